// Wake-ups under concurrency (fi_eq(3) fi_eq_sread, fi_cq(3) fi_cq_sread / fi_cq_signal,
// fi_trywait(3)): a reader blocked in a queue is woken by every write that it waits for, however
// the write races with it going to sleep. Each iteration lets a reader block (5 s timeout)
// while a writer thread writes at a random tiny delay; a timeout is a lost wake-up and fails the
// test instead of hanging it. Also runs under ThreadSanitizer.
#include <gtest/gtest.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/fabric.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <sched.h>
#include <sys/epoll.h>
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
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/cq.h"
#include "core/deadline.h"
#include "core/eq.h"
#include "core/spinlock.h"
#include "core/wait.h"

// Sanitized builds run fewer rounds (ThreadSanitizer is the slowest).
#if defined(__SANITIZE_THREAD__)
#define FABQ_TEST_TSAN 1
#elif defined(__SANITIZE_ADDRESS__)
#define FABQ_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FABQ_TEST_TSAN 1
#elif __has_feature(address_sanitizer)
#define FABQ_TEST_ASAN 1
#endif
#endif

namespace fabq::core {

void PrintTo(Code c, std::ostream* os) {
  *os << "Code(" << static_cast<int>(c) << ")";
}

namespace {

#if defined(FABQ_TEST_TSAN)
constexpr uint64_t kIterations = 600;
constexpr uint64_t kThresholdIterations = 150;
constexpr uint64_t kTwoReaderIterations = 300;
constexpr uint64_t kSignalRepeats = 60;
constexpr uint64_t kOverrunIterations = 100;
#elif defined(FABQ_TEST_ASAN)
constexpr uint64_t kIterations = 1000;
constexpr uint64_t kThresholdIterations = 250;
constexpr uint64_t kTwoReaderIterations = 500;
constexpr uint64_t kSignalRepeats = 100;
constexpr uint64_t kOverrunIterations = 200;
#else
constexpr uint64_t kIterations = 2000;
constexpr uint64_t kThresholdIterations = 500;
constexpr uint64_t kTwoReaderIterations = 1000;
constexpr uint64_t kSignalRepeats = 200;
constexpr uint64_t kOverrunIterations = 500;
#endif

constexpr int kWaitMs = 5000;            // every blocking wait: a lost wake-up fails, never hangs
constexpr int64_t kMaxDelayNs = 50'000;  // writer delays: 0..50 us, a quarter of them none
constexpr uint32_t kEvent = FI_NOTIFY;

int64_t elapsed_ms(int64_t start_ns) {
  return (monotonic_ns() - start_ns) / 1'000'000;
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

// Busy-waits a random 0..50 us (none a quarter of the time): the write lands anywhere around
// the reader's spin, its announcement on the gate and its futex sleep.
void random_delay(std::mt19937_64& rng) {
  const uint64_t r = rng();
  if (r % 4 == 0) return;
  const int64_t end = monotonic_ns() + static_cast<int64_t>((r >> 8) % (kMaxDelayNs + 1));
  while (monotonic_ns() < end) cpu_relax();
}

// The scheduling state letter of thread `tid` ('R', 'S', ...), or 0.
char thread_state(pid_t tid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/self/task/%d/stat", static_cast<int>(tid));
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return 0;
  char line[512] = {};
  const bool got = std::fgets(line, sizeof(line), f) != nullptr;
  std::fclose(f);
  const char* paren = got ? std::strrchr(line, ')') : nullptr;
  return paren != nullptr && paren[1] == ' ' ? paren[2] : 0;
}

// Whether /proc/<tid>/syscall can be read here (it needs CONFIG_HAVE_ARCH_TRACEHOOK).
bool syscalls_visible() {
  static const bool visible = [] {
    FILE* f = std::fopen("/proc/thread-self/syscall", "r");
    if (f == nullptr) return false;
    long nr = -1;
    const bool ok = std::fscanf(f, "%ld", &nr) == 1;
    std::fclose(f);
    return ok;
  }();
  return visible;
}

// True when thread `tid` sits in a futex call on a word inside `obj`: asleep in a blocking read
// of the queue owning `obj`. Where system calls are not visible: asleep somewhere.
bool asleep_on(pid_t tid, const WaitObject* obj) {
  if (!syscalls_visible()) return thread_state(tid) == 'S';
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

// Stops and joins helper threads when the test body leaves, also through a failed ASSERT.
class JoinOnExit {
 public:
  JoinOnExit(std::vector<std::thread>* threads, std::atomic<bool>* stop,
             std::function<void()> before_join = nullptr)
      : threads_(threads), stop_(stop), before_join_(std::move(before_join)) {}
  ~JoinOnExit() {
    stop_->store(true, std::memory_order_release);
    if (before_join_) before_join_();
    for (auto& t : *threads_) {
      if (t.joinable()) t.join();
    }
  }
  JoinOnExit(const JoinOnExit&) = delete;
  JoinOnExit& operator=(const JoinOnExit&) = delete;

 private:
  std::vector<std::thread>* threads_;
  std::atomic<bool>* stop_;
  std::function<void()> before_join_;
};

// A writer thread in lock step with the test: after begin(i) it waits a random tiny delay and
// calls write(i) (which may write several entries, each after its own delay).
class PacedWriter {
 public:
  PacedWriter(std::function<void(uint64_t, std::mt19937_64&)> write, uint64_t seed)
      : write_(std::move(write)), seed_(seed), thread_([this] { run(); }) {}
  ~PacedWriter() {
    stop_.store(true, std::memory_order_release);
    thread_.join();
  }
  PacedWriter(const PacedWriter&) = delete;
  PacedWriter& operator=(const PacedWriter&) = delete;

  void begin(uint64_t i) { go_.store(i, std::memory_order_release); }
  // How many write(i) calls have returned.
  uint64_t completed() const { return done_.load(std::memory_order_acquire); }

 private:
  void run() {
    std::mt19937_64 rng(seed_);
    for (uint64_t next = 1;;) {
      if (go_.load(std::memory_order_acquire) >= next) {
        write_(next, rng);
        done_.store(next, std::memory_order_release);
        ++next;
        continue;
      }
      if (stop_.load(std::memory_order_acquire)) return;
      sched_yield();
    }
  }

  const std::function<void(uint64_t, std::mt19937_64&)> write_;
  const uint64_t seed_;
  std::atomic<uint64_t> go_{0};
  std::atomic<uint64_t> done_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

enum class QueueType { kEq, kCq };

struct Variant {
  QueueType type;
  WaitKind kind;
  int64_t spin_ns;
};

std::string describe(const Variant& v) {
  std::string name = v.type == QueueType::kEq ? "eq_" : "cq_";
  name += wait_kind_name(v.kind);
  if (v.kind != WaitKind::kYield) name += v.spin_ns == 0 ? "_nospin" : "_spin";
  return name;
}

void PrintTo(const Variant& v, std::ostream* os) {
  *os << describe(v);
}

std::string variant_name(const testing::TestParamInfo<Variant>& info) {
  return describe(info.param);
}

// Every blocking kind; the futex kinds with the default spin and with none (straight to the
// sleep, so the sleep path races with every write).
std::vector<Variant> blocking_variants(QueueType type) {
  std::vector<Variant> v;
  for (WaitKind kind :
       {WaitKind::kUnspec, WaitKind::kFd, WaitKind::kPollFd, WaitKind::kMutexCond}) {
    v.push_back({type, kind, kDefaultSpinNs});
    v.push_back({type, kind, 0});
  }
  v.push_back({type, WaitKind::kYield, kDefaultSpinNs});
  return v;
}

std::vector<Variant> futex_variants(QueueType type) {
  std::vector<Variant> v = blocking_variants(type);
  v.pop_back();  // kYield spins: nothing to see asleep
  return v;
}

std::unique_ptr<EventQueue> make_eq(const Variant& v) {
  EqConfig config;
  config.size = 64;
  config.wait = v.kind;
  config.spin_ns = v.spin_ns;
  auto r = EventQueue::create(config);
  EXPECT_TRUE(r.ok());
  return r.ok() ? std::move(r.value()) : nullptr;
}

std::unique_ptr<CompletionQueue> make_cq(const Variant& v) {
  CqConfig config;
  config.size = 64;
  config.format = CqFormat::kData;
  config.wait = v.kind;
  config.spin_ns = v.spin_ns;
  auto r = CompletionQueue::create(config);
  EXPECT_TRUE(r.ok());
  return r.ok() ? std::move(r.value()) : nullptr;
}

Completion completion(uint64_t v) {
  Completion c;
  c.op_context = reinterpret_cast<void*>(uintptr_t{0x1000} + v);
  c.data = v;
  return c;
}

// One EQ or CQ behind the same calls; entries carry one 64-bit value.
class Queue {
 public:
  explicit Queue(const Variant& v) {
    if (v.type == QueueType::kEq) {
      eq_ = make_eq(v);
    } else {
      cq_ = make_cq(v);
    }
  }
  bool valid() const { return eq_ != nullptr || cq_ != nullptr; }
  WaitObject* wait_object() const { return eq_ ? eq_->wait_object() : cq_->wait_object(); }
  size_t pending() const { return eq_ ? eq_->pending() : cq_->pending(); }
  Status write(uint64_t v) {
    return eq_ ? eq_->write(kEvent, &v, sizeof(v)).status() : cq_->write(completion(v));
  }
  Status try_wait() { return eq_ ? eq_->try_wait() : cq_->try_wait(); }
  // One entry: its value, or the status.
  Result<uint64_t> sread(int timeout_ms) {
    uint64_t v = 0;
    Result<size_t> r = Code::kIo;
    if (eq_) {
      uint32_t event = 0;
      r = eq_->sread(&event, &v, sizeof(v), timeout_ms, 0);
    } else {
      fi_cq_data_entry e{};
      r = cq_->sread(&e, 1, nullptr, 0, timeout_ms);
      v = e.data;
    }
    if (!r.ok()) return r.status();
    return v;
  }
  Result<uint64_t> read() {
    uint64_t v = 0;
    Result<size_t> r = Code::kIo;
    if (eq_) {
      uint32_t event = 0;
      r = eq_->read(&event, &v, sizeof(v), 0);
    } else {
      fi_cq_data_entry e{};
      r = cq_->read(&e, 1, nullptr);
      v = e.data;
    }
    if (!r.ok()) return r.status();
    return v;
  }

 private:
  std::unique_ptr<EventQueue> eq_;
  std::unique_ptr<CompletionQueue> cq_;
};

// ---------------------------------------------------------------------------------------------
// One reader blocked in sread, one write at a random tiny delay: the reader gets the entry.

class SreadWakeUp : public testing::TestWithParam<Variant> {};

TEST_P(SreadWakeUp, ReaderBlockedInSreadGetsTheEntryWrittenWhileItWaits) {
  Queue q(GetParam());
  ASSERT_TRUE(q.valid());
  PacedWriter writer(
      [&](uint64_t i, std::mt19937_64& rng) {
        random_delay(rng);
        EXPECT_TRUE(q.write(i).ok());
      },
      /*seed=*/1);
  for (uint64_t i = 1; i <= kIterations; ++i) {
    writer.begin(i);
    const int64_t start = monotonic_ns();
    Result<uint64_t> r = q.sread(kWaitMs);
    const int64_t took = elapsed_ms(start);
    ASSERT_TRUE(r.ok()) << "iteration " << i << ": "
                        << (r.status().code() == Code::kAgain ? "lost wake-up" : "error")
                        << " after " << took << " ms";
    ASSERT_EQ(*r, i) << "iteration " << i;
    // The entry may also come from the last look at the deadline: that is a lost wake-up too.
    ASSERT_LT(took, kWaitMs) << "iteration " << i << ": lost wake-up (only the timeout ended it)";
  }
}

// Two readers blocked at once, two writes: each reader gets one (the gate counts sleepers).
TEST_P(SreadWakeUp, TwoBlockedReadersEachGetOneOfTwoEntries) {
  Queue q(GetParam());
  ASSERT_TRUE(q.valid());
  std::atomic<uint64_t> go{0};
  std::atomic<uint64_t> finished{0};
  std::atomic<bool> stop{false};
  std::vector<Result<uint64_t>> results(2, Result<uint64_t>(Code::kIo));
  std::vector<int64_t> took(2, 0);
  std::vector<std::thread> readers;
  JoinOnExit join_readers(&readers, &stop);
  for (int k = 0; k < 2; ++k) {
    readers.emplace_back([&, k] {
      for (uint64_t next = 1;; ++next) {
        while (go.load(std::memory_order_acquire) < next) {
          if (stop.load(std::memory_order_acquire)) return;
          sched_yield();
        }
        const int64_t start = monotonic_ns();
        results[k] = q.sread(kWaitMs);
        took[k] = elapsed_ms(start);
        finished.fetch_add(1, std::memory_order_acq_rel);
      }
    });
  }
  PacedWriter writer(
      [&](uint64_t i, std::mt19937_64& rng) {
        random_delay(rng);
        EXPECT_TRUE(q.write(2 * i).ok());
        random_delay(rng);
        EXPECT_TRUE(q.write(2 * i + 1).ok());
      },
      /*seed=*/2);
  for (uint64_t i = 1; i <= kTwoReaderIterations; ++i) {
    go.store(i, std::memory_order_release);
    writer.begin(i);
    const bool both =
        wait_for([&] { return finished.load(std::memory_order_acquire) == 2 * i; }, 3 * kWaitMs);
    if (!both) {
      ADD_FAILURE() << "iteration " << i << ": a reader never returned";
      break;
    }
    bool ok = true;
    uint64_t sum = 0;
    for (int k = 0; k < 2; ++k) {
      if (!results[k].ok()) {
        ADD_FAILURE() << "iteration " << i << ", reader " << k << ": "
                      << (results[k].status().code() == Code::kAgain ? "lost wake-up" : "error");
        ok = false;
      } else if (took[k] >= kWaitMs) {
        ADD_FAILURE() << "iteration " << i << ", reader " << k
                      << ": lost wake-up (only the timeout ended it)";
        ok = false;
      } else {
        sum += *results[k];
      }
    }
    if (!ok) break;
    ASSERT_EQ(sum, 4 * i + 1) << "iteration " << i << ": wrong entries";
  }
}

std::vector<Variant> all_blocking_variants() {
  std::vector<Variant> v = blocking_variants(QueueType::kEq);
  for (const Variant& c : blocking_variants(QueueType::kCq)) v.push_back(c);
  return v;
}

INSTANTIATE_TEST_SUITE_P(AllKinds, SreadWakeUp, testing::ValuesIn(all_blocking_variants()),
                         variant_name);

// ---------------------------------------------------------------------------------------------
// External waiters: fi_trywait, then epoll_wait on the fd (FD, POLLFD) or pthread_cond_timedwait
// on the mutex/cond pair (MUTEX_COND), while another thread writes. Spurious readiness is fine
// (the reader reads nothing, calls try_wait again); a wait that times out is a lost wake-up.

class EpollWakeUp : public testing::TestWithParam<Variant> {};

TEST_P(EpollWakeUp, EpollAfterTryWaitWakesForTheEntryWrittenWhileItWaits) {
  Queue q(GetParam());
  ASSERT_TRUE(q.valid());
  WaitObject* w = q.wait_object();
  ASSERT_NE(w, nullptr);
  const int fd = GetParam().kind == WaitKind::kPollFd ? w->pollfd_set()->fd[0].fd : w->fd();
  ASSERT_GE(fd, 0);
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  ASSERT_GE(ep, 0);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ASSERT_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev), 0);
  PacedWriter writer(
      [&](uint64_t i, std::mt19937_64& rng) {
        random_delay(rng);
        EXPECT_TRUE(q.write(i).ok());
      },
      /*seed=*/3);
  uint64_t spurious = 0;
  for (uint64_t i = 1; i <= kIterations && !HasFailure(); ++i) {
    writer.begin(i);
    const int64_t start = monotonic_ns();
    for (;;) {
      Result<uint64_t> r = q.read();
      if (r.ok()) {
        ASSERT_EQ(*r, i) << "iteration " << i;
        break;
      }
      ASSERT_EQ(r.status().code(), Code::kAgain);
      ASSERT_LT(elapsed_ms(start), 2 * kWaitMs) << "iteration " << i << ": no entry";
      const Status s = q.try_wait();
      if (s.code() == Code::kAgain) continue;  // something queued (maybe not yet published)
      ASSERT_TRUE(s.ok());
      epoll_event out{};
      const int n = epoll_wait(ep, &out, 1, kWaitMs);
      if (n == 0) {
        ADD_FAILURE() << "iteration " << i << ": epoll_wait timed out after try_wait was ok"
                      << (q.read().ok() ? " although an entry was written: lost wake-up" : "");
        break;
      }
      ASSERT_EQ(n, 1) << "epoll_wait: " << errno;
      if (q.pending() == 0) ++spurious;
    }
  }
  close(ep);
  RecordProperty("spurious_wakeups", static_cast<int>(spurious));
}

class CondWakeUp : public testing::TestWithParam<Variant> {};

TEST_P(CondWakeUp, CondWaitAfterTryWaitWakesForTheEntryWrittenWhileItWaits) {
  Queue q(GetParam());
  ASSERT_TRUE(q.valid());
  WaitObject* w = q.wait_object();
  ASSERT_NE(w, nullptr);
  const fi_mutex_cond mc = w->mutex_cond();
  ASSERT_NE(mc.mutex, nullptr);
  ASSERT_NE(mc.cond, nullptr);
  PacedWriter writer(
      [&](uint64_t i, std::mt19937_64& rng) {
        random_delay(rng);
        EXPECT_TRUE(q.write(i).ok());
      },
      /*seed=*/4);
  for (uint64_t i = 1; i <= kIterations && !HasFailure(); ++i) {
    writer.begin(i);
    const int64_t start = monotonic_ns();
    for (;;) {
      Result<uint64_t> r = q.read();
      if (r.ok()) {
        ASSERT_EQ(*r, i) << "iteration " << i;
        break;
      }
      ASSERT_EQ(r.status().code(), Code::kAgain);
      ASSERT_LT(elapsed_ms(start), 2 * kWaitMs) << "iteration " << i << ": no entry";
      pthread_mutex_lock(mc.mutex);
      const Status s = q.try_wait();
      if (!s.ok()) {
        pthread_mutex_unlock(mc.mutex);
        ASSERT_EQ(s.code(), Code::kAgain);
        continue;
      }
      // try_wait was ok: the write of entry i is still to come and must broadcast; wait for it
      // even if the entry shows up already (a write that forgot to broadcast would time out).
      // A wake-up with nothing queued (the broadcast of entry i-1's write landing late) sends
      // the reader back through try_wait: fi_trywait(3) comes before every block, so waiting
      // again on the bare condition would rely on an arm that the late broadcast consumed.
      const timespec abstime = realtime_after_ms(kWaitMs);
      const int rc = pthread_cond_timedwait(mc.cond, mc.mutex, &abstime);
      pthread_mutex_unlock(mc.mutex);
      if (rc != 0) {
        ADD_FAILURE() << "iteration " << i << ": pthread_cond_timedwait gave " << rc
                      << (q.read().ok() ? " although an entry was written: lost wake-up" : "");
        break;
      }
    }
  }
}

// A fabq sleeper (sread) and an external waiter (try_wait + epoll) at once: one write wakes
// both. Each iteration starts once the previous write has returned, so the fd can only be
// made readable by this iteration's write.
TEST_P(EpollWakeUp, OneWriteWakesBothAnEpollWaiterAndAReaderBlockedInSread) {
  Queue q(GetParam());
  ASSERT_TRUE(q.valid());
  WaitObject* w = q.wait_object();
  ASSERT_NE(w, nullptr);
  const int fd = GetParam().kind == WaitKind::kPollFd ? w->pollfd_set()->fd[0].fd : w->fd();
  ASSERT_GE(fd, 0);
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  ASSERT_GE(ep, 0);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ASSERT_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev), 0);
  std::atomic<uint64_t> go{0};
  std::atomic<uint64_t> finished{0};
  std::atomic<bool> stop{false};
  Result<uint64_t> result(Code::kIo);
  int64_t took = 0;
  std::vector<std::thread> reader;
  JoinOnExit join_reader(&reader, &stop);
  reader.emplace_back([&] {
    for (uint64_t next = 1;; ++next) {
      while (go.load(std::memory_order_acquire) < next) {
        if (stop.load(std::memory_order_acquire)) return;
        sched_yield();
      }
      const int64_t start = monotonic_ns();
      result = q.sread(kWaitMs);
      took = elapsed_ms(start);
      finished.store(next, std::memory_order_release);
    }
  });
  PacedWriter writer(
      [&](uint64_t i, std::mt19937_64& rng) {
        random_delay(rng);
        EXPECT_TRUE(q.write(i).ok());
      },
      /*seed=*/8);
  for (uint64_t i = 1; i <= kTwoReaderIterations && !HasFailure(); ++i) {
    ASSERT_TRUE(wait_for([&] { return writer.completed() == i - 1; }, kWaitMs));
    go.store(i, std::memory_order_release);
    ASSERT_TRUE(q.try_wait().ok()) << "iteration " << i << ": the queue should be empty";
    writer.begin(i);
    epoll_event out{};
    const int n = epoll_wait(ep, &out, 1, kWaitMs);
    EXPECT_EQ(n, 1) << "iteration " << i << ": the epoll waiter was not woken";
    const bool back =
        wait_for([&] { return finished.load(std::memory_order_acquire) == i; }, 2 * kWaitMs);
    ASSERT_TRUE(back) << "iteration " << i << ": the sread reader never returned";
    ASSERT_TRUE(result.ok()) << "iteration " << i << ": the sread reader lost its wake-up";
    ASSERT_EQ(*result, i);
    ASSERT_LT(took, kWaitMs) << "iteration " << i << ": the sread reader lost its wake-up";
  }
  close(ep);
}

std::vector<Variant> fd_variants() {
  std::vector<Variant> v;
  for (QueueType type : {QueueType::kEq, QueueType::kCq}) {
    for (WaitKind kind : {WaitKind::kFd, WaitKind::kPollFd}) {
      v.push_back({type, kind, kDefaultSpinNs});
      v.push_back({type, kind, 0});
    }
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(FdKinds, EpollWakeUp, testing::ValuesIn(fd_variants()), variant_name);

INSTANTIATE_TEST_SUITE_P(
    MutexCond, CondWakeUp,
    testing::Values(Variant{QueueType::kEq, WaitKind::kMutexCond, kDefaultSpinNs},
                    Variant{QueueType::kCq, WaitKind::kMutexCond, kDefaultSpinNs}),
    variant_name);

// ---------------------------------------------------------------------------------------------
// fi_cq_sread with FI_CQ_COND_THRESHOLD 8: the reader waits while a writer writes 8 entries one
// by one (each after a random tiny delay), and gets all 8.

class CqThresholdWakeUp : public testing::TestWithParam<Variant> {};

TEST_P(CqThresholdWakeUp, SreadWithThreshold8GetsAll8EntriesWrittenOneByOne) {
  auto cq = make_cq(GetParam());
  ASSERT_NE(cq, nullptr);
  constexpr uint64_t kThreshold = 8;
  PacedWriter writer(
      [&](uint64_t i, std::mt19937_64& rng) {
        for (uint64_t k = 0; k < kThreshold; ++k) {
          random_delay(rng);
          EXPECT_TRUE(cq->write(completion(kThreshold * i + k)).ok());
        }
      },
      /*seed=*/5);
  fi_cq_data_entry e[2 * kThreshold];
  for (uint64_t i = 1; i <= kThresholdIterations; ++i) {
    writer.begin(i);
    const int64_t start = monotonic_ns();
    Result<size_t> r = cq->sread(e, 2 * kThreshold, nullptr, kThreshold, kWaitMs);
    const int64_t took = elapsed_ms(start);
    ASSERT_TRUE(r.ok()) << "iteration " << i << ": "
                        << (r.status().code() == Code::kAgain ? "lost wake-up" : "error")
                        << " after " << took << " ms";
    ASSERT_LT(took, kWaitMs) << "iteration " << i << ": lost wake-up (only the timeout ended it)";
    ASSERT_EQ(*r, kThreshold) << "iteration " << i << ": returned before the threshold after "
                              << took << " ms";
    for (uint64_t k = 0; k < kThreshold; ++k) {
      ASSERT_EQ(e[k].data, kThreshold * i + k) << "iteration " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllKinds, CqThresholdWakeUp,
                         testing::ValuesIn(blocking_variants(QueueType::kCq)), variant_name);

// An error entry ends a threshold wait: the reader waiting for 8 entries learns of the error
// (kAvail) as soon as it is written.
TEST_P(CqThresholdWakeUp, ErrorEntryWakesAReaderWaitingForAThreshold) {
  auto cq = make_cq(GetParam());
  ASSERT_NE(cq, nullptr);
  PacedWriter writer(
      [&](uint64_t i, std::mt19937_64& rng) {
        random_delay(rng);
        CompletionError e;
        e.completion = completion(i);
        e.err = FI_EIO;
        EXPECT_TRUE(cq->write_error(e).ok());
      },
      /*seed=*/6);
  fi_cq_data_entry e[16];
  for (uint64_t i = 1; i <= kThresholdIterations; ++i) {
    writer.begin(i);
    const int64_t start = monotonic_ns();
    Result<size_t> r = cq->sread(e, 16, nullptr, 8, kWaitMs);
    const int64_t took = elapsed_ms(start);
    ASSERT_EQ(r.status().code(), Code::kAvail) << "iteration " << i;
    ASSERT_LT(took, kWaitMs) << "iteration " << i << ": only the timeout ended the wait";
    fi_cq_err_entry err{};
    ASSERT_TRUE(cq->read_error(&err, 0).ok());
    ASSERT_EQ(err.data, i);
  }
}

// ---------------------------------------------------------------------------------------------
// Overrun (fault injection) wakes a reader blocked in fi_cq_sread on an empty queue: it learns
// of the overrun entry (kAvail) at once, not at its timeout.

class CqOverrunWakeUp : public testing::TestWithParam<Variant> {};

TEST_P(CqOverrunWakeUp, EnterOverrunWakesAReaderBlockedInSread) {
  std::mt19937_64 rng(7);
  for (uint64_t i = 1; i <= kOverrunIterations; ++i) {
    auto cq = make_cq(GetParam());  // overrun is permanent: a new queue each time
    ASSERT_NE(cq, nullptr);
    std::atomic<bool> go{false};
    std::thread injector([&] {
      while (!go.load(std::memory_order_acquire)) cpu_relax();
      random_delay(rng);
      cq->enter_overrun();
    });
    go.store(true, std::memory_order_release);
    fi_cq_data_entry e;
    const int64_t start = monotonic_ns();
    Result<size_t> r = cq->sread(&e, 1, nullptr, 0, kWaitMs);
    const int64_t took = elapsed_ms(start);
    injector.join();
    ASSERT_EQ(r.status().code(), Code::kAvail) << "iteration " << i;
    ASSERT_LT(took, kWaitMs) << "iteration " << i << ": the overrun did not wake the reader";
    fi_cq_err_entry err{};
    ASSERT_TRUE(cq->read_error(&err, 0).ok());
    EXPECT_EQ(err.err, FI_EOVERRUN);
  }
}

INSTANTIATE_TEST_SUITE_P(AllKinds, CqOverrunWakeUp,
                         testing::ValuesIn(blocking_variants(QueueType::kCq)), variant_name);

// ---------------------------------------------------------------------------------------------
// fi_cq_signal: four threads blocked in fi_cq_sread, one signal, all four return kAgain.

class CqSignalWakeUp : public testing::TestWithParam<Variant> {};

TEST_P(CqSignalWakeUp, OneSignalMakesEveryBlockedReaderReturnAgain) {
  auto cq = make_cq(GetParam());
  ASSERT_NE(cq, nullptr);
  constexpr int kReaders = 4;
  constexpr int kReaderTimeoutMs = 3 * kWaitMs;  // beyond every bound below
  std::atomic<uint64_t> go{0};
  std::atomic<uint64_t> finished{0};
  std::atomic<bool> stop{false};
  std::vector<std::atomic<pid_t>> tids(kReaders);
  std::vector<Result<size_t>> results(kReaders, Result<size_t>(Code::kIo));
  std::vector<std::thread> readers;
  // On failure: writes let every reader out, so that the test ends.
  auto release = [&] {
    for (int k = 0; k < 2 * kReaders; ++k) (void)cq->write(completion(0));
  };
  JoinOnExit join_readers(&readers, &stop, [&] {
    if (testing::Test::HasFailure()) release();
  });
  for (int k = 0; k < kReaders; ++k) {
    readers.emplace_back([&, k] {
      tids[k].store(static_cast<pid_t>(syscall(SYS_gettid)), std::memory_order_release);
      fi_cq_data_entry e;
      for (uint64_t next = 1;; ++next) {
        while (go.load(std::memory_order_acquire) < next) {
          if (stop.load(std::memory_order_acquire)) return;
          sched_yield();
        }
        results[k] = cq->sread(&e, 1, nullptr, 0, kReaderTimeoutMs);
        finished.fetch_add(1, std::memory_order_acq_rel);
      }
    });
  }
  for (uint64_t rep = 1; rep <= kSignalRepeats; ++rep) {
    go.store(rep, std::memory_order_release);
    // Signal only once all four sleep in the queue: a reader that comes later may legitimately
    // miss a signal another reader already answered.
    const bool all_asleep = wait_for(
        [&] {
          for (int k = 0; k < kReaders; ++k) {
            if (!asleep_on(tids[k].load(std::memory_order_acquire), cq->wait_object())) {
              return false;
            }
          }
          return true;
        },
        kWaitMs);
    if (!all_asleep) {
      ADD_FAILURE() << "repeat " << rep << ": the readers did not all go to sleep";
      release();
      break;
    }
    ASSERT_TRUE(cq->signal().ok());
    const bool all_back = wait_for(
        [&] { return finished.load(std::memory_order_acquire) == kReaders * rep; }, kWaitMs);
    if (!all_back) {
      ADD_FAILURE() << "repeat " << rep << ": " << kReaders * rep - finished.load()
                    << " blocked reader(s) missed the signal";
      release();
      break;
    }
    bool ok = true;
    for (int k = 0; k < kReaders; ++k) {
      if (results[k].status().code() != Code::kAgain) {
        ADD_FAILURE() << "repeat " << rep << ", reader " << k << ": code "
                      << static_cast<int>(results[k].status().code());
        ok = false;
      }
    }
    if (!ok) break;
  }
}

INSTANTIATE_TEST_SUITE_P(FutexKinds, CqSignalWakeUp,
                         testing::ValuesIn(futex_variants(QueueType::kCq)), variant_name);

}  // namespace
}  // namespace fabq::core
