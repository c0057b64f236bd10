// RDM over the TCP transport (transport_harness.h): a message carries its sender's announced
// name, the accepting side answers through the connection it was offered, no CM event, a refused
// connect fails the sends, the listener asks its owner before freeing a closed connection, and
// frees what a sweep retired when the transport goes.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <rdma/fi_errno.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "transport_harness.h"

namespace fabq::xport::testing {
namespace {

INSTANTIATE_TEST_SUITE_P(, TransportTest, ::testing::Values(false, true), tcp_or_shm);

// =============================================================================================
// RDM

TEST_P(TransportTest, RdmMessageArrivesWithTheSendersNameAndNoCmEvent) {
  RdmPair p;
  ASSERT_NO_FATAL_FAILURE(open_rdm_pair(&p));
  const sockaddr_in& a_name = p.a_name;
  const sockaddr_in& b_name = p.b_name;
  EXPECT_NE(b_name.sin_port, 0);
  std::unique_ptr<Connection>& c = p.c;
  Outbox out;
  // An RDM connection takes sends before it is up.
  ASSERT_NO_FATAL_FAILURE(
      send(client_, c.get(), out.make(pattern(5000, 1), 1, 2, TxLevel::kDelivery)));
  ASSERT_EQ(c->connect(b_name, &a_name, sizeof(a_name)), 0);
  ASSERT_NO_FATAL_FAILURE(send(client_, c.get(), out.tagged(pattern(1u << 20, 2), 2, 5, 4)));
  ASSERT_TRUE(pump([&] { return server_.received_count() == 2 && client_.ack_count() == 1; }));
  settle(milliseconds(30));
  const std::vector<Received> got = server_.received();
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE("message " + std::to_string(i));
    EXPECT_EQ(addr_str(got[i].in.from), addr_str(a_name)) << "FI_SOURCE: the announced name";
    EXPECT_NE(got[i].in.via, nullptr);
    EXPECT_EQ(got[i].in.via, got[0].in.via);
    EXPECT_TRUE(got[i].bytes == out.payload(i));
  }
  EXPECT_TRUE(got[1].in.tagged);
  EXPECT_EQ(got[1].in.tag, 5u);
  const std::vector<AckRecord> acks = client_.acks();
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_EQ(acks[0].conn, c.get());
  EXPECT_EQ(acks[0].seq, 1u);
  EXPECT_TRUE(acks[0].delivered);
  EXPECT_EQ(client_.written_count(), 2u);
  for (const FakeOwner* o : {&client_, &server_}) {
    EXPECT_EQ(cms(*o), std::vector<std::string>{}) << "no CM event on an RDM connection";
    EXPECT_EQ(o->ended(), 0);
    EXPECT_EQ(asyncs(*o), std::vector<std::string>{});
    EXPECT_EQ(o->abort_count(), 0u);
  }
}

// A read queued before its connection is up is made direct (through shared memory) when it is
// written, like one submitted afterwards: its answer is not left to come in pieces behind the
// direct reads that follow it (TxOp::decide_later).
TEST_P(TransportTest, RdmReadQueuedBeforeTheConnectionIsUpGoesDirectOnceItIs) {
  RdmPair p;
  ASSERT_NO_FATAL_FAILURE(open_rdm_pair(&p));
  constexpr uint64_t kKey = 0x52;
  constexpr size_t kLen = 256 * 1024;
  std::string region(kLen, '\0');
  for (size_t i = 0; i < kLen; ++i) region[i] = static_cast<char>(i * 13 + i / 4096);
  server_.set_region(kKey, reinterpret_cast<unsigned char*>(region.data()), region.size());
  std::string back(kLen, '\0');
  TxOp op;
  op.kind = TxKind::kRead;
  op.seq = 3;
  op.key = kKey;
  put_prefix_u64(&op, kLen);
  op.iov[0] = {op.prefix, sizeof(op.prefix)};
  op.iov_count = 1;
  op.len = sizeof(op.prefix);
  op.result[0] = {back.data(), kLen};
  op.result_count = 1;
  op.result_len = kLen;
  ASSERT_NO_FATAL_FAILURE(send(client_, p.c.get(), &op));
  ASSERT_EQ(p.c->connect(p.b_name, &p.a_name, sizeof(p.a_name)), 0);
  ASSERT_TRUE(pump([&] { return client_.answers().size() == 1; }));
  EXPECT_EQ(client_.answers()[0], std::make_pair(uint32_t{3}, RmaStatus::kOk));
  EXPECT_EQ(op.direct, GetParam()) << "direct exactly when the connection has shared memory";
  const std::vector<std::string> j = server_.journal();
  EXPECT_EQ(std::find(j.begin(), j.end(), "direct read") != j.end(), GetParam());
  EXPECT_TRUE(back == region);
}

TEST_P(TransportTest, RdmAcceptingSideIsOfferedTheConnectionAndAnswersThroughIt) {
  RdmPair p;
  ASSERT_NO_FATAL_FAILURE(open_rdm_pair(&p));
  const sockaddr_in& a_name = p.a_name;
  const sockaddr_in& b_name = p.b_name;
  std::unique_ptr<Connection>& c = p.c;
  Outbox out;
  ASSERT_NO_FATAL_FAILURE(send(client_, c.get(), out.make("request", 1)));
  ASSERT_EQ(c->connect(b_name, &a_name, sizeof(a_name)), 0);
  ASSERT_TRUE(pump([&] { return server_.received_count() == 1; }));
  // The listener's owner hears of the connection, up, with the name its peer announced.
  const std::vector<std::pair<Connection*, sockaddr_in>> offered = server_.inbound();
  ASSERT_EQ(offered.size(), 1u);
  Connection* back = offered[0].first;
  EXPECT_EQ(back, server_.received()[0].in.via);
  EXPECT_EQ(addr_str(offered[0].second), addr_str(a_name));
  EXPECT_TRUE(client_.inbound().empty()) << "a connection it made is not offered to its maker";
  // The reply goes through the same connection, acknowledgements both ways.
  Outbox replies;
  ASSERT_NO_FATAL_FAILURE(
      send(server_, back, replies.make(pattern(70000, 3), 1, 3, TxLevel::kDelivery)));
  ASSERT_NO_FATAL_FAILURE(send(server_, back, replies.tagged("tagged reply", 2, 9)));
  ASSERT_TRUE(pump([&] { return client_.received_count() == 2 && server_.ack_count() == 1; }));
  settle(milliseconds(30));
  const std::vector<Received> got = client_.received();
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE("reply " + std::to_string(i));
    EXPECT_EQ(addr_str(got[i].in.from), addr_str(b_name)) << "FI_SOURCE: the name connected to";
    EXPECT_EQ(got[i].in.via, c.get());
    EXPECT_TRUE(got[i].bytes == replies.payload(i));
  }
  EXPECT_TRUE(got[1].in.tagged);
  EXPECT_EQ(got[1].in.tag, 9u);
  ASSERT_EQ(server_.acks().size(), 1u);
  EXPECT_EQ(server_.acks()[0].conn, back);
  EXPECT_TRUE(server_.acks()[0].delivered);
  for (const FakeOwner* o : {&client_, &server_}) {
    EXPECT_EQ(cms(*o), std::vector<std::string>{});
    EXPECT_EQ(o->abort_count(), 0u);
    EXPECT_EQ(o->problems(), std::vector<std::string>{});
  }
}

