// The TCP transport's connection set-up (transport_harness.h): a passive listener's request
// (peer, connect data), take(), adopt(), accept() and FI_CONNECTED on both sides with the accept
// data, reject() and a request the passive owner cannot queue (FI_ECONNREFUSED), a peer that
// leaves before the accept, the shared-memory offer of the connecting side and its fallback when
// declined.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <memory>
#include <string>
#include <vector>

#include "transport_harness.h"

namespace fabq::xport::testing {
namespace {

using namespace std::string_literals;

INSTANTIATE_TEST_SUITE_P(, TransportTest, ::testing::Values(false, true), tcp_or_shm);

TEST_P(TransportTest, RequestCarriesThePeerAddressAndTheConnectData) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(listen(&p));
  EXPECT_EQ(p.at.sin_family, AF_INET);
  EXPECT_EQ(p.at.sin_addr.s_addr, htonl(INADDR_LOOPBACK));
  EXPECT_NE(p.at.sin_port, 0) << "port 0 asks the kernel for one; listen() says which";
  // The largest connect data there is, NULs included.
  const std::string data = pattern(core::kCmDataSize, 7);
  Request r;
  ASSERT_NO_FATAL_FAILURE(request(&p, data, &r));
  EXPECT_EQ(r.data, data);
  const sockaddr_in me = name_of(*p.client);
  EXPECT_EQ(addr_str(r.peer), addr_str(me)) << "the request names the connecting socket";
  EXPECT_NE(r.pending, nullptr);
  // Nothing else until the request is answered.
  settle(milliseconds(30));
  EXPECT_EQ(passive_.request_count(), 1u);
  EXPECT_EQ(client_.journal(), std::vector<std::string>{});
  EXPECT_FALSE(p.client->connected());
  EXPECT_TRUE(p.client->open());
  EXPECT_EQ(p.client->connect(p.at, nullptr, 0), -FI_EISCONN);
}

TEST_P(TransportTest, AcceptReportsConnectedToBothOwnersWithTheAcceptData) {
  Pair p;
  const std::string accept_data = "welcome\0aboard"s;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p, "hello", accept_data));
  settle(milliseconds(30));  // and nothing more comes of it
  EXPECT_EQ(cms(client_), std::vector<std::string>{cm_str(FI_CONNECTED, 0, accept_data)});
  EXPECT_EQ(cms(server_), std::vector<std::string>{cm_str(FI_CONNECTED, 0)});
  EXPECT_EQ(client_.ended(), 0);
  EXPECT_EQ(server_.ended(), 0);
  EXPECT_EQ(asyncs(client_), std::vector<std::string>{});
  EXPECT_EQ(asyncs(server_), std::vector<std::string>{});
  EXPECT_TRUE(p.client->connected());
  EXPECT_TRUE(p.server->connected());
  EXPECT_EQ(addr_str(peer_of(*p.client)), addr_str(p.at));
  EXPECT_EQ(addr_str(peer_of(*p.server)), addr_str(name_of(*p.client)));
  EXPECT_EQ(p.server->accept(nullptr, 0), -FI_EOPBADSTATE) << "accepted twice";
}

TEST_P(TransportTest, TakeOfAConnectionTheListenerDoesNotHoldGivesNull) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(listen(&p));
  Request r;
  ASSERT_NO_FATAL_FAILURE(request(&p, "x", &r));
  FakeOwner other_owner;
  std::unique_ptr<Connection> other = t_->make_connection(&other_owner, params());
  EXPECT_EQ(p.listener->take(other.get()), nullptr) << "a connection it never made";
  EXPECT_EQ(p.listener->take(nullptr), nullptr);
  p.server = p.listener->take(r.pending);
  ASSERT_NE(p.server, nullptr);
  EXPECT_EQ(p.server.get(), r.pending);
  EXPECT_EQ(p.listener->take(r.pending), nullptr) << "taken twice";
  // What was taken is whole: it still connects.
  ASSERT_TRUE(p.server->adopt(&server_, params()));
  ASSERT_EQ(p.server->accept(nullptr, 0), 0);
  ASSERT_TRUE(pump([&] { return client_.has_cm(FI_CONNECTED) && server_.has_cm(FI_CONNECTED); }));
}

TEST_P(TransportTest, RejectRefusesThePeerWithTheRejectData) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(listen(&p));
  Request r;
  ASSERT_NO_FATAL_FAILURE(request(&p, "let me in", &r));
  p.server = p.listener->take(r.pending);
  ASSERT_NE(p.server, nullptr);
  const std::string reject_data = "go\0away"s;
  ASSERT_EQ(p.server->reject(reject_data.data(), reject_data.size()), 0);
  ASSERT_TRUE(pump([&] { return client_.ended() > 0; }));
  settle(milliseconds(30));
  EXPECT_EQ(cms(client_), std::vector<std::string>{cm_str(0, FI_ECONNREFUSED, reject_data)});
  EXPECT_EQ(client_.ended(), 1);
  EXPECT_FALSE(p.client->open());
  EXPECT_FALSE(p.client->connected());
  EXPECT_EQ(p.server->reject(nullptr, 0), -FI_EOPBADSTATE) << "rejected twice";
  Outbox out;
  EXPECT_EQ(client_.submit(p.client.get(), out.make("late", 1)), -FI_ENOTCONN);
  EXPECT_EQ(server_.journal(), std::vector<std::string>{});
  EXPECT_EQ(passive_.request_count(), 1u);
}

