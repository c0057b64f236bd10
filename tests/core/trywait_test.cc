// fi_trywait(3) on EQs and CQs with FI_WAIT_FD, FI_WAIT_POLLFD and FI_WAIT_MUTEX_COND: what an
// application that waits on the exposed object itself (poll/epoll, pthread_cond_wait) relies
// on. No wake-up is ever lost; spurious readiness is allowed; try_wait is kAgain while anything
// is queued, else ok and the object stays quiet until the next event; FI_PEEK reads never quiet
// the fd; the write path makes no syscall and takes no lock while nobody waits.
#include <gtest/gtest.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/fabric.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>

#include "core/cq.h"
#include "core/deadline.h"
#include "core/eq.h"
#include "core/wait.h"

namespace fabq::core {

void PrintTo(Code c, std::ostream* os) {
  *os << "Code(" << static_cast<int>(c) << ")";
}

namespace {

constexpr uint32_t kEvent = FI_NOTIFY;
constexpr size_t kQueueSize = 64;
constexpr int64_t kHangBoundMs = 5000;  // only catches hangs and lost wake-ups

int64_t elapsed_ms(int64_t start_ns) {
  return (monotonic_ns() - start_ns) / 1'000'000;
}

void sleep_ms(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

bool wait_for(const std::function<bool()>& cond, int64_t bound_ms) {
  const int64_t start = monotonic_ns();
  while (!cond()) {
    if (elapsed_ms(start) >= bound_ms) return cond();
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return true;
}

timespec realtime_after_ms(int64_t ms) {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  const int64_t ns = ts.tv_nsec + (ms % 1000) * 1'000'000;
  ts.tv_sec += ms / 1000 + ns / 1'000'000'000;
  ts.tv_nsec = ns % 1'000'000'000;
  return ts;
}

enum class QueueType { kEq, kCq };

// The same operations on an EQ or a CQ; entries carry one 64-bit value.
class Queue {
 public:
  static std::unique_ptr<Queue> make(QueueType type, WaitKind kind);
  virtual ~Queue() = default;
  virtual Status try_wait() = 0;
  virtual Status write(uint64_t v) = 0;
  virtual Status write_error(uint64_t v) = 0;
  // Reads one normal entry: its value, or the status.
  virtual Result<uint64_t> read() = 0;
  // EQ only: a FI_PEEK read of the normal entry at the head.
  virtual Result<uint64_t> peek() = 0;
  virtual Result<uint64_t> read_error(uint64_t flags) = 0;
  // Leaves the queue with nothing but the overrun entry queued.
  virtual void make_overrun() = 0;
  virtual WaitObject* wait_object() const = 0;
  virtual size_t pending() const = 0;
};

class EqQueue : public Queue {
 public:
  explicit EqQueue(std::unique_ptr<EventQueue> eq) : eq_(std::move(eq)) {}
  Status try_wait() override { return eq_->try_wait(); }
  Status write(uint64_t v) override { return eq_->write(kEvent, &v, sizeof(v)).status(); }
  Status write_error(uint64_t v) override {
    EqError e;
    e.err = FI_EIO;
    e.data = v;
    return eq_->write_error(e);
  }
  Result<uint64_t> read() override { return read_flags(0); }
  Result<uint64_t> peek() override { return read_flags(FI_PEEK); }
  Result<uint64_t> read_error(uint64_t flags) override {
    fi_eq_err_entry e{};
    Result<size_t> r = eq_->read_error(&e, flags);
    if (!r.ok()) return r.status();
    return e.data;
  }
  void make_overrun() override {
    while (write(0).ok()) {
    }
    while (read().ok()) {
    }
  }
  WaitObject* wait_object() const override { return eq_->wait_object(); }
  size_t pending() const override { return eq_->pending(); }

 private:
  Result<uint64_t> read_flags(uint64_t flags) {
    uint32_t event = 0;
    uint64_t v = 0;
    Result<size_t> r = eq_->read(&event, &v, sizeof(v), flags);
    if (!r.ok()) return r.status();
    return v;
  }
  std::unique_ptr<EventQueue> eq_;
};

class CqQueue : public Queue {
 public:
  explicit CqQueue(std::unique_ptr<CompletionQueue> cq) : cq_(std::move(cq)) {}
  Status try_wait() override { return cq_->try_wait(); }
  Status write(uint64_t v) override { return cq_->write(completion(v)); }
  Status write_error(uint64_t v) override {
    CompletionError e;
    e.completion = completion(v);
    e.err = FI_EIO;
    return cq_->write_error(e);
  }
  Result<uint64_t> read() override {
    fi_cq_data_entry e{};
    Result<size_t> r = cq_->read(&e, 1, nullptr);
    if (!r.ok()) return r.status();
    return e.data;
  }
  Result<uint64_t> peek() override { return Code::kNoSys; }
  Result<uint64_t> read_error(uint64_t flags) override {
    fi_cq_err_entry e{};
    Result<size_t> r = cq_->read_error(&e, flags);
    if (!r.ok()) return r.status();
    return e.data;
  }
  void make_overrun() override { cq_->enter_overrun(); }
  WaitObject* wait_object() const override { return cq_->wait_object(); }
  size_t pending() const override { return cq_->pending(); }

 private:
  static Completion completion(uint64_t v) {
    Completion c;
    c.op_context = reinterpret_cast<void*>(uintptr_t{0x1000} + v);
    c.data = v;
    return c;
  }
  std::unique_ptr<CompletionQueue> cq_;
};

std::unique_ptr<Queue> Queue::make(QueueType type, WaitKind kind) {
  if (type == QueueType::kEq) {
    EqConfig config;
    config.size = kQueueSize;
    config.wait = kind;
    auto r = EventQueue::create(config);
    EXPECT_TRUE(r.ok());
    return r.ok() ? std::make_unique<EqQueue>(std::move(r.value())) : nullptr;
  }
  CqConfig config;
  config.size = kQueueSize;
  config.format = CqFormat::kData;
  config.wait = kind;
  auto r = CompletionQueue::create(config);
  EXPECT_TRUE(r.ok());
  return r.ok() ? std::make_unique<CqQueue>(std::move(r.value())) : nullptr;
}

void PrintTo(QueueType t, std::ostream* os) {
  *os << (t == QueueType::kEq ? "eq" : "cq");
}

using TypeKind = std::tuple<QueueType, WaitKind>;

std::string type_kind_name(const testing::TestParamInfo<TypeKind>& info) {
  const auto [type, kind] = info.param;
  return std::string(type == QueueType::kEq ? "eq_" : "cq_") + wait_kind_name(kind);
}

// ---------------------------------------------------------------------------------------------
// FI_WAIT_FD and FI_WAIT_POLLFD.

class TryWaitFd : public testing::TestWithParam<TypeKind> {
 protected:
  void SetUp() override {
    q_ = Queue::make(std::get<0>(GetParam()), kind());
    ASSERT_NE(q_, nullptr);
    ASSERT_NE(q_->wait_object(), nullptr);
    fd_ = exposed_fd();
    ASSERT_GE(fd_, 0);
  }
  WaitKind kind() const { return std::get<1>(GetParam()); }

  // The descriptor the application gets through FI_GETWAIT: the fd itself, or the one entry of
  // the pollfd set.
  int exposed_fd() const {
    WaitObject* w = q_->wait_object();
    if (kind() == WaitKind::kFd) return w->fd();
    fi_wait_pollfd* set = w->pollfd_set();
    if (set == nullptr || set->nfds != 1) return -1;
    return set->fd[0].fd;
  }
  // poll() with timeout 0, the way the application would: on the fd, or on the pollfd set.
  bool readable() const {
    if (kind() == WaitKind::kPollFd) {
      fi_wait_pollfd* set = q_->wait_object()->pollfd_set();
      for (size_t i = 0; i < set->nfds; ++i) set->fd[i].revents = 0;
      const int n = poll(set->fd, set->nfds, 0);
      return n > 0 && (set->fd[0].revents & POLLIN) != 0;
    }
    pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
    return poll(&p, 1, 0) == 1 && (p.revents & POLLIN) != 0;
  }
  // The eventfd counter (reading it quiets the fd).
  uint64_t drain_counter() const {
    uint64_t value = 0;
    if (::read(fd_, &value, sizeof(value)) != sizeof(value)) return 0;
    return value;
  }

  std::unique_ptr<Queue> q_;
  int fd_ = -1;
};

TEST_P(TryWaitFd, TryWaitOnAnEmptyQueueIsOkAndTheFdIsQuiet) {
  ASSERT_TRUE(q_->try_wait().ok());
  EXPECT_FALSE(readable());
}

TEST_P(TryWaitFd, TryWaitIsAgainWhileAnEntryIsQueued) {
  ASSERT_TRUE(q_->write(1).ok());
  EXPECT_EQ(q_->try_wait().code(), Code::kAgain);
  EXPECT_EQ(q_->try_wait().code(), Code::kAgain) << "try_wait must not consume the entry";
  Result<uint64_t> r = q_->read();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 1u);
}

TEST_P(TryWaitFd, TryWaitIsAgainWhileAnErrorEntryIsQueued) {
  ASSERT_TRUE(q_->write_error(2).ok());
  EXPECT_EQ(q_->try_wait().code(), Code::kAgain);
  Result<uint64_t> r = q_->read_error(0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 2u);
  EXPECT_TRUE(q_->try_wait().ok());
}

TEST_P(TryWaitFd, TryWaitIsAgainWhileOnlyTheOverrunEntryIsQueued) {
  q_->make_overrun();
  EXPECT_EQ(q_->read().status().code(), Code::kAvail);
  EXPECT_EQ(q_->try_wait().code(), Code::kAgain);
}

TEST_P(TryWaitFd, TryWaitIsOkOnceEverythingQueuedWasRead) {
  for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE(q_->write(i).ok());
  for (uint64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(q_->try_wait().code(), Code::kAgain) << i << " read so far";
    ASSERT_TRUE(q_->read().ok());
  }
  EXPECT_TRUE(q_->try_wait().ok());
  EXPECT_FALSE(readable());
}

TEST_P(TryWaitFd, WriteAfterTryWaitMakesTheFdReadable) {
  ASSERT_TRUE(q_->try_wait().ok());
  ASSERT_FALSE(readable());
  ASSERT_TRUE(q_->write(1).ok());
  EXPECT_TRUE(readable());
}

TEST_P(TryWaitFd, ErrorWriteAfterTryWaitMakesTheFdReadable) {
  ASSERT_TRUE(q_->try_wait().ok());
  ASSERT_FALSE(readable());
  ASSERT_TRUE(q_->write_error(1).ok());
  EXPECT_TRUE(readable());
}

TEST_P(TryWaitFd, FdStaysQuietUntilTheNextEvent) {
  ASSERT_TRUE(q_->try_wait().ok());
  for (int i = 0; i < 5; ++i) {
    sleep_ms(5);
    EXPECT_FALSE(readable()) << "readable without an event";
  }
  ASSERT_TRUE(q_->write(1).ok());
  EXPECT_TRUE(readable());
}

// The fd may stay readable after a plain read (spurious readiness is fine); the next try_wait
// returns ok only with the fd quiet.
TEST_P(TryWaitFd, TryWaitQuietsAFdLeftReadableByAnEarlierEvent) {
  ASSERT_TRUE(q_->try_wait().ok());
  ASSERT_TRUE(q_->write(1).ok());
  ASSERT_TRUE(readable());
  ASSERT_TRUE(q_->read().ok());
  ASSERT_TRUE(q_->try_wait().ok());
  EXPECT_FALSE(readable());
}

TEST_P(TryWaitFd, PeekErrorReadDoesNotQuietTheFd) {
  ASSERT_TRUE(q_->try_wait().ok());
  ASSERT_TRUE(q_->write_error(7).ok());
  ASSERT_TRUE(readable());
  Result<uint64_t> r = q_->read_error(FI_PEEK);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 7u);
  EXPECT_TRUE(readable()) << "a FI_PEEK read quieted the fd";
  EXPECT_EQ(q_->try_wait().code(), Code::kAgain) << "the peeked error is still queued";
}

TEST_P(TryWaitFd, EveryTryWaitThenWriteCycleWakesTheFd) {
  for (uint64_t i = 0; i < 200; ++i) {
    ASSERT_TRUE(q_->try_wait().ok()) << "cycle " << i;
    ASSERT_FALSE(readable()) << "cycle " << i;
    ASSERT_TRUE(q_->write(i).ok());
    ASSERT_TRUE(readable()) << "cycle " << i;
    Result<uint64_t> r = q_->read();
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(*r, i);
  }
}

// The write path makes no syscall while nobody waits: with no try_wait armed the eventfd is
// never written.
TEST_P(TryWaitFd, WritesWithNoTryWaitArmedNeverMakeTheFdReadable) {
  for (uint64_t i = 0; i < 10'000; ++i) {
    ASSERT_TRUE(q_->write(i).ok());
    if (i % kQueueSize == kQueueSize - 1) {
      while (q_->read().ok()) {
      }
    }
  }
  EXPECT_FALSE(readable());
  ASSERT_TRUE(q_->write_error(1).ok());
  EXPECT_FALSE(readable()) << "an error write signalled the fd with nobody waiting";
}

// One try_wait arms one wake-up: the first write signals the fd, later ones (nobody waits any
// more) make no syscall, so the eventfd counter holds exactly one signal.
TEST_P(TryWaitFd, OneTryWaitCostsAtMostOneFdSignal) {
  ASSERT_TRUE(q_->try_wait().ok());
  for (uint64_t i = 0; i < 1000; ++i) {
    ASSERT_TRUE(q_->write(i).ok());
    if (i % 2 == 1) {
      while (q_->read().ok()) {
      }
    }
  }
  EXPECT_EQ(drain_counter(), 1u);
}

TEST_P(TryWaitFd, EpollWaitAfterTryWaitReportsNothingUntilAnEvent) {
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  ASSERT_GE(ep, 0);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 0xF00D;
  ASSERT_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, fd_, &ev), 0);
  ASSERT_TRUE(q_->try_wait().ok());
  epoll_event out{};
  EXPECT_EQ(epoll_wait(ep, &out, 1, 0), 0);
  EXPECT_EQ(epoll_wait(ep, &out, 1, 20), 0);
  ASSERT_TRUE(q_->write(1).ok());
  EXPECT_EQ(epoll_wait(ep, &out, 1, 0), 1);
  close(ep);
}

