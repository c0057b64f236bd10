// fabq core: SpinLock, the consumer-side lock of EQs and CQs.
//
// Readers of one queue are serialized by this lock. It is a test-and-test-and-set lock that
// pauses while it spins and yields the CPU after a short while, so a reader preempted while
// holding it costs others a yield, not a burned time slice. Uncontended it is one atomic
// exchange and one release store, which is what the write+read benchmark pays for it.
//
// Memory ordering: lock() acquires, unlock() releases; everything done under the lock is
// ordered before everything the next holder does.
//
// It is a capability for clang's thread-safety analysis (thread_annotations.h): hold it with
// SpinLockHolder, and members marked FABQ_GUARDED_BY(the lock) are checked.
#pragma once

#include <sched.h>

#include <atomic>

#include "core/thread_annotations.h"

namespace fabq::core {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

class FABQ_CAPABILITY("mutex") SpinLock {
 public:
  SpinLock() = default;
  SpinLock(const SpinLock&) = delete;
  SpinLock& operator=(const SpinLock&) = delete;

  void lock() FABQ_ACQUIRE() {
    if (!locked_.exchange(true, std::memory_order_acquire)) return;
    for (unsigned spins = 0;; ++spins) {
      while (locked_.load(std::memory_order_relaxed)) {
        if (++spins < 128) {
          cpu_relax();
        } else {
          sched_yield();
        }
      }
      if (!locked_.exchange(true, std::memory_order_acquire)) return;
    }
  }
  bool try_lock() FABQ_TRY_ACQUIRE(true) {
    return !locked_.load(std::memory_order_relaxed) &&
           !locked_.exchange(true, std::memory_order_acquire);
  }
  void unlock() FABQ_RELEASE() { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

// Holds a SpinLock from its construction to the end of its scope, as std::lock_guard does, but
// seen by the analysis.
class FABQ_SCOPED_CAPABILITY SpinLockHolder {
 public:
  explicit SpinLockHolder(SpinLock& lock) FABQ_ACQUIRE(lock) : lock_(lock) { lock_.lock(); }
  ~SpinLockHolder() FABQ_RELEASE() { lock_.unlock(); }
  SpinLockHolder(const SpinLockHolder&) = delete;
  SpinLockHolder& operator=(const SpinLockHolder&) = delete;

 private:
  SpinLock& lock_;
};

}  // namespace fabq::core