TEST_P(TransportTest, RequestThePassiveOwnerCannotQueueRefusesThePeer) {
  passive_.set_accepting(false);
  Pair p;
  ASSERT_NO_FATAL_FAILURE(listen(&p));
  Request r;
  ASSERT_NO_FATAL_FAILURE(request(&p, "first", &r));
  EXPECT_EQ(r.data, "first");
  ASSERT_TRUE(pump([&] { return client_.ended() > 0; }));
  EXPECT_EQ(cms(client_), std::vector<std::string>{cm_str(0, FI_ECONNREFUSED)});
  EXPECT_FALSE(p.client->open());
  EXPECT_EQ(p.listener->take(r.pending), nullptr) << "a refused request is not the owner's";
  // The listener goes on: the next peer, accepted this time, connects.
  passive_.set_accepting(true);
  FakeOwner second;
  std::unique_ptr<Connection> c2 = t_->make_connection(&second, params());
  ASSERT_EQ(c2->connect(p.at, "second", 6), 0);
  ASSERT_TRUE(pump([&] { return passive_.request_count() == 2; }));
  EXPECT_EQ(passive_.requests()[1].data, "second");
  p.server = p.listener->take(passive_.requests()[1].pending);
  ASSERT_NE(p.server, nullptr);
  ASSERT_TRUE(p.server->adopt(&server_, params()));
  ASSERT_EQ(p.server->accept(nullptr, 0), 0);
  ASSERT_TRUE(pump([&] { return second.has_cm(FI_CONNECTED) && server_.has_cm(FI_CONNECTED); }));
  EXPECT_EQ(second.problems(), std::vector<std::string>{});
}

TEST_P(TransportTest, PeerThatLeavesBeforeTheAcceptIsReportedAsAborted) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(listen(&p));
  Request r;
  ASSERT_NO_FATAL_FAILURE(request(&p, "bye", &r));
  p.client.reset();
  settle(milliseconds(30));
  p.server = p.listener->take(r.pending);
  ASSERT_NE(p.server, nullptr) << "a requested connection waits for take(), whatever its peer";
  // The transport may notice at adopt() (false), at accept() (-FI_ECONNABORTED) or after it
  // (an FI_ECONNABORTED error event); never FI_CONNECTED.
  const bool adopted = p.server->adopt(&server_, params());
  const int rc = adopted ? p.server->accept("late", 4) : -FI_ECONNABORTED;
  if (rc == 0) {
    ASSERT_TRUE(pump([&] { return server_.cm_count() > 0; }));
    settle(milliseconds(30));
    EXPECT_EQ(cms(server_), std::vector<std::string>{cm_str(0, FI_ECONNABORTED)});
    EXPECT_EQ(server_.ended(), 1);
  } else {
    EXPECT_EQ(rc, -FI_ECONNABORTED);
    settle(milliseconds(30));
    EXPECT_EQ(cms(server_), std::vector<std::string>{});
  }
  EXPECT_FALSE(p.server->open());
  EXPECT_FALSE(p.server->connected());
}

TEST_P(TransportTest, ConnectingSideOffersSharedMemoryOnlyWhenConfiguredAndFallsBackWhenDeclined) {
  WireListener raw(ticker());
  std::unique_ptr<Connection> c = t_->make_connection(&client_, params());
  ASSERT_EQ(c->connect(raw.addr(), "offer?", 6), 0);
  WirePeer peer(ticker(), raw.accept_one());
  ASSERT_GE(peer.fd(), 0);
  wire::Header h;
  std::string payload;
  ASSERT_TRUE(peer.recv_frame(&h, &payload));
  ASSERT_EQ(h.op, wire::Op::kConnReq);
  EXPECT_EQ(payload, "offer?");
  EXPECT_EQ((h.flags & wire::kShmOffer) != 0, GetParam()) << "flags " << h.flags;
  EXPECT_EQ(h.flags & ~uint32_t{wire::kShmOffer}, 0u);
  if (GetParam()) {
    EXPECT_NE(h.tag, 0u) << "the offer names its segment";
  } else {
    EXPECT_EQ(h.tag, 0u);
    EXPECT_EQ(h.data, 0u);
  }
  // Declined (no kShmAccept): a plain TCP connection.
  ASSERT_TRUE(peer.send_frame({.op = wire::Op::kConnAccept, .length = 2}, "ok"));
  ASSERT_TRUE(pump([&] { return client_.has_cm(FI_CONNECTED); }));
  EXPECT_EQ(cms(client_), std::vector<std::string>{cm_str(FI_CONNECTED, 0, "ok")});
  ASSERT_TRUE(peer.recv_frame(&h, &payload));
  EXPECT_EQ(h.op, wire::Op::kConnReady);
  EXPECT_EQ(h.length, 0u);
  Outbox out;
  ASSERT_NO_FATAL_FAILURE(send(client_, c.get(), out.with_data(out.tagged("ping", 42, 0x77), 9)));
  ASSERT_TRUE(peer.recv_frame(&h, &payload)) << "the message is on the socket";
  EXPECT_EQ(h.op, wire::Op::kTagged);
  EXPECT_EQ(h.seq, 42u);
  EXPECT_EQ(h.tag, 0x77u);
  EXPECT_EQ(h.flags, uint32_t{wire::kRemoteData});
  EXPECT_EQ(h.data, 9u);
  EXPECT_EQ(payload, "ping");
  ASSERT_TRUE(pump([&] { return client_.written_count() == 1; }));
}

}  // namespace
}  // namespace fabq::xport::testing
