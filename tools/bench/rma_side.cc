#include "tools/bench/rma_side.h"

#include <linux/futex.h>
#include <netinet/in.h>
#include <rdma/fi_cm.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <thread>

#include "tools/bench/rma.h"
#include "tools/fabric_setup.h"

namespace fabq::tools::bench::rma {
namespace {

constexpr const char* kHost = "127.0.0.1";
// Every mr_mode bit the scenarios handle (rma_side.h). Not FI_MR_RAW (keys wider than 64 bits
// through fi_mr_raw_attr) nor FI_MR_HMEM, FI_MR_MMU_NOTIFY or FI_MR_RMA_EVENT.
constexpr int kMrModes =
    FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
// The completion flags that tell an operation's kind; a completion must carry its kind's and
// none of the others.
constexpr uint64_t kKindFlags = FI_MSG | FI_TAGGED | FI_RMA | FI_ATOMIC | FI_SEND | FI_RECV |
                                FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;

uint64_t flags_of(Op kind) {
  switch (kind) {
    case Op::kWrite:
      return FI_RMA | FI_WRITE;
    case Op::kRead:
      return FI_RMA | FI_READ;
    case Op::kAtomic:
      return FI_ATOMIC | FI_WRITE;
    case Op::kFetchAtomic:
      return FI_ATOMIC | FI_READ;
    case Op::kSend:
      return FI_MSG | FI_SEND;
    case Op::kRecv:
      return FI_MSG | FI_RECV;
  }
  return 0;
}

const char* name_of(Op kind) {
  switch (kind) {
    case Op::kWrite:
      return "fi_write";
    case Op::kRead:
      return "fi_read";
    case Op::kAtomic:
      return "fi_atomic";
    case Op::kFetchAtomic:
      return "fi_fetch_atomic";
    case Op::kSend:
      return "fi_send";
    case Op::kRecv:
      return "fi_recv";
  }
  return "?";
}

std::string flag_names(uint64_t flags) {
  std::string s;
  for (const auto& [bit, name] : {std::pair{FI_MSG, "FI_MSG"},
                                  {FI_TAGGED, "FI_TAGGED"},
                                  {FI_RMA, "FI_RMA"},
                                  {FI_ATOMIC, "FI_ATOMIC"},
                                  {FI_SEND, "FI_SEND"},
                                  {FI_RECV, "FI_RECV"},
                                  {FI_READ, "FI_READ"},
                                  {FI_WRITE, "FI_WRITE"},
                                  {FI_REMOTE_READ, "FI_REMOTE_READ"},
                                  {FI_REMOTE_WRITE, "FI_REMOTE_WRITE"}}) {
    if ((flags & bit) != 0) s += (s.empty() ? "" : "|") + std::string(name);
  }
  return s.empty() ? "none of them" : s;
}

uint8_t* alloc_zeroed(size_t len) {
  const size_t rounded = (std::max<size_t>(len, 1) + 4095) / 4096 * 4096;
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(4096, rounded));
  if (p != nullptr) std::memset(p, 0, rounded);
  return p;
}

}  // namespace

// The bookkeeping of a busy-polling wait, as in the MSG scenarios: again(), called after each
// empty poll, looks at the stop flag and the timeout every kSpinCheck calls. The timeout runs
// from the last operation completed on either side (Link::completions).
class Side::Spin {
 public:
  explicit Spin(Side* s) : s_(s) {}
  bool again(const char* what, const char* then = "", const std::string* why = nullptr) {
    if (++spins_ % msg::kSpinCheck != 0) return true;
    if (s_->link_->stop.load(std::memory_order_relaxed)) return s_->stopped();
    const int64_t t = now_ns();
    const uint64_t done = s_->link_->completions[0].n.load(std::memory_order_relaxed) +
                          s_->link_->completions[1].n.load(std::memory_order_relaxed);
    if (start_ == 0 || done != done_) {
      start_ = t;
      done_ = done;
    }
    if (t - start_ > s_->timeout_ns_) {
      return s_->fail(fmt("%s%s within %d ms", what, then, s_->link_->timeout_ms) +
                      (why != nullptr && !why->empty() ? ": " + *why : std::string()) +
                      s_->state());
    }
    return true;
  }

 private:
  Side* const s_;
  uint32_t spins_ = 0;
  int64_t start_ = 0;
  uint64_t done_ = 0;  // Link::completions when start_ was taken
};

Side::~Side() = default;

bool Side::fail(const std::string& why, bool unsupported) {
  if (out_.state == Sample::State::kOk) {
    out_.state = unsupported ? Sample::State::kUnsupported : Sample::State::kFailed;
    out_.why = role_ + ": " + why;
    out_.order = link_->failures.fetch_add(1, std::memory_order_acq_rel);
    link_->stop.store(true, std::memory_order_release);
  }
  return false;
}