TEST_P(TryWaitFd, EpollWaitAfterTryWaitWakesWhenAnotherThreadWrites) {
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  ASSERT_GE(ep, 0);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 0xF00D;
  ASSERT_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, fd_, &ev), 0);
  for (uint64_t round = 0; round < 20; ++round) {
    ASSERT_TRUE(q_->try_wait().ok()) << "round " << round;
    std::atomic<bool> written{false};
    std::thread writer([&] {
      sleep_ms(round % 2 == 0 ? 10 : 0);
      EXPECT_TRUE(q_->write(round).ok());
      written.store(true, std::memory_order_release);
    });
    epoll_event out{};
    const int64_t start = monotonic_ns();
    const int n = epoll_wait(ep, &out, 1, 5000);
    writer.join();
    ASSERT_EQ(n, 1) << "round " << round << ": no wake-up after " << elapsed_ms(start) << " ms";
    EXPECT_EQ(out.data.u64, 0xF00Du);
    EXPECT_NE(out.events & EPOLLIN, 0u);
    Result<uint64_t> r = q_->read();
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, round);
  }
  close(ep);
}

INSTANTIATE_TEST_SUITE_P(FdKinds, TryWaitFd,
                         testing::Values(TypeKind{QueueType::kEq, WaitKind::kFd},
                                         TypeKind{QueueType::kEq, WaitKind::kPollFd},
                                         TypeKind{QueueType::kCq, WaitKind::kFd},
                                         TypeKind{QueueType::kCq, WaitKind::kPollFd}),
                         type_kind_name);

