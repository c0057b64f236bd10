// fabq core: wait objects and wait gates.
//
// A `WaitObject` is what a blocked reader sleeps on and what an application may be handed
// through FI_GETWAIT: for every kind it holds a futex word that fabq's own blocking calls
// (sread, wait) sleep on, plus, by kind, the object exposed to the application:
//   kFd, kPollFd   an eventfd (poll/select/epoll)
//   kMutexCond     a pthread mutex and condition variable
//   kUnspec        nothing exposed: fabq spins briefly, then sleeps on the futex
//   kYield         nothing exposed: blocking calls yield (sched_yield) between naps of at
//                  most kYieldNapNs on the futex, so that a writer wakes them at once and a
//                  POSIX signal interrupts them as it does the other kinds
//   kNone          no blocking at all (sread returns -FI_ENOSYS)
//
// A `WaitGate` sits in each queue and decides whether a write must wake anybody. The write
// path costs one seq_cst load of the gate while nobody waits: no syscall, no lock.
// Waiters announce themselves on the gate before their final emptiness check:
//   - fabq's own sleepers with enter()/leave() around the futex sleep;
//   - external waiters (fi_trywait followed by epoll or pthread_cond_wait) with arm_external(),
//     which lasts until the next write that sees it (that write makes the fd readable or
//     broadcasts the condition, then disarms).
//
// Memory ordering (the no-lost-wake-up argument): a waiter does
//     gate RMW (seq_cst)  ->  load the queue's producer index (seq_cst)  ->  sleep
// and a producer does
//     CAS the producer index (seq_cst)  ->  publish  ->  load the gate (seq_cst)  ->  wake.
// In the single total order of seq_cst operations one of the two loads sees the other side's
// RMW: either the waiter sees the new entry and does not sleep, or the producer sees the waiter
// and wakes it. A sleeper takes its futex ticket before announcing itself, so a wake that lands
// between its check and its sleep makes the sleep return at once.
//
// Thread safety: every member may be called from any thread, except where noted.
#pragma once

#include <pthread.h>
#include <rdma/fabric.h>
#include <rdma/fi_eq.h>
#include <sched.h>

#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>

#include "core/deadline.h"
#include "core/spinlock.h"
#include "core/status.h"
#include "core/unique_fd.h"

namespace fabq::core {

enum class WaitKind { kNone, kUnspec, kFd, kPollFd, kMutexCond, kYield, kSet };

// FI_WAIT_* -> WaitKind; kInval for values libfabric does not define. Takes an int so that
// callers can pass whatever an application stored in the field.
Result<WaitKind> wait_kind_from_fi(int obj);
enum fi_wait_obj wait_kind_to_fi(WaitKind kind);
const char* wait_kind_name(WaitKind kind);

// How long fabq's blocking calls spin before they sleep (kUnspec, kFd, kPollFd, kMutexCond).
inline constexpr int64_t kDefaultSpinNs = 20'000;

class WaitObject {
 public:
  // kNone and kSet have no wait object of their own: kInval. kIo if eventfd() fails.
  static Result<std::unique_ptr<WaitObject>> create(WaitKind kind);
  ~WaitObject();
  WaitObject(const WaitObject&) = delete;
  WaitObject& operator=(const WaitObject&) = delete;

  WaitKind kind() const { return kind_; }
  // The eventfd for kFd/kPollFd, else -1. Owned by this object.
  int fd() const { return fd_.get(); }
  // The mutex/cond pair for kMutexCond (FI_GETWAIT hands these out), else nulls.
  fi_mutex_cond mutex_cond();
  // The pollfd set for kPollFd (one entry: the eventfd). Valid while this object lives.
  fi_wait_pollfd* pollfd_set();

  // Sleeper side. ticket() is taken before the waiter announces itself on its gate; sleep()
  // returns kOk when woken (or the ticket is already stale), kAgain at the deadline, kIntr when
  // a signal interrupted it.
  uint32_t ticket() const { return futex_.load(std::memory_order_acquire); }
  Status sleep(uint32_t ticket, const Deadline& deadline);

  // Waker side: wake every fabq sleeper; wake external waiters (eventfd readable, condition
  // broadcast). Both are syscalls: gates call them only when someone is announced.
  void wake_sleepers();
  void wake_external();
  // Make the eventfd quiet again (fi_trywait does this before it arms). No-op for other kinds.
  void quiet();

 private:
  explicit WaitObject(WaitKind kind) : kind_(kind) {}