TEST_P(TransportTest, RdmConnectionFromAnotherHostThanItsNameIsNotOfferedForReplies) {
  int err = 0;
  std::unique_ptr<Listener> lb = t_->open_listener(&server_, rdm_params(), loopback(0), &err);
  ASSERT_NE(lb, nullptr) << err;
  // It comes from 127.0.0.1 and claims an endpoint of 192.0.2.1: its messages name that one
  // (FI_SOURCE is what was announced), but what this side sends to 192.0.2.1 must not go to it.
  sockaddr_in claimed = loopback(7000);
  claimed.sin_addr.s_addr = htonl(0xC0000201);
  std::unique_ptr<Connection> c = t_->make_connection(&client_, rdm_params());
  Outbox out;
  ASSERT_NO_FATAL_FAILURE(send(client_, c.get(), out.make("not who I say", 1)));
  ASSERT_EQ(c->connect(name_of(*lb), &claimed, sizeof(claimed)), 0);
  ASSERT_TRUE(pump([&] { return server_.received_count() == 1; }));
  settle(milliseconds(30));
  EXPECT_EQ(addr_str(server_.received()[0].in.from), addr_str(claimed));
  EXPECT_TRUE(server_.inbound().empty());
}

TEST_P(TransportTest, RdmConnectionToAPortWhereNothingListensAbortsItsSendsWithoutACmEvent) {
  DeadPort dead;
  const sockaddr_in me = loopback(1);
  std::unique_ptr<Connection> c = t_->make_connection(&client_, rdm_params());
  Outbox out;
  ASSERT_NO_FATAL_FAILURE(send(client_, c.get(), out.make("lost", 1, 1, TxLevel::kDelivery)));
  ASSERT_EQ(c->connect(dead.addr(), &me, sizeof(me)), 0);
  ASSERT_TRUE(pump([&] { return client_.abort_count() > 0; }));
  settle(milliseconds(30));
  const std::vector<AbortRecord> aborts = client_.aborts();
  ASSERT_EQ(aborts.size(), 1u);
  EXPECT_EQ(aborts[0].conn, c.get());
  EXPECT_EQ(aborts[0].err, FI_ECONNREFUSED);
  EXPECT_EQ(cms(client_), std::vector<std::string>{});
  EXPECT_EQ(client_.ended(), 0);
  EXPECT_EQ(client_.written_count(), 0u);
  EXPECT_FALSE(c->open());
}

