// The connection of the MSG scenarios (msg.cc): two FI_EP_MSG endpoints of the provider under
// test, a server and a client, each a Peer, and run_connected(), which runs a scenario's part on
// each.
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
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <sched.h>
#include <time.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tools/bench/bench.h"
#include "tools/bench/msg.h"

namespace fabq::tools::bench::msg {

inline std::string fmt(const char* f, auto... args) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), f, args...);
  return buf;
}

inline constexpr size_t kCqBatch = 16;       // completions per fi_cq_read
inline constexpr uint32_t kSpinCheck = 256;  // empty polls between looks at the clock and stop flag
inline constexpr size_t kNone = ~size_t{0};

inline int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1'000'000'000LL + ts.tv_nsec;
}

inline std::string fi_error(const std::string& call, long rc) {
  return call + " returned " + std::to_string(rc) +
         (rc < 0 ? std::string(" (") + fi_strerror(static_cast<int>(-rc)) + ")" : "");
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

// The Sample of a run whose server and client ended as `server` and `client`: kOk, or the
// first real failure (one that is only "the other side failed" comes last, and an unsupported
// side makes the scenario unsupported), with where the other side stood when it stopped.
Sample sample_of(const Outcome& server, const Outcome& client);

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
  std::string state() const;
  bool stopped();

  // A setup call's failure: unsupported when the provider does not implement the call.
  bool setup_fail(const std::string& call, long rc) {
    return fail(fi_error(call, rc), rc == -FI_ENOSYS || rc == -FI_EOPNOTSUPP);
  }

  // Setup (msg_peer.cc).
  bool wait_port(int* port);
  bool open(const char* service, uint64_t flags, const MsgFormat& f, size_t send_slots,
            size_t recv_slots);
  bool listen();
  // An endpoint for `info` bound to the EQ and the CQ and enabled; then every receive buffer
  // posted, so that receives are posted before the first message can come.
  bool open_endpoint(fi_info* info);
  bool accept();
  bool connect();
  // Waits for CM event `want` about `from`; its data goes to *data and, for FI_CONNREQ, its
  // fi_info (the caller's to free) to *info.
  bool wait_cm(uint32_t want, const fid* from, std::string* data, fi_info** info);
  std::string eq_error();
  std::string cq_error();

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

// The first two CPUs this process may run on, or -1s when it may use fewer than two: the two
// sides of a scenario run pinned one to each.
struct CpuPair {
  cpu_set_t allowed;
  int cpu[2] = {-1, -1};
};
CpuPair pick_cpus();
// Pins the calling thread to `cpu` (nothing when cpu < 0). A failure only costs steadiness.
void pin_to(int cpu);

// One side's part in a scenario: its queue depths and what it does once connected.
struct Part {
  size_t send_slots, recv_slots;
  std::function<bool(Peer&)> body;
};

// Connects a server (in a thread of its own) and a client (this thread), each pinned to a CPU
// of its own, runs their parts and closes both. The figure is the caller's to fill in when
// the result is kOk; otherwise `why` names the side and the step that failed first.
Sample run_connected(const MsgFormat& f, const Provider& p, const Options& o, const Part& server,
                     const Part& client);

}  // namespace fabq::tools::bench::msg
