// Concurrency of the queue engine (fi_cq(3), fi_eq(3) threading): producers are lock-free and
// many threads may write one queue; readers are serialized internally, so several threads may
// read one queue at once. Several writers and two concurrent readers move millions of entries
// through one CQ and many through one EQ; every entry encodes (writer, sequence). Checked: no
// entry lost, none duplicated, and each reader sees every writer's entries in the order that
// writer wrote them. Also runs under ThreadSanitizer.
#include <gtest/gtest.h>
#include <rdma/fabric.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <ostream>
#include <thread>
#include <utility>
#include <vector>

#include "core/cq.h"
#include "core/deadline.h"
#include "core/eq.h"
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
constexpr uint64_t kScaleDown = 5;
#elif defined(FABQ_TEST_ASAN)
constexpr uint64_t kScaleDown = 2;
#else
constexpr uint64_t kScaleDown = 1;
#endif

constexpr int kWriters = 4;
constexpr int kReaders = 2;
constexpr uint64_t kCqPerWriter = 500'000 / kScaleDown;
constexpr uint64_t kCqReservePerWriter = 250'000 / kScaleDown;
constexpr uint64_t kEqPerWriter = 250'000 / kScaleDown;
// A failure must not hang the suite: every thread of the test gives up after kGiveUpNs, and a
// watchdog aborts the run (with a message) if the test is stuck inside the queue itself.
constexpr int64_t kGiveUpNs = 60'000'000'000;
constexpr int64_t kWatchdogMs = 100'000;