// fi_eq_read with FI_PEEK (fi_cq_read has no FI_PEEK; its error read is covered above).
class TryWaitEqFd : public TryWaitFd {};

TEST_P(TryWaitEqFd, PeekReadDoesNotQuietTheFd) {
  ASSERT_TRUE(q_->try_wait().ok());
  ASSERT_TRUE(q_->write(7).ok());
  ASSERT_TRUE(readable());
  Result<uint64_t> r = q_->peek();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 7u);
  EXPECT_TRUE(readable()) << "a FI_PEEK read quieted the fd";
  r = q_->peek();
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(readable()) << "a FI_PEEK read quieted the fd";
  EXPECT_EQ(q_->try_wait().code(), Code::kAgain) << "the peeked event is still queued";
}

INSTANTIATE_TEST_SUITE_P(FdKinds, TryWaitEqFd,
                         testing::Values(TypeKind{QueueType::kEq, WaitKind::kFd},
                                         TypeKind{QueueType::kEq, WaitKind::kPollFd}),
                         type_kind_name);

// ---------------------------------------------------------------------------------------------
// FI_WAIT_MUTEX_COND: the application locks the mutex, calls fi_trywait, then waits on the
// condition with the default (realtime) clock.

class TryWaitMutexCond : public testing::TestWithParam<QueueType> {
 protected:
  void SetUp() override {
    q_ = Queue::make(GetParam(), WaitKind::kMutexCond);
    ASSERT_NE(q_, nullptr);
    ASSERT_NE(q_->wait_object(), nullptr);
    mc_ = q_->wait_object()->mutex_cond();
    ASSERT_NE(mc_.mutex, nullptr);
    ASSERT_NE(mc_.cond, nullptr);
  }

