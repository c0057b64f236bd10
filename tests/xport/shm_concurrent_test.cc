// Two threads on the two sides of one shared-memory segment, each sleeping on a doorbell when it
// must: a producer and a consumer moving 64 MiB, and a ping-pong of single bytes that provokes
// the doorbell flags' race. A consumer sleeps as the protocol in shm.h allows: after a fresh arm,
// until its RecheckTimer expires at the latest, and then it looks at its ring again; with no
// look owed, until its doorbell.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>

#include "core/deadline.h"
#include "core/unique_fd.h"

#include "shm_util.h"

namespace fabq::xport::shm {
namespace {

// One direction of a connection, the way conn_shm.cc drives it: the producer writes chunks of
// random size and, when the ring is full, arms and sleeps on its doorbell; the consumer takes
// random amounts and, when the ring is empty, arms and sleeps on its own. Each doorbell is an
// eventfd. A lost wake-up leaves a side asleep: its wait times out and the test fails.
class Doorbell {
 public:
  Doorbell() : fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}
  bool valid() const { return fd_.valid(); }
  void ring() {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(fd_.get(), &one, sizeof(one));
  }
  // False if nobody rang within `ns`.
  bool wait_ns(int64_t ns) {
    pollfd pfd{fd_.get(), POLLIN, 0};
    const timespec ts = core::timespec_of_ns(ns);
    if (ppoll(&pfd, 1, &ts, nullptr) != 1) return false;
    uint64_t v;
    [[maybe_unused]] ssize_t n = ::read(fd_.get(), &v, sizeof(v));
    return true;
  }
  bool wait(int ms) { return wait_ns(int64_t{ms} * 1'000'000); }

 private:
  core::UniqueFd fd_;
};

// A consumer's sleeps, by the rule Engine::thread_main() keeps: a fresh arm (Armed::kNow) owes a
// look at the ring once the RecheckTimer expires, and a sleep ends by then (the engine's
// timerfd); with no look owed, a sleep lasts until the bell. After a fresh arm the consumer
// looks once more before it sleeps at all. Counts the looks that found bytes, by look: bytes
// that came while the consumer armed, whether their doorbell was on its way or never sent.
class ConsumerSleep {
 public:
  // After arm_consumer() said kNow or kStill. False if a sleep without a limit timed out after
  // `ms`: a lost wake-up.
  bool sleep(const Ring& ring, Doorbell& bell, Armed armed, int ms) {
    const int64_t now = core::monotonic_ns();
    looking_again_ = Look::kNone;
    if (armed == Armed::kNow) {
      timer_.armed(now);
      if (ring.readable()) {
        looking_again_ = Look::kBeforeSleep;
        return true;
      }
    }
    const int64_t due = timer_.due();
    if (due != 0) {
      if (now < due && bell.wait_ns(due - now)) return true;
      timer_.expired(core::monotonic_ns());
      looking_again_ = Look::kTimer;
      return true;
    }
    return bell.wait(ms);
  }
  // The consumer found bytes.
  void found_bytes() {
    if (looking_again_ == Look::kBeforeSleep) ++before_sleep_;
    if (looking_again_ == Look::kTimer) ++by_timer_;
    looking_again_ = Look::kNone;
  }
  uint64_t found_before_sleep() const { return before_sleep_; }
  uint64_t found_by_timer() const { return by_timer_; }

 private:
  enum class Look : uint8_t { kNone, kBeforeSleep, kTimer };
  RecheckTimer timer_;
  Look looking_again_ = Look::kNone;
  uint64_t before_sleep_ = 0;
  uint64_t by_timer_ = 0;
};

// What the two threads of a test share to stop at the first failure: its reason, and the
// doorbells to ring so that neither side stays asleep.
class FirstFailure {
 public:
  FirstFailure(Doorbell& a, Doorbell& b) : bells_{&a, &b} {}
  void operator()(const std::string& why) {
    {
      std::lock_guard lock(mu_);
      if (failure_.empty()) failure_ = why;
    }
    stop_.store(true);
    for (Doorbell* d : bells_) d->ring();
  }
  bool stopped() const { return stop_.load(); }
  std::string reason() {
    std::lock_guard lock(mu_);
    return failure_;
  }