bool Side::stopped() {
  if (out_.state == Sample::State::kOk) {
    out_.state = Sample::State::kFailed;
    out_.detail = state();
    out_.why = role_ + ": stopped, the other side failed" + out_.detail;
    out_.stopped = true;
  }
  return false;
}

std::string Side::state() const {
  if (slots_.empty()) return "";
  size_t posted = 0;
  for (const Slot& s : slots_) posted += s.posted;
  return fmt(" (%llu operations completed, %zu posted)", static_cast<unsigned long long>(done_),
             posted);
}

// fi_getinfo for an FI_EP_RDM endpoint (FI_EP_DGRAM for Needs::dgram) of the provider itself (not,
// say, "tcp;ofi_rxm" for "tcp") with the capabilities asked for, every mr_mode bit of kMrModes
// acceptable, the FI_CONTEXT/FI_CONTEXT2 modes and manual data progress (as the MSG scenarios, for
// the same reason). A provider whose addresses are IPv4 ones is asked again for 127.0.0.1.
bool Side::getinfo(const Needs& needs) {
  const uint64_t caps = needs.messages ? FI_MSG | FI_SEND | FI_RECV
                                       : (needs.atomics ? FI_ATOMIC : FI_RMA) | FI_READ | FI_WRITE |
                                             FI_REMOTE_READ | FI_REMOTE_WRITE;
  const fi_ep_type type = needs.dgram ? FI_EP_DGRAM : FI_EP_RDM;
  const char* type_name = needs.dgram ? "FI_EP_DGRAM" : "FI_EP_RDM";
  auto ask = [&](const char* node, const char* service, uint64_t flags, uint32_t addr_format,
                 fi_info** out) -> int {
    *out = nullptr;
    fi_info* h = fi_allocinfo();
    if (h == nullptr) return -FI_ENOMEM;
    h->fabric_attr->prov_name = strdup(spec_.prov_name.c_str());
    h->ep_attr->type = type;
    h->caps = caps;
    h->mode = FI_CONTEXT | FI_CONTEXT2;
    h->addr_format = addr_format;
    h->domain_attr->mr_mode = kMrModes;
    h->domain_attr->data_progress = FI_PROGRESS_MANUAL;
    fi_info* list = nullptr;
    const int rc = fi_getinfo(setup::kApiVersion, node, service, flags, h, &list);
    fi_freeinfo(h);
    if (rc != 0) return rc;
    for (fi_info* i = list; i != nullptr; i = i->next) {
      if (i->fabric_attr->prov_name != nullptr && spec_.prov_name == i->fabric_attr->prov_name) {
        *out = fi_dupinfo(i);
        break;
      }
    }
    fi_freeinfo(list);
    return *out == nullptr ? -FI_ENODATA : 0;
  };
  const char* what = needs.messages ? "FI_MSG" : needs.atomics ? "FI_ATOMIC" : "FI_RMA";
  fi_info* info = nullptr;
  int rc = ask(nullptr, nullptr, 0, FI_FORMAT_UNSPEC, &info);
  if (rc == 0 && info->addr_format == FI_SOCKADDR_IN) {
    fi_freeinfo(info);
    rc = ask(kHost, "0", FI_SOURCE, FI_SOCKADDR_IN, &info);
  }
  info_.reset(info);
  if (rc == -FI_ENODATA) {
    return fail(
        fmt("fi_getinfo: no %s endpoint of %s itself with %s", type_name, spec_.prov_name.c_str(),
            what) +
            (spec_.ep_type == type ? "" : fmt(" (these scenarios use %s endpoints)", type_name)),
        true);
  }
  if (rc != 0) return setup_fail("fi_getinfo", rc);
  const fi_domain_attr* d = info_->domain_attr;
  mr_mode_ = static_cast<uint64_t>(d->mr_mode);
  if ((mr_mode_ & ~static_cast<uint64_t>(kMrModes)) != 0) {
    return fail(
        fmt("fi_getinfo answered mr_mode 0x%x, beyond the 0x%x asked for", d->mr_mode, kMrModes));
  }
  if ((info_->mode & ~static_cast<uint64_t>(FI_CONTEXT | FI_CONTEXT2)) != 0) {
    return fail(fmt("fi_getinfo answered mode 0x%llx, beyond FI_CONTEXT|FI_CONTEXT2",
                    static_cast<unsigned long long>(info_->mode)));
  }
  if ((info_->caps & caps) != caps) {
    return fail(fmt("fi_getinfo answered caps 0x%llx without all of 0x%llx",
                    static_cast<unsigned long long>(info_->caps),
                    static_cast<unsigned long long>(caps)));
  }
  if (d->mr_key_size > sizeof(uint64_t)) {
    return fail(fmt("mr_key_size %zu: keys wider than 64 bits need FI_MR_RAW", d->mr_key_size),
                true);
  }
  if (info_->ep_attr->max_msg_size < needs.op_bytes) {
    return fail(fmt("max_msg_size %zu is below the operation's %zu bytes",
                    info_->ep_attr->max_msg_size, needs.op_bytes),
                true);
  }
  return true;
}