TEST_P(TransportTest, RdmRequestWithoutANameIsRefused) {
  int err = 0;
  std::unique_ptr<Listener> lb = t_->open_listener(&server_, rdm_params(), loopback(0), &err);
  ASSERT_NE(lb, nullptr) << err;
  std::unique_ptr<Connection> c = t_->make_connection(&client_, rdm_params());
  Outbox out;
  ASSERT_NO_FATAL_FAILURE(send(client_, c.get(), out.make("who am I", 1)));
  ASSERT_EQ(c->connect(name_of(*lb), "not a sockaddr_in", 17), 0);
  ASSERT_TRUE(pump([&] { return client_.abort_count() > 0; }));
  settle(milliseconds(30));
  EXPECT_EQ(client_.aborts()[0].err, FI_ECONNREFUSED);
  EXPECT_EQ(server_.received_count(), 0u);
  EXPECT_EQ(cms(client_), std::vector<std::string>{});
  EXPECT_EQ(cms(server_), std::vector<std::string>{});
  EXPECT_TRUE(logged_containing("an RDM request without a name"));
}

// A scalable endpoint's listener (Owner::route): each connection goes to the receive context its
// request names, or is refused; a one-way connection is not offered for replies; release() closes
// the connections of one context only.
TEST_P(TransportTest, RdmListenerRoutesEachConnectionToTheContextItNamesAndReleasesOneContext) {
  FakeOwner ctx1;  // receive context 1; outlives the listener, which may call it until released
  int err = 0;
  std::unique_ptr<Listener> lb = t_->open_listener(&server_, rdm_params(), loopback(0), &err);
  ASSERT_NE(lb, nullptr) << err;
  server_.set_routes({&server_, &ctx1});
  const sockaddr_in a_name = loopback(1);
  const RdmConnectData to1 = rdm_connect_data(a_name, 1, false);
  const RdmConnectData to2 = rdm_connect_data(a_name, 2, false);
  const RdmConnectData one_way = rdm_connect_data(a_name, 0, true);
  std::unique_ptr<Connection> c1 = t_->make_connection(&client_, rdm_params());
  std::unique_ptr<Connection> c2 = t_->make_connection(&client_, rdm_params());
  std::unique_ptr<Connection> c0 = t_->make_connection(&client_, rdm_params());
  Outbox out;
  ASSERT_NO_FATAL_FAILURE(send(client_, c1.get(), out.make("to one", 1)));
  ASSERT_NO_FATAL_FAILURE(send(client_, c2.get(), out.make("to two", 2)));
  ASSERT_NO_FATAL_FAILURE(send(client_, c0.get(), out.make("one way", 3)));
  ASSERT_EQ(c1->connect(name_of(*lb), to1.bytes, to1.len), 0);
  ASSERT_EQ(c2->connect(name_of(*lb), to2.bytes, to2.len), 0);
  ASSERT_EQ(c0->connect(name_of(*lb), one_way.bytes, one_way.len), 0);
  ASSERT_TRUE(pump([&] {
    return ctx1.received_count() == 1 && server_.received_count() == 1 &&
           client_.abort_count() == 1;
  }));
  settle(milliseconds(30));
  EXPECT_TRUE(ctx1.received()[0].bytes == out.payload(0)) << "context 1 has its message";
  EXPECT_TRUE(server_.received()[0].bytes == out.payload(2)) << "context 0 the one-way one";
  EXPECT_EQ(client_.aborts()[0].conn, c2.get()) << "no context 2: refused";
  EXPECT_EQ(client_.aborts()[0].err, FI_ECONNREFUSED);
  EXPECT_TRUE(logged_containing("no receive context 2"));
  EXPECT_EQ(ctx1.inbound().size(), 1u) << "an ordinary peer is offered for replies";
  EXPECT_TRUE(server_.inbound().empty()) << "a one-way peer takes nothing back";

  // Context 1 closes: its connection goes, and nothing more reaches it; context 0 goes on.
  server_.set_routes({&server_, nullptr});
  lb->release(&ctx1);
  ASSERT_NO_FATAL_FAILURE(send(client_, c1.get(), out.make("too late", 4, 4, TxLevel::kDelivery)));
  ASSERT_NO_FATAL_FAILURE(send(client_, c0.get(), out.make("still here", 5)));
  ASSERT_TRUE(pump([&] { return client_.abort_count() == 2 && server_.received_count() == 2; }));
  EXPECT_EQ(client_.aborts()[1].conn, c1.get());
  EXPECT_EQ(ctx1.received_count(), 1u);
  EXPECT_EQ(ctx1.problems(), std::vector<std::string>{});
}

