// The end of a TCP transport connection (transport_harness.h): shutdown() after queued sends,
// destruction, a refused connect, a submit before the connection is up.
#include <gtest/gtest.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <memory>
#include <string>
#include <vector>

#include "transport_harness.h"

namespace fabq::xport::testing {
namespace {

INSTANTIATE_TEST_SUITE_P(, TransportTest, ::testing::Values(false, true), tcp_or_shm);

TEST_P(TransportTest, ShutdownSendsWhatIsQueuedThenReportsShutdownToBothSides) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  Outbox out;
  ASSERT_NO_FATAL_FAILURE(send(client_, p.client.get(), out.make(pattern(1u << 20, 1), 1, 2)));
  ASSERT_NO_FATAL_FAILURE(send(client_, p.client.get(), out.make("last", 2)));
  ASSERT_EQ(p.client->shutdown(), 0);
  EXPECT_EQ(client_.submit(p.client.get(), out.make("too late", 3)), -FI_ENOTCONN);
  ASSERT_TRUE(pump([&] { return server_.ended() == 1 && client_.has_cm(FI_SHUTDOWN); }));
  settle(milliseconds(50));
  // The peer: both messages, then FI_SHUTDOWN, then the end.
  const std::vector<std::string> j = server_.journal();
  const int placed2 = journal_at(j, "placed 2");
  const int shut = journal_at(j, "cm " + std::to_string(FI_SHUTDOWN) + " 0");
  const int ended = journal_at(j, "ended");
  EXPECT_GE(journal_at(j, "placed 1"), 0);
  EXPECT_GE(placed2, 0);
  EXPECT_LT(placed2, shut);
  EXPECT_LT(shut, ended);
  EXPECT_EQ(cms(server_),
            (std::vector<std::string>{cm_str(FI_CONNECTED, 0, ""), cm_str(FI_SHUTDOWN, 0)}));
  EXPECT_TRUE(server_.received()[0].bytes == out.payload(0));
  EXPECT_FALSE(p.server->open());
  // This side: its queue drained, and FI_SHUTDOWN once.
  EXPECT_EQ(client_.written_count(), 2u);
  EXPECT_EQ(cms(client_),
            (std::vector<std::string>{cm_str(FI_CONNECTED, 0, "welcome"), cm_str(FI_SHUTDOWN, 0)}));
  EXPECT_EQ(asyncs(client_), std::vector<std::string>{"SQ_DRAINED"});
  EXPECT_EQ(p.client->shutdown(), 0) << "shut down twice";
}

TEST_P(TransportTest, DestroyingAConnectionReportsShutdownToItsPeer) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  p.client.reset();
  ASSERT_TRUE(pump([&] { return server_.ended() == 1; }));
  settle(milliseconds(30));
  EXPECT_EQ(cms(server_),
            (std::vector<std::string>{cm_str(FI_CONNECTED, 0, ""), cm_str(FI_SHUTDOWN, 0)}));
  EXPECT_EQ(server_.ended(), 1);
  EXPECT_EQ(asyncs(server_), std::vector<std::string>{});
  EXPECT_FALSE(p.server->open());
  Outbox out;
  EXPECT_EQ(server_.submit(p.server.get(), out.make("nobody", 1)), -FI_ENOTCONN);
}

TEST_P(TransportTest, ConnectToAPortWhereNothingListensIsRefused) {
  DeadPort dead;
  std::unique_ptr<Connection> c = t_->make_connection(&client_, params());
  ASSERT_EQ(c->connect(dead.addr(), "anyone?", 7), 0);
  ASSERT_TRUE(pump([&] { return client_.ended() > 0; }));
  settle(milliseconds(30));
  EXPECT_EQ(cms(client_), std::vector<std::string>{cm_str(0, FI_ECONNREFUSED)});
  EXPECT_EQ(client_.ended(), 1);
  EXPECT_FALSE(c->open());
  EXPECT_FALSE(c->connected());
}

TEST_P(TransportTest, SubmitBeforeTheConnectionIsUpIsRefusedAndTheOpStaysTheOwners) {
  std::unique_ptr<Connection> c = t_->make_connection(&client_, params());
  Outbox out;
  TxOp* op = out.make("early", 1);
  EXPECT_EQ(client_.submit(c.get(), op), -FI_ENOTCONN);
  EXPECT_FALSE(op->accepted);
  EXPECT_FALSE(c->connected());
  EXPECT_TRUE(c->open()) << "not connected yet is not closed";
}

}  // namespace
}  // namespace fabq::xport::testing