bool Side::register_region(uint8_t* buf, size_t len, uint64_t access, uint64_t key, fid_mr** mr,
                           const char* what) {
  if (int r = fi_mr_reg(domain_.get(), buf, len, access, 0, key, 0, mr, nullptr); r != 0) {
    return setup_fail(std::string("fi_mr_reg(") + what + ")", r);
  }
  if ((mr_mode_ & FI_MR_ENDPOINT) != 0) {
    if (int r = fi_mr_bind(*mr, &ep_->fid, 0); r != 0) {
      return setup_fail(std::string("fi_mr_bind(") + what + ", ep)", r);
    }
    if (int r = fi_mr_enable(*mr); r != 0) {
      return setup_fail(std::string("fi_mr_enable(") + what + ")", r);
    }
  }
  return true;
}

bool Side::start(const Needs& needs) {
  if (!getinfo(needs)) return false;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  const setup::Result opened = setup::open_fabric(info_.get(), &fabric, &domain);
  fabric_.reset(fabric);
  domain_.reset(domain);
  if (!opened.ok()) return setup_fail(opened.call, opened.rc);

  size_t window = std::max<size_t>(needs.window, 1);
  if (info_->tx_attr->size > 0) window = std::min(window, info_->tx_attr->size);
  ctx_.resize(window);
  slots_.resize(window);
  for (size_t i = window; i > 0; --i) free_.push_back(i - 1);

  fi_av_attr av_attr{};
  av_attr.type = info_->domain_attr->av_type;
  av_attr.count = 2;
  fid_av* av = nullptr;
  if (int r = fi_av_open(domain_.get(), &av_attr, &av, nullptr); r != 0) {
    return setup_fail("fi_av_open", r);
  }
  av_.reset(av);
  fi_cq_attr cq_attr{};
  cq_attr.size = 2 * window + 16;  // every operation's completion fits
  cq_attr.format = FI_CQ_FORMAT_DATA;
  cq_attr.wait_obj = FI_WAIT_NONE;  // both sides busy-poll
  fid_cq* cq = nullptr;
  if (int r = fi_cq_open(domain_.get(), &cq_attr, &cq, nullptr); r != 0) {
    return setup_fail("fi_cq_open", r);
  }
  cq_.reset(cq);
  fid_ep* ep = nullptr;
  const setup::Result made =
      setup::open_endpoint(domain_.get(), info_.get(), nullptr,
                           {{&av_->fid, 0, "av"}, {&cq_->fid, FI_TRANSMIT | FI_RECV, "cq"}}, &ep);
  ep_.reset(ep);
  if (!made.ok()) return setup_fail(made.call, made.rc);

  if (needs.atomics) {
    // fi_atomic(3): what the endpoint can do with FI_UINT64 and FI_SUM, fetching or not.
    size_t count = 0;
    if (int r = fi_atomicvalid(ep_.get(), FI_UINT64, FI_SUM, &count); r != 0 || count == 0) {
      return fail(r != 0 ? msg::fi_error("fi_atomicvalid(FI_UINT64, FI_SUM)", r)
                         : "fi_atomicvalid(FI_UINT64, FI_SUM) allows 0 elements",
                  true);
    }
    if (int r = fi_fetch_atomicvalid(ep_.get(), FI_UINT64, FI_SUM, &count); r != 0 || count == 0) {
      return fail(r != 0 ? msg::fi_error("fi_fetch_atomicvalid(FI_UINT64, FI_SUM)", r)
                         : "fi_fetch_atomicvalid(FI_UINT64, FI_SUM) allows 0 elements",
                  true);
    }
  }
  // fi_rma_pingpong asks FI_OPT_INJECT_RMA_SIZE first; libfabric 1.17 has no such option.
  inject_limit_ = info_->tx_attr->inject_size;

  target_.reset(alloc_zeroed(needs.target_bytes));
  local_.reset(alloc_zeroed(needs.local_bytes));
  if (!target_ || !local_) return fail("no memory for the regions");
  // Keys are the application's unless FI_MR_PROV_KEY: each region its own in the domain.
  fid_mr* mr = nullptr;
  if (needs.target_bytes > 0) {
    const bool ok =
        register_region(target_.get(), needs.target_bytes, FI_REMOTE_READ | FI_REMOTE_WRITE,
                        0x100 + index_, &mr, "target region");
    target_mr_.reset(mr);
    if (!ok) return false;
  }
  if ((mr_mode_ & FI_MR_LOCAL) != 0 && needs.local_bytes > 0) {
    mr = nullptr;
    const bool ok = register_region(local_.get(), needs.local_bytes, FI_READ | FI_WRITE,
                                    0x200 + index_, &mr, "local buffers");
    local_mr_.reset(mr);
    if (!ok) return false;
    local_desc_ = fi_mr_desc(local_mr_.get());
  }
  return exchange();
}