 private:
  Doorbell* bells_[2];
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::string failure_;
};

TEST(ShmConcurrent, ProducerAndConsumerThreadsMove64MiBIntactSleepingOnDoorbells) {
  constexpr uint64_t kTotal = uint64_t{64} << 20;
  constexpr int kWaitMs = 5'000;  // far beyond any legitimate sleep: a lost wake-up
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  // The stream is this pattern repeated; its length is no divisor of the ring's.
  const Bytes pat = pattern((size_t{1} << 20) + 3, 42);
  auto expected = [&](uint64_t pos) { return pat.data() + pos % pat.size(); };
  auto left_in_pat = [&](uint64_t pos) { return pat.size() - pos % pat.size(); };

  const Segment creator = Segment::create();
  ASSERT_TRUE(creator.valid());
  const Segment acceptor = Segment::open(creator.id(), creator.nonce());
  ASSERT_TRUE(acceptor.valid());
  Doorbell producer_bell;
  Doorbell consumer_bell;
  ASSERT_TRUE(producer_bell.valid());
  ASSERT_TRUE(consumer_bell.valid());

  FirstFailure fail(producer_bell, consumer_bell);
  auto late = [&] { return std::chrono::steady_clock::now() > deadline; };
  std::atomic<uint64_t> producer_sleeps{0};
  std::atomic<uint64_t> consumer_sleeps{0};
  std::atomic<uint64_t> found_before_sleep{0};
  std::atomic<uint64_t> found_by_timer{0};

  std::thread producer([&] {
    Ring ring = creator.tx(true);
    std::mt19937 rng(7);
    std::uniform_int_distribution<size_t> size(1, 64 * 1024);
    uint64_t pos = 0;
    while (pos < kTotal && !fail.stopped()) {
      if (late()) return fail("producer: past the deadline at byte " + std::to_string(pos));
      // Up to two iovec entries: the chunk may run past the end of the pattern.
      const size_t len = static_cast<size_t>(std::min<uint64_t>(size(rng), kTotal - pos));
      iovec iov[2];
      int cnt = 1;
      const size_t first = std::min(len, left_in_pat(pos));
      iov[0] = {const_cast<unsigned char*>(expected(pos)), first};
      if (first < len) {
        iov[1] = {const_cast<unsigned char*>(pat.data()), len - first};
        cnt = 2;
      }
      size_t written = 0;
      bool bell = false;
      if (ring.write(iov, cnt, &written, &bell) != Status::kOk) {
        return fail("producer: write() says the ring is corrupt");
      }
      if (bell) consumer_bell.ring();
      pos += written;
      if (written > 0) continue;
      if (ring.arm_producer()) continue;
      producer_sleeps.fetch_add(1);
      if (!producer_bell.wait(kWaitMs)) {
        return fail("producer: lost wake-up, asleep on a full ring at byte " + std::to_string(pos));
      }
    }
  });

  std::thread consumer([&] {
    Ring ring = acceptor.rx(false);
    std::mt19937 rng(11);
    std::uniform_int_distribution<size_t> size(1, 96 * 1024);
    uint64_t pos = 0;
    ConsumerSleep sleeper;
    while (pos < kTotal && !fail.stopped()) {
      if (late()) return fail("consumer: past the deadline at byte " + std::to_string(pos));
      const unsigned char* p = nullptr;
      size_t contiguous = 0;
      size_t avail = 0;
      if (ring.peek(&p, &contiguous, &avail) != Status::kOk) {
        return fail("consumer: peek() says the ring is corrupt");
      }
      if (avail == 0) {
        const Armed armed = ring.arm_consumer();
        if (armed == Armed::kBytes) continue;
        consumer_sleeps.fetch_add(1);
        if (!sleeper.sleep(ring, consumer_bell, armed, kWaitMs)) {
          return fail("consumer: lost wake-up, asleep on an empty ring at byte " +
                      std::to_string(pos));
        }
        continue;
      }
      sleeper.found_bytes();
      if (avail > kRingBytes || contiguous > avail || pos + avail > kTotal) {
        return fail("consumer: peek() reports " + std::to_string(avail) + " bytes at byte " +
                    std::to_string(pos));
      }
      const size_t n = std::min(contiguous, size(rng));
      for (size_t done = 0; done < n;) {
        const size_t c = std::min(n - done, left_in_pat(pos + done));
        if (std::memcmp(p + done, expected(pos + done), c) != 0) {
          return fail("consumer: wrong bytes within [" + std::to_string(pos + done) + ", " +
                      std::to_string(pos + done + c) + ")");
        }
        done += c;
      }
      pos += n;
      if (ring.consume(n)) producer_bell.ring();
    }
    if (pos == kTotal && ring.readable()) fail("consumer: bytes beyond the end of the stream");
    found_before_sleep.store(sleeper.found_before_sleep());
    found_by_timer.store(sleeper.found_by_timer());
  });

  producer.join();
  consumer.join();
  EXPECT_EQ(fail.reason(), "");
  RecordProperty("producer_sleeps", std::to_string(producer_sleeps.load()));
  RecordProperty("consumer_sleeps", std::to_string(consumer_sleeps.load()));
  RecordProperty("bytes_found_by_the_look_before_sleeping",
                 std::to_string(found_before_sleep.load()));
  RecordProperty("bytes_found_when_the_timer_expired", std::to_string(found_by_timer.load()));
}

// The race the doorbell flags exist for, provoked as often as a short test can: two sides
// ping-pong one byte at a time, and before arming each spins a random while, so that its arm
// often lands just as the other side writes. A side that armed, found its ring empty, looked
// again before sleeping and once its timer expired, and then waits in vain for its doorbell has
// lost a wake-up.
TEST(ShmConcurrent, PingPongOfSingleBytesLosesNoWakeUp) {
  constexpr int kRounds = 20'000;
  constexpr int kWaitMs = 5'000;  // far beyond any legitimate sleep: a lost wake-up
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  const Segment creator = Segment::create();
  ASSERT_TRUE(creator.valid());
  const Segment acceptor = Segment::open(creator.id(), creator.nonce());
  ASSERT_TRUE(acceptor.valid());
  Doorbell bells[2];
  ASSERT_TRUE(bells[0].valid());
  ASSERT_TRUE(bells[1].valid());

  FirstFailure fail(bells[0], bells[1]);
  std::atomic<uint64_t> found_before_sleep{0};
  std::atomic<uint64_t> found_by_timer{0};

  // Side 0 (the connecting side) sends byte `round` and waits for it to come back; side 1
  // waits for it and sends it back.
  auto side = [&](int me) {
    const Segment& seg = me == 0 ? creator : acceptor;
    Ring tx = seg.tx(me == 0);
    Ring rx = seg.rx(me == 0);
    Doorbell& mine = bells[me];
    Doorbell& peers = bells[1 - me];
    std::mt19937 rng(static_cast<unsigned>(100 + me));
    std::uniform_int_distribution<int> spins(0, 200);
    const std::string who = "side " + std::to_string(me);
    ConsumerSleep sleeper;
    auto send = [&](int round) {
      const unsigned char b = static_cast<unsigned char>(round);
      iovec iov{const_cast<unsigned char*>(&b), 1};
      size_t written = 0;
      bool bell = false;
      if (tx.write(&iov, 1, &written, &bell) != Status::kOk || written != 1) {
        fail(who + ": write failed in round " + std::to_string(round));
        return false;
      }
      if (bell) peers.ring();
      return true;
    };
    // Spins a random while, then arms and sleeps, until the byte of `round` is there.
    auto receive = [&](int round) {
      for (int spun = 0, limit = spins(rng); !fail.stopped(); ++spun) {
        if (std::chrono::steady_clock::now() > deadline) {
          fail(who + ": past the deadline in round " + std::to_string(round));
          return false;
        }
        const unsigned char* p = nullptr;
        size_t contiguous = 0;
        size_t avail = 0;
        if (rx.peek(&p, &contiguous, &avail) != Status::kOk) {
          fail(who + ": peek() says the ring is corrupt");
          return false;
        }
        if (avail > 0) {
          sleeper.found_bytes();
          if (avail != 1 || *p != static_cast<unsigned char>(round)) {
            fail(who + ": wrong byte in round " + std::to_string(round));
            return false;
          }
          if (rx.consume(1)) peers.ring();
          return true;
        }
        if (spun < limit) continue;
        const Armed armed = rx.arm_consumer();
        if (armed == Armed::kBytes) continue;
        if (!sleeper.sleep(rx, mine, armed, kWaitMs)) {
          fail(who + ": lost wake-up in round " + std::to_string(round));
          return false;
        }
      }
      return false;
    };
    for (int round = 0; round < kRounds; ++round) {
      if (me == 0 && !(send(round) && receive(round))) return;
      if (me == 1 && !(receive(round) && send(round))) return;
    }
    found_before_sleep.fetch_add(sleeper.found_before_sleep());
    found_by_timer.fetch_add(sleeper.found_by_timer());
  };
  std::thread a(side, 0);
  std::thread b(side, 1);
  a.join();
  b.join();
  EXPECT_EQ(fail.reason(), "");
  RecordProperty("bytes_found_by_the_look_before_sleeping",
                 std::to_string(found_before_sleep.load()));
  RecordProperty("bytes_found_when_the_timer_expired", std::to_string(found_by_timer.load()));
}

}  // namespace
}  // namespace fabq::xport::shm