TEST_P(TransportTest, RdmListenerAsksItsOwnerBeforeFreeingAConnectionThatClosed) {
  int err = 0;
  std::unique_ptr<Listener> lb = t_->open_listener(&server_, rdm_params(), loopback(0), &err);
  ASSERT_NE(lb, nullptr) << err;
  const sockaddr_in a_name = loopback(1);
  std::unique_ptr<Connection> c = t_->make_connection(&client_, rdm_params());
  ASSERT_EQ(c->connect(name_of(*lb), &a_name, sizeof(a_name)), 0);
  Outbox out;
  ASSERT_NO_FATAL_FAILURE(send(client_, c.get(), out.make("hi", 1)));
  ASSERT_TRUE(pump([&] { return server_.received_count() == 1; }));
  const Connection* via = server_.received()[0].in.via;
  server_.set_can_free(false);  // say, a buffered message still owes it a delivery ack
  c.reset();
  ASSERT_TRUE(pump([&] { return !server_.can_free_calls().empty(); }));
  // The peer's end fails what was sent on it (nothing) and reports no CM event.
  ASSERT_TRUE(pump([&] { return server_.abort_count() == 1; }));
  EXPECT_EQ(server_.aborts()[0].conn, via);
  EXPECT_EQ(server_.aborts()[0].err, FI_ECONNABORTED);
  EXPECT_EQ(cms(server_), std::vector<std::string>{});
  const size_t asked = server_.can_free_calls().size();
  lb->sweep();
  EXPECT_GT(server_.can_free_calls().size(), asked) << "sweep() asks again";
  server_.set_can_free(true);
  lb->sweep();
  const std::vector<const Connection*> calls = server_.can_free_calls();
  for (const Connection* x : calls) EXPECT_EQ(x, via);
  lb->sweep();
  settle(milliseconds(20));
  EXPECT_EQ(server_.can_free_calls().size(), calls.size()) << "freed: nobody asks any more";
}

// An RDM listener's inbound connection, stalled, whose peer went: the owner resumes it, the
// round that places its last message sees it close, the owner frees it (sweep()) and the
// transport goes right after, with no progress round in between. What the engine retired is
// freed with it, safely.
//
// Over shared memory the retired connection's destructor reads the engine's list of rings, which
// still names it: ~Engine must free what it retired before its own members go (ASan reported a
// heap-use-after-free in Engine::forget_shm() here while it did not).
TEST_P(TransportTest, TransportDestroyedRightAfterASweepFreesWhatTheSweepRetired) {
  int err = 0;
  std::unique_ptr<Listener> lb = t_->open_listener(&server_, rdm_params(), loopback(0), &err);
  ASSERT_NE(lb, nullptr) << err;
  const sockaddr_in a_name = loopback(1);
  std::unique_ptr<Connection> c = t_->make_connection(&client_, rdm_params());
  ASSERT_EQ(c->connect(name_of(*lb), &a_name, sizeof(a_name)), 0);
  Outbox out;
  ASSERT_NO_FATAL_FAILURE(send(client_, c.get(), out.make("first", 1)));
  ASSERT_TRUE(pump([&] { return server_.received_count() == 1; }));
  Connection* via = server_.received()[0].in.via;
  server_.set_accepting(false);
  ASSERT_NO_FATAL_FAILURE(send(client_, c.get(), out.make("last", 2)));
  ASSERT_TRUE(pump([&] { return server_.refused_places() >= 1 && client_.written_count() == 2; }));
  c.reset();
  settle(milliseconds(50));  // the end of the socket is seen; the message still waits
  ASSERT_EQ(server_.received_count(), 1u);
  server_.set_accepting(true);
  server_.set_can_free(false);
  via->resume();
  // One round: the resumed connection places its message, finds its peer gone and closes.
  ASSERT_TRUE(pump([&] { return !server_.can_free_calls().empty(); }));
  EXPECT_EQ(server_.received_count(), 2u);
  server_.set_can_free(true);
  lb->sweep();
  lb.reset();
  t_.reset();
}

}  // namespace
}  // namespace fabq::xport::testing
