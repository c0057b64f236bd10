#include "core/mutex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/deadline.h"
#include "core/spinlock.h"

namespace fabq::core {
namespace {

long futex(std::atomic<uint32_t>* word, int op, uint32_t val, const timespec* ts, uint32_t bits) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, val, ts, nullptr, bits);
}

}  // namespace

void Mutex::lock_slow() {
  // Holders keep it for a few hundred instructions: spinning a little usually beats sleeping.
  for (int i = 0; i < 64; ++i) {
    cpu_relax();
    uint32_t expected = kFree;
    if (state_.load(std::memory_order_relaxed) == kFree &&
        state_.compare_exchange_weak(expected, kLocked, std::memory_order_acquire,
                                     std::memory_order_relaxed)) {
      return;
    }
  }
  // From here this thread takes the lock as kSleepers, whether or not it slept, so that its
  // unlock() wakes whoever else went to sleep meanwhile.
  while (state_.exchange(kSleepers, std::memory_order_acquire) != kFree) {
    futex(&state_, FUTEX_WAIT_PRIVATE, kSleepers, nullptr, 0);  // EAGAIN, EINTR: try again
  }
}

void Mutex::wake_one() {
  futex(&state_, FUTEX_WAKE_PRIVATE, 1, nullptr, 0);
}

void CondVar::block(Mutex& mu, const std::chrono::steady_clock::time_point* deadline) {
  // Both under mu: a notifier that changes the condition under mu afterwards sees this waiter
  // counted, and bumps seq_ past what this waiter read.
  waiters_.fetch_add(1, std::memory_order_relaxed);
  const uint32_t seen = seq_.load(std::memory_order_relaxed);
  mu.unlock();
  timespec ts{};
  bool sleep = true;
  if (deadline != nullptr) {
    // steady_clock is CLOCK_MONOTONIC, which FUTEX_WAIT_BITSET takes as an absolute time.
    const auto ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(deadline->time_since_epoch()).count();
    sleep = std::chrono::steady_clock::now() < *deadline;
    ts = timespec_of_ns(ns);
  }
  // Returns at once if a notify came since `seen` was read (EAGAIN); EINTR and ETIMEDOUT are
  // wake-ups like any other: callers look at their condition again.
  if (sleep) {
    futex(&seq_, FUTEX_WAIT_BITSET_PRIVATE, seen, deadline != nullptr ? &ts : nullptr,
          FUTEX_BITSET_MATCH_ANY);
  }
  waiters_.fetch_sub(1, std::memory_order_relaxed);
  mu.lock();
}

void CondVar::notify(int count) {
  // seq_cst: the bump is ordered before the load of waiters_ (a waiter that counted itself
  // under the Mutex before this notify's condition change is seen).
  seq_.fetch_add(1, std::memory_order_seq_cst);
  if (waiters_.load(std::memory_order_seq_cst) != 0) {
    futex(&seq_, FUTEX_WAKE_PRIVATE, static_cast<uint32_t>(count), nullptr, 0);
  }
}

}  // namespace fabq::core