  // The application's side: locks the mutex, try_wait, keeps the mutex `hold_ms` longer (a
  // write may land meanwhile), then waits on the condition until woken with something queued.
  // The wait runs at least once, so a wake-up that never comes shows as ETIMEDOUT. Returns the
  // last pthread_cond_timedwait result (0 or ETIMEDOUT), or -1 if try_wait was not ok; the
  // mutex is held on return. `armed` is set once try_wait returned.
  int lock_trywait_and_wait(std::atomic<bool>* armed, int hold_ms = 0) {
    pthread_mutex_lock(mc_.mutex);
    const bool ok = q_->try_wait().ok();
    armed->store(true, std::memory_order_release);
    if (!ok) return -1;
    if (hold_ms > 0) sleep_ms(hold_ms);
    const timespec abstime = realtime_after_ms(kHangBoundMs);
    int rc;
    do {
      rc = pthread_cond_timedwait(mc_.cond, mc_.mutex, &abstime);
    } while (rc == 0 && q_->pending() == 0);  // spurious wake-up: wait again
    return rc;
  }

  static std::string describe(int rc) {
    if (rc == ETIMEDOUT) return "wake-up lost (ETIMEDOUT)";
    if (rc == -1) return "try_wait was not ok on an empty queue";
    return "pthread_cond_timedwait gave " + std::to_string(rc);
  }

