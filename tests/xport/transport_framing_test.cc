// How the TCP transport reads a peer's byte stream (transport_harness.h), with raw peers: a
// message written one byte at a time, a frame split at the header, several frames in one write;
// every kind of bad frame after the handshake (EP_REQ_ERR), garbage before it (nobody hears of
// it; the listener goes on).
#include <gtest/gtest.h>
#include <rdma/fi_eq.h>

#include <string>
#include <vector>

#include "transport_harness.h"

namespace fabq::xport::testing {
namespace {

// =============================================================================================
// Raw peers: framing

TEST_F(TransportRawTest, MessageWrittenOneBytePerWriteArrivesWhole) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(listen(&p));
  WirePeer peer(ticker());
  ASSERT_NO_FATAL_FAILURE(accept_raw(&p, &peer, &server_, "one byte at a time", true));
  const std::string payload = pattern(100, 1);
  ASSERT_TRUE(peer.send_byte_by_byte(frame({.op = wire::Op::kTagged,
                                            .flags = wire::kRemoteData | wire::kWantReceived,
                                            .length = 100,
                                            .seq = 7,
                                            .tag = 0xabcdef,
                                            .data = 0x55aa},
                                           payload)));
  ASSERT_TRUE(pump([&] { return server_.received_count() == 1; }));
  const Received got = server_.received()[0];
  EXPECT_TRUE(got.bytes == payload);
  EXPECT_EQ(got.in.len, 100u);
  EXPECT_EQ(got.in.seq, 7u);
  EXPECT_TRUE(got.in.tagged);
  EXPECT_EQ(got.in.tag, 0xabcdefu);
  EXPECT_TRUE(got.in.has_data);
  EXPECT_EQ(got.in.data, 0x55aau);
  EXPECT_EQ(got.in.ack, AckWanted::kReceived);
  // Its acknowledgement, as wire.h says.
  wire::Header h;
  std::string body;
  ASSERT_TRUE(peer.recv_frame(&h, &body));
  EXPECT_EQ(h.op, wire::Op::kAckReceived);
  EXPECT_EQ(h.seq, 7u);
  EXPECT_EQ(h.length, 0u);
  EXPECT_EQ(asyncs(server_), std::vector<std::string>{"COMM_EST"});
}

TEST_F(TransportRawTest, FrameSplitAtTheHeaderPayloadBoundaryArrivesWhole) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(listen(&p));
  WirePeer peer(ticker());
  ASSERT_NO_FATAL_FAILURE(accept_raw(&p, &peer, &server_));
  // A small payload (through the read buffer) and a large one (read straight into place).
  const size_t sizes[] = {10, 64 * 1024};
  for (size_t i = 0; i < std::size(sizes); ++i) {
    SCOPED_TRACE(std::to_string(sizes[i]) + " bytes");
    const std::string payload = pattern(sizes[i], static_cast<uint32_t>(i));
    const std::string f =
        frame({.op = wire::Op::kMsg, .length = static_cast<uint32_t>(sizes[i]), .seq = uint32_t(i)},
              payload);
    ASSERT_TRUE(peer.send_bytes(std::string_view(f).substr(0, wire::kHeaderSize)));
    settle(milliseconds(30));
    EXPECT_EQ(server_.received_count(), i) << "a message before its payload";
    ASSERT_TRUE(peer.send_bytes(std::string_view(f).substr(wire::kHeaderSize)));
    ASSERT_TRUE(pump([&] { return server_.received_count() == i + 1; }));
    EXPECT_TRUE(server_.received()[i].bytes == payload);
  }
}

TEST_F(TransportRawTest, SeveralFramesInOneWriteArriveInOrder) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(listen(&p));
  WirePeer peer(ticker());
  ASSERT_NO_FATAL_FAILURE(accept_raw(&p, &peer, &server_));
  const std::string a = pattern(3, 1);
  const std::string c = pattern(20000, 3);
  ASSERT_TRUE(peer.send_bytes(frame({.op = wire::Op::kMsg, .length = 3, .seq = 1}, a) +
                              frame({.op = wire::Op::kMsg, .length = 0, .seq = 2}) +
                              frame({.op = wire::Op::kMsg, .length = 20000, .seq = 3}, c)));
  ASSERT_TRUE(pump([&] { return server_.received_count() == 3; }));
  const std::vector<Received> got = server_.received();
  EXPECT_EQ(got[0].in.seq, 1u);
  EXPECT_EQ(got[1].in.seq, 2u);
  EXPECT_EQ(got[2].in.seq, 3u);
  EXPECT_TRUE(got[0].bytes == a);
  EXPECT_EQ(got[1].bytes, "");
  EXPECT_TRUE(got[2].bytes == c);
}

// =============================================================================================
// Raw peers: bad input

TEST_F(TransportRawTest, GarbageAfterTheHandshakeFailsTheConnectionWithReqErr) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(listen(&p));
  WirePeer peer(ticker());
  ASSERT_NO_FATAL_FAILURE(accept_raw(&p, &peer, &server_));
  ASSERT_TRUE(peer.send_bytes(std::string(wire::kHeaderSize, '\xab')));
  ASSERT_TRUE(pump([&] { return server_.has_async(FI_FABQ_EVENT_EP_REQ_ERR); }));
  EXPECT_TRUE(peer.closed_by_peer()) << "the connection is closed";
  settle(milliseconds(30));
  EXPECT_EQ(asyncs(server_), std::vector<std::string>{"EP_REQ_ERR"});
  EXPECT_EQ(cms(server_), std::vector<std::string>{cm_str(FI_CONNECTED, 0)}) << "no FI_SHUTDOWN";
  ASSERT_EQ(server_.abort_count(), 1u);
  EXPECT_EQ(server_.aborts()[0].conn, p.server.get());
  EXPECT_EQ(server_.aborts()[0].err, FI_EIO);
  EXPECT_FALSE(p.server->open());
  EXPECT_EQ(server_.received_count(), 0u);
  EXPECT_TRUE(logged_containing("bad magic"));
}