bool Side::exchange() {
  Card& mine = link_->card[index_];
  size_t len = sizeof(mine.name);
  if (const int r = fi_getname(&ep_->fid, mine.name, &len); r != 0) {
    if (r == -FI_ETOOSMALL) {
      return fail(fmt("fi_getname needs %zu bytes, more than the %zu a card holds", len,
                      sizeof(mine.name)));
    }
    return setup_fail("fi_getname", r);
  }
  mine.name_len = len;
  if (target_mr_) {
    mine.addr = (mr_mode_ & FI_MR_VIRT_ADDR) != 0 ? reinterpret_cast<uintptr_t>(target_.get()) : 0;
    mine.key = fi_mr_key(target_mr_.get());
    if (mine.key == FI_KEY_NOTAVAIL) return fail("fi_mr_key gave FI_KEY_NOTAVAIL");
  }
  link_->ready[index_].store(true, std::memory_order_release);
  Spin spin(this);
  while (!link_->ready[1 - index_].load(std::memory_order_acquire)) {
    if (!spin.again("the other side did not publish its address")) return false;
  }
  peer_card_ = link_->card[1 - index_];
  const int n = fi_av_insert(av_.get(), peer_card_.name, 1, &peer_, 0, nullptr);
  if (n != 1) return fail(msg::fi_error("fi_av_insert of the peer's name", n));
  return true;
}

bool Side::acquire(size_t* slot) {
  Spin spin(this);
  while (free_.empty()) {
    size_t got = 0;
    if (!progress(&got)) return false;
    if (got == 0 && !spin.again("no completion")) return false;
  }
  *slot = free_.back();
  free_.pop_back();
  return true;
}

template <typename F>
bool Side::post(const char* call, size_t slot, Op kind, uint64_t tag, F op, size_t len) {
  if (slot != msg::kNone) slots_[slot] = Slot{true, kind, tag, len};
  Spin spin(this);
  for (;;) {
    const ssize_t rc = op();
    if (rc == 0) return true;
    if (rc != -FI_EAGAIN) {
      if (slot != msg::kNone) slots_[slot].posted = false;
      return fail(msg::fi_error(call, rc));
    }
    size_t got = 0;
    if (!progress(&got)) return false;
    if (!spin.again(call, " kept returning -FI_EAGAIN")) return false;
  }
}

bool Side::write(size_t slot, uint64_t tag, size_t local_off, size_t len, size_t remote_off) {
  return post("fi_write", slot, Op::kWrite, tag, [&] {
    return fi_write(ep_.get(), local_.get() + local_off, len, local_desc_, peer_,
                    remote(remote_off), peer_card_.key, &ctx_[slot]);
  });
}

bool Side::read(size_t slot, uint64_t tag, size_t local_off, size_t len, size_t remote_off) {
  return post("fi_read", slot, Op::kRead, tag, [&] {
    return fi_read(ep_.get(), local_.get() + local_off, len, local_desc_, peer_, remote(remote_off),
                   peer_card_.key, &ctx_[slot]);
  });
}

bool Side::atomic_add(size_t slot, uint64_t tag, size_t operand_off, size_t remote_off) {
  return post("fi_atomic", slot, Op::kAtomic, tag, [&] {
    return fi_atomic(ep_.get(), local_.get() + operand_off, 1, local_desc_, peer_,
                     remote(remote_off), peer_card_.key, FI_UINT64, FI_SUM, &ctx_[slot]);
  });
}

bool Side::fetch_add(size_t slot, uint64_t tag, size_t operand_off, size_t result_off,
                     size_t remote_off) {
  return post("fi_fetch_atomic", slot, Op::kFetchAtomic, tag, [&] {
    return fi_fetch_atomic(ep_.get(), local_.get() + operand_off, 1, local_desc_,
                           local_.get() + result_off, local_desc_, peer_, remote(remote_off),
                           peer_card_.key, FI_UINT64, FI_SUM, &ctx_[slot]);
  });
}

