// fabq core: SpinLock, the consumer-side lock of EQs and CQs.
//
// Readers of one queue are serialized by this lock. It is a test-and-test-and-set lock that
// pauses while it spins and yields the CPU after a short while, so a reader preempted while
// holding it costs others a yield, not a burned time slice. Uncontended it is one atomic
// exchange and one release store, which is what the write+read benchmark pays for it.
//
// Memory ordering: lock() acquires, unlock() releases; everything done under the lock is
// ordered before everything the next holder does.
#pragma once

#include <sched.h>

#include <atomic>

namespace fabq::core {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

class SpinLock {
 public:
  SpinLock() = default;
  SpinLock(const SpinLock&) = delete;
  SpinLock& operator=(const SpinLock&) = delete;

  void lock() {
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
  bool try_lock() {
    return !locked_.load(std::memory_order_relaxed) &&
           !locked_.exchange(true, std::memory_order_acquire);
  }
  void unlock() { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

}  // namespace fabq::core