  const WaitKind kind_;
  std::atomic<uint32_t> futex_{0};
  UniqueFd fd_;
  pollfd pollfd_{};
  fi_wait_pollfd pollset_{};
  pthread_mutex_t mutex_ = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t cond_;
  bool cond_ready_ = false;
};

class WaitGate {
 public:
  // `obj` may be null (kNone): then notify() is a load and nothing else.
  explicit WaitGate(WaitObject* obj) : obj_(obj) {}
  WaitGate(const WaitGate&) = delete;
  WaitGate& operator=(const WaitGate&) = delete;

  WaitObject* object() const { return obj_; }

  // Producer, after publishing the entry that makes the queue hold `filled` entries in total
  // since it was created (its producer index + 1). Wakes sleepers whose wake_at <= filled.
  void notify(uint64_t filled) {
    if (arm_.load(std::memory_order_seq_cst) != 0) [[unlikely]]
      notify_slow(filled);
  }
  // Wake everybody announced, whatever they wait for (errors, overrun, cq signal).
  void notify_all() {
    if (arm_.load(std::memory_order_seq_cst) != 0) notify_slow(kWakeAlways);
  }

  // fabq sleeper: announce before the final check, leave after the sleep. `wake_at` is the
  // producer-index value (filled count) the sleeper needs; 0 = any write.
  void enter(uint64_t wake_at);
  void leave() { arm_.fetch_sub(1, std::memory_order_seq_cst); }

  // External waiter (fi_trywait): quiets the fd, then arms, so that the next write makes it
  // readable again (or broadcasts the condition). In that order: a write between the two would
  // otherwise have its readiness drained. The caller looks at its queue after this.
  void arm_external() {
    if (obj_ != nullptr) obj_->quiet();
    arm_.fetch_or(kExternal, std::memory_order_seq_cst);
  }

 private:
  static constexpr uint32_t kExternal = 1u << 31;
  static constexpr uint64_t kWakeAlways = std::numeric_limits<uint64_t>::max();
  void notify_slow(uint64_t filled);

  std::atomic<uint32_t> arm_{0};  // kExternal | number of fabq sleepers
  std::atomic<uint64_t> wake_at_{kWakeAlways};
  WaitObject* const obj_;
};

// The longest a kYield waiter sleeps between two yields. A loop of sched_yield alone never
// learns that a signal handler ran (sched_yield is not interrupted), so a kYield sread would
// outlive the signal; the nap is where the signal lands (EINTR, kIntr). A write wakes the nap
// at once, so its length costs no latency.
inline constexpr int64_t kYieldNapNs = 1'000'000;

// Blocks the calling thread until `ready()` is true, the deadline passes (kAgain) or a signal
// interrupts (kIntr). `ready` is evaluated without locks and must be cheap; it may be true
// spuriously (the caller retries its read). Spins for up to `spin_ns` first (not for kYield,
// which yields between naps of at most kYieldNapNs instead).
template <class Ready>
Status wait_until(WaitGate& gate, uint64_t wake_at, const Deadline& deadline, int64_t spin_ns,
                  Ready&& ready) {
  WaitObject* obj = gate.object();
  if (obj == nullptr) return Code::kNoSys;
  if (ready()) return OkStatus();
  const bool yield = obj->kind() == WaitKind::kYield;
  if (yield) spin_ns = 0;
  if (spin_ns > 0) {
    const int64_t budget =
        deadline.is_never() ? spin_ns : std::min(spin_ns, deadline.remaining_ns());
    const int64_t end = monotonic_ns() + budget;
    do {
      for (int i = 0; i < 64; ++i) {
        if (ready()) return OkStatus();
        cpu_relax();
      }
    } while (monotonic_ns() < end);
  }
  for (;;) {
    Deadline until = deadline;
    if (yield) {
      if (deadline.expired()) return Code::kAgain;
      sched_yield();
      if (ready()) return OkStatus();
      until = Deadline::after_ns(
          deadline.is_never() ? kYieldNapNs : std::min(kYieldNapNs, deadline.remaining_ns()));
    }
    const uint32_t ticket = obj->ticket();
    gate.enter(wake_at);
    const bool now = ready();
    Status s = OkStatus();
    if (!now) s = obj->sleep(ticket, until);
    gate.leave();
    if (now || ready()) return OkStatus();
    if (!s.ok() && !(yield && s.code() == Code::kAgain)) return s;
  }
}

}  // namespace fabq::core
