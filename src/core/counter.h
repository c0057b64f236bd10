// fabq core: Counter, the storage and semantics behind fi_cntr(3).
//
// Two 64-bit values, the success count and the error count. Updates are lock-free and wake
// waiters only when one is announced (one seq_cst load otherwise, as for queues).
//
// Semantics (fi_cntr(3)):
//   - add()/set() change the value, add_error()/set_error() the error value: they are the
//     application's fi_cntr_add/set/adderr/seterr and nothing else. complete()/complete_error()
//     are the provider's increments for finished operations, and the only ones it may use:
//     add() would hide the change from poll sets. Reads see every completed update (all
//     seq_cst: see value()).
//   - poll sets (fi_poll(3)) report a counter when its value or error value changed since the
//     last fi_poll, fi_cntr_set or fi_cntr_add: complete*(), add_error() and set_error() set
//     that mark after storing the new value (release; take_poll_event() acquires, so a poller
//     that takes the mark reads the new value), add()/set() clear it. The mark is the
//     counter's, not a set's: of two poll sets holding one counter, the first to poll after a
//     change reports it.
//   - wait(threshold, timeout): ok once value >= threshold; kAvail when the error value changes
//     while waiting (fi_cntr(3): "any change in a counter's error value will unblock any thread
//     inside fi_cntr_wait"); kTimedOut at the timeout (the error value is left unchanged);
//     kAgain when a POSIX signal interrupts; kNoSys for kNone and kSet.
//   - try_wait(): quiets the fd and arms the external wake-up; the next update makes the fd
//     readable (or broadcasts the condition). Counters have nothing "queued", so it returns ok
//     unless the counter has no wait object (kNoSys).
//
// Threads: every member may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "core/ring.h"
#include "core/status.h"
#include "core/wait.h"
#include "core/wait_set.h"

namespace fabq::core {

struct CounterConfig {
  WaitKind wait = WaitKind::kNone;
  int64_t spin_ns = kDefaultSpinNs;
  WaitSet* wait_set = nullptr;  // for kSet; not owned, must outlive the counter
};

class Counter final : public WaitSetMember {
 public:
  // kInval for kSet without a wait set; kIo/kNoSpace if the wait object cannot be made.
  static Result<std::unique_ptr<Counter>> create(const CounterConfig& config);
  ~Counter() override;
  Counter(const Counter&) = delete;
  Counter& operator=(const Counter&) = delete;

  WaitKind wait_kind() const { return wait_kind_; }
  WaitObject* wait_object() const { return gate_->object(); }

  // seq_cst: a waiter's look at the values must pair with its announcement on the gate (see
  // wait.h); on the write side every update is a seq_cst RMW or store followed by the gate load.
  uint64_t value() const { return value_.load(std::memory_order_seq_cst); }
  uint64_t errors() const { return errors_.load(std::memory_order_seq_cst); }
  void add(uint64_t n);
  void set(uint64_t v);
  void add_error(uint64_t n);
  void set_error(uint64_t v);
  void complete(uint64_t n = 1);
  void complete_error(uint64_t n = 1);

  Status wait(uint64_t threshold, int timeout_ms);
  Status try_wait();

  // WaitSetMember: a counter in a wait set or poll set is ready when it changed since the set
  // last reported it.
  bool has_entries() const override { return false; }
  uint64_t change_count() const override { return updates_.load(std::memory_order_seq_cst); }
  bool take_poll_event() override { return polled_.exchange(false, std::memory_order_acquire); }

 private:
  Counter(const CounterConfig& config, std::unique_ptr<WaitObject> own_wait);
  void updated(uint64_t new_value);
  void mark_for_poll();

  alignas(kCacheLine) std::atomic<uint64_t> value_{0};
  std::atomic<uint64_t> errors_{0};
  std::atomic<uint64_t> updates_{0};  // every add/set of either value
  std::atomic<bool> polled_{false};   // a completion changed it since the last poll/add/set
  const WaitKind wait_kind_;
  const int64_t spin_ns_;
  WaitSet* const wait_set_;
  std::unique_ptr<WaitObject> own_wait_;
  WaitGate own_gate_;
  WaitGate* gate_;
};

}  // namespace fabq::core
