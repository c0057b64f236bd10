#include "core/cq.h"

#include "core/err_data.h"

#include <algorithm>
#include <cassert>
#include <cstring>

namespace fabq::core {
namespace {

constexpr size_t kMaxCqSlots = size_t{1} << 26;

void store_entry(CqFormat format, const Completion& c, unsigned char* out) {
  switch (format) {
    case CqFormat::kContext: {
      fi_cq_entry e{c.op_context};
      std::memcpy(out, &e, sizeof(e));
      return;
    }
    case CqFormat::kMsg: {
      fi_cq_msg_entry e{c.op_context, c.flags, c.len};
      std::memcpy(out, &e, sizeof(e));
      return;
    }
    case CqFormat::kData: {
      fi_cq_data_entry e{c.op_context, c.flags, c.len, c.buf, c.data};
      std::memcpy(out, &e, sizeof(e));
      return;
    }
    case CqFormat::kTagged: {
      fi_cq_tagged_entry e{c.op_context, c.flags, c.len, c.buf, c.data, c.tag};
      std::memcpy(out, &e, sizeof(e));
      return;
    }
  }
}

}  // namespace

Result<CqFormat> cq_format_from_fi(int format) {
  switch (format) {
    case FI_CQ_FORMAT_UNSPEC:
    case FI_CQ_FORMAT_CONTEXT:
      return CqFormat::kContext;
    case FI_CQ_FORMAT_MSG:
      return CqFormat::kMsg;
    case FI_CQ_FORMAT_DATA:
      return CqFormat::kData;
    case FI_CQ_FORMAT_TAGGED:
      return CqFormat::kTagged;
  }
  return Code::kInval;
}

size_t cq_entry_size(CqFormat format) {
  switch (format) {
    case CqFormat::kContext:
      return sizeof(fi_cq_entry);
    case CqFormat::kMsg:
      return sizeof(fi_cq_msg_entry);
    case CqFormat::kData:
      return sizeof(fi_cq_data_entry);
    case CqFormat::kTagged:
      return sizeof(fi_cq_tagged_entry);
  }
  return 0;
}

Result<std::unique_ptr<CompletionQueue>> CompletionQueue::create(const CqConfig& config) {
  if (config.size == 0 || config.size > kMaxCqSlots) return Code::kInval;
  std::unique_ptr<WaitObject> own;
  if (config.wait == WaitKind::kSet) {
    if (config.wait_set == nullptr) return Code::kInval;
  } else if (config.wait != WaitKind::kNone) {
    auto w = WaitObject::create(config.wait);
    if (!w.ok()) return w.status();
    own = std::move(w.value());
  }
  std::unique_ptr<CompletionQueue> q(new CompletionQueue(config, std::move(own)));
  if (q->wait_set_ != nullptr) q->wait_set_->add(q.get());
  return q;
}

CompletionQueue::CompletionQueue(const CqConfig& config, std::unique_ptr<WaitObject> own_wait)
    : ring_(config.size),
      credits_(static_cast<int64_t>(ring_.capacity())),
      format_(config.format),
      entry_size_(cq_entry_size(config.format)),
      wait_kind_(config.wait),
      provider_owned_err_data_(config.provider_owned_err_data),
      spin_ns_(config.spin_ns),
      own_wait_(std::move(own_wait)),
      wait_set_(config.wait == WaitKind::kSet ? config.wait_set : nullptr),
      own_gate_(own_wait_.get()),
      gate_(wait_set_ != nullptr ? wait_set_->gate() : &own_gate_) {}

CompletionQueue::~CompletionQueue() {
  if (wait_set_ != nullptr) wait_set_->remove(this);
}

Status CompletionQueue::reserve(size_t n) {
  return reserve_leaving(n, 0);
}

Status CompletionQueue::reserve_leaving(size_t n, size_t keep) {
  if (overrun()) return Code::kOverrun;
  const auto want = static_cast<int64_t>(n);
  // A transiently negative count can make a racing reserve() fail with kAgain; kAgain is
  // always retryable, so that is harmless and keeps the fast path to one RMW.
  if (credits_.fetch_sub(want, std::memory_order_acquire) < want + static_cast<int64_t>(keep)) {
    // Credits this take hid for a moment from an await_room() are room that waiter must hear
    // of. None free once they are back (the queue is full): nothing to tell, and telling would
    // make a producer that retries on the hook's word (a receive waiting for room) loop.
    if (credits_.fetch_add(want, std::memory_order_seq_cst) + want > 0) wake_room_waiter();
    return Code::kAgain;
  }
  return OkStatus();
}

void CompletionQueue::cancel_reservation(size_t n) {
  give_back(n);
}

void CompletionQueue::give_back(size_t n) {
  credits_.fetch_add(static_cast<int64_t>(n), std::memory_order_seq_cst);
  wake_room_waiter();
}

void CompletionQueue::wake_room_waiter() {
  // The usual case, nobody waiting, is one load. A waiter that armed after this load sees the
  // credits (await_room()).
  if (room_wanted_.load(std::memory_order_seq_cst) &&
      room_wanted_.exchange(false, std::memory_order_seq_cst) && room_hook_ != nullptr) {
    room_hook_(room_arg_);
  }
}

bool CompletionQueue::await_room() {
  room_wanted_.store(true, std::memory_order_seq_cst);
  return credits_.load(std::memory_order_seq_cst) > 0 && !overrun();
}

uint64_t CompletionQueue::claim_reserved() {
  // A credit guarantees a free slot, so claim() can only fail transiently (a reader that has
  // returned credits is about to publish its new head).
  for (;;) {
    if (auto pos = ring_.claim()) return *pos;
    cpu_relax();
  }
}

void CompletionQueue::complete(const Completion& c) {
  if (overrun()) {
    cancel_reservation(1);
    return;
  }
  const uint64_t pos = claim_reserved();
  ring_.at(pos).c = c;
  ring_.publish(pos, /*tag=error*/ false);
  gate_->notify(pos + 1);
}

void CompletionQueue::complete_error(const CompletionError& e) {
  if (overrun()) {
    cancel_reservation(1);
    return;
  }
  const uint64_t pos = claim_reserved();
  Slot& slot = ring_.at(pos);
  slot.c = e.completion;
  slot.olen = e.olen;
  slot.err = e.err;
  slot.prov_errno = e.prov_errno;
  const size_t n = e.err_data != nullptr ? std::min(e.err_data_size, kCqMaxErrData) : 0;
  slot.err_data_size = static_cast<uint32_t>(n);
  if (n > 0) std::memcpy(slot.err_data, e.err_data, n);
  errors_queued_.fetch_add(1, std::memory_order_seq_cst);
  ring_.publish(pos, /*tag=error*/ true);
  gate_->notify_all();
}

Status CompletionQueue::write(const Completion& c) {
  if (Status s = reserve(1); !s.ok()) return s;
  complete(c);
  return OkStatus();
}

Status CompletionQueue::write_error(const CompletionError& e) {
  if (Status s = reserve(1); !s.ok()) return s;
  complete_error(e);
  return OkStatus();
}

void CompletionQueue::enter_overrun() {
  overrun_.store(true, std::memory_order_seq_cst);
  gate_->notify_all();
}

Result<size_t> CompletionQueue::read_locked(void* buf, size_t count, fi_addr_t* src_addr,
                                            size_t min_ready) {
  const uint64_t head = ring_.head();
  auto* out = static_cast<unsigned char*>(buf);
  size_t n = 0;
  bool is_error = false;
  // Count first when a threshold applies, so that a short batch is left in place.
  if (min_ready > 1) {
    size_t ready = 0;
    while (ready < min_ready) {
      if (ring_.peek(head + ready, &is_error) == nullptr || is_error) break;
      ++ready;
    }
    // An error within reach, or an overrun, ends the wait: read what precedes it.
    if (ready < min_ready && !is_error && !overrun()) return Code::kAgain;
  }
  is_error = false;
  while (n < count) {
    const Slot* slot = ring_.peek(head + n, &is_error);
    if (slot == nullptr || is_error) break;
    store_entry(format_, slot->c, out + n * entry_size_);
    if (src_addr != nullptr) src_addr[n] = slot->c.src_addr;
    ++n;
  }
  if (n > 0) {
    ring_.consume(n);
    give_back(n);
    return n;
  }
  if (is_error) return Code::kAvail;
  return overrun() && ring_.claimed() == 0 ? Code::kAvail : Code::kAgain;
}

Result<size_t> CompletionQueue::read(void* buf, size_t count, fi_addr_t* src_addr) {
  if (count > 0 && buf == nullptr) return Code::kInval;
  SpinLockHolder lock(read_lock_);
  if (count == 0) {
    bool is_error = false;
    if (ring_.peek(ring_.head(), &is_error) != nullptr) {
      return is_error ? Result<size_t>(Code::kAvail) : Result<size_t>(size_t{0});
    }
    return overrun() && ring_.claimed() == 0 ? Code::kAvail : Code::kAgain;
  }
  return read_locked(buf, count, src_addr, 0);
}

Result<size_t> CompletionQueue::read_error(fi_cq_err_entry* entry, uint64_t flags) {
  if (entry == nullptr) return Code::kInval;
  SpinLockHolder lock(read_lock_);
  const uint64_t head = ring_.head();
  bool is_error = false;
  const Slot* slot = ring_.peek(head, &is_error);
  if (slot != nullptr) {
    if (!is_error) return Code::kAgain;
    const Completion& c = slot->c;
    entry->op_context = c.op_context;
    entry->flags = c.flags;
    entry->len = c.len;
    entry->buf = c.buf;
    entry->data = c.data;
    entry->tag = c.tag;
    entry->olen = slot->olen;
    entry->err = slot->err;
    entry->prov_errno = slot->prov_errno;
    deliver_err_data(slot->err_data, slot->err_data_size, provider_owned_err_data_, err_buf_,
                     &entry->err_data, &entry->err_data_size);
    if ((flags & FI_PEEK) == 0) {
      ring_.consume(1);
      errors_queued_.fetch_sub(1, std::memory_order_relaxed);
      give_back(1);
    }
    return 1;
  }
  if (!overrun() || ring_.claimed() != 0) return Code::kAgain;
  *entry = fi_cq_err_entry{};
  entry->err = FI_EOVERRUN;
  return 1;
}

Result<size_t> CompletionQueue::sread(void* buf, size_t count, fi_addr_t* src_addr,
                                      size_t threshold, int timeout_ms) {
  if (wait_kind_ == WaitKind::kNone || wait_kind_ == WaitKind::kSet) return Code::kNoSys;
  if (count == 0 || buf == nullptr) return Code::kInval;
  const size_t want = std::max<size_t>(1, std::min({threshold, count, capacity()}));
  const Deadline deadline = Deadline::from_timeout_ms(timeout_ms);

  // A signal nobody has answered yet makes this call return at once. Claiming it is one CAS,
  // so of several sreads starting together exactly one answers it.
  const uint64_t seen = signals_.load(std::memory_order_seq_cst);
  uint64_t answered = signals_seen_.load(std::memory_order_relaxed);
  const bool pending_signal =
      seen != answered && signals_seen_.compare_exchange_strong(answered, seen);

  for (;;) {
    {
      SpinLockHolder lock(read_lock_);
      const bool give_up = pending_signal || deadline.expired();
      Result<size_t> r = read_locked(buf, count, src_addr, give_up ? 0 : want);
      if (r.status().code() != Code::kAgain || give_up) return r;
    }
    const uint64_t wake_at = ring_.head() + want;
    const Status s = wait_until(*gate_, wake_at, deadline, spin_ns_, [&] {
      return ring_.claimed() >= want || errors_queued_.load(std::memory_order_seq_cst) != 0 ||
             overrun() || signalled_since(seen);
    });
    const uint64_t now = signals_.load(std::memory_order_seq_cst);
    if (now != seen) {
      // Answer the signal: every sleeper that saw it returns. Only ever move the answered
      // count forward, so an older answer cannot make a signal pending again.
      uint64_t prev = signals_seen_.load(std::memory_order_relaxed);
      while (prev < now && !signals_seen_.compare_exchange_weak(prev, now)) {
      }
      SpinLockHolder lock(read_lock_);
      return read_locked(buf, count, src_addr, 0);
    }
    if (!s.ok()) {
      SpinLockHolder lock(read_lock_);
      return read_locked(buf, count, src_addr, 0);  // timeout or interrupt: what is there
    }
  }
}

Status CompletionQueue::signal() {
  if (wait_kind_ == WaitKind::kNone) return Code::kNoSys;
  signals_.fetch_add(1, std::memory_order_seq_cst);
  gate_->notify_all();
  return OkStatus();
}

Status CompletionQueue::try_wait() {
  if (gate_->object() == nullptr) return Code::kNoSys;
  gate_->arm_external();
  return has_entries() ? Status(Code::kAgain) : OkStatus();
}

}  // namespace fabq::core