bool Side::inject_write(size_t local_off, size_t len, size_t remote_off) {
  return post("fi_inject_write", msg::kNone, Op::kWrite, 0, [&] {
    return fi_inject_write(ep_.get(), local_.get() + local_off, len, peer_, remote(remote_off),
                           peer_card_.key);
  });
}

bool Side::send(size_t slot, uint64_t tag, size_t local_off, size_t len) {
  return post("fi_send", slot, Op::kSend, tag, [&] {
    return fi_send(ep_.get(), local_.get() + local_off, len, local_desc_, peer_, &ctx_[slot]);
  });
}

bool Side::recv(size_t slot, uint64_t tag, size_t local_off, size_t len) {
  return post(
      "fi_recv", slot, Op::kRecv, tag,
      [&] {
        return fi_recv(ep_.get(), local_.get() + local_off, len, local_desc_, peer_, &ctx_[slot]);
      },
      len);
}

bool Side::inject(size_t local_off, size_t len) {
  return post("fi_inject", msg::kNone, Op::kSend, 0,
              [&] { return fi_inject(ep_.get(), local_.get() + local_off, len, peer_); });
}

bool Side::drain() {
  Spin spin(this);
  while (free_.size() < slots_.size()) {
    size_t got = 0;
    if (!progress(&got)) return false;
    if (got == 0 && !spin.again("not every operation completed")) return false;
  }
  return true;
}

bool Side::wait_until(const char* what, const std::function<bool()>& ready,
                      const std::string* why) {
  Spin spin(this);
  while (!ready()) {
    size_t got = 0;
    if (!progress(&got)) return false;
    if (!spin.again(what, "", why)) return false;
  }
  return true;
}

bool Side::barrier(bool poll) {
  const int target = 2 * ++barriers_;
  link_->arrived.fetch_add(1, std::memory_order_acq_rel);
  Spin spin(this);
  while (link_->arrived.load(std::memory_order_acquire) < target) {
    size_t got = 0;
    if (poll && !progress(&got)) return false;
    if (!spin.again("the other side did not come")) return false;
  }
  return true;
}

bool Side::progress(size_t* got) {
  fi_cq_data_entry e[msg::kCqBatch];
  const ssize_t r = fi_cq_read(cq_.get(), e, msg::kCqBatch);
  if (r == -FI_EAGAIN) {
    *got = 0;
    return true;
  }
  if (r == -FI_EAVAIL) return fail(cq_error());
  if (r < 0) return fail(msg::fi_error("fi_cq_read", r));
  for (ssize_t i = 0; i < r; ++i) {
    if (!sort(e[i])) return false;
  }
  *got = static_cast<size_t>(r);
  return true;
}

