// The MSG scenarios: two FI_EP_MSG endpoints of the provider under test connected over TCP on
// 127.0.0.1 (passive endpoint listening on port 0, fi_getname for the port, fi_connect, CM
// events through an EQ), exercised as fabtests' fi_msg_pingpong and fi_msg_bw do.
//
// The two sides are two threads of the provider's child process (isolate.cc), each with its
// own fi_getinfo, fabric, domain, EQ and CQ, as two processes would have; only libfabric's
// process-wide state is shared. Not two processes: when a scenario runs, the child has loaded
// libfabric and opened the provider, whose threads (sockets' progress threads, for one) may
// hold locks at a fork(), so a forked peer could not safely call libfabric; forking the peer
// before that would give isolate.cc a second child per provider, with its own command
// channel, hang detection and kill. Threads also share a clock (msg-comp-rate times both
// sides on one time line) and a stop flag, so a side that fails ends the other's waits at once.
//
// The two threads are pinned to two different CPUs. Two busy-pollers that the scheduler
// stacks on one core hand a message over only at a preemption tick: on a shared two-core
// machine that happened in about one run in three (ping-pong p50 8 ms instead of 10 us).
//
// The setup (fi_getinfo, fabric, domain, passive endpoint, endpoint, CM events) takes the steps of
// tools/fabric_setup.h, the ones the tests' harness takes too.
//
// Every blocking step (the server's port, a CM event, a completion, a send that keeps getting
// -FI_EAGAIN, the other side at a barrier) gives up after Options::timeout_ms: a provider that
// does not work gives FAILED, or unsupported when setup returns -FI_ENOSYS/-FI_EOPNOTSUPP or
// fi_getinfo has no MSG endpoint, with the step and the side, never a hang. Every completion
// is checked: its context must be a buffer the side posted and has not got back, its flags
// must say send or receive, and a received message must pass MsgFormat::check.
#include "tools/bench/msg.h"

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <thread>

#include "tools/fabric_setup.h"

namespace fabq::tools::bench {
namespace {

std::string fmt(const char* f, auto... args) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), f, args...);
  return buf;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The message format.

MsgFormat::MsgFormat(size_t size) : pattern_(std::max(size, kMinSize)) {
  uint64_t x = 0x9e3779b97f4a7c15ULL ^ size;  // xorshift64: cheap, and another pattern per size
  for (uint8_t& b : pattern_) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b = static_cast<uint8_t>(x >> 56);
  }
  for (size_t off = 0; off + 8 <= pattern_.size(); off += kStampEvery) stamps_.push_back(off);
  if (const size_t last = pattern_.size() - 8; last >= stamps_.back() + 8) stamps_.push_back(last);
}

void MsgFormat::fill(void* buf) const {
  std::memcpy(buf, pattern_.data(), pattern_.size());
}

void MsgFormat::stamp(void* buf, uint64_t seq, MsgDir dir) const {
  const uint64_t v = seq << 1 | static_cast<uint64_t>(dir);
  for (const size_t off : stamps_) std::memcpy(static_cast<uint8_t*>(buf) + off, &v, sizeof(v));
}

bool MsgFormat::check(const void* buf, size_t len, MsgDir dir, uint64_t* seq,
                      std::string* why) const {
  const auto* p = static_cast<const uint8_t*>(buf);
  if (len != size()) {
    *why = fmt("received %zu bytes where the message has %zu", len, size());
    return false;
  }
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  if ((v & 1) != static_cast<uint64_t>(dir) || (v >> 1) == 0) {
    *why = fmt("not a message to the %s: it begins with 0x%016llx",
               dir == MsgDir::kToServer ? "server" : "client", static_cast<unsigned long long>(v));
    return false;
  }
  const unsigned long long n = v >> 1;
  // The bytes in [from, to) must be the pattern's.
  auto same = [&](size_t from, size_t to) {
    if (std::memcmp(p + from, pattern_.data() + from, to - from) == 0) return true;
    size_t i = from;
    while (p[i] == pattern_[i]) ++i;
    *why = fmt("message %llu of %zu bytes: byte %zu is 0x%02x where 0x%02x was sent", n, size(), i,
               p[i], pattern_[i]);
    return false;
  };
  size_t pos = 0;
  for (const size_t off : stamps_) {
    if (!same(pos, off)) return false;
    uint64_t w;
    std::memcpy(&w, p + off, sizeof(w));
    if (w != v) {
      *why =
          fmt("message %llu of %zu bytes: the stamp at byte %zu is 0x%016llx, not 0x%016llx", n,
              size(), off, static_cast<unsigned long long>(w), static_cast<unsigned long long>(v));
      return false;
    }
    pos = off + sizeof(w);
  }
  if (!same(pos, size())) return false;
  *seq = v >> 1;
  return true;
}

std::string msg_size_name(size_t bytes) {
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) return std::to_string(bytes >> 20) + "Mi";
  if (bytes >= 1024 && bytes % 1024 == 0) return std::to_string(bytes >> 10) + "Ki";
  return std::to_string(bytes);
}

std::string msg_size_label(size_t bytes) {
  const std::string name = msg_size_name(bytes);
  if (name.back() != 'i') return name + " B";
  return name.substr(0, name.size() - 2) + " " + name.substr(name.size() - 2) + "B";
}

namespace {

// ---------------------------------------------------------------------------------------------
// The connection: what the two sides share, and one side.

constexpr const char* kHost = "127.0.0.1";
constexpr char kConnectData[] = "fabq bench: connect";
constexpr char kAcceptData[] = "fabq bench: accept";
constexpr int kCmSliceMs = 20;        // a wait for a CM event looks at the stop flag this often
constexpr size_t kCqBatch = 16;       // completions per fi_cq_read
constexpr uint32_t kSpinCheck = 256;  // empty polls between looks at the clock and stop flag
constexpr size_t kNone = ~size_t{0};

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1'000'000'000LL + ts.tv_nsec;
}