class Watchdog {
 public:
  explicit Watchdog(const char* what)
      : thread_([this, what] {
          std::unique_lock lock(mu_);
          if (!cv_.wait_for(lock, std::chrono::milliseconds(kWatchdogMs),
                            [this] { return done_; })) {
            std::fprintf(stderr, "FATAL: %s did not finish in %lld ms (stuck in the queue?)\n",
                         what, static_cast<long long>(kWatchdogMs));
            std::abort();
          }
        }) {}
  ~Watchdog() {
    {
      std::lock_guard lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

uint64_t encode(uint64_t writer, uint64_t seq) {
  return (writer << 32) | seq;
}

// Every n-th entry of a writer is an error entry (the error path runs concurrently too).
bool is_error_seq(uint64_t seq, uint64_t every) {
  return seq % every == every - 1;
}

// What one reader saw.
struct ReaderView {
  std::vector<int64_t> last;  // last sequence seen per writer
  uint64_t received = 0;
  uint64_t out_of_order = 0;
  uint64_t bad_entries = 0;   // undecodable, or an error entry with the wrong err
  uint64_t bad_statuses = 0;  // a read status that is not part of the contract here
};

// Counts every (writer, sequence) received by any reader.
class Tally {
 public:
  Tally(int writers, uint64_t per_writer)
      : writers_(writers), per_writer_(per_writer), seen_(writers * per_writer) {}

  uint64_t total() const { return writers_ * per_writer_; }
  bool complete() const { return received_.load(std::memory_order_relaxed) >= total(); }
  uint64_t received() const { return received_.load(std::memory_order_relaxed); }

  ReaderView new_view() const {
    ReaderView v;
    v.last.assign(writers_, -1);
    return v;
  }

  void record(uint64_t code, ReaderView* view) {
    const uint64_t writer = code >> 32;
    const uint64_t seq = code & 0xFFFF'FFFFu;
    if (writer >= static_cast<uint64_t>(writers_) || seq >= per_writer_) {
      ++view->bad_entries;
      return;
    }
    if (static_cast<int64_t>(seq) <= view->last[writer]) ++view->out_of_order;
    view->last[writer] = static_cast<int64_t>(seq);
    seen_[writer * per_writer_ + seq].fetch_add(1, std::memory_order_relaxed);
    ++view->received;
    received_.fetch_add(1, std::memory_order_relaxed);
  }

  // After every thread joined: each entry received exactly once, every view clean.
  void check(const std::vector<ReaderView>& views) const {
    uint64_t missing = 0;
    uint64_t duplicated = 0;
    for (uint64_t i = 0; i < seen_.size(); ++i) {
      const unsigned n = seen_[i].load(std::memory_order_relaxed);
      if (n == 0) {
        if (missing++ < 5) {
          ADD_FAILURE() << "lost: writer " << i / per_writer_ << " seq " << i % per_writer_;
        }
      } else if (n > 1) {
        if (duplicated++ < 5) {
          ADD_FAILURE() << "duplicated " << n << "x: writer " << i / per_writer_ << " seq "
                        << i % per_writer_;
        }
      }
    }
    EXPECT_EQ(missing, 0u) << "entries lost";
    EXPECT_EQ(duplicated, 0u) << "entries duplicated";
    uint64_t sum = 0;
    for (size_t r = 0; r < views.size(); ++r) {
      EXPECT_EQ(views[r].out_of_order, 0u) << "reader " << r << " saw a writer's entries reordered";
      EXPECT_EQ(views[r].bad_entries, 0u) << "reader " << r << " got undecodable entries";
      EXPECT_EQ(views[r].bad_statuses, 0u) << "reader " << r << " got unexpected statuses";
      sum += views[r].received;
    }
    EXPECT_EQ(sum, total());
  }

 private:
  const int writers_;
  const uint64_t per_writer_;
  std::vector<std::atomic<uint8_t>> seen_;
  std::atomic<uint64_t> received_{0};
};

Completion completion(uint64_t code) {
  Completion c;
  c.op_context = reinterpret_cast<void*>(uintptr_t{0x1000} + code);
  c.flags = FI_RECV;
  c.data = code;
  return c;
}

CompletionError completion_error(uint64_t code) {
  CompletionError e;
  e.completion = completion(code);
  e.err = FI_EIO;
  return e;
}

std::unique_ptr<CompletionQueue> make_cq(size_t size) {
  CqConfig config;
  config.size = size;
  config.format = CqFormat::kData;
  config.wait = WaitKind::kUnspec;
  auto r = CompletionQueue::create(config);
  EXPECT_TRUE(r.ok());
  return r.ok() ? std::move(r.value()) : nullptr;
}

// A CQ reader: blocking reads of up to `count` entries with `threshold`, error entries through
// read_error, until every entry was received (by any reader) or the give-up time.
void cq_reader(CompletionQueue& cq, Tally& tally, ReaderView* view, size_t count, size_t threshold,
               const Deadline& give_up) {
  std::vector<fi_cq_data_entry> buf(count);
  while (!tally.complete() && !give_up.expired()) {
    Result<size_t> r = cq.sread(buf.data(), count, nullptr, threshold, 10);
    if (r.ok()) {
      if (*r == 0 || *r > count) ++view->bad_statuses;
      for (size_t i = 0; i < *r && i < count; ++i) tally.record(buf[i].data, view);
      continue;
    }
    if (r.status().code() == Code::kAvail) {
      fi_cq_err_entry e{};
      Result<size_t> er = cq.read_error(&e, 0);
      if (er.ok()) {
        if (e.err != FI_EIO) ++view->bad_entries;
        tally.record(e.data, view);
      } else if (er.status().code() != Code::kAgain) {  // the other reader took it
        ++view->bad_statuses;
      }
      continue;
    }
    if (r.status().code() != Code::kAgain) ++view->bad_statuses;
  }
}

// Runs the readers on `cq`; returns their views once every entry arrived or they gave up.
std::vector<ReaderView> run_cq_readers(CompletionQueue& cq, Tally& tally,
                                       std::vector<std::thread>* producers,
                                       const Deadline& give_up) {
  std::vector<ReaderView> views(kReaders, tally.new_view());
  std::vector<std::thread> readers;
  // Reader 0 waits for batches (threshold), reader 1 takes whatever is there.
  readers.emplace_back(cq_reader, std::ref(cq), std::ref(tally), &views[0], 64, 16, give_up);
  readers.emplace_back(cq_reader, std::ref(cq), std::ref(tally), &views[1], 32, 0, give_up);
  for (auto& t : *producers) t.join();
  for (auto& t : readers) t.join();
  return views;
}

// ---------------------------------------------------------------------------------------------
// CQ: writers use write(), retrying on kAgain (queue full).

TEST(CqConcurrency, ManyWritersAndConcurrentReadersLoseNothingDuplicateNothingAndKeepOrder) {
  Watchdog watchdog(testing::UnitTest::GetInstance()->current_test_info()->name());
  auto cq = make_cq(1024);
  ASSERT_NE(cq, nullptr);
  Tally tally(kWriters, kCqPerWriter);
  const Deadline give_up = Deadline::after_ns(kGiveUpNs);
  std::atomic<uint64_t> bad_writes{0};
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      for (uint64_t seq = 0; seq < kCqPerWriter; ++seq) {
        const uint64_t code = encode(w, seq);
        for (;;) {
          const Status s = is_error_seq(seq, 1024) ? cq->write_error(completion_error(code))
                                                   : cq->write(completion(code));
          if (s.ok()) break;
          if (s.code() != Code::kAgain || give_up.expired()) {
            bad_writes.fetch_add(1, std::memory_order_relaxed);
            return;
          }
          sched_yield();  // full: let a reader make room
        }
      }
    });
  }
  const std::vector<ReaderView> views = run_cq_readers(*cq, tally, &writers, give_up);
  EXPECT_EQ(bad_writes.load(), 0u) << "a write failed with something other than kAgain";
  EXPECT_EQ(tally.received(), tally.total()) << "readers gave up";
  tally.check(views);
  EXPECT_EQ(cq->pending(), 0u);
  EXPECT_EQ(cq->free_credits(), static_cast<int64_t>(cq->capacity()));
}