bool Side::sort(const fi_cq_data_entry& e) {
  const auto base = reinterpret_cast<uintptr_t>(ctx_.data());
  const auto c = reinterpret_cast<uintptr_t>(e.op_context);
  const auto flags = static_cast<unsigned long long>(e.flags);
  if (c < base || c >= base + ctx_.size() * sizeof(fi_context2) ||
      (c - base) % sizeof(fi_context2) != 0) {
    return fail(fmt("a completion with context %p, which no operation carried (flags 0x%llx: ",
                    e.op_context, flags) +
                flag_names(e.flags) + ")");
  }
  const size_t slot = (c - base) / sizeof(fi_context2);
  Slot& s = slots_[slot];
  if (!s.posted) return fail(fmt("a completion for operation slot %zu, which is not posted", slot));
  const uint64_t want = flags_of(s.kind);
  const uint64_t got = e.flags & kKindFlags;
  // A fetching atomic both reads and writes the target: libfabric's utility code (ofi_rxm,
  // shm) reports it with FI_READ, sockets with FI_WRITE; either names it.
  const bool fetch_as_write = s.kind == Op::kFetchAtomic && got == (FI_ATOMIC | FI_WRITE);
  // libfabric's udp provider reports a datagram's send and receive with FI_SEND or FI_RECV
  // alone, without the FI_MSG fi_cq(3) asks for; tolerated for it only, so that it is
  // compared at all.
  const bool udp_msg = spec_.prov_name == "udp" && got == (want & ~FI_MSG) &&
                       (s.kind == Op::kRecv || s.kind == Op::kSend);
  if (got != want && !fetch_as_write && !udp_msg) {
    return fail(std::string("a completion of ") + name_of(s.kind) + " with flags " +
                flag_names(e.flags & kKindFlags) + " where " + flag_names(want) + " are due");
  }
  if (s.kind == Op::kRecv && e.len != s.len) {
    return fail(fmt("fi_recv into slot %zu completed with %zu bytes where %zu were sent", slot,
                    e.len, s.len));
  }
  s.posted = false;
  ++done_;
  // This side is the counter's only writer: a load and a store, no locked instruction.
  std::atomic<uint64_t>& mine = link_->completions[index_].n;
  mine.store(mine.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  if (on_done_ && !on_done_(slot, s.tag)) return false;
  free_.push_back(slot);
  return true;
}

std::string Side::cq_error() {
  fi_cq_err_entry err{};
  const ssize_t r = fi_cq_readerr(cq_.get(), &err, 0);
  if (r < 0) return msg::fi_error("fi_cq_readerr", r);
  std::string what = "an unknown operation";
  const auto base = reinterpret_cast<uintptr_t>(ctx_.data());
  const auto c = reinterpret_cast<uintptr_t>(err.op_context);
  if (c >= base && c < base + ctx_.size() * sizeof(fi_context2)) {
    what = name_of(slots_[(c - base) / sizeof(fi_context2)].kind);
  }
  std::string s = "completion error on " + what + ": " + fi_strerror(err.err);
  if (err.prov_errno != 0) {
    s += fmt(" (prov_errno %d: %s)", err.prov_errno,
             fi_cq_strerror(cq_.get(), err.prov_errno, err.err_data, nullptr, 0));
  }
  return s;
}

namespace {

constexpr uint32_t kQuit = ~uint32_t{0};  // Mailbox::index: the server process ends
// How long the client waits for the server process's outcome beyond Options::timeout_ms once
// its own side is done: the server's side then has only to close its objects, or to see the
// stop flag and give up its wait.
constexpr int64_t kServerMarginMs = 3'000;

// A msg::Outcome in plain bytes, its strings cut to fit.
struct PlainOutcome {
  Sample::State state = Sample::State::kOk;
  bool stopped = false;
  int order = 0;
  char why[1024] = {};
  char detail[256] = {};
};

}  // namespace

// What the client process and the server process share, in a MAP_SHARED mapping made before
// the fork (so at one address in both). The client alone writes the commands and resets the
// Link; the server alone writes the outcome. Generations count the commands from 1.
struct Mailbox {
  // The latest command: `index` (the scenario, or kQuit) is stored before `command` (release).
  // The server sleeps on `command` (futex).
  std::atomic<uint32_t> command{0};
  std::atomic<uint32_t> index{0};
  // The generation whose Link the client has reset, stored after the reset (release).
  std::atomic<uint32_t> link_gen{0};
  // The generation whose server outcome `outcome` holds, stored after it (release). The
  // client sleeps on it (futex).
  std::atomic<uint32_t> done{0};
  PlainOutcome outcome;
  alignas(Link) unsigned char link_bytes[sizeof(Link)];
  Link* link() { return std::launder(reinterpret_cast<Link*>(link_bytes)); }
};
static_assert(std::atomic<uint32_t>::is_always_lock_free &&
              sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));

namespace {

// How run_pair plays its part in this process.
struct Mode {
  enum class Role { kThreads, kClient, kServer };
  Role role = Role::kThreads;
  Mailbox* box = nullptr;
  // kClient: the server process (-1 once reaped), the scenario about to run, and why the
  // server process serves no more ("" while it does; kept for the failures of the runs after).
  pid_t pid = -1;
  size_t index = 0;
  std::string lost;
  bool gone = false;  // it served and then was lost: a new pair of processes can do better
  // kServer: the command being run, and whether run_pair answered it.
  uint32_t gen = 0;
  bool served = false;
};
Mode mode;

// futex(2) on a word of the shared mapping: not FUTEX_PRIVATE_FLAG (nor std::atomic::wait,
// whose futex is private to the process), since the other process wakes it.
void futex_wait(std::atomic<uint32_t>* word, uint32_t seen, int64_t ns) {
  const timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  (void)syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, seen, &ts, nullptr, 0);
}

void futex_wake(std::atomic<uint32_t>* word) {
  (void)syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr,
                0);
}

template <size_t N>
void copy_text(char (&to)[N], const std::string& from) {
  std::snprintf(to, N, "%s", from.c_str());
}

msg::Outcome failed(const std::string& why) {
  msg::Outcome out;
  out.state = Sample::State::kFailed;
  out.why = why;
  return out;
}

void publish(Mailbox* b, uint32_t gen, const msg::Outcome& out) {
  PlainOutcome& p = b->outcome;
  p.state = out.state;
  p.stopped = out.stopped;
  p.order = out.order;
  copy_text(p.why, out.why);
  copy_text(p.detail, out.detail);
  b->done.store(gen, std::memory_order_release);
  futex_wake(&b->done);
}

