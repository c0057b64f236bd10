// Who moves the TCP transport's bytes (transport_harness.h): begin_wait() has the progress
// thread move everything, end_wait() stops it; after_round runs after every progress round, the
// thread's too.
#include <gtest/gtest.h>
#include <rdma/fi_eq.h>

#include <string>
#include <vector>

#include "transport_harness.h"

namespace fabq::xport::testing {
namespace {

INSTANTIATE_TEST_SUITE_P(, TransportTest, ::testing::Values(false, true), tcp_or_shm);

// =============================================================================================
// The progress thread

TEST_P(TransportTest, ProgressThreadMovesEverythingWhileSomebodyWaitsAndNothingOnceNobodyDoes) {
  manual_ = false;  // from here on, this thread never calls progress()
  t_->begin_wait();
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  Outbox out;
  ASSERT_NO_FATAL_FAILURE(
      send(client_, p.client.get(), out.make(pattern(1u << 20, 1), 1, 4, TxLevel::kDelivery)));
  ASSERT_NO_FATAL_FAILURE(
      send(server_, p.server.get(), out.make("back", 1, 1, TxLevel::kTransmit)));
  ASSERT_TRUE(pump([&] {
    return server_.received_count() == 1 && client_.received_count() == 1 &&
           client_.ack_count() == 1 && server_.ack_count() == 1;
  }));
  EXPECT_TRUE(server_.received()[0].bytes == out.payload(0));
  EXPECT_EQ(client_.received()[0].bytes, "back");
  EXPECT_TRUE(client_.acks()[0].delivered);
  EXPECT_FALSE(server_.acks()[0].delivered);
  // A stalled connection resumed by another thread goes on.
  server_.set_accepting(false);
  ASSERT_NO_FATAL_FAILURE(send(client_, p.client.get(), out.make("stalled", 2)));
  ASSERT_TRUE(pump([&] { return server_.refused_places() == 1; }));
  server_.set_accepting(true);
  p.server->resume();
  ASSERT_TRUE(pump([&] { return server_.received_count() == 2; }));
  EXPECT_EQ(server_.received()[1].bytes, "stalled");

  t_->end_wait();
  // Nobody waits: the bytes are the application's to move (manual progress). (A round the
  // thread began before end_wait() may still end first.)
  std::this_thread::sleep_for(milliseconds(50));
  ASSERT_NO_FATAL_FAILURE(send(client_, p.client.get(), out.make("manual", 3)));
  std::this_thread::sleep_for(milliseconds(200));
  EXPECT_EQ(server_.received_count(), 2u) << "the progress thread ran with nobody waiting";
  manual_ = true;
  ASSERT_TRUE(pump([&] { return server_.received_count() == 3; }));
  EXPECT_EQ(server_.received()[2].bytes, "manual");
}

// A ring armed afresh is looked at once more within shm::kRecheckNs even without a doorbell
// (shm.h: a publish may race with the arm unseen; shm_concurrent_test provokes that race). That
// is one more round, not a timer: once it is done the thread sleeps until something happens.
TEST_P(TransportTest, ProgressThreadWithArmedRingsSleepsUntilWokenNotOnATimer) {
  manual_ = false;
  t_->begin_wait();
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  Outbox out;
  ASSERT_NO_FATAL_FAILURE(send(client_, p.client.get(), out.make("ping", 1)));
  ASSERT_TRUE(pump([&] { return server_.received_count() == 1; }));
  std::this_thread::sleep_for(milliseconds(50));  // every look again is done
  const int settled = g_rounds.load();
  std::this_thread::sleep_for(milliseconds(300));
  const int idle = g_rounds.load() - settled;
  t_->end_wait();
  EXPECT_EQ(idle, 0) << "the progress thread woke " << idle << " times with nothing to do";
}

// =============================================================================================
// after_round

TEST_F(TransportRawTest, AfterRoundRunsAfterEveryProgressRound) {
  g_rounds.store(0);
  for (int i = 0; i < 5; ++i) t_->progress();
  EXPECT_EQ(g_rounds.load(), 5);
  // The progress thread's rounds too, while somebody waits.
  Pair p;
  ASSERT_NO_FATAL_FAILURE(listen(&p));
  t_->begin_wait();
  p.client = t_->make_connection(&client_, params());
  ASSERT_EQ(p.client->connect(p.at, "x", 1), 0);
  const bool requested =
      eventually([] {}, [&] { return passive_.request_count() == 1 && g_rounds.load() > 5; });
  t_->end_wait();
  EXPECT_TRUE(requested) << "the progress thread moved nothing";
}

}  // namespace
}  // namespace fabq::xport::testing
