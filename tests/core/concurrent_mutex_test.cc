// core::Mutex and core::CondVar (core/mutex.h): mutual exclusion, try_lock, and waits that a
// notify made after the waiter released the Mutex always ends. Every wait here has a deadline,
// so a lost wake-up fails the test instead of hanging it. Also runs under ThreadSanitizer.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "core/mutex.h"

namespace fabq::core {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

#if defined(__SANITIZE_THREAD__)
constexpr int kRounds = 200;
#else
constexpr int kRounds = 2000;
#endif

TEST(Mutex, HoldersExcludeEachOther) {
  Mutex mu;
  long count = 0;  // guarded by mu (a plain long: a race is what ThreadSanitizer would report)
  constexpr int kThreads = 4;
  constexpr int kEach = 50000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) {
        MutexLock lock(mu);
        ++count;
      }
    });
  }
  for (auto& t : threads) t.join();
  MutexLock lock(mu);
  EXPECT_EQ(count, long{kThreads} * kEach);
}

TEST(Mutex, TryLockFailsWhileHeldAndSucceedsOnceReleased) {
  Mutex mu;
  mu.lock();
  std::thread other([&] { EXPECT_FALSE(mu.try_lock()); });
  other.join();
  mu.unlock();
  bool took = false;
  std::thread again([&] {
    if (mu.try_lock()) {
      took = true;
      mu.unlock();
    }
  });
  again.join();
  EXPECT_TRUE(took);
}

// Holders that keep it long enough for the others to stop spinning and sleep in the kernel:
// every release must wake one of them.
TEST(Mutex, ThreadsThatSleptForItAllGetIt) {
  Mutex mu;
  std::atomic<int> done{0};
  mu.lock();
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20; ++i) {
        MutexLock lock(mu);
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      done.fetch_add(1);
    });
  }
  std::this_thread::sleep_for(milliseconds(20));  // all three are asleep on it by now
  mu.unlock();
  const auto end = steady_clock::now() + std::chrono::seconds(20);
  while (done.load() < 3 && steady_clock::now() < end) std::this_thread::sleep_for(milliseconds(1));
  EXPECT_EQ(done.load(), 3) << "a release woke nobody";
  // Joined once they are done; left behind (the process ends) if a thread is stuck.
  for (auto& t : threads) done.load() == 3 ? t.join() : t.detach();
}

TEST(CondVar, WaitUntilReturnsFalseOnceTheDeadlineHasPassed) {
  Mutex mu;
  CondVar cv;
  MutexLock lock(mu);
  const auto start = steady_clock::now();
  const auto deadline = start + milliseconds(30);
  while (cv.wait_until(mu, deadline)) {
  }
  EXPECT_GE(steady_clock::now(), deadline);
  EXPECT_LT(steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(CondVar, APastDeadlineReturnsFalseAtOnceHoldingTheMutex) {
  Mutex mu;
  CondVar cv;
  MutexLock lock(mu);
  EXPECT_FALSE(cv.wait_until(mu, steady_clock::now() - milliseconds(1)));
  EXPECT_FALSE(mu.try_lock()) << "still held by this thread";
}

// The usual pattern, raced: the notifier sets the condition under the Mutex and notifies after
// releasing it, at a random moment relative to the waiter going to sleep.
TEST(CondVar, ANotifyAfterTheConditionChangedIsNeverLost) {
  for (int round = 0; round < kRounds; ++round) {
    Mutex mu;
    CondVar cv;
    bool ready = false;
    std::thread notifier([&] {
      for (int spin = round % 64; spin > 0; --spin) std::this_thread::yield();
      {
        MutexLock lock(mu);
        ready = true;
      }
      cv.notify_one();
    });
    bool seen = false;
    {
      MutexLock lock(mu);
      const auto deadline = steady_clock::now() + std::chrono::seconds(5);
      while (!ready && cv.wait_until(mu, deadline)) {
      }
      seen = ready;
    }
    notifier.join();
    ASSERT_TRUE(seen) << "round " << round << ": the waiter timed out";
  }
}

TEST(CondVar, NotifyAllWakesEveryWaiter) {
  Mutex mu;
  CondVar cv;
  bool go = false;
  int waiting = 0;
  std::atomic<int> woken{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      MutexLock lock(mu);
      ++waiting;
      const auto deadline = steady_clock::now() + std::chrono::seconds(10);
      while (!go && cv.wait_until(mu, deadline)) {
      }
      if (go) woken.fetch_add(1);
    });
  }
  for (;;) {
    MutexLock lock(mu);
    if (waiting == 4) {
      go = true;
      break;
    }
    cv.wait_until(mu, steady_clock::now() + milliseconds(1));
  }
  cv.notify_all();
  for (auto& t : threads) t.join();
  EXPECT_EQ(woken.load(), 4);
}

}  // namespace
}  // namespace fabq::core