msg::Outcome received(const PlainOutcome& p) {
  msg::Outcome out;
  out.state = p.state;
  out.stopped = p.stopped;
  out.order = p.order;
  out.why = p.why;
  out.detail = p.detail;
  return out;
}

// Waits for `pid` to end, at most `ms`, then kills it. Either way it is reaped.
void reap(pid_t pid, int64_t ms) {
  const int64_t deadline = now_ns() + ms * 1'000'000;
  int status = 0;
  for (;;) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid || (r < 0 && errno != EINTR)) return;
    if (now_ns() > deadline) break;
    usleep(1000);
  }
  kill(pid, SIGKILL);
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
}

// The server process is of no more use: it is killed (if still there), and this run and the
// RMA runs after it fail with `why`.
msg::Outcome lose(const std::string& why) {
  mode.lost = "server: " + why;
  mode.gone = true;
  if (mode.pid > 0) reap(mode.pid, 0);
  mode.pid = -1;
  return failed(mode.lost);
}

// The client's wait for the server's outcome of command `gen`.
msg::Outcome await_server(Mailbox* b, uint32_t gen, const Options& o) {
  const int64_t limit_ms = o.timeout_ms + kServerMarginMs;
  const int64_t deadline = now_ns() + limit_ms * 1'000'000;
  for (;;) {
    const uint32_t done = b->done.load(std::memory_order_acquire);
    if (done == gen) return received(b->outcome);
    int status = 0;
    if (waitpid(mode.pid, &status, WNOHANG) == mode.pid) {
      mode.pid = -1;
      return lose(WIFSIGNALED(status)
                      ? std::string("its process died: ") + strsignal(WTERMSIG(status))
                      : fmt("its process died: exit status %d", WEXITSTATUS(status)));
    }
    const int64_t left = deadline - now_ns();
    if (left <= 0) {
      return lose(fmt("its process did not finish within %lld ms of the client's side",
                      static_cast<long long>(limit_ms)));
    }
    futex_wait(&b->done, done, std::min<int64_t>(left, 10'000'000));
  }
}

// Both sides in this process: the server in a thread of its own, the client in this one.
Sample run_threads(const Provider& p, const Options& o, const Part& server, const Part& client) {
  const ProviderSpec& spec = p.spec();
  Link link(o);
  msg::Outcome s_out, c_out;
  const msg::CpuPair cpus = msg::pick_cpus();
  std::thread server_thread([&] {
    msg::pin_to(cpus.cpu[0]);
    Side s(0, &link, spec);
    (void)(s.start(server.needs) && server.body(s) && s.finish());
    s_out = s.outcome();
  });
  msg::pin_to(cpus.cpu[1]);
  {
    Side c(1, &link, spec);
    (void)(c.start(client.needs) && client.body(c) && c.finish());
    c_out = c.outcome();
  }
  server_thread.join();
  // This thread runs the provider's next scenarios: they get every allowed CPU back.
  if (cpus.cpu[1] >= 0) (void)sched_setaffinity(0, sizeof(cpus.allowed), &cpus.allowed);
  return msg::sample_of(s_out, c_out);
}

// The client process's part: sends the server process the scenario, plays the client.
Sample run_client(const Provider& p, const Options& o, const Part& client) {
  if (!mode.lost.empty()) return msg::sample_of(failed(mode.lost), msg::Outcome{});
  Mailbox* b = mode.box;
  const uint32_t gen = b->command.load(std::memory_order_relaxed) + 1;  // only this process posts
  // The last run's server is done with the Link (await_server saw it, or it was killed).
  Link* link = std::construct_at(reinterpret_cast<Link*>(b->link_bytes), o);
  b->link_gen.store(gen, std::memory_order_release);
  b->index.store(static_cast<uint32_t>(mode.index), std::memory_order_relaxed);
  b->command.store(gen, std::memory_order_release);
  futex_wake(&b->command);
  msg::Outcome c_out;
  const msg::CpuPair cpus = msg::pick_cpus();
  msg::pin_to(cpus.cpu[1]);
  {
    Side c(1, link, p.spec());
    (void)(c.start(client.needs) && client.body(c) && c.finish());
    c_out = c.outcome();
  }
  if (cpus.cpu[1] >= 0) (void)sched_setaffinity(0, sizeof(cpus.allowed), &cpus.allowed);
  msg::Outcome s_out = await_server(b, gen, o);
  // The server process was lost in this run: how the client's side ran into it tells when.
  if (mode.gone && c_out.state != Sample::State::kOk) s_out.why += "; " + c_out.why;
  return msg::sample_of(s_out, c_out);
}