// ---------------------------------------------------------------------------------------------
// CQ: operations reserve() when posted and complete() later on another thread (the way a
// transport completes local operations); some reservations are abandoned (cancel_reservation).

// One producer, one consumer: hands reserved operations from a poster to its completer.
class Handoff {
 public:
  bool push(uint64_t v) {
    const uint64_t t = tail_.load(std::memory_order_relaxed);
    if (t - head_.load(std::memory_order_acquire) == kSize) return false;
    buf_[t % kSize] = v;
    tail_.store(t + 1, std::memory_order_release);
    return true;
  }
  bool pop(uint64_t* v) {
    const uint64_t h = head_.load(std::memory_order_relaxed);
    if (h == tail_.load(std::memory_order_acquire)) return false;
    *v = buf_[h % kSize];
    head_.store(h + 1, std::memory_order_release);
    return true;
  }

 private:
  static constexpr uint64_t kSize = 512;
  uint64_t buf_[kSize] = {};
  alignas(64) std::atomic<uint64_t> head_{0};
  alignas(64) std::atomic<uint64_t> tail_{0};
};

TEST(CqConcurrency, ReservationsCompletedOnAnotherThreadLoseNothingDuplicateNothingAndKeepOrder) {
  Watchdog watchdog(testing::UnitTest::GetInstance()->current_test_info()->name());
  auto cq = make_cq(256);  // small: posters often find every credit taken
  ASSERT_NE(cq, nullptr);
  Tally tally(kWriters, kCqReservePerWriter);
  const Deadline give_up = Deadline::after_ns(kGiveUpNs);
  std::atomic<uint64_t> bad_reserves{0};
  std::vector<Handoff> handoffs(kWriters);
  std::vector<std::thread> producers;
  for (int w = 0; w < kWriters; ++w) {
    // Poster: reserves 1..4 credits at a time, hands the operations to its completer.
    producers.emplace_back([&, w] {
      uint64_t seq = 0;
      for (uint64_t round = 0; seq < kCqReservePerWriter; ++round) {
        if (round % 97 == 0) {  // an operation abandoned before it completes
          while (cq->reserve(1).code() == Code::kAgain && !give_up.expired()) sched_yield();
          cq->cancel_reservation(1);
        }
        const uint64_t n = std::min<uint64_t>(1 + round % 4, kCqReservePerWriter - seq);
        for (;;) {
          const Status s = cq->reserve(n);
          if (s.ok()) break;
          if (s.code() != Code::kAgain || give_up.expired()) {
            bad_reserves.fetch_add(1, std::memory_order_relaxed);
            return;
          }
          sched_yield();
        }
        for (uint64_t i = 0; i < n; ++i, ++seq) {
          while (!handoffs[w].push(encode(w, seq))) {
            if (give_up.expired()) return;
            sched_yield();
          }
        }
      }
    });
    // Completer: completes the operations its poster reserved, in the order they were posted.
    producers.emplace_back([&, w] {
      uint64_t done = 0;
      while (done < kCqReservePerWriter && !give_up.expired()) {
        uint64_t code;
        if (!handoffs[w].pop(&code)) {
          sched_yield();
          continue;
        }
        if (is_error_seq(code & 0xFFFF'FFFFu, 1024)) {
          cq->complete_error(completion_error(code));
        } else {
          cq->complete(completion(code));
        }
        ++done;
      }
    });
  }
  const std::vector<ReaderView> views = run_cq_readers(*cq, tally, &producers, give_up);
  EXPECT_EQ(bad_reserves.load(), 0u) << "a reserve failed with something other than kAgain";
  EXPECT_EQ(tally.received(), tally.total()) << "readers gave up";
  tally.check(views);
  EXPECT_EQ(cq->pending(), 0u);
  EXPECT_EQ(cq->free_credits(), static_cast<int64_t>(cq->capacity()))
      << "credits leaked or were returned twice";
}

// ---------------------------------------------------------------------------------------------
// EQ: an EQ overrun is permanent, so writers are paced by a counter of free slots that readers
// give back. The counter uses relaxed operations on purpose: it must add no happens-before
// edge between readers and writers, so that ThreadSanitizer checks the queue's own ordering of
// slot reuse. That is enough on x86 (TSO: a writer that sees the slot given back also sees the
// queue's new consumer index); elsewhere acquire/release is needed for the count to be exact.
#if defined(__x86_64__) || defined(__i386__)
constexpr std::memory_order kPaceGive = std::memory_order_relaxed;
constexpr std::memory_order kPaceTake = std::memory_order_relaxed;
#else
constexpr std::memory_order kPaceGive = std::memory_order_release;
constexpr std::memory_order kPaceTake = std::memory_order_acquire;
#endif

void eq_reader(EventQueue& eq, Tally& tally, ReaderView* view, std::atomic<int64_t>* room,
               bool blocking, const Deadline& give_up) {
  while (!tally.complete() && !give_up.expired()) {
    uint32_t event = 0;
    uint64_t code = 0;
    Result<size_t> r = blocking ? eq.sread(&event, &code, sizeof(code), 10, 0)
                                : eq.read(&event, &code, sizeof(code), 0);
    if (r.ok()) {
      if (*r != sizeof(code) || event != FI_NOTIFY) ++view->bad_entries;
      room->fetch_add(1, kPaceGive);
      tally.record(code, view);
      continue;
    }
    if (r.status().code() == Code::kAvail) {
      fi_eq_err_entry e{};
      Result<size_t> er = eq.read_error(&e, 0);
      if (er.ok()) {
        room->fetch_add(1, kPaceGive);
        if (e.err != FI_EIO) ++view->bad_entries;
        tally.record(e.data, view);
      } else if (er.status().code() != Code::kAgain) {
        ++view->bad_statuses;
      }
      continue;
    }
    if (r.status().code() != Code::kAgain) ++view->bad_statuses;
    if (!blocking) sched_yield();
  }
}

TEST(EqConcurrency, ManyWritersAndConcurrentReadersLoseNothingDuplicateNothingAndKeepOrder) {
  Watchdog watchdog(testing::UnitTest::GetInstance()->current_test_info()->name());
  EqConfig config;
  config.size = 1024;
  config.wait = WaitKind::kUnspec;
  auto created = EventQueue::create(config);
  ASSERT_TRUE(created.ok());
  std::unique_ptr<EventQueue> eq = std::move(created.value());
  Tally tally(kWriters, kEqPerWriter);
  const Deadline give_up = Deadline::after_ns(kGiveUpNs);
  std::atomic<int64_t> room{static_cast<int64_t>(eq->capacity())};
  std::atomic<uint64_t> bad_writes{0};
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      for (uint64_t seq = 0; seq < kEqPerWriter; ++seq) {
        while (room.fetch_sub(1, kPaceTake) <= 0) {
          room.fetch_add(1, std::memory_order_relaxed);
          if (give_up.expired()) return;
          sched_yield();
        }
        const uint64_t code = encode(w, seq);
        Status s;
        if (is_error_seq(seq, 64)) {
          EqError e;
          e.err = FI_EIO;
          e.data = code;
          s = eq->write_error(e);
        } else {
          s = eq->write(FI_NOTIFY, &code, sizeof(code)).status();
        }
        if (!s.ok()) {  // kOverrun here means the queue lost track of free slots
          bad_writes.fetch_add(1, std::memory_order_relaxed);
          return;
        }
      }
    });
  }
  std::vector<ReaderView> views(kReaders, tally.new_view());
  std::thread r0(eq_reader, std::ref(*eq), std::ref(tally), &views[0], &room, true, give_up);
  std::thread r1(eq_reader, std::ref(*eq), std::ref(tally), &views[1], &room, false, give_up);
  for (auto& t : writers) t.join();
  r0.join();
  r1.join();
  EXPECT_EQ(bad_writes.load(), 0u) << "a paced write failed (overrun?)";
  EXPECT_FALSE(eq->overrun());
  EXPECT_EQ(tally.received(), tally.total()) << "readers gave up";
  tally.check(views);
  EXPECT_EQ(eq->pending(), 0u);
}

}  // namespace
}  // namespace fabq::core
