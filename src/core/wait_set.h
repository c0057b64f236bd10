// fabq core: WaitSet and PollSet, the engines behind fi_wait_open and fi_poll_open (fi_poll(3)).
//
// A WaitSet owns one WaitObject and one WaitGate that all its members share: a queue or counter
// opened with kSet notifies the set's gate instead of a gate of its own, so one fabq sleeper (or
// one application thread on the set's fd) covers every member. The set's wait() announces
// itself on that gate and then looks at every member, so the no-lost-wake-up argument of
// wait.h holds unchanged.
//
// A PollSet has no wait object: poll() looks at each member once and reports the contexts of
// those with something new.
//
// "Ready" for a wait set: a queue holds entries (events, completions, error entries, an overrun
// report); a counter changed (either value) since this set last reported it.
// "Ready" for a poll set, as fi_poll(3) says: a queue is not empty; a counter's success or error
// value changed since the last fi_poll, fi_cntr_set or fi_cntr_add.
//
// Threads: every member function may be called from any thread. Membership changes take the
// set's mutex; a member must leave every set before it is destroyed (queues and counters
// opened with kSet do that themselves).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/mutex.h"
#include "core/status.h"
#include "core/wait.h"

namespace fabq::core {

// Implemented by EventQueue, CompletionQueue and Counter.
class WaitSetMember {
 public:
  virtual ~WaitSetMember() = default;
  // Queues: true while anything is queued. Counters: false.
  virtual bool has_entries() const = 0;
  // Counters: a number that changes with every update. Queues: 0.
  virtual uint64_t change_count() const = 0;
  // For poll sets: queues: has_entries(); counters: whether they changed since the last poll,
  // fi_cntr_add or fi_cntr_set, clearing that mark.
  virtual bool take_poll_event() = 0;
};

class WaitSet {
 public:
  // kUnspec, kFd, kPollFd, kMutexCond or kYield; kInval for kNone and kSet.
  static Result<std::unique_ptr<WaitSet>> create(WaitKind kind, int64_t spin_ns = kDefaultSpinNs);
  WaitSet(const WaitSet&) = delete;
  WaitSet& operator=(const WaitSet&) = delete;

  WaitKind kind() const { return object_->kind(); }
  WaitObject* object() const { return object_.get(); }
  WaitGate* gate() { return &gate_; }

  void add(WaitSetMember* m) FABQ_EXCLUDES(mu_);
  void remove(WaitSetMember* m) FABQ_EXCLUDES(mu_);
  size_t size() const FABQ_EXCLUDES(mu_);

  // ok as soon as any member is ready; kAgain at the timeout (negative = forever) or when a
  // POSIX signal interrupts.
  Status wait(int timeout_ms) FABQ_EXCLUDES(mu_);
  // fi_trywait: kAgain if any member is ready (a counter change counts once, as for wait());
  // otherwise quiets the fd, arms it and returns ok.
  Status try_wait() FABQ_EXCLUDES(mu_);

 private:
  struct Entry {
    WaitSetMember* member;
    uint64_t seen;  // change_count() when last reported
  };
  WaitSet(std::unique_ptr<WaitObject> object, int64_t spin_ns);
  // When `consume`, counters that are reported have their change recorded.
  bool any_ready_locked(bool consume) FABQ_REQUIRES(mu_);

  std::unique_ptr<WaitObject> object_;
  WaitGate gate_;
  const int64_t spin_ns_;
  mutable Mutex mu_;
  std::vector<Entry> members_ FABQ_GUARDED_BY(mu_);
};

class PollSet {
 public:
  PollSet() = default;
  PollSet(const PollSet&) = delete;
  PollSet& operator=(const PollSet&) = delete;

  // kBusy if `m` is already a member; kNoMem if the list cannot grow.
  Status add(WaitSetMember* m, void* context) FABQ_EXCLUDES(mu_);
  // kInval if `m` is not a member.
  Status remove(WaitSetMember* m) FABQ_EXCLUDES(mu_);
  size_t size() const FABQ_EXCLUDES(mu_);
  bool contains(WaitSetMember* m) const FABQ_EXCLUDES(mu_);

  // Writes the contexts of up to `count` ready members into `contexts`, in the order they were
  // added, and returns how many. Members beyond `count` are not looked at (their marks stay).
  size_t poll(void** contexts, size_t count) FABQ_EXCLUDES(mu_);

 private:
  struct Entry {
    WaitSetMember* member;
    void* context;
  };
  mutable Mutex mu_;
  std::vector<Entry> members_ FABQ_GUARDED_BY(mu_);
};

}  // namespace fabq::core
