// Wait objects (fi_eq(3), fi_cq(3), fi_control(3) FI_GETWAIT): the wait kind mapping, what each
// kind exposes to the application, timeouts of the blocking reads (fi_eq_sread, fi_cq_sread)
// for every kind, FI_WAIT_NONE / FI_WAIT_SET refusing to block, and a POSIX signal
// interrupting a blocked read.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/fabric.h>
#include <rdma/fi_eq.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
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
#include "core/wait_set.h"

namespace fabq::core {

// Readable gtest output for status codes and wait kinds.
void PrintTo(Code c, std::ostream* os) {
  *os << "Code(" << static_cast<int>(c) << ")";
}
void PrintTo(WaitKind k, std::ostream* os) {
  *os << wait_kind_name(k);
}

namespace {

constexpr uint32_t kEvent = FI_NOTIFY;

int64_t elapsed_ms(int64_t start_ns) {
  return (monotonic_ns() - start_ns) / 1'000'000;
}

void sleep_ms(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

// Polls `cond` every 100 us until it holds or `bound_ms` passed. Returns cond().
bool wait_for(const std::function<bool()>& cond, int64_t bound_ms) {
  const int64_t start = monotonic_ns();
  while (!cond()) {
    if (elapsed_ms(start) >= bound_ms) return cond();
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return true;
}

std::unique_ptr<EventQueue> make_eq(WaitKind kind, int64_t spin_ns = kDefaultSpinNs,
                                    WaitSet* set = nullptr) {
  EqConfig config;
  config.size = 64;
  config.wait = kind;
  config.spin_ns = spin_ns;
  config.wait_set = set;
  auto r = EventQueue::create(config);
  EXPECT_TRUE(r.ok()) << wait_kind_name(kind);
  return r.ok() ? std::move(r.value()) : nullptr;
}

std::unique_ptr<CompletionQueue> make_cq(WaitKind kind, int64_t spin_ns = kDefaultSpinNs,
                                         WaitSet* set = nullptr) {
  CqConfig config;
  config.size = 64;
  config.format = CqFormat::kData;
  config.wait = kind;
  config.spin_ns = spin_ns;
  config.wait_set = set;
  auto r = CompletionQueue::create(config);
  EXPECT_TRUE(r.ok()) << wait_kind_name(kind);
  return r.ok() ? std::move(r.value()) : nullptr;
}

std::unique_ptr<WaitObject> make_wait(WaitKind kind) {
  auto r = WaitObject::create(kind);
  EXPECT_TRUE(r.ok()) << wait_kind_name(kind);
  return r.ok() ? std::move(r.value()) : nullptr;
}

std::unique_ptr<WaitSet> make_set(WaitKind kind) {
  auto r = WaitSet::create(kind);
  EXPECT_TRUE(r.ok()) << wait_kind_name(kind);
  return r.ok() ? std::move(r.value()) : nullptr;
}

Status eq_write(EventQueue& eq, uint64_t v) {
  return eq.write(kEvent, &v, sizeof(v)).status();
}

Completion completion(uint64_t v) {
  Completion c;
  c.op_context = reinterpret_cast<void*>(uintptr_t{0x1000} + v);
  c.data = v;
  return c;
}

bool fd_readable(int fd) {
  pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
  return poll(&p, 1, 0) == 1 && (p.revents & POLLIN) != 0;
}

// True when thread `tid` of this process sits in a futex call on a word inside `obj`, i.e. it
// is asleep in a blocking read of the queue owning `obj`.
bool asleep_on(pid_t tid, const WaitObject* obj) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", static_cast<int>(tid));
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return false;
  long nr = -1;
  unsigned long arg0 = 0;
  const int n = std::fscanf(f, "%ld %lx", &nr, &arg0);
  std::fclose(f);
  if (n != 2 || nr != SYS_futex) return false;
  const auto lo = reinterpret_cast<uintptr_t>(obj);
  return arg0 >= lo && arg0 < lo + sizeof(WaitObject);
}

// A thread running one call; records its kernel tid, when it finished and the call's result.
class Worker {
 public:
  explicit Worker(std::function<Result<size_t>()> fn)
      : thread_([this, fn = std::move(fn)] {
          tid_.store(static_cast<pid_t>(syscall(SYS_gettid)), std::memory_order_release);
          start_ns_.store(monotonic_ns(), std::memory_order_release);
          const Result<size_t> r = fn();
          result_ = r;
          end_ns_.store(monotonic_ns(), std::memory_order_relaxed);
          done_.store(true, std::memory_order_release);
        }) {}
  ~Worker() {
    if (thread_.joinable()) thread_.join();
  }
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  pid_t tid() {
    wait_for([this] { return tid_.load(std::memory_order_acquire) != 0; }, 10'000);
    return tid_.load(std::memory_order_acquire);
  }
  pthread_t handle() { return thread_.native_handle(); }
  bool done() const { return done_.load(std::memory_order_acquire); }
  bool wait_done(int64_t bound_ms) {
    return wait_for([this] { return done(); }, bound_ms);
  }
  // Valid once joined.
  Result<size_t> join() {
    thread_.join();
    return result_;
  }
  int64_t run_ms() const {
    return (end_ns_.load(std::memory_order_relaxed) - start_ns_.load(std::memory_order_acquire)) /
           1'000'000;
  }

 private:
  std::atomic<pid_t> tid_{0};
  std::atomic<int64_t> start_ns_{0};
  std::atomic<int64_t> end_ns_{0};
  std::atomic<bool> done_{false};
  Result<size_t> result_{Code::kIo};
  std::thread thread_;
};

// ---------------------------------------------------------------------------------------------
// Wait kind mapping.

TEST(WaitKindMapping, EachFiWaitObjSelectsItsWaitKind) {
  const std::pair<fi_wait_obj, WaitKind> cases[] = {
      {FI_WAIT_NONE, WaitKind::kNone},     {FI_WAIT_UNSPEC, WaitKind::kUnspec},
      {FI_WAIT_SET, WaitKind::kSet},       {FI_WAIT_FD, WaitKind::kFd},
      {FI_WAIT_POLLFD, WaitKind::kPollFd}, {FI_WAIT_MUTEX_COND, WaitKind::kMutexCond},
      {FI_WAIT_YIELD, WaitKind::kYield},
  };
  for (const auto& [fi, kind] : cases) {
    Result<WaitKind> r = wait_kind_from_fi(fi);
    ASSERT_TRUE(r.ok()) << "fi_wait_obj " << fi;
    EXPECT_EQ(*r, kind) << "fi_wait_obj " << fi;
  }
}

TEST(WaitKindMapping, WaitKindToFiInvertsWaitKindFromFi) {
  const fi_wait_obj all_fi[] = {FI_WAIT_NONE,   FI_WAIT_UNSPEC,     FI_WAIT_SET,  FI_WAIT_FD,
                                FI_WAIT_POLLFD, FI_WAIT_MUTEX_COND, FI_WAIT_YIELD};
  for (fi_wait_obj fi : all_fi) {
    Result<WaitKind> r = wait_kind_from_fi(fi);
    ASSERT_TRUE(r.ok()) << "fi_wait_obj " << fi;
    EXPECT_EQ(wait_kind_to_fi(*r), fi);
  }
  const WaitKind all_kinds[] = {WaitKind::kNone,   WaitKind::kUnspec,    WaitKind::kFd,
                                WaitKind::kPollFd, WaitKind::kMutexCond, WaitKind::kYield,
                                WaitKind::kSet};
  for (WaitKind kind : all_kinds) {
    Result<WaitKind> r = wait_kind_from_fi(wait_kind_to_fi(kind));
    ASSERT_TRUE(r.ok()) << wait_kind_name(kind);
    EXPECT_EQ(*r, kind);
  }
}

TEST(WaitKindMapping, UndefinedFiWaitObjIsInval) {
  // 7 is the first value libfabric does not define (and still within the enum's range).
  Result<WaitKind> r = wait_kind_from_fi(static_cast<fi_wait_obj>(7));
  EXPECT_EQ(r.status().code(), Code::kInval);
}

TEST(WaitKindMapping, EveryWaitKindHasItsOwnName) {
  const WaitKind all_kinds[] = {WaitKind::kNone,   WaitKind::kUnspec,    WaitKind::kFd,
                                WaitKind::kPollFd, WaitKind::kMutexCond, WaitKind::kYield,
                                WaitKind::kSet};
  for (WaitKind a : all_kinds) {
    ASSERT_NE(wait_kind_name(a), nullptr);
    for (WaitKind b : all_kinds) {
      if (a != b) {
        EXPECT_STRNE(wait_kind_name(a), wait_kind_name(b));
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// What each kind exposes (FI_GETWAIT).

TEST(WaitObjectExposure, CreateWithNoneIsInval) {
  EXPECT_EQ(WaitObject::create(WaitKind::kNone).status().code(), Code::kInval);
}

TEST(WaitObjectExposure, CreateWithSetIsInval) {
  EXPECT_EQ(WaitObject::create(WaitKind::kSet).status().code(), Code::kInval);
}

TEST(WaitObjectExposure, FdKindExposesAnEventfdAndNothingElse) {
  auto w = make_wait(WaitKind::kFd);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->kind(), WaitKind::kFd);
  ASSERT_GE(w->fd(), 0);
  EXPECT_NE(fcntl(w->fd(), F_GETFD), -1) << "fd is not open";
  char link[256] = {};
  const std::string path = "/proc/self/fd/" + std::to_string(w->fd());
  ASSERT_GT(readlink(path.c_str(), link, sizeof(link) - 1), 0);
  EXPECT_STREQ(link, "anon_inode:[eventfd]");
  EXPECT_FALSE(fd_readable(w->fd())) << "a fresh wait object must not be readable";
  EXPECT_EQ(w->pollfd_set(), nullptr);
  const fi_mutex_cond mc = w->mutex_cond();
  EXPECT_EQ(mc.mutex, nullptr);
  EXPECT_EQ(mc.cond, nullptr);
}

TEST(WaitObjectExposure, PollFdKindExposesOnePollfdHoldingItsEventfd) {
  auto w = make_wait(WaitKind::kPollFd);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->kind(), WaitKind::kPollFd);
  ASSERT_GE(w->fd(), 0);
  EXPECT_NE(fcntl(w->fd(), F_GETFD), -1);
  fi_wait_pollfd* set = w->pollfd_set();
  ASSERT_NE(set, nullptr);
  EXPECT_EQ(set->nfds, 1u);
  ASSERT_NE(set->fd, nullptr);
  EXPECT_EQ(set->fd[0].fd, w->fd());
  EXPECT_NE(set->fd[0].events & POLLIN, 0);
  EXPECT_EQ(poll(set->fd, set->nfds, 0), 0) << "a fresh wait object must not be readable";
  const fi_mutex_cond mc = w->mutex_cond();
  EXPECT_EQ(mc.mutex, nullptr);
  EXPECT_EQ(mc.cond, nullptr);
}

TEST(WaitObjectExposure, MutexCondKindExposesAUsableMutexAndCondition) {
  auto w = make_wait(WaitKind::kMutexCond);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->kind(), WaitKind::kMutexCond);
  const fi_mutex_cond mc = w->mutex_cond();
  ASSERT_NE(mc.mutex, nullptr);
  ASSERT_NE(mc.cond, nullptr);
  EXPECT_EQ(w->fd(), -1);
  EXPECT_EQ(w->pollfd_set(), nullptr);
  // Usable with the default (realtime) clock, as applications use it.
  ASSERT_EQ(pthread_mutex_lock(mc.mutex), 0);
  timespec abstime;
  clock_gettime(CLOCK_REALTIME, &abstime);
  abstime.tv_nsec += 1'000'000;
  if (abstime.tv_nsec >= 1'000'000'000) {
    abstime.tv_sec += 1;
    abstime.tv_nsec -= 1'000'000'000;
  }
  int rc;
  do {
    rc = pthread_cond_timedwait(mc.cond, mc.mutex, &abstime);
  } while (rc == 0);  // spurious wake-ups are allowed
  EXPECT_EQ(rc, ETIMEDOUT);
  EXPECT_EQ(pthread_mutex_unlock(mc.mutex), 0);
}

TEST(WaitObjectExposure, UnspecAndYieldKindsExposeNothing) {
  for (WaitKind kind : {WaitKind::kUnspec, WaitKind::kYield}) {
    auto w = make_wait(kind);
    ASSERT_NE(w, nullptr);
    EXPECT_EQ(w->kind(), kind);
    EXPECT_EQ(w->fd(), -1) << wait_kind_name(kind);
    EXPECT_EQ(w->pollfd_set(), nullptr) << wait_kind_name(kind);
    const fi_mutex_cond mc = w->mutex_cond();
    EXPECT_EQ(mc.mutex, nullptr) << wait_kind_name(kind);
    EXPECT_EQ(mc.cond, nullptr) << wait_kind_name(kind);
  }
}

TEST(WaitObjectExposure, EachFdWaitObjectHasItsOwnEventfd) {
  auto a = make_wait(WaitKind::kFd);
  auto b = make_wait(WaitKind::kPollFd);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a->fd(), b->fd());
}

TEST(WaitObjectExposure, QueuesWithNoneHaveNoWaitObject) {
  auto eq = make_eq(WaitKind::kNone);
  auto cq = make_cq(WaitKind::kNone);
  ASSERT_NE(eq, nullptr);
  ASSERT_NE(cq, nullptr);
  EXPECT_EQ(eq->wait_object(), nullptr);
  EXPECT_EQ(cq->wait_object(), nullptr);
}

TEST(WaitObjectExposure, QueuesExposeAWaitObjectOfTheirOwnKind) {
  for (WaitKind kind : {WaitKind::kUnspec, WaitKind::kFd, WaitKind::kPollFd, WaitKind::kMutexCond,
                        WaitKind::kYield}) {
    auto eq = make_eq(kind);
    auto cq = make_cq(kind);
    ASSERT_NE(eq, nullptr);
    ASSERT_NE(cq, nullptr);
    EXPECT_EQ(eq->wait_kind(), kind);
    EXPECT_EQ(cq->wait_kind(), kind);
    ASSERT_NE(eq->wait_object(), nullptr) << wait_kind_name(kind);
    ASSERT_NE(cq->wait_object(), nullptr) << wait_kind_name(kind);
    EXPECT_EQ(eq->wait_object()->kind(), kind);
    EXPECT_EQ(cq->wait_object()->kind(), kind);
    EXPECT_NE(eq->wait_object(), cq->wait_object());
    const bool has_fd = kind == WaitKind::kFd || kind == WaitKind::kPollFd;
    EXPECT_EQ(eq->wait_object()->fd() >= 0, has_fd) << wait_kind_name(kind);
    EXPECT_EQ(cq->wait_object()->fd() >= 0, has_fd) << wait_kind_name(kind);
  }
}

TEST(WaitObjectExposure, QueuesOnASetUseTheSetsWaitObject) {
  auto set = make_set(WaitKind::kFd);
  ASSERT_NE(set, nullptr);
  auto eq = make_eq(WaitKind::kSet, kDefaultSpinNs, set.get());
  auto cq = make_cq(WaitKind::kSet, kDefaultSpinNs, set.get());
  ASSERT_NE(eq, nullptr);
  ASSERT_NE(cq, nullptr);
  ASSERT_NE(set->object(), nullptr);
  EXPECT_EQ(eq->wait_object(), set->object());
  EXPECT_EQ(cq->wait_object(), set->object());
}

// ---------------------------------------------------------------------------------------------
// sread on FI_WAIT_NONE and FI_WAIT_SET: -FI_ENOSYS, promptly. A blocking implementation would
// come back with kAgain after the timeout instead, and late.

constexpr int kNoSysTimeoutMs = 3000;
constexpr int64_t kPromptMs = 1000;

TEST(SreadNoSys, EqSreadOnNoneIsNoSysPromptly) {
  auto eq = make_eq(WaitKind::kNone);
  ASSERT_NE(eq, nullptr);
  uint32_t event;
  uint64_t v;
  const int64_t start = monotonic_ns();
  Result<size_t> r = eq->sread(&event, &v, sizeof(v), kNoSysTimeoutMs, 0);
  EXPECT_EQ(r.status().code(), Code::kNoSys);
  EXPECT_LT(elapsed_ms(start), kPromptMs);
}

TEST(SreadNoSys, EqSreadOnSetIsNoSysPromptly) {
  auto set = make_set(WaitKind::kUnspec);
  ASSERT_NE(set, nullptr);
  auto eq = make_eq(WaitKind::kSet, kDefaultSpinNs, set.get());
  ASSERT_NE(eq, nullptr);
  uint32_t event;
  uint64_t v;
  const int64_t start = monotonic_ns();
  Result<size_t> r = eq->sread(&event, &v, sizeof(v), kNoSysTimeoutMs, 0);
  EXPECT_EQ(r.status().code(), Code::kNoSys);
  EXPECT_LT(elapsed_ms(start), kPromptMs);
}

TEST(SreadNoSys, CqSreadOnNoneIsNoSysPromptly) {
  auto cq = make_cq(WaitKind::kNone);
  ASSERT_NE(cq, nullptr);
  fi_cq_data_entry e;
  const int64_t start = monotonic_ns();
  Result<size_t> r = cq->sread(&e, 1, nullptr, 0, kNoSysTimeoutMs);
  EXPECT_EQ(r.status().code(), Code::kNoSys);
  EXPECT_LT(elapsed_ms(start), kPromptMs);
}

TEST(SreadNoSys, CqSreadOnSetIsNoSysPromptly) {
  auto set = make_set(WaitKind::kUnspec);
  ASSERT_NE(set, nullptr);
  auto cq = make_cq(WaitKind::kSet, kDefaultSpinNs, set.get());
  ASSERT_NE(cq, nullptr);
  fi_cq_data_entry e;
  const int64_t start = monotonic_ns();
  Result<size_t> r = cq->sread(&e, 1, nullptr, 0, kNoSysTimeoutMs);
  EXPECT_EQ(r.status().code(), Code::kNoSys);
  EXPECT_LT(elapsed_ms(start), kPromptMs);
}

TEST(SreadNoSys, CqSreadWithThresholdOnNoneIsNoSysPromptly) {
  auto cq = make_cq(WaitKind::kNone);
  ASSERT_NE(cq, nullptr);
  fi_cq_data_entry e[4];
  const int64_t start = monotonic_ns();
  Result<size_t> r = cq->sread(e, 4, nullptr, 4, kNoSysTimeoutMs);
  EXPECT_EQ(r.status().code(), Code::kNoSys);
  EXPECT_LT(elapsed_ms(start), kPromptMs);
}

// ---------------------------------------------------------------------------------------------
// Timeouts, for every kind that blocks: 0 does not block, a positive timeout gives kAgain after
// about that long, a negative one waits until an event. Futex kinds run with the default spin
// and with no spin at all (straight to the sleep).

using KindSpin = std::tuple<WaitKind, int64_t>;

std::string kind_spin_name(const testing::TestParamInfo<KindSpin>& info) {
  const auto [kind, spin] = info.param;
  return std::string(wait_kind_name(kind)) + (spin == 0 ? "_nospin" : "_spin");
}

const KindSpin kBlockingKinds[] = {
    {WaitKind::kUnspec, kDefaultSpinNs},    {WaitKind::kUnspec, 0},
    {WaitKind::kFd, kDefaultSpinNs},        {WaitKind::kFd, 0},
    {WaitKind::kPollFd, kDefaultSpinNs},    {WaitKind::kPollFd, 0},
    {WaitKind::kMutexCond, kDefaultSpinNs}, {WaitKind::kMutexCond, 0},
    {WaitKind::kYield, kDefaultSpinNs},
};

constexpr int kShortTimeoutMs = 50;
constexpr int64_t kShortTimeoutLowerMs = 45;  // clock granularity slack only
constexpr int64_t kHangBoundMs = 5000;        // "well before": only catches a hang

class SreadTimeout : public testing::TestWithParam<KindSpin> {
 protected:
  WaitKind kind() const { return std::get<0>(GetParam()); }
  int64_t spin() const { return std::get<1>(GetParam()); }
};

TEST_P(SreadTimeout, EqTimeoutZeroDoesNotBlock) {
  auto eq = make_eq(kind(), spin());
  ASSERT_NE(eq, nullptr);
  uint32_t event;
  uint64_t v;
  const int64_t start = monotonic_ns();
  Result<size_t> r = eq->sread(&event, &v, sizeof(v), 0, 0);
  EXPECT_EQ(r.status().code(), Code::kAgain);
  EXPECT_LT(elapsed_ms(start), kPromptMs);
}

TEST_P(SreadTimeout, EqTimeoutZeroStillReturnsAQueuedEvent) {
  auto eq = make_eq(kind(), spin());
  ASSERT_NE(eq, nullptr);
  ASSERT_TRUE(eq_write(*eq, 42).ok());
  uint32_t event = 0;
  uint64_t v = 0;
  Result<size_t> r = eq->sread(&event, &v, sizeof(v), 0, 0);
  ASSERT_TRUE(r.ok()) << static_cast<int>(r.status().code());
  EXPECT_EQ(*r, sizeof(v));
  EXPECT_EQ(event, kEvent);
  EXPECT_EQ(v, 42u);
}

TEST_P(SreadTimeout, EqPositiveTimeoutReturnsAgainAfterThatLong) {
  auto eq = make_eq(kind(), spin());
  ASSERT_NE(eq, nullptr);
  uint32_t event;
  uint64_t v;
  const int64_t start = monotonic_ns();
  Result<size_t> r = eq->sread(&event, &v, sizeof(v), kShortTimeoutMs, 0);
  const int64_t took = elapsed_ms(start);
  EXPECT_EQ(r.status().code(), Code::kAgain);
  EXPECT_GE(took, kShortTimeoutLowerMs);
  EXPECT_LT(took, kHangBoundMs);
}

TEST_P(SreadTimeout, EqPositiveTimeoutReturnsTheEventThatArrivesBeforeIt) {
  auto eq = make_eq(kind(), spin());
  ASSERT_NE(eq, nullptr);
  Worker reader([&] {
    uint32_t event = 0;
    uint64_t v = 0;
    Result<size_t> r = eq->sread(&event, &v, sizeof(v), 10 * kHangBoundMs, 0);
    return r.ok() && (event != kEvent || v != 7) ? Result<size_t>(Code::kIo) : r;
  });
  sleep_ms(20);
  ASSERT_TRUE(eq_write(*eq, 7).ok());
  ASSERT_TRUE(reader.wait_done(kHangBoundMs)) << "the event did not wake the reader";
  Result<size_t> r = reader.join();
  ASSERT_TRUE(r.ok()) << static_cast<int>(r.status().code());
  EXPECT_EQ(*r, sizeof(uint64_t));
}

TEST_P(SreadTimeout, EqNegativeTimeoutWaitsUntilAnEvent) {
  auto eq = make_eq(kind(), spin());
  ASSERT_NE(eq, nullptr);
  Worker reader([&] {
    uint32_t event = 0;
    uint64_t v = 0;
    Result<size_t> r = eq->sread(&event, &v, sizeof(v), -1, 0);
    return r.ok() && (event != kEvent || v != 9) ? Result<size_t>(Code::kIo) : r;
  });
  sleep_ms(150);
  EXPECT_FALSE(reader.done()) << "sread(-1) returned without an event";
  ASSERT_TRUE(eq_write(*eq, 9).ok());
  if (!reader.wait_done(kHangBoundMs)) {
    ADD_FAILURE() << "sread(-1) was not woken by the event";
    for (int i = 0; i < 16 && !reader.done(); ++i) (void)eq_write(*eq, 9);  // let it go
  }
  Result<size_t> r = reader.join();
  ASSERT_TRUE(r.ok()) << static_cast<int>(r.status().code());
}

TEST_P(SreadTimeout, CqTimeoutZeroDoesNotBlock) {
  auto cq = make_cq(kind(), spin());
  ASSERT_NE(cq, nullptr);
  fi_cq_data_entry e;
  const int64_t start = monotonic_ns();
  Result<size_t> r = cq->sread(&e, 1, nullptr, 0, 0);
  EXPECT_EQ(r.status().code(), Code::kAgain);
  EXPECT_LT(elapsed_ms(start), kPromptMs);
}

TEST_P(SreadTimeout, CqTimeoutZeroStillReturnsAQueuedCompletion) {
  auto cq = make_cq(kind(), spin());
  ASSERT_NE(cq, nullptr);
  ASSERT_TRUE(cq->write(completion(42)).ok());
  fi_cq_data_entry e{};
  Result<size_t> r = cq->sread(&e, 1, nullptr, 0, 0);
  ASSERT_TRUE(r.ok()) << static_cast<int>(r.status().code());
  EXPECT_EQ(*r, 1u);
  EXPECT_EQ(e.data, 42u);
}

TEST_P(SreadTimeout, CqPositiveTimeoutReturnsAgainAfterThatLong) {
  auto cq = make_cq(kind(), spin());
  ASSERT_NE(cq, nullptr);
  fi_cq_data_entry e;
  const int64_t start = monotonic_ns();
  Result<size_t> r = cq->sread(&e, 1, nullptr, 0, kShortTimeoutMs);
  const int64_t took = elapsed_ms(start);
  EXPECT_EQ(r.status().code(), Code::kAgain);
  EXPECT_GE(took, kShortTimeoutLowerMs);
  EXPECT_LT(took, kHangBoundMs);
}

TEST_P(SreadTimeout, CqPositiveTimeoutReturnsTheCompletionThatArrivesBeforeIt) {
  auto cq = make_cq(kind(), spin());
  ASSERT_NE(cq, nullptr);
  Worker reader([&] {
    fi_cq_data_entry e{};
    Result<size_t> r = cq->sread(&e, 1, nullptr, 0, 10 * kHangBoundMs);
    return r.ok() && e.data != 7 ? Result<size_t>(Code::kIo) : r;
  });
  sleep_ms(20);
  ASSERT_TRUE(cq->write(completion(7)).ok());
  ASSERT_TRUE(reader.wait_done(kHangBoundMs)) << "the completion did not wake the reader";
  Result<size_t> r = reader.join();
  ASSERT_TRUE(r.ok()) << static_cast<int>(r.status().code());
  EXPECT_EQ(*r, 1u);
}

TEST_P(SreadTimeout, CqNegativeTimeoutWaitsUntilACompletion) {
  auto cq = make_cq(kind(), spin());
  ASSERT_NE(cq, nullptr);
  Worker reader([&] {
    fi_cq_data_entry e{};
    Result<size_t> r = cq->sread(&e, 1, nullptr, 0, -1);
    return r.ok() && e.data != 9 ? Result<size_t>(Code::kIo) : r;
  });
  sleep_ms(150);
  EXPECT_FALSE(reader.done()) << "sread(-1) returned without a completion";
  ASSERT_TRUE(cq->write(completion(9)).ok());
  if (!reader.wait_done(kHangBoundMs)) {
    ADD_FAILURE() << "sread(-1) was not woken by the completion";
    for (int i = 0; i < 16 && !reader.done(); ++i) (void)cq->write(completion(9));
  }
  Result<size_t> r = reader.join();
  ASSERT_TRUE(r.ok()) << static_cast<int>(r.status().code());
}

TEST_P(SreadTimeout, CqThresholdNotReachedReturnsWhatIsThereAtTheTimeout) {
  auto cq = make_cq(kind(), spin());
  ASSERT_NE(cq, nullptr);
  ASSERT_TRUE(cq->write(completion(1)).ok());
  ASSERT_TRUE(cq->write(completion(2)).ok());
  fi_cq_data_entry e[8] = {};
  const int64_t start = monotonic_ns();
  Result<size_t> r = cq->sread(e, 8, nullptr, 4, kShortTimeoutMs);
  const int64_t took = elapsed_ms(start);
  ASSERT_TRUE(r.ok()) << static_cast<int>(r.status().code());
  EXPECT_EQ(*r, 2u);
  EXPECT_EQ(e[0].data, 1u);
  EXPECT_EQ(e[1].data, 2u);
  EXPECT_GE(took, kShortTimeoutLowerMs);
  EXPECT_LT(took, kHangBoundMs);
}

TEST_P(SreadTimeout, CqThresholdNotReachedWithTimeoutZeroReturnsWhatIsThere) {
  auto cq = make_cq(kind(), spin());
  ASSERT_NE(cq, nullptr);
  ASSERT_TRUE(cq->write(completion(1)).ok());
  fi_cq_data_entry e[8] = {};
  const int64_t start = monotonic_ns();
  Result<size_t> r = cq->sread(e, 8, nullptr, 4, 0);
  ASSERT_TRUE(r.ok()) << static_cast<int>(r.status().code());
  EXPECT_EQ(*r, 1u);
  EXPECT_LT(elapsed_ms(start), kPromptMs);
}

INSTANTIATE_TEST_SUITE_P(BlockingKinds, SreadTimeout, testing::ValuesIn(kBlockingKinds),
                         kind_spin_name);

// ---------------------------------------------------------------------------------------------
// A POSIX signal delivered to a thread blocked in sread makes it return kAgain, whatever the
// kind (kYield naps on the futex between its yields, and the signal lands in a nap). The handler
// is installed without SA_RESTART. A signal that lands while the reader still spins is absorbed,
// so the signal is sent again until the reader returns.

std::atomic<int> g_signals_handled{0};
void on_sigusr1(int) {
  g_signals_handled.fetch_add(1, std::memory_order_relaxed);
}

class SreadSignal : public testing::TestWithParam<KindSpin> {
 protected:
  void SetUp() override {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_sigusr1;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART
    ASSERT_EQ(sigaction(SIGUSR1, &sa, &old_), 0);
  }
  void TearDown() override { sigaction(SIGUSR1, &old_, nullptr); }

  WaitKind kind() const { return std::get<0>(GetParam()); }
  int64_t spin() const { return std::get<1>(GetParam()); }

  // Sends SIGUSR1 to the reader until it returns (bounded). `release` unblocks it if the
  // signal never does, so that a failure does not hang the suite.
  void interrupt(Worker& reader, const WaitObject* obj, const std::function<void()>& release) {
    const pid_t tid = reader.tid();
    // Not required for correctness (the loop below retries), but makes most signals land in
    // the sleep rather than in the spin.
    wait_for([&] { return asleep_on(tid, obj); }, 2000);
    const int handled_before = g_signals_handled.load();
    const int64_t start = monotonic_ns();
    while (!reader.done() && elapsed_ms(start) < kHangBoundMs) {
      ASSERT_EQ(pthread_kill(reader.handle(), SIGUSR1), 0);
      wait_for([&] { return reader.done(); }, 5);
    }
    if (!reader.done()) {
      ADD_FAILURE() << "a POSIX signal did not interrupt sread";
      release();
    }
    EXPECT_GT(g_signals_handled.load(), handled_before);
  }

 private:
  struct sigaction old_;
};

TEST_P(SreadSignal, EqSreadInterruptedByAPosixSignalReturnsAgain) {
  auto eq = make_eq(kind(), spin());
  ASSERT_NE(eq, nullptr);
  Worker reader([&] {
    uint32_t event;
    uint64_t v;
    return eq->sread(&event, &v, sizeof(v), -1, 0);
  });
  interrupt(reader, eq->wait_object(), [&] { (void)eq_write(*eq, 1); });
  Result<size_t> r = reader.join();
  EXPECT_EQ(r.status().code(), Code::kAgain);
  // The queue still works afterwards.
  ASSERT_TRUE(eq_write(*eq, 5).ok());
  uint32_t event = 0;
  uint64_t v = 0;
  Result<size_t> r2 = eq->sread(&event, &v, sizeof(v), 0, 0);
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(v, 5u);
}

TEST_P(SreadSignal, EqSreadWithTimeoutInterruptedByAPosixSignalReturnsAgainEarly) {
  auto eq = make_eq(kind(), spin());
  ASSERT_NE(eq, nullptr);
  constexpr int kLongMs = 60'000;
  Worker reader([&] {
    uint32_t event;
    uint64_t v;
    return eq->sread(&event, &v, sizeof(v), kLongMs, 0);
  });
  interrupt(reader, eq->wait_object(), [&] { (void)eq_write(*eq, 1); });
  Result<size_t> r = reader.join();
  EXPECT_EQ(r.status().code(), Code::kAgain);
  EXPECT_LT(reader.run_ms(), kLongMs / 2);
}

TEST_P(SreadSignal, CqSreadInterruptedByAPosixSignalReturnsAgain) {
  auto cq = make_cq(kind(), spin());
  ASSERT_NE(cq, nullptr);
  Worker reader([&] {
    fi_cq_data_entry e;
    return cq->sread(&e, 1, nullptr, 0, -1);
  });
  interrupt(reader, cq->wait_object(), [&] { (void)cq->write(completion(1)); });
  Result<size_t> r = reader.join();
  EXPECT_EQ(r.status().code(), Code::kAgain);
  ASSERT_TRUE(cq->write(completion(5)).ok());
  fi_cq_data_entry e{};
  Result<size_t> r2 = cq->sread(&e, 1, nullptr, 0, 0);
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(e.data, 5u);
}

// With a threshold not reached the interrupted call returns what is there (or kAgain): the entry
// already queued is never lost.
TEST_P(SreadSignal, CqSreadWithThresholdIsInterruptedByAPosixSignal) {
  auto cq = make_cq(kind(), spin());
  ASSERT_NE(cq, nullptr);
  ASSERT_TRUE(cq->write(completion(3)).ok());
  Worker reader([&] {
    fi_cq_data_entry e[8] = {};
    Result<size_t> r = cq->sread(e, 8, nullptr, 8, -1);
    return r.ok() && (*r != 1 || e[0].data != 3) ? Result<size_t>(Code::kIo) : r;
  });
  interrupt(reader, cq->wait_object(), [&] {
    for (int i = 0; i < 8; ++i) (void)cq->write(completion(3));
  });
  Result<size_t> r = reader.join();
  if (r.ok()) {
    EXPECT_EQ(*r, 1u);
  } else {
    ASSERT_EQ(r.status().code(), Code::kAgain);
    fi_cq_data_entry e{};
    Result<size_t> left = cq->read(&e, 1, nullptr);
    ASSERT_TRUE(left.ok()) << "the queued completion was lost";
    EXPECT_EQ(e.data, 3u);
  }
}

INSTANTIATE_TEST_SUITE_P(BlockingKinds, SreadSignal, testing::ValuesIn(kBlockingKinds),
                         kind_spin_name);

}  // namespace
}  // namespace fabq::core
