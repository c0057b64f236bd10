// fi_fabq(7): "get_event() is atomic: with many threads reading one channel each event goes to
// exactly one of them, oldest first." Runs under ThreadSanitizer too.
#include <algorithm>
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "async_fixture.h"

namespace fabq::testing {
namespace {

class ConcurrentAsyncEvents : public AsyncTest {};

TEST_F(ConcurrentAsyncEvents, ManyReadersGetEveryEventExactlyOnceInOrder) {
  constexpr int kReaders = 4;
  constexpr int kEvents = 2000;
  std::atomic<int> taken{0};
  std::vector<std::vector<uint64_t>> seen(kReaders);
  std::vector<std::thread> readers;
  for (int r = 0; r < kReaders; ++r) {
    readers.emplace_back([&, r] {
      while (taken.load() < kEvents) {
        fi_fabq_async_event ev;
        const int rc = ops_->get_event(domain_, &ev, 50);
        if (rc == -FI_EAGAIN) continue;
        ASSERT_EQ(rc, 0);
        seen[r].push_back(ev.seq);
        EXPECT_EQ(ops_->ack_event(domain_, &ev), 0);
        taken.fetch_add(1);
      }
    });
  }
  // Two writers raise events while four readers take them.
  std::vector<std::thread> writers;
  for (int w = 0; w < 2; ++w) {
    writers.emplace_back([&] {
      for (int i = 0; i < kEvents / 2; ++i) EXPECT_EQ(ops_->inject(domain_, "event=sm_change"), 0);
    });
  }
  for (auto& t : writers) t.join();
  for (auto& t : readers) t.join();
  std::vector<uint64_t> all;
  for (const auto& s : seen) {
    EXPECT_TRUE(std::is_sorted(s.begin(), s.end())) << "each reader sees events oldest first";
    all.insert(all.end(), s.begin(), s.end());
  }
  std::sort(all.begin(), all.end());
  ASSERT_EQ(all.size(), static_cast<size_t>(kEvents)) << "none lost, none duplicated";
  EXPECT_TRUE(std::adjacent_find(all.begin(), all.end()) == all.end());
  fi_fabq_async_event ev;
  EXPECT_EQ(ops_->get_event(domain_, &ev, 0), -FI_EAGAIN);
}

TEST_F(ConcurrentAsyncEvents, CloseRacingWithGetAndAckNeverLosesTheBusyRule) {
  for (int round = 0; round < 50; ++round) {
    fid_cq* cq = open_cq({.size = 8});
    ASSERT_NE(cq, nullptr);
    ASSERT_EQ(ops_->inject(domain_, ("event=cq_err,on=cq:" + std::to_string(round)).c_str()), 0);
    fi_fabq_async_event ev{};
    std::thread reader([&] { ASSERT_EQ(ops_->get_event(domain_, &ev, 2000), 0); });
    reader.join();
    std::thread acker([&] { EXPECT_EQ(ops_->ack_event(domain_, &ev), 0); });
    int rc;
    while ((rc = fi_close(&cq->fid)) == -FI_EBUSY) std::this_thread::yield();
    acker.join();
    EXPECT_EQ(rc, 0);
  }
}

TEST_F(ConcurrentAsyncEvents, TimedRulesFireWhileObjectsOpenAndClose) {
  // A rule every 1 ms on CQs that open and close under it: each event is about a CQ that is
  // open when it is raised, or about none; closing never waits forever.
  ASSERT_EQ(ops_->inject(domain_, "event=sm_change,ms=1,count=0"), 0);
  std::atomic<bool> stop{false};
  std::thread reader([&] {
    while (!stop.load()) {
      fi_fabq_async_event ev;
      if (ops_->get_event(domain_, &ev, 10) == 0) {
        EXPECT_EQ(ops_->ack_event(domain_, &ev), 0);
      }
    }
  });
  for (int i = 0; i < 100; ++i) {
    fid_cq* cq = open_cq({.size = 4});
    ASSERT_NE(cq, nullptr);
    ASSERT_EQ(ops_->inject(domain_, ("event=cq_err,on=cq:" + std::to_string(i) + ",ms=1").c_str()),
              0);
    int rc;
    while ((rc = fi_close(&cq->fid)) == -FI_EBUSY) std::this_thread::yield();
    EXPECT_EQ(rc, 0);
  }
  stop.store(true);
  reader.join();
}

}  // namespace
}  // namespace fabq::testing
