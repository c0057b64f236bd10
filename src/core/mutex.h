// fabq core: Mutex, MutexLock and CondVar: a sleeping lock and condition variable built on the
// Linux futex, with the annotations clang's thread-safety analysis checks
// (thread_annotations.h).
//
//   Mutex      a lock that is a capability: members marked FABQ_GUARDED_BY(mu_) are only
//              touched with it held. lock()/unlock()/try_lock(), so std::lock_guard and
//              std::unique_lock accept it too, but only MutexLock is seen by the analysis.
//              Not recursive; not shared between processes.
//   MutexLock  holds a Mutex from its construction to the end of its scope.
//   CondVar    waits that take the Mutex the caller holds. Waits may wake spuriously: callers
//              loop on their condition, which they change with the Mutex held. Predicates are
//              not taken as lambdas because the analysis cannot tell that a lambda runs under
//              the lock.
//
// Why not std::mutex: a small message takes several locks on its way (endpoint, connection,
// queue), each held for a few hundred instructions and almost never contended. Here an
// uncontended lock() is one inline compare-exchange and unlock() one inline exchange; glibc's
// pthread_mutex_lock/unlock are calls of about 25 instructions each that check the mutex's type
// first. The slow paths (spinning briefly, then sleeping in the kernel) are out of line.
//
// Memory ordering: lock() and a successful try_lock() acquire, unlock() releases; everything
// done under the lock is ordered before everything the next holder does. A CondVar wait
// releases and re-acquires the Mutex like unlock() and lock().
//
// Under ThreadSanitizer both are announced to it as a mutex (its deadlock detector sees them).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "core/thread_annotations.h"

#if defined(__SANITIZE_THREAD__)
#define FABQ_TSAN_MUTEX 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FABQ_TSAN_MUTEX 1
#endif
#endif

#ifdef FABQ_TSAN_MUTEX
#include <sanitizer/tsan_interface.h>
#endif

namespace fabq::core {

class FABQ_CAPABILITY("mutex") Mutex {
 public:
  // constexpr and trivially destructible, so a global needs no constructor or destructor at
  // run time. ThreadSanitizer learns of it at its first lock; it forgets it when its memory is
  // freed.
  constexpr Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() FABQ_ACQUIRE() {
#ifdef FABQ_TSAN_MUTEX
    __tsan_mutex_pre_lock(this, 0);
#endif
    uint32_t expected = kFree;
    // Acquire: pairs with the release in unlock().
    if (!state_.compare_exchange_strong(expected, kLocked, std::memory_order_acquire,
                                        std::memory_order_relaxed)) [[unlikely]] {
      lock_slow();
    }
#ifdef FABQ_TSAN_MUTEX
    __tsan_mutex_post_lock(this, 0, 0);
#endif
  }

  void unlock() FABQ_RELEASE() {
#ifdef FABQ_TSAN_MUTEX
    __tsan_mutex_pre_unlock(this, 0);
#endif
    // Release: what this holder did is visible to the next one (its acquire).
    if (state_.exchange(kFree, std::memory_order_release) == kSleepers) [[unlikely]]
      wake_one();
#ifdef FABQ_TSAN_MUTEX
    __tsan_mutex_post_unlock(this, 0);
#endif
  }

  bool try_lock() FABQ_TRY_ACQUIRE(true) {
#ifdef FABQ_TSAN_MUTEX
    __tsan_mutex_pre_lock(this, __tsan_mutex_try_lock);
#endif
    uint32_t expected = kFree;
    const bool ok = state_.compare_exchange_strong(expected, kLocked, std::memory_order_acquire,
                                                   std::memory_order_relaxed);
#ifdef FABQ_TSAN_MUTEX
    __tsan_mutex_post_lock(this, ok ? __tsan_mutex_try_lock : __tsan_mutex_try_lock_failed, 0);
#endif
    return ok;
  }

 private:
  friend class CondVar;
  // kSleepers: held, and a thread may be asleep in the kernel on state_ (Drepper, "Futexes Are
  // Tricky", mutex 3): its unlock() wakes one.
  static constexpr uint32_t kFree = 0;
  static constexpr uint32_t kLocked = 1;
  static constexpr uint32_t kSleepers = 2;

  void lock_slow();
  void wake_one();

  std::atomic<uint32_t> state_{kFree};
};

class FABQ_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) FABQ_ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~MutexLock() FABQ_RELEASE() { mu_.unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mu_;
};

// A notify wakes the waiters that were asleep (or about to sleep: they had released the Mutex)
// when it was made; one that begins waiting afterwards waits for the next. notify_* make no
// system call when nobody waits.
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  // Releases `mu` while asleep and holds it again on return.
  void wait(Mutex& mu) FABQ_REQUIRES(mu) { block(mu, nullptr); }
  // As wait(); false once `deadline` has passed.
  bool wait_until(Mutex& mu, std::chrono::steady_clock::time_point deadline) FABQ_REQUIRES(mu) {
    block(mu, &deadline);
    return std::chrono::steady_clock::now() < deadline;
  }
  void notify_one() { notify(1); }
  void notify_all() { notify(INT32_MAX); }

 private:
  // Sleeps until a notify, a signal or `deadline` (none if null), with `mu` released meanwhile.
  void block(Mutex& mu, const std::chrono::steady_clock::time_point* deadline) FABQ_REQUIRES(mu);
  void notify(int count);

  // Bumped by every notify: a waiter sleeps only while it still reads the value it saw with the
  // Mutex held, so a notify made after it released the Mutex is never lost.
  std::atomic<uint32_t> seq_{0};
  std::atomic<uint32_t> waiters_{0};  // counted with the Mutex held, before it is released
};

}  // namespace fabq::core