TEST_F(TransportRawTest, EveryKindOfBadFrameFailsAnEstablishedConnectionWithReqErr) {
  struct Case {
    const char* what;
    std::string bytes;
    bool then_close;
    const char* logged;
  };
  std::string bad_version = frame({.op = wire::Op::kMsg});
  bad_version[2] = 2;
  std::string unknown_op = frame({.op = wire::Op::kMsg});
  unknown_op[3] = 42;
  const Case cases[] = {
      {"bad version", bad_version, false, "unsupported protocol version"},
      {"unknown op", unknown_op, false, "unknown opcode"},
      {"flag the op does not allow",
       frame({.op = wire::Op::kMsg, .flags = wire::kShmOffer, .length = 1}, "x"), false,
       "flags the opcode does not allow"},
      {"longer than max_msg_size",
       frame({.op = wire::Op::kMsg, .length = static_cast<uint32_t>(kMaxMsg + 1)}), false,
       "length beyond the receiver's limit"},
      {"unused field set", frame({.op = wire::Op::kShutdown, .tag = 5}), false,
       "a field the opcode does not use is set"},
      {"a request once connected", frame({.op = wire::Op::kConnReq}), false,
       "a frame the connection's state forbids"},
      {"an acknowledgement of no send", frame({.op = wire::Op::kAckReceived, .seq = 99}), false,
       "an acknowledgement of no send"},
      {"a direct request over a socket (nobody proved its pid)",
       frame({.op = wire::Op::kWrite, .flags = wire::kDirect, .length = 16, .tag = 1},
             std::string(8, '\0') + std::string("\x00\x10\0\0\0\0\0\0", 8)),
       false, "a direct request this side does not serve"},
      {"a direct write that also carries CQ data",
       frame({.op = wire::Op::kWrite, .flags = wire::kDirect | wire::kRemoteData, .length = 16},
             std::string(16, '\0')),
       false, "flags the opcode does not allow"},
      {"a direct request whose entries are cut",
       frame({.op = wire::Op::kReadReq, .flags = wire::kDirect, .length = 20},
             std::string(20, '\0')),
       false, "length beyond the receiver's limit"},
      {"closed inside a frame", frame({.op = wire::Op::kMsg, .length = 100}) + "0123456789", true,
       "connection closed inside a frame"},
  };
  Pair p;
  ASSERT_NO_FATAL_FAILURE(listen(&p));
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    {
      std::lock_guard lock(g_log_mu);
      g_log.clear();
    }
    FakeOwner owner;
    WirePeer peer(ticker());
    ASSERT_NO_FATAL_FAILURE(accept_raw(&p, &peer, &owner));
    ASSERT_TRUE(peer.send_bytes(c.bytes));
    if (c.then_close) peer.close_now();
    ASSERT_TRUE(pump([&] { return owner.has_async(FI_FABQ_EVENT_EP_REQ_ERR); }))
        << ::testing::PrintToString(owner.journal());
    if (!c.then_close) {
      EXPECT_TRUE(peer.closed_by_peer());
    }
    settle(milliseconds(10));
    EXPECT_EQ(asyncs(owner), std::vector<std::string>{"EP_REQ_ERR"});
    EXPECT_EQ(cms(owner), std::vector<std::string>{cm_str(FI_CONNECTED, 0)});
    EXPECT_EQ(owner.received_count(), 0u);
    EXPECT_FALSE(p.server->open());
    EXPECT_TRUE(logged_containing(c.logged)) << ::testing::PrintToString(logged());
    EXPECT_EQ(owner.problems(), std::vector<std::string>{});
    p.server.reset();
  }
}

TEST_F(TransportRawTest, GarbageBeforeTheHandshakeReachesNobodyAndALegitimatePeerStillConnects) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(listen(&p));
  {
    WirePeer garbage(ticker());
    ASSERT_TRUE(garbage.connect_to(p.at));
    ASSERT_TRUE(garbage.send_bytes("GET / HTTP/1.1\r\nHost: fabq\r\n\r\n" + pattern(64, 1)));
    EXPECT_TRUE(garbage.closed_by_peer()) << "refused";
  }
  {
    // A valid header the state forbids: a message before any request.
    WirePeer early(ticker());
    ASSERT_TRUE(early.connect_to(p.at));
    ASSERT_TRUE(early.send_frame({.op = wire::Op::kMsg, .length = 2}, "hi"));
    EXPECT_TRUE(early.closed_by_peer()) << "refused";
  }
  settle(milliseconds(30));
  EXPECT_EQ(passive_.request_count(), 0u);
  EXPECT_EQ(client_.journal(), std::vector<std::string>{});
  EXPECT_EQ(server_.journal(), std::vector<std::string>{});
  EXPECT_TRUE(logged_containing("bad magic"));
  // The listener goes on.
  Request r;
  ASSERT_NO_FATAL_FAILURE(request(&p, "legit", &r));
  EXPECT_EQ(r.data, "legit");
  p.server = p.listener->take(r.pending);
  ASSERT_NE(p.server, nullptr);
  ASSERT_TRUE(p.server->adopt(&server_, params()));
  ASSERT_EQ(p.server->accept(nullptr, 0), 0);
  ASSERT_TRUE(pump([&] { return client_.has_cm(FI_CONNECTED) && server_.has_cm(FI_CONNECTED); }));
}

}  // namespace
}  // namespace fabq::xport::testing