  std::unique_ptr<Queue> q_;
  fi_mutex_cond mc_{};
};

TEST_P(TryWaitMutexCond, TryWaitIsAgainWhileAnythingIsQueuedElseOk) {
  EXPECT_TRUE(q_->try_wait().ok());
  ASSERT_TRUE(q_->write(1).ok());
  EXPECT_EQ(q_->try_wait().code(), Code::kAgain);
  ASSERT_TRUE(q_->read().ok());
  EXPECT_TRUE(q_->try_wait().ok());
  ASSERT_TRUE(q_->write_error(2).ok());
  EXPECT_EQ(q_->try_wait().code(), Code::kAgain);
  ASSERT_TRUE(q_->read_error(0).ok());
  EXPECT_TRUE(q_->try_wait().ok());
  q_->make_overrun();
  EXPECT_EQ(q_->try_wait().code(), Code::kAgain);
}

// The write comes after the waiter sleeps (even rounds) or while it still holds the mutex
// between try_wait and the wait (odd rounds): either way the waiter is woken, since the
// wake-up takes the mutex.
TEST_P(TryWaitMutexCond, CondWaiterIsWokenByAWriteFromAnotherThread) {
  for (uint64_t round = 0; round < 20; ++round) {
    std::atomic<bool> armed{false};
    int rc = -2;
    std::thread waiter([&] {
      rc = lock_trywait_and_wait(&armed, round % 2 == 1 ? 20 : 0);
      pthread_mutex_unlock(mc_.mutex);
    });
    const bool was_armed =
        wait_for([&] { return armed.load(std::memory_order_acquire); }, kHangBoundMs);
    if (round % 2 == 0) sleep_ms(5);
    const Status written = q_->write(round);
    waiter.join();
    ASSERT_TRUE(was_armed);
    ASSERT_TRUE(written.ok());
    ASSERT_EQ(rc, 0) << "round " << round << ": " << describe(rc);
    Result<uint64_t> r = q_->read();
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, round);
  }
}