std::string fi_error(const std::string& call, long rc) {
  return call + " returned " + std::to_string(rc) +
         (rc < 0 ? std::string(" (") + fi_strerror(static_cast<int>(-rc)) + ")" : "");
}

std::string event_name(uint32_t event) {
  switch (event) {
    case FI_CONNREQ:
      return "FI_CONNREQ";
    case FI_CONNECTED:
      return "FI_CONNECTED";
    case FI_SHUTDOWN:
      return "FI_SHUTDOWN";
    default:
      return "event " + std::to_string(event);
  }
}

template <typename T>
struct Closer {
  void operator()(T* p) const { fi_close(&p->fid); }
};
template <typename T>
using FidPtr = std::unique_ptr<T, Closer<T>>;

struct InfoFree {
  void operator()(fi_info* i) const { fi_freeinfo(i); }
};
using InfoPtr = std::unique_ptr<fi_info, InfoFree>;

struct MemFree {
  void operator()(uint8_t* p) const { std::free(p); }
};

// What the two sides share. Written by both threads; every member is atomic.
struct Link {
  explicit Link(const Options& opt) : o(opt) {}
  const Options& o;
  std::atomic<int> port{0};       // the server's port, once it listens
  std::atomic<bool> stop{false};  // a side failed: the other gives up its waits
  std::atomic<int> arrived{0};    // barrier arrivals so far, both sides together
  std::atomic<int> failures{0};   // failures so far: tells which side failed first
};

// How one side ended.
struct Outcome {
  Sample::State state = Sample::State::kOk;
  std::string why;
  bool stopped = false;  // it failed only because the other side had
  std::string detail;    // when stopped: its sends and receives then, if it had any
  int order = 0;         // among the failures of the two sides, 0 first
};

// Buffers of one kind (send or receive), each with the fi_context2 its operations carry (so
// FI_CONTEXT and FI_CONTEXT2 modes are met) and whether the provider holds it now.
class Slots {
 public:
  Slots(size_t count, size_t size)
      : count_(count),
        size_(size),
        mem_(static_cast<uint8_t*>(std::aligned_alloc(4096, (count * size + 4095) / 4096 * 4096))),
        ctx_(count),
        posted_(count, false) {
    free_.reserve(count);
    for (size_t i = count; i > 0; --i) free_.push_back(i - 1);
  }
  bool ok() const { return mem_ != nullptr; }
  size_t count() const { return count_; }
  size_t size() const { return size_; }
  uint8_t* buf(size_t i) { return mem_.get() + i * size_; }
  void* context(size_t i) { return &ctx_[i]; }
  // The slot whose context `c` is, or kNone.
  size_t find(const void* c) const {
    const auto base = reinterpret_cast<uintptr_t>(ctx_.data());
    const auto p = reinterpret_cast<uintptr_t>(c);
    if (p < base || p >= base + count_ * sizeof(fi_context2)) return kNone;
    if ((p - base) % sizeof(fi_context2) != 0) return kNone;
    return (p - base) / sizeof(fi_context2);
  }
  bool posted(size_t i) const { return posted_[i]; }
  void set_posted(size_t i, bool v) { posted_[i] = v; }
  // Send slots cycle through a free list: taken, posted, completed, freed.
  bool take(size_t* i) {
    if (free_.empty()) return false;
    *i = free_.back();
    free_.pop_back();
    return true;
  }
  void give(size_t i) { free_.push_back(i); }
  bool all_free() const { return free_.size() == count_; }
  bool any_free() const { return !free_.empty(); }

 private:
  size_t count_, size_;
  std::unique_ptr<uint8_t, MemFree> mem_;
  std::vector<fi_context2> ctx_;
  std::vector<bool> posted_;
  std::vector<size_t> free_;
};

// One side of the connection. Used by one thread only; closes its objects (endpoint, passive
// endpoint, CQ, EQ, domain, fabric) on destruction.
class Peer {
 public:
  Peer(const char* role, Link* link, const ProviderSpec& spec)
      : role_(role), link_(link), spec_(spec), timeout_ns_(link->o.timeout_ms * 1'000'000LL) {}
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;

  // Setup. Server: open, listen, accept. Client: open (once the server listens), connect.
  bool start_server(const MsgFormat& f, size_t send_slots, size_t recv_slots) {
    return open("0", FI_SOURCE, f, send_slots, recv_slots) && listen() && accept();
  }
  bool start_client(const MsgFormat& f, size_t send_slots, size_t recv_slots) {
    int port = 0;
    return wait_port(&port) && open(std::to_string(port).c_str(), 0, f, send_slots, recv_slots) &&
           connect();
  }
  // After the scenario: every send completed, the other side done too, no message left
  // unread. Then a second barrier that leaves the CQ alone: once a side closes, the other's
  // posted receives complete in error (FI_ECANCELED), and no one may be reading by then.
  bool finish() {
    if (!drain_sends() || !barrier(true)) return false;
    if (pending_count_ > 0) {
      return fail(fmt("an unexpected message: %zu bytes in receive buffer %zu",
                      pending_[pending_head_].len, pending_[pending_head_].slot));
    }
    return barrier(false);
  }

  // --- data path
  uint8_t* send_buf(size_t slot) { return tx_->buf(slot); }
  uint8_t* recv_buf(size_t slot) { return rx_->buf(slot); }
  size_t send_slots() const { return tx_->count(); }
  size_t recv_slots() const { return rx_->count(); }

