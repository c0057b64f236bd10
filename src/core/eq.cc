#include "core/eq.h"

#include "core/err_data.h"

#include <algorithm>
#include <cstring>

namespace fabq::core {
namespace {

// Sizes beyond this cannot be backed by memory anyway; refuse before the multiplication
// in the ring's allocation can overflow.
constexpr size_t kMaxEqSlots = size_t{1} << 26;

// Most events are a bare fi_eq_entry: copy those with a constant size, which the compiler
// inlines, instead of calling memcpy.
inline void copy_event(void* dst, const void* src, size_t len) {
  if (len == sizeof(fi_eq_entry)) {
    std::memcpy(dst, src, sizeof(fi_eq_entry));
  } else if (len > 0) {
    std::memcpy(dst, src, len);
  }
}

struct ErrorHeader {
  fid_t fid;
  void* context;
  uint64_t data;
  int err;
  int prov_errno;
};

}  // namespace

Result<std::unique_ptr<EventQueue>> EventQueue::create(const EqConfig& config) {
  if (config.size == 0 || config.size > kMaxEqSlots) return Code::kInval;
  std::unique_ptr<WaitObject> own;
  if (config.wait == WaitKind::kSet) {
    if (config.wait_set == nullptr) return Code::kInval;
  } else if (config.wait != WaitKind::kNone) {
    auto w = WaitObject::create(config.wait);
    if (!w.ok()) return w.status();
    own = std::move(w.value());
  }
  std::unique_ptr<EventQueue> q(new EventQueue(config, std::move(own)));
  if (q->wait_set_ != nullptr) q->wait_set_->add(q.get());
  return q;
}

EventQueue::EventQueue(const EqConfig& config, std::unique_ptr<WaitObject> own_wait)
    : ring_(config.size),
      wait_kind_(config.wait),
      provider_owned_err_data_(config.provider_owned_err_data),
      spin_ns_(config.spin_ns),
      owner_(config.owner),
      own_wait_(std::move(own_wait)),
      wait_set_(config.wait == WaitKind::kSet ? config.wait_set : nullptr),
      own_gate_(own_wait_.get()),
      gate_(wait_set_ != nullptr ? wait_set_->gate() : &own_gate_) {}

EventQueue::~EventQueue() {
  if (wait_set_ != nullptr) wait_set_->remove(this);
}

inline Status EventQueue::claim_for_write(uint64_t* pos) {
  if (overrun()) return Code::kOverrun;
  auto claimed = ring_.claim();
  if (!claimed) {
    overrun_.store(true, std::memory_order_seq_cst);
    // Readers blocked on an empty-looking queue must learn about the overrun entry.
    gate_->notify_all();
    return Code::kOverrun;
  }
  *pos = *claimed;
  return OkStatus();
}

inline void EventQueue::fill_event(uint64_t pos, uint32_t event, const void* buf, size_t len) {
  Slot& slot = ring_.at(pos);
  slot.event = event;
  slot.len = static_cast<uint32_t>(len);
  copy_event(slot.payload, buf, len);
  ring_.publish(pos, /*tag=error*/ false);
  gate_->notify(pos + 1);
}

Result<size_t> EventQueue::write(uint32_t event, const void* buf, size_t len) {
  if (len > kEqMaxEventSize || (buf == nullptr && len > 0)) return Code::kInval;
  uint64_t pos;
  if (Status s = claim_for_write(&pos); !s.ok()) return s;
  fill_event(pos, event, buf, len);
  return len;
}

Result<size_t> EventQueue::write_leaving(size_t keep_free, uint32_t event, const void* buf,
                                         size_t len) {
  if (len > kEqMaxEventSize || (buf == nullptr && len > 0)) return Code::kInval;
  if (overrun()) return Code::kOverrun;
  const std::optional<uint64_t> pos = ring_.claim(keep_free);
  if (!pos) return Code::kAgain;
  fill_event(*pos, event, buf, len);
  return len;
}

namespace {

bool valid_error(const EqError& error) {
  return error.err > 0 && error.err_data_size <= kEqMaxErrData &&
         (error.err_data != nullptr || error.err_data_size == 0);
}

}  // namespace

Status EventQueue::write_error(const EqError& error) {
  if (!valid_error(error)) return Code::kInval;
  uint64_t pos;
  if (Status s = claim_for_write(&pos); !s.ok()) return s;
  fill_error_slot(pos, error);
  return OkStatus();
}

Status EventQueue::write_error_leaving(size_t keep_free, const EqError& error) {
  if (!valid_error(error)) return Code::kInval;
  if (overrun()) return Code::kOverrun;
  const std::optional<uint64_t> pos = ring_.claim(keep_free);
  if (!pos) return Code::kAgain;
  fill_error_slot(*pos, error);
  return OkStatus();
}

void EventQueue::fill_error_slot(uint64_t pos, const EqError& error) {
  Slot& slot = ring_.at(pos);
  const ErrorHeader h{error.fid, error.context, error.data, error.err, error.prov_errno};
  slot.event = 0;
  slot.len = static_cast<uint32_t>(error.err_data_size);
  std::memcpy(slot.payload, &h, sizeof(h));
  if (error.err_data_size > 0) {
    std::memcpy(slot.payload + sizeof(h), error.err_data, error.err_data_size);
  }
  ring_.publish(pos, /*tag=error*/ true);
  gate_->notify_all();
}

// A purged slot keeps its place in the ring (slots are consumed in order) with this length.
constexpr uint32_t kPurged = UINT32_MAX;

const EventQueue::Slot* EventQueue::head_slot(bool* is_error) {
  for (;;) {
    const Slot* slot = ring_.peek(ring_.head(), is_error);
    if (slot == nullptr || slot->len != kPurged) return slot;
    ring_.consume(1);
  }
}

size_t EventQueue::purge(const void* fid, const Release& release) {
  SpinLockHolder lock(read_lock_);
  size_t n = 0;
  for (uint64_t pos = ring_.head();; ++pos) {
    bool is_error = false;
    if (ring_.peek(pos, &is_error) == nullptr) break;
    Slot& slot = ring_.at(pos);
    if (slot.len == kPurged) continue;
    fid_t about = nullptr;
    if (is_error || slot.len >= sizeof(fid_t)) std::memcpy(&about, slot.payload, sizeof(about));
    if (about != fid) continue;
    if (release && !is_error) release(slot.event, slot.payload, slot.len);
    slot.len = kPurged;
    ++n;
  }
  return n;
}

Result<size_t> EventQueue::read(uint32_t* event, void* buf, size_t len, uint64_t flags) {
  SpinLockHolder lock(read_lock_);
  bool is_error = false;
  const Slot* slot = head_slot(&is_error);
  if (slot == nullptr) {
    // The overrun entry follows the last stored event (claimed-but-unpublished ones included).
    return overrun() && ring_.claimed() == 0 ? Code::kAvail : Code::kAgain;
  }
  if (is_error) return Code::kAvail;
  if (len < slot->len || (buf == nullptr && slot->len > 0)) return Code::kTooSmall;
  if (event != nullptr) *event = slot->event;
  const size_t n = slot->len;
  copy_event(buf, slot->payload, n);
  if ((flags & FI_PEEK) == 0) ring_.consume(1);
  return n;
}

void EventQueue::fill_error(const Slot& slot, fi_eq_err_entry* entry) {
  ErrorHeader h;
  std::memcpy(&h, slot.payload, sizeof(h));
  entry->fid = h.fid;
  entry->context = h.context;
  entry->data = h.data;
  entry->err = h.err;
  entry->prov_errno = h.prov_errno;
  deliver_err_data(slot.payload + sizeof(h), slot.len, provider_owned_err_data_, err_buf_,
                   &entry->err_data, &entry->err_data_size);
}

Result<size_t> EventQueue::read_error(fi_eq_err_entry* entry, uint64_t flags) {
  if (entry == nullptr) return Code::kInval;
  SpinLockHolder lock(read_lock_);
  bool is_error = false;
  const Slot* slot = head_slot(&is_error);
  if (slot != nullptr) {
    if (!is_error) return Code::kAgain;
    fill_error(*slot, entry);
    if ((flags & FI_PEEK) == 0) ring_.consume(1);
    return sizeof(fi_eq_err_entry);
  }
  if (!overrun() || ring_.claimed() != 0) return Code::kAgain;
  entry->fid = owner_;
  entry->context = nullptr;
  entry->data = 0;
  entry->err = FI_EOVERRUN;
  entry->prov_errno = 0;
  if (provider_owned_err_data_ || entry->err_data == nullptr || entry->err_data_size == 0) {
    entry->err_data = nullptr;
  }
  entry->err_data_size = 0;
  return sizeof(fi_eq_err_entry);
}

Result<size_t> EventQueue::sread(uint32_t* event, void* buf, size_t len, int timeout_ms,
                                 uint64_t flags) {
  if (wait_kind_ == WaitKind::kNone || wait_kind_ == WaitKind::kSet) return Code::kNoSys;
  const Deadline deadline = Deadline::from_timeout_ms(timeout_ms);
  for (;;) {
    Result<size_t> r = read(event, buf, len, flags);
    if (r.status().code() != Code::kAgain) return r;
    const Status s = wait_until(*gate_, 0, deadline, spin_ns_, [this] { return readable(); });
    if (!s.ok()) return read(event, buf, len, flags);  // timeout or signal: last look
  }
}

Status EventQueue::try_wait() {
  if (gate_->object() == nullptr) return Code::kNoSys;
  // Arm, then look: a write that lands after the look sees the arm.
  gate_->arm_external();
  return readable() ? Status(Code::kAgain) : OkStatus();
}

}  // namespace fabq::core