TEST_P(TryWaitMutexCond, CondWaiterIsWokenByAnErrorWriteFromAnotherThread) {
  for (int round = 0; round < 2; ++round) {
    std::atomic<bool> armed{false};
    int rc = -2;
    std::thread waiter([&] {
      rc = lock_trywait_and_wait(&armed, round == 1 ? 20 : 0);
      pthread_mutex_unlock(mc_.mutex);
    });
    const bool was_armed =
        wait_for([&] { return armed.load(std::memory_order_acquire); }, kHangBoundMs);
    if (round == 0) sleep_ms(5);
    const Status written = q_->write_error(3);
    waiter.join();
    ASSERT_TRUE(was_armed);
    ASSERT_TRUE(written.ok());
    ASSERT_EQ(rc, 0) << "round " << round << ": " << describe(rc);
    Result<uint64_t> r = q_->read_error(0);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, 3u);
  }
}

// No lock is taken on the write path while nobody waits: writes complete while the
// application holds the mutex.
TEST_P(TryWaitMutexCond, WritesWithNoTryWaitArmedNeverTakeTheMutex) {
  ASSERT_EQ(pthread_mutex_lock(mc_.mutex), 0);
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (uint64_t i = 0; i < 1000; ++i) {
      EXPECT_TRUE(q_->write(i).ok());
      EXPECT_TRUE(q_->read().ok());
    }
    EXPECT_TRUE(q_->write_error(1).ok());
    EXPECT_TRUE(q_->read_error(0).ok());
    done.store(true, std::memory_order_release);
  });
  const bool finished = wait_for([&] { return done.load(std::memory_order_acquire); }, 10'000);
  pthread_mutex_unlock(mc_.mutex);
  writer.join();
  EXPECT_TRUE(finished) << "a write blocked on the application's mutex with nobody waiting";
}

// Once the waiter was woken nobody waits any more: later writes take no lock.
TEST_P(TryWaitMutexCond, WritesAfterTheWakeUpNeverTakeTheMutex) {
  std::atomic<bool> armed{false};
  std::atomic<bool> woken{false};
  std::atomic<bool> more_written{false};
  int rc = -2;
  std::thread waiter([&] {
    rc = lock_trywait_and_wait(&armed);
    woken.store(true, std::memory_order_release);
    // Keep the mutex while the writer goes on (bounded: a blocked writer fails, not hangs).
    wait_for([&] { return more_written.load(std::memory_order_acquire); }, 10'000);
    pthread_mutex_unlock(mc_.mutex);
  });
  wait_for([&] { return armed.load(std::memory_order_acquire); }, kHangBoundMs);
  const Status first = q_->write(0);
  wait_for([&] { return woken.load(std::memory_order_acquire); }, 2 * kHangBoundMs);
  std::thread writer([&] {
    for (uint64_t i = 1; i <= 20; ++i) EXPECT_TRUE(q_->write(i).ok());
    more_written.store(true, std::memory_order_release);
  });
  const bool finished =
      wait_for([&] { return more_written.load(std::memory_order_acquire); }, 10'000);
  writer.join();
  waiter.join();
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(rc, 0) << describe(rc);
  EXPECT_TRUE(finished) << "a write after the wake-up blocked on the application's mutex";
}

INSTANTIATE_TEST_SUITE_P(MutexCond, TryWaitMutexCond,
                         testing::Values(QueueType::kEq, QueueType::kCq),
                         [](const testing::TestParamInfo<QueueType>& info) {
                           return std::string(info.param == QueueType::kEq ? "eq" : "cq");
                         });

// ---------------------------------------------------------------------------------------------
// FI_WAIT_NONE: nothing to wait on.

TEST(TryWaitNone, EqTryWaitOnNoneIsNoSys) {
  auto q = Queue::make(QueueType::kEq, WaitKind::kNone);
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->try_wait().code(), Code::kNoSys);
  ASSERT_TRUE(q->write(1).ok());
  EXPECT_EQ(q->try_wait().code(), Code::kNoSys);
}

TEST(TryWaitNone, CqTryWaitOnNoneIsNoSys) {
  auto q = Queue::make(QueueType::kCq, WaitKind::kNone);
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->try_wait().code(), Code::kNoSys);
  ASSERT_TRUE(q->write(1).ok());
  EXPECT_EQ(q->try_wait().code(), Code::kNoSys);
}

}  // namespace
}  // namespace fabq::core