  // A free send buffer, polling the CQ until a send completes if none is.
  bool acquire_send(size_t* slot) {
    while (!tx_->take(slot)) {
      if (!wait_any()) return false;
    }
    return true;
  }
  bool try_acquire_send(size_t* slot) { return tx_->take(slot); }
  bool has_free_send() const { return tx_->any_free(); }
  bool send(size_t slot, size_t len) {
    if (!post("fi_send", [&] {
          return fi_send(ep_.get(), tx_->buf(slot), len, nullptr, 0, tx_->context(slot));
        })) {
      return false;
    }
    tx_->set_posted(slot, true);
    return true;
  }
  bool post_recv(size_t slot) {
    if (!post("fi_recv", [&] {
          return fi_recv(ep_.get(), rx_->buf(slot), rx_->size(), nullptr, 0, rx_->context(slot));
        })) {
      return false;
    }
    rx_->set_posted(slot, true);
    return true;
  }
  // The next completed receive, polling the CQ until there is one.
  bool next_recv(size_t* slot, size_t* len) {
    while (!pop_recv(slot, len)) {
      if (!wait_any()) return false;
    }
    return true;
  }
  bool pop_recv(size_t* slot, size_t* len) {
    if (pending_count_ == 0) return false;
    *slot = pending_[pending_head_].slot;
    *len = pending_[pending_head_].len;
    pending_head_ = (pending_head_ + 1) % pending_.size();
    --pending_count_;
    return true;
  }
  // Checks receive buffer `slot` as a message of `f` going `dir`. With `want` > 0, its
  // sequence number must be `want`.
  bool check(const MsgFormat& f, size_t slot, size_t len, MsgDir dir, uint64_t want,
             uint64_t* seq) {
    std::string why;
    if (!f.check(rx_->buf(slot), len, dir, seq, &why)) return fail(why);
    if (want != 0 && *seq != want) {
      return fail(fmt("message %llu arrived where %llu was expected",
                      static_cast<unsigned long long>(*seq),
                      static_cast<unsigned long long>(want)));
    }
    return true;
  }
  // Polls the CQ until at least one completion arrived.
  bool wait_any() {
    Spin spin(this);
    for (;;) {
      size_t got = 0;
      if (!progress(&got)) return false;
      if (got > 0) return true;
      if (!spin.again("no completion")) return false;
    }
  }
  bool drain_sends() {
    while (!tx_->all_free()) {
      if (!wait_any()) return false;
    }
    return true;
  }
  // Waits until the other side has called barrier() as often as this one. With `poll`, reads
  // the CQ meanwhile: with manual progress, the other side's last sends may complete only
  // once this side's provider has acknowledged them. Completions read here wait in pending_.
  bool barrier(bool poll) {
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

  bool fail(const std::string& why, bool unsupported = false) {
    if (out_.state == Sample::State::kOk) {
      out_.state = unsupported ? Sample::State::kUnsupported : Sample::State::kFailed;
      out_.why = role_ + ": " + why;
      out_.order = link_->failures.fetch_add(1, std::memory_order_acq_rel);
      link_->stop.store(true, std::memory_order_release);
    }
    return false;
  }
  const Outcome& outcome() const { return out_; }

 private:
  struct Received {
    size_t slot, len;
  };

  // The bookkeeping of a busy-polling wait: again(), called after each empty poll, looks at
  // the stop flag and the timeout every kSpinCheck calls. It never yields the core: on a
  // loaded machine that hands it to other work, not to the peer, and the figures get worse.
  class Spin {
   public:
    explicit Spin(Peer* p) : p_(p) {}
    // False (after stopped() or fail()) when the wait must end; the failure reads
    // "<what><then> within <timeout> ms (<the side's state>)".
    bool again(const char* what, const char* then = "") {
      if (++spins_ % kSpinCheck != 0) return true;  // the clock costs more than a poll
      if (p_->link_->stop.load(std::memory_order_relaxed)) return p_->stopped();
      const int64_t t = now_ns();
      if (start_ == 0) start_ = t;
      if (t - start_ > p_->timeout_ns_) {
        return p_->fail(fmt("%s%s within %d ms", what, then, p_->link_->o.timeout_ms) +
                        p_->state());
      }
      return true;
    }

   private:
    Peer* const p_;
    uint32_t spins_ = 0;
    int64_t start_ = 0;
  };

  // Where this side stands, for a failure reason: what completed and what is outstanding.
  std::string state() const {
    if (!tx_ || !rx_) return "";
    size_t sends_out = 0, recvs_out = 0;
    for (size_t i = 0; i < tx_->count(); ++i) sends_out += tx_->posted(i);
    for (size_t i = 0; i < rx_->count(); ++i) recvs_out += rx_->posted(i);
    return fmt(" (%llu sends and %llu receives completed; %zu sends and %zu receives posted)",
               static_cast<unsigned long long>(sends_done_),
               static_cast<unsigned long long>(recvs_done_), sends_out, recvs_out);
  }

  bool stopped() {
    if (out_.state == Sample::State::kOk) {
      out_.state = Sample::State::kFailed;
      out_.detail = state();
      out_.why = role_ + ": stopped, the other side failed" + out_.detail;
      out_.stopped = true;
    }
    return false;
  }

  // A setup call's failure: unsupported when the provider does not implement the call.
  bool setup_fail(const std::string& call, long rc) {
    return fail(fi_error(call, rc), rc == -FI_ENOSYS || rc == -FI_EOPNOTSUPP);
  }

  bool wait_port(int* port) {
    const int64_t deadline = now_ns() + timeout_ns_;
    while ((*port = link_->port.load(std::memory_order_acquire)) == 0) {
      if (link_->stop.load(std::memory_order_relaxed)) return stopped();
      if (now_ns() > deadline) {
        return fail(fmt("the server did not listen within %d ms", link_->o.timeout_ms));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    return true;
  }

  bool open(const char* service, uint64_t flags, const MsgFormat& f, size_t send_slots,
            size_t recv_slots) {
    setup::Hints hints;
    hints.provider = spec_.prov_name;
    // Both sides busy-poll their CQ, so that thread is the one to move data (fabq's default).
    // Left to FI_PROGRESS_AUTO, sockets moves it in threads of its own, which get a core from
    // the two pollers only at a preemption: 8 B one way took 16-27 ms instead of 20-30 us on a
    // two-core machine. tcp does the same either way.
    hints.data_progress = FI_PROGRESS_MANUAL;
    fi_info* info = nullptr;
    const setup::Result got = setup::getinfo(hints, kHost, service, flags, &info);
    info_.reset(info);
    if (got.rc == -FI_ENODATA) {
      return fail(got.call + ": no FI_EP_MSG endpoint of " + spec_.prov_name, true);
    }
    if (!got.ok()) return setup_fail(got.call, got.rc);
    if (info_->ep_attr->max_msg_size < f.size()) {
      return fail(fmt("max_msg_size %zu is below the message size %zu",
                      info_->ep_attr->max_msg_size, f.size()),
                  true);
    }
    // Queue depths as asked, within what the provider offers.
    if (info_->tx_attr->size > 0) send_slots = std::min(send_slots, info_->tx_attr->size);
    if (info_->rx_attr->size > 0) recv_slots = std::min(recv_slots, info_->rx_attr->size);
    tx_.emplace(send_slots, f.size());
    rx_.emplace(recv_slots, f.size());
    if (!tx_->ok() || !rx_->ok()) return fail("no memory for the message buffers");
    for (size_t i = 0; i < send_slots; ++i) f.fill(tx_->buf(i));
    std::memset(rx_->buf(0), 0, recv_slots * f.size());
    pending_.resize(recv_slots);

    fid_fabric* fabric = nullptr;
    fid_domain* domain = nullptr;
    const setup::Result opened = setup::open_fabric(info_.get(), &fabric, &domain);
    fabric_.reset(fabric);
    domain_.reset(domain);
    if (!opened.ok()) return setup_fail(opened.call, opened.rc);
    fi_eq_attr eq_attr{};
    eq_attr.size = 64;
    eq_attr.wait_obj = FI_WAIT_UNSPEC;  // CM events are waited for in fi_eq_sread
    fid_eq* eq = nullptr;
    if (int r = fi_eq_open(fabric_.get(), &eq_attr, &eq, nullptr); r != 0) {
      return setup_fail("fi_eq_open", r);
    }
    eq_.reset(eq);
    fi_cq_attr cq_attr{};
    cq_attr.size = send_slots + recv_slots + 16;  // every operation's completion fits
    cq_attr.format = FI_CQ_FORMAT_MSG;
    cq_attr.wait_obj = FI_WAIT_NONE;  // both sides busy-poll
    fid_cq* cq = nullptr;
    if (int r = fi_cq_open(domain_.get(), &cq_attr, &cq, nullptr); r != 0) {
      return setup_fail("fi_cq_open", r);
    }
    cq_.reset(cq);
    return true;
  }

  bool listen() {
    fid_pep* pep = nullptr;
    uint16_t port = 0;
    const setup::Result r = setup::listen(fabric_.get(), info_.get(), eq_.get(), &pep, &port);
    pep_.reset(pep);
    if (!r.ok()) return setup_fail(r.call, r.rc);
    link_->port.store(port, std::memory_order_release);
    return true;
  }

  // An endpoint for `info` bound to the EQ and the CQ and enabled; then every receive buffer
  // posted, so that receives are posted before the first message can come.
  bool open_endpoint(fi_info* info) {
    fid_ep* ep = nullptr;
    const setup::Result r =
        setup::open_endpoint(domain_.get(), info, nullptr,
                             {{&eq_->fid, 0, "eq"}, {&cq_->fid, FI_TRANSMIT | FI_RECV, "cq"}}, &ep);
    ep_.reset(ep);
    if (!r.ok()) return setup_fail(r.call, r.rc);
    for (size_t i = 0; i < rx_->count(); ++i) {
      if (!post_recv(i)) return false;
    }
    return true;
  }

  bool accept() {
    std::string data;
    fi_info* req = nullptr;
    if (!wait_cm(FI_CONNREQ, &pep_->fid, &data, &req)) return false;
    const InfoPtr req_info(req);
    if (data != std::string_view(kConnectData, sizeof(kConnectData))) {
      return fail(fmt("FI_CONNREQ's data (%zu bytes) is not what fi_connect sent (%zu bytes)",
                      data.size(), sizeof(kConnectData)));
    }
    if (!open_endpoint(req_info.get())) return false;
    if (int r = fi_accept(ep_.get(), kAcceptData, sizeof(kAcceptData)); r != 0) {
      return setup_fail("fi_accept", r);
    }
    return wait_cm(FI_CONNECTED, &ep_->fid, &data, nullptr);
  }

  bool connect() {
    if (!open_endpoint(info_.get())) return false;
    if (int r = fi_connect(ep_.get(), info_->dest_addr, kConnectData, sizeof(kConnectData));
        r != 0) {
      return setup_fail("fi_connect", r);
    }
    std::string data;
    if (!wait_cm(FI_CONNECTED, &ep_->fid, &data, nullptr)) return false;
    if (data != std::string_view(kAcceptData, sizeof(kAcceptData))) {
      return fail(fmt("FI_CONNECTED's data (%zu bytes) is not what fi_accept sent (%zu bytes)",
                      data.size(), sizeof(kAcceptData)));
    }
    return true;
  }

  // Waits for CM event `want` about `from`; its data goes to *data and, for FI_CONNREQ, its
  // fi_info (the caller's to free) to *info.
  bool wait_cm(uint32_t want, const fid* from, std::string* data, fi_info** info) {
    setup::CmEvent ev;
    uint32_t event = 0;
    const ssize_t r =
        setup::read_event(eq_.get(), &event, &ev, link_->o.timeout_ms, kCmSliceMs, 0,
                          [this] { return !link_->stop.load(std::memory_order_relaxed); });
    if (r == setup::kStopped) return stopped();
    if (r == -FI_ETIMEDOUT) {
      return fail("no " + event_name(want) + fmt(" within %d ms", link_->o.timeout_ms));
    }
    if (r == -FI_EAVAIL) return fail("waiting for " + event_name(want) + ": " + eq_error());
    if (r < 0) return fail(fi_error("fi_eq_sread", r));
    if (static_cast<size_t>(r) < setup::kCmEntrySize) {
      return fail(fmt("fi_eq_sread returned %zd bytes, less than a CM entry", r));
    }
    InfoPtr got_info(event == FI_CONNREQ ? ev.entry().info : nullptr);
    if (event != want) return fail(event_name(event) + " where " + event_name(want) + " was due");
    if (ev.entry().fid != from) return fail(event_name(event) + " names another fid");
    data->assign(ev.data(), static_cast<size_t>(r) - setup::kCmEntrySize);
    if (info != nullptr) *info = got_info.release();
    return true;
  }

  std::string eq_error() {
    fi_eq_err_entry err{};
    const ssize_t r = fi_eq_readerr(eq_.get(), &err, 0);
    if (r < 0) return fi_error("fi_eq_readerr", r);
    std::string s = std::string("EQ error ") + fi_strerror(err.err);
    if (err.prov_errno != 0) {
      s += fmt(" (prov_errno %d: %s)", err.prov_errno,
               fi_eq_strerror(eq_.get(), err.prov_errno, err.err_data, nullptr, 0));
    }
    return s;
  }

  std::string cq_error() {
    fi_cq_err_entry err{};
    const ssize_t r = fi_cq_readerr(cq_.get(), &err, 0);
    if (r < 0) return fi_error("fi_cq_readerr", r);
    const char* what = tx_->find(err.op_context) != kNone   ? "a send"
                       : rx_->find(err.op_context) != kNone ? "a receive"
                                                            : "an unknown operation";
    std::string s = std::string("completion error on ") + what + ": " + fi_strerror(err.err);
    if (err.prov_errno != 0) {
      s += fmt(" (prov_errno %d: %s)", err.prov_errno,
               fi_cq_strerror(cq_.get(), err.prov_errno, err.err_data, nullptr, 0));
    }
    return s;
  }

  // Retries `op` while it returns -FI_EAGAIN (a full queue), reading the CQ in between: that
  // drains the queue and drives providers whose progress is manual.
  template <typename Op>
  bool post(const char* call, Op op) {
    Spin spin(this);
    for (;;) {
      const ssize_t rc = op();
      if (rc == 0) return true;
      if (rc != -FI_EAGAIN) return fail(fi_error(call, rc));
      size_t got = 0;
      if (!progress(&got)) return false;
      if (!spin.again(call, " kept returning -FI_EAGAIN")) return false;
    }
  }

  // Reads what the CQ holds and sorts it: a send completion frees its buffer, a receive
  // completion is queued for next_recv/pop_recv. *got: how many were read.
  bool progress(size_t* got) {
    fi_cq_msg_entry e[kCqBatch];
    const ssize_t r = fi_cq_read(cq_.get(), e, kCqBatch);
    if (r == -FI_EAGAIN) {
      *got = 0;
      return true;
    }
    if (r == -FI_EAVAIL) return fail(cq_error());
    if (r < 0) return fail(fi_error("fi_cq_read", r));
    for (ssize_t i = 0; i < r; ++i) {
      if (!sort(e[i])) return false;
    }
    *got = static_cast<size_t>(r);
    return true;
  }

  bool sort(const fi_cq_msg_entry& e) {
    const auto flags = static_cast<unsigned long long>(e.flags);
    if (const size_t s = tx_->find(e.op_context); s != kNone) {
      if (!tx_->posted(s)) return fail(fmt("a completion for send buffer %zu, not posted", s));
      if ((e.flags & FI_SEND) == 0) {
        return fail(fmt("a send's completion without FI_SEND (flags 0x%llx)", flags));
      }
      tx_->set_posted(s, false);
      tx_->give(s);
      ++sends_done_;
      return true;
    }
    if (const size_t s = rx_->find(e.op_context); s != kNone) {
      if (!rx_->posted(s)) return fail(fmt("a completion for receive buffer %zu, not posted", s));
      if ((e.flags & FI_RECV) == 0) {
        return fail(fmt("a receive's completion without FI_RECV (flags 0x%llx)", flags));
      }
      // At most one entry per receive buffer, so the ring never overflows.
      rx_->set_posted(s, false);
      pending_[(pending_head_ + pending_count_++) % pending_.size()] = {s, e.len};
      ++recvs_done_;
      return true;
    }
    return fail(fmt("a completion with context %p, which no operation carried (flags 0x%llx)",
                    e.op_context, flags));
  }

  const std::string role_;
  Link* const link_;
  const ProviderSpec& spec_;
  const int64_t timeout_ns_;
  Outcome out_;
  int barriers_ = 0;
  uint64_t sends_done_ = 0, recvs_done_ = 0;  // completions so far, for the failure reasons
  std::optional<Slots> tx_, rx_;
  // Completed receives not yet taken: a ring of one entry per receive buffer, allocated at
  // setup, so sorting completions never allocates.
  std::vector<Received> pending_;
  size_t pending_head_ = 0, pending_count_ = 0;
  // Closed in the reverse order: endpoint, passive endpoint, CQ, EQ, domain, fabric.
  InfoPtr info_;
  FidPtr<fid_fabric> fabric_;
  FidPtr<fid_domain> domain_;
  FidPtr<fid_eq> eq_;
  FidPtr<fid_cq> cq_;
  FidPtr<fid_pep> pep_;
  FidPtr<fid_ep> ep_;
};

// One side's part in a scenario: its queue depths and what it does once connected.
struct Part {
  size_t send_slots, recv_slots;
  std::function<bool(Peer&)> body;
};

Sample unsupported(std::string why) {
  Sample s;
  s.state = Sample::State::kUnsupported;
  s.why = std::move(why);
  return s;
}

double allocs_per(int64_t before, int64_t after, uint64_t events) {
  if (before < 0 || after < 0 || events == 0) return -1;
  return static_cast<double>(after - before) / static_cast<double>(events);
}

// The first two CPUs this process may run on, or -1s when it may use fewer than two.
struct CpuPair {
  cpu_set_t allowed;
  int cpu[2] = {-1, -1};
};

CpuPair pick_cpus() {
  CpuPair pair;
  CPU_ZERO(&pair.allowed);
  if (sched_getaffinity(0, sizeof(pair.allowed), &pair.allowed) != 0) return CpuPair{};
  for (int c = 0, n = 0; c < CPU_SETSIZE && n < 2; ++c) {
    if (CPU_ISSET(c, &pair.allowed)) pair.cpu[n++] = c;
  }
  if (pair.cpu[1] < 0) pair.cpu[0] = -1;
  return pair;
}

// Pins the calling thread to `cpu` (nothing when cpu < 0). A failure only costs steadiness.
void pin_to(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  (void)sched_setaffinity(0, sizeof(set), &set);
}

// Connects a server (in a thread of its own) and a client (this thread), each pinned to a CPU
// of its own, runs their parts and closes both. The figure is the caller's to fill in when
// the result is kOk; otherwise `why` names the side and the step that failed first.
Sample run_connected(const MsgFormat& f, const Provider& p, const Options& o, const Part& server,
                     const Part& client) {
  const ProviderSpec& spec = p.spec();
  if (spec.ep_type != FI_EP_MSG) {
    return unsupported("MSG scenarios need FI_EP_MSG endpoints; '" + spec.name + "' stands for " +
                       spec.note + (spec.name == "tcp" ? " (see tcp-core)" : ""));
  }
  Link link(o);
  Outcome s_out, c_out;
  const CpuPair cpus = pick_cpus();
  std::thread server_thread([&] {
    pin_to(cpus.cpu[0]);
    Peer s("server", &link, spec);
    (void)(s.start_server(f, server.send_slots, server.recv_slots) && server.body(s) && s.finish());
    s_out = s.outcome();
  });
  pin_to(cpus.cpu[1]);
  {
    Peer c("client", &link, spec);
    (void)(c.start_client(f, client.send_slots, client.recv_slots) && client.body(c) && c.finish());
    c_out = c.outcome();
  }
  server_thread.join();
  // This thread runs the provider's next scenarios: they get every allowed CPU back.
  if (cpus.cpu[1] >= 0) (void)sched_setaffinity(0, sizeof(cpus.allowed), &cpus.allowed);

  const Outcome* first = nullptr;
  for (const Outcome* x : {&s_out, &c_out}) {
    if (x->state == Sample::State::kOk) continue;
    if (first == nullptr || (first->stopped && !x->stopped) ||
        (first->stopped == x->stopped && x->order < first->order)) {
      first = x;
    }
  }
  Sample r;
  if (first != nullptr) {
    r.state = first->state;
    r.why = first->why;
    // Where the other side stood tells a stalled provider from a side that stopped polling.
    const Outcome* other = first == &s_out ? &c_out : &s_out;
    if (other->stopped && !other->detail.empty()) r.why += "; " + other->why;
  }
  return r;
}

// ---------------------------------------------------------------------------------------------
// The scenarios.

// What the sides measure: each side writes its own members, the client reads all of them
// once the server thread has been joined.
struct Figures {
  std::vector<double> half_rtt;  // msg-pingpong: one per timed round trip
  int64_t start[2] = {0, 0};     // per side (0 server, 1 client): the timed part's bounds
  int64_t end[2] = {0, 0};
  int64_t allocs0 = -1, allocs1 = -1;  // process-wide, around the client's timed part
};

// Message counts: `base`, fewer for large messages so that a sample moves at most
// Options::msg_bytes, but never fewer than `least`.
uint64_t count_for(uint64_t base, uint64_t least, size_t size, const Options& o) {
  return std::max(least, std::min(base, o.msg_bytes / size));
}

// Sends in flight for msg-rate: Options::msg_window, fewer when they would hold over 16 MiB.
size_t window_for(size_t size, const Options& o) {
  return std::max<size_t>(4, std::min<size_t>(o.msg_window, (16u << 20) / size));
}

// The client sends ping k and takes the time from just before fi_send to the receive
// completion of pong k; it checks the pong after that. The server sends pong k as soon as
// ping k completes and checks ping k while the pong travels. So the checks, which
// fi_msg_pingpong skips by default, overlap each other and stay (almost) out of the figure.
bool pingpong_client(Peer& c, const MsgFormat& f, uint64_t warm, uint64_t timed, Figures* fig) {
  for (uint64_t k = 1; k <= warm + timed; ++k) {
    if (k == warm + 1) fig->allocs0 = heap_allocations_now();
    size_t s = 0, r = 0, len = 0;
    uint64_t seq = 0;
    if (!c.acquire_send(&s)) return false;
    f.stamp(c.send_buf(s), k, MsgDir::kToServer);
    const int64_t t0 = now_ns();
    if (!c.send(s, f.size()) || !c.next_recv(&r, &len)) return false;
    const int64_t t1 = now_ns();
    if (k > warm) fig->half_rtt[k - warm - 1] = static_cast<double>(t1 - t0) / 2;
    if (!c.check(f, r, len, MsgDir::kToClient, k, &seq) || !c.post_recv(r)) return false;
  }
  fig->allocs1 = heap_allocations_now();
  return true;
}

bool pingpong_server(Peer& s, const MsgFormat& f, uint64_t total) {
  for (uint64_t k = 1; k <= total; ++k) {
    size_t r = 0, len = 0, slot = 0;
    uint64_t seq = 0;
    if (!s.next_recv(&r, &len) || !s.acquire_send(&slot)) return false;
    f.stamp(s.send_buf(slot), k, MsgDir::kToClient);
    if (!s.send(slot, f.size())) return false;
    if (!s.check(f, r, len, MsgDir::kToServer, k, &seq) || !s.post_recv(r)) return false;
  }
  return true;
}

Sample msg_pingpong(const Scenario& sc, const Provider& p, const Options& o) {
  const uint64_t timed = count_for(o.msg_round_trips, 50, sc.msg_size, o);
  const uint64_t warm = std::max<uint64_t>(timed / 10, 10);
  const MsgFormat f(sc.msg_size);
  Figures fig;
  fig.half_rtt.resize(timed);
  // Two buffers each way: the next ping never waits for the last one's send completion.
  const Part server{2, 2, [&](Peer& s) { return pingpong_server(s, f, warm + timed); }};
  const Part client{2, 2, [&](Peer& c) { return pingpong_client(c, f, warm, timed, &fig); }};
  Sample s = run_connected(f, p, o, server, client);
  if (s.state != Sample::State::kOk) return s;
  s.p99 = quantile(&fig.half_rtt, 0.99);
  s.value = quantile(&fig.half_rtt, 0.50);
  s.allocs = allocs_per(fig.allocs0, fig.allocs1, 2 * timed);
  return s;
}

// msg-rate: the client keeps a window of sends in flight; the server, whose receives are all
// posted before it accepts, checks each message, reposts its buffer and, after the last of a
// round, sends an 8-byte ack. Warm-up rounds, then the timed one, which ends at the ack.
//
// Here and in msg-comp-rate, a sender outruns its receiver, so messages wait for their
// receives, and how many wait at most varies from round to round. Three warm-up rounds as long
// as the timed one let the receiver's buffers for them reach that peak before the timed round,
// which then shows the steady state.
constexpr uint64_t kRateRounds = 4;
bool rate_client(Peer& c, const MsgFormat& f, const MsgFormat& ack, uint64_t warm, uint64_t timed,
                 Figures* fig) {
  uint64_t seq = 0;
  for (uint64_t round = 1; round <= kRateRounds; ++round) {
    const bool timed_round = round == kRateRounds;
    if (timed_round) {
      fig->allocs0 = heap_allocations_now();
      fig->start[1] = now_ns();
    }
    for (uint64_t i = 0, n = timed_round ? timed : warm; i < n; ++i) {
      size_t s = 0;
      if (!c.acquire_send(&s)) return false;
      f.stamp(c.send_buf(s), ++seq, MsgDir::kToServer);
      if (!c.send(s, f.size())) return false;
    }
    size_t r = 0, len = 0;
    uint64_t got = 0;
    if (!c.next_recv(&r, &len) || !c.check(ack, r, len, MsgDir::kToClient, round, &got) ||
        !c.post_recv(r) || !c.drain_sends()) {
      return false;
    }
    if (timed_round) {
      fig->end[1] = now_ns();
      fig->allocs1 = heap_allocations_now();
    }
  }
  return true;
}

// Takes the next `n` messages, numbered [first, first + n) in any order, each once.
bool receive_round(Peer& p, const MsgFormat& f, MsgDir dir, uint64_t first, uint64_t n,
                   std::vector<bool>* seen, size_t r, size_t len) {
  uint64_t seq = 0;
  if (!p.check(f, r, len, dir, 0, &seq)) return false;
  if (seq < first || seq >= first + n || (*seen)[seq]) {
    return p.fail(fmt("message %llu arrived out of place (this round is %llu-%llu)%s",
                      static_cast<unsigned long long>(seq), static_cast<unsigned long long>(first),
                      static_cast<unsigned long long>(first + n - 1),
                      seq < seen->size() && (*seen)[seq] ? ", a second time" : ""));
  }
  (*seen)[seq] = true;
  return p.post_recv(r);
}

bool rate_server(Peer& s, const MsgFormat& f, const MsgFormat& ack, uint64_t warm, uint64_t timed) {
  std::vector<bool> seen((kRateRounds - 1) * warm + timed + 1, false);
  uint64_t first = 1;
  for (uint64_t round = 1; round <= kRateRounds; ++round) {
    const uint64_t n = round == kRateRounds ? timed : warm;
    for (uint64_t i = 0; i < n; ++i) {
      size_t r = 0, len = 0;
      if (!s.next_recv(&r, &len) ||
          !receive_round(s, f, MsgDir::kToServer, first, n, &seen, r, len)) {
        return false;
      }
    }
    first += n;
    size_t slot = 0;
    if (!s.acquire_send(&slot)) return false;
    ack.stamp(s.send_buf(slot), round, MsgDir::kToClient);
    if (!s.send(slot, ack.size())) return false;
  }
  return true;
}

Sample msg_rate(const Scenario& sc, const Provider& p, const Options& o) {
  const size_t window = window_for(sc.msg_size, o);
  const uint64_t timed = count_for(o.msg_messages, 4 * window, sc.msg_size, o);
  const uint64_t warm = timed;
  const MsgFormat f(sc.msg_size), ack(MsgFormat::kMinSize);
  Figures fig;
  const Part server{2, window, [&](Peer& s) { return rate_server(s, f, ack, warm, timed); }};
  const Part client{window, 2, [&](Peer& c) { return rate_client(c, f, ack, warm, timed, &fig); }};
  Sample s = run_connected(f, p, o, server, client);
  if (s.state != Sample::State::kOk) return s;
  s.value = static_cast<double>(fig.end[1] - fig.start[1]) / static_cast<double>(timed);
  s.allocs = allocs_per(fig.allocs0, fig.allocs1, timed);
  return s;
}

// msg-comp-rate: both sides send and receive at once, each with a window of sends in flight
// and its receives posted; a round starts at a barrier; warm-up rounds as in msg-rate. Its figure
// is the time from the earlier start to the later end over every completion both CQs delivered: 2
// per message.
bool comp_rate_side(Peer& p, int side, const MsgFormat& f, uint64_t warm, uint64_t timed,
                    Figures* fig) {
  const MsgDir out = side == 1 ? MsgDir::kToServer : MsgDir::kToClient;
  const MsgDir in = side == 1 ? MsgDir::kToClient : MsgDir::kToServer;
  std::vector<bool> seen((kRateRounds - 1) * warm + timed + 1, false);
  uint64_t seq = 0, first = 1;
  for (uint64_t round = 1; round <= kRateRounds; ++round) {
    const bool timed_round = round == kRateRounds;
    const uint64_t n = timed_round ? timed : warm;
    if (!p.barrier(true)) return false;
    if (timed_round) {
      if (side == 1) fig->allocs0 = heap_allocations_now();
      fig->start[side] = now_ns();
    }
    uint64_t sent = 0, got = 0;
    while (sent < n || got < n) {
      size_t s = 0, r = 0, len = 0;
      while (sent < n && p.try_acquire_send(&s)) {
        f.stamp(p.send_buf(s), ++seq, out);
        if (!p.send(s, f.size())) return false;
        ++sent;
      }
      bool any = false;
      while (p.pop_recv(&r, &len)) {
        if (!receive_round(p, f, in, first, n, &seen, r, len)) return false;
        ++got;
        any = true;
      }
      // Nothing to do until a completion comes: a message, or a send buffer to reuse.
      if (!any && (sent == n || !p.has_free_send()) && !p.wait_any()) return false;
    }
    if (!p.drain_sends()) return false;
    first += n;
    if (timed_round) {
      fig->end[side] = now_ns();
      if (side == 1) fig->allocs1 = heap_allocations_now();
    }
  }
  return true;
}

Sample msg_comp_rate(const Scenario& sc, const Provider& p, const Options& o) {
  const size_t window = window_for(sc.msg_size, o);
  const uint64_t timed = count_for(o.msg_messages, 4 * window, sc.msg_size, o);
  const uint64_t warm = timed;
  const MsgFormat f(sc.msg_size);
  Figures fig;
  const Part server{window, window,
                    [&](Peer& s) { return comp_rate_side(s, 0, f, warm, timed, &fig); }};
  const Part client{window, window,
                    [&](Peer& c) { return comp_rate_side(c, 1, f, warm, timed, &fig); }};
  Sample s = run_connected(f, p, o, server, client);
  if (s.state != Sample::State::kOk) return s;
  const int64_t span = std::max(fig.end[0], fig.end[1]) - std::min(fig.start[0], fig.start[1]);
  const uint64_t completions = 4 * timed;  // each side: a send and a receive per message
  s.value = static_cast<double>(span) / static_cast<double>(completions);
  s.allocs = allocs_per(fig.allocs0, fig.allocs1, completions);
  return s;
}

}  // namespace

const std::vector<Scenario>& msg_scenarios() {
  static const std::vector<Scenario> all = [] {
    using M = Measure;
    const Options o;
    std::vector<Scenario> v;
    for (const size_t n : {8u, 64u, 256u, 1u << 10, 4u << 10, 64u << 10, 1u << 20}) {
      v.push_back({"msg-pingpong/" + msg_size_name(n),
                   "fi_send/fi_recv ping-pong, " + msg_size_label(n) +
                       ": one-way latency (round trip / 2), both sides busy-polling",
                   M::kLatencyNs, msg_pingpong, FI_WAIT_NONE, n});
    }
    for (const size_t n : {8u, 64u, 4u << 10, 64u << 10, 1u << 20}) {
      v.push_back({"msg-rate/" + msg_size_name(n),
                   msg_size_label(n) + " messages one way, " + std::to_string(window_for(n, o)) +
                       " sends in flight, receives pre-posted: ns per message",
                   M::kNsPerEvent, msg_rate, FI_WAIT_NONE, n});
    }
    v.push_back({"msg-comp-rate/8",
                 "8 B messages both ways at once, " + std::to_string(window_for(8, o)) +
                     " sends in flight each: ns per completion, both CQs counted",
                 M::kNsPerEvent, msg_comp_rate, FI_WAIT_NONE, 8});
    return v;
  }();
  return all;
}

}  // namespace fabq::tools::bench