// The server process's part in the command it is running (mode.gen): waits for the client's
// Link of that command, plays the server, answers with its outcome.
Sample run_server(const Provider& p, const Options& o, const Part& server) {
  Mailbox* b = mode.box;
  const uint32_t gen = mode.gen;
  if (mode.served) return Sample{.state = Sample::State::kFailed, .why = "run_pair ran twice"};
  mode.served = true;
  const int64_t deadline = now_ns() + o.timeout_ms * 1'000'000LL;
  while (b->link_gen.load(std::memory_order_acquire) != gen) {
    // A newer command means the client has moved on: this run's Link will never come.
    if (b->command.load(std::memory_order_acquire) != gen || now_ns() > deadline) {
      const msg::Outcome out = failed("server: the client did not set up its side of this run");
      publish(b, gen, out);
      return msg::sample_of(out, msg::Outcome{});
    }
    usleep(100);
  }
  msg::Outcome out;
  const msg::CpuPair cpus = msg::pick_cpus();
  msg::pin_to(cpus.cpu[0]);
  {
    Side s(0, b->link(), p.spec());
    (void)(s.start(server.needs) && server.body(s) && s.finish());
    out = s.outcome();
  }
  if (cpus.cpu[0] >= 0) (void)sched_setaffinity(0, sizeof(cpus.allowed), &cpus.allowed);
  publish(b, gen, out);
  return msg::sample_of(out, msg::Outcome{});
}

// The server process: runs each scenario the client sends until told to quit. Never returns,
// and leaves by _exit, as the provider's child process does (a provider's close may hang).
[[noreturn]] void serve(const ProviderSpec& spec, const std::vector<const Scenario*>& scenarios,
                        const Options& o, Mailbox* b) {
  std::string why;
  const std::unique_ptr<Provider> p = Provider::open(spec, &why);
  uint32_t seen = 0;
  for (;;) {
    const uint32_t gen = b->command.load(std::memory_order_acquire);
    if (gen == seen) {
      futex_wait(&b->command, seen, 1'000'000'000);
      continue;
    }
    seen = gen;
    const uint32_t index = b->index.load(std::memory_order_relaxed);
    if (index == kQuit) _exit(0);
    mode.gen = gen;
    mode.served = false;
    if (p && index < scenarios.size()) (void)scenarios[index]->run(*scenarios[index], *p, o);
    if (mode.served) continue;
    // The client's side waits for this one: tell it at once that none comes.
    if (b->link_gen.load(std::memory_order_acquire) == gen) {
      b->link()->stop.store(true, std::memory_order_release);
    }
    publish(b, gen,
            failed(p ? "server: the scenario returned before it ran its side" : "server: " + why));
  }
}

}  // namespace

Sample run_pair(const Provider& p, const Options& o, const Part& server, const Part& client) {
  switch (mode.role) {
    case Mode::Role::kThreads:
      return run_threads(p, o, server, client);
    case Mode::Role::kClient:
      return run_client(p, o, client);
    case Mode::Role::kServer:
      return run_server(p, o, server);
  }
  return Sample{.state = Sample::State::kFailed, .why = "run_pair: no role"};
}

void ServerProcess::Unmap::operator()(Mailbox* box) const {
  munmap(box, sizeof(Mailbox));
}

ServerProcess::ServerProcess(const ProviderSpec& spec,
                             const std::vector<const Scenario*>& scenarios, const Options& o,
                             int parent_pipe) {
  mode = Mode{};
  mode.role = Mode::Role::kClient;
  void* m =
      mmap(nullptr, sizeof(Mailbox), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    mode.lost = std::string("server: mmap of the mailbox: ") + std::strerror(errno);
    return;
  }
  box_.reset(std::construct_at(static_cast<Mailbox*>(m)));
  mode.box = box_.get();
  const pid_t parent = getpid();
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    mode.lost = std::string("server: fork: ") + std::strerror(errno);
    return;
  }
  if (pid == 0) {
    // It must not outlive the client process, whatever ends that one (isolate.cc's SIGKILL of
    // a hung provider, for one).
    (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(0);
    close(parent_pipe);
    mode.role = Mode::Role::kServer;
    serve(spec, scenarios, o, mode.box);
  }
  mode.pid = pid;
}

ServerProcess::~ServerProcess() {
  if (mode.pid > 0) {
    Mailbox* b = mode.box;
    b->index.store(kQuit, std::memory_order_relaxed);
    b->command.store(b->command.load(std::memory_order_relaxed) + 1, std::memory_order_release);
    futex_wake(&b->command);
    reap(mode.pid, 1'000);
  }
  mode = Mode{};
}

void ServerProcess::next(size_t index) {
  mode.index = index;
}

bool ServerProcess::lost() const {
  return mode.gone;
}

}  // namespace fabq::tools::bench::rma
