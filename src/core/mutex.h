// fabq core: Mutex, MutexLock and CondVar, std::mutex and std::condition_variable with the
// annotations clang's thread-safety analysis checks (thread_annotations.h).
//
//   Mutex      a std::mutex that is a capability: members marked FABQ_GUARDED_BY(mu_) are only
//              touched with it held. lock()/unlock()/try_lock(), so std::lock_guard and
//              std::unique_lock accept it too, but only MutexLock is seen by the analysis.
//   MutexLock  holds a Mutex from its construction to the end of its scope.
//   CondVar    a std::condition_variable whose waits take the Mutex the caller holds. Waits
//              may wake spuriously: callers loop on their condition. Predicates are not taken
//              as lambdas because the analysis cannot tell that a lambda runs under the lock.
//
// Costs are std::mutex's and std::condition_variable's; nothing is added at run time.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "core/thread_annotations.h"

namespace fabq::core {

class FABQ_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() FABQ_ACQUIRE() { mu_.lock(); }
  void unlock() FABQ_RELEASE() { mu_.unlock(); }
  bool try_lock() FABQ_TRY_ACQUIRE(true) { return mu_.try_lock(); }

 private:
  friend class CondVar;
  std::mutex mu_;
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

class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  // Releases `mu` while asleep and holds it again on return.
  void wait(Mutex& mu) FABQ_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();  // still held: the caller's
  }
  // As wait(); false once `deadline` has passed.
  bool wait_until(Mutex& mu, std::chrono::steady_clock::time_point deadline) FABQ_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    const bool woken = cv_.wait_until(lock, deadline) == std::cv_status::no_timeout;
    lock.release();
    return woken;
  }
  void notify_one() { cv_.notify_one(); }
  void notify_all() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace fabq::core
