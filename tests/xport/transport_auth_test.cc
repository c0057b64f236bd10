// Authentication on the TCP transport (transport_harness.h): the same key, different keys, a key
// on one side only, and a raw peer that computes the MACs as wire.h documents them (or proves
// nothing).
#include <gtest/gtest.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/hmac.h"
#include "transport_harness.h"

namespace fabq::xport::testing {
namespace {

INSTANTIATE_TEST_SUITE_P(, TransportTest, ::testing::Values(false, true), tcp_or_shm);

// =============================================================================================
// Authentication

TEST_P(TransportTest, PeersWithTheSameKeyConnectAndExchangeMessages) {
  const core::HmacSha256 client_key("open sesame", 11);
  const core::HmacSha256 server_key("open sesame", 11);
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p, "auth", "ok", &client_key, &server_key));
  EXPECT_EQ(passive_.requests()[0].data, "auth") << "the nonce is not the application's data";
  EXPECT_EQ(cms(client_), std::vector<std::string>{cm_str(FI_CONNECTED, 0, "ok")});
  Outbox out;
  ASSERT_NO_FATAL_FAILURE(send(client_, p.client.get(), out.make(pattern(10000, 1), 1, 2)));
  ASSERT_TRUE(pump([&] { return server_.received_count() == 1; }));
  EXPECT_TRUE(server_.received()[0].bytes == out.payload(0));
}

TEST_P(TransportTest, PeersWithDifferentKeysAreRefusedAndTheRequestIsNeverReported) {
  const core::HmacSha256 client_key("open sesame", 11);
  const core::HmacSha256 server_key("open barley", 11);
  Pair p;
  ASSERT_NO_FATAL_FAILURE(listen(&p, &server_key));
  p.client = t_->make_connection(&client_, params(&client_key));
  ASSERT_EQ(p.client->connect(p.at, "let me in", 9), 0);
  ASSERT_TRUE(pump([&] { return client_.ended() > 0; }));
  settle(milliseconds(100));
  EXPECT_EQ(cms(client_), std::vector<std::string>{cm_str(0, FI_ECONNREFUSED)});
  EXPECT_EQ(passive_.request_count(), 0u);
  EXPECT_FALSE(p.client->open());
  EXPECT_TRUE(logged_containing("did not prove the secret"));
}

TEST_P(TransportTest, KeyOnOneSideOnlyIsRefusedAndTheRequestIsNeverReported) {
  const core::HmacSha256 key("open sesame", 11);
  for (const bool client_has_key : {true, false}) {
    SCOPED_TRACE(client_has_key ? "only the connecting side has a key"
                                : "only the listening side has a key");
    FakeOwner owner;
    FakePassiveOwner passive;
    std::unique_ptr<PassiveListener> l =
        t_->open_passive(&passive, client_has_key ? nullptr : &key);
    sockaddr_in at{};
    ASSERT_EQ(l->listen(loopback(0), &at), 0);
    std::unique_ptr<Connection> c =
        t_->make_connection(&owner, params(client_has_key ? &key : nullptr));
    ASSERT_EQ(c->connect(at, "hi", 2), 0);
    ASSERT_TRUE(pump([&] { return owner.ended() > 0; }));
    settle(milliseconds(50));
    EXPECT_EQ(cms(owner), std::vector<std::string>{cm_str(0, FI_ECONNREFUSED)});
    EXPECT_EQ(passive.request_count(), 0u);
    EXPECT_EQ(owner.problems(), std::vector<std::string>{});
  }
}

TEST_P(TransportTest, RdmPeersWithDifferentKeysExchangeNothing) {
  const core::HmacSha256 a_key("alpha", 5);
  const core::HmacSha256 b_key("bravo", 5);
  int err = 0;
  std::unique_ptr<Listener> lb = t_->open_listener(&server_, rdm_params(&b_key), loopback(0), &err);
  ASSERT_NE(lb, nullptr) << err;
  const sockaddr_in a_name = loopback(1);
  std::unique_ptr<Connection> c = t_->make_connection(&client_, rdm_params(&a_key));
  Outbox out;
  ASSERT_NO_FATAL_FAILURE(send(client_, c.get(), out.make("secret", 1)));
  ASSERT_EQ(c->connect(name_of(*lb), &a_name, sizeof(a_name)), 0);
  ASSERT_TRUE(pump([&] { return client_.abort_count() > 0; }));
  settle(milliseconds(50));
  EXPECT_EQ(client_.aborts()[0].err, FI_ECONNREFUSED);
  EXPECT_EQ(server_.received_count(), 0u);
  EXPECT_EQ(cms(server_), std::vector<std::string>{});
  // All the listener's owner may hear of it: the sends of the inbound connection that never
  // came up (none) fail.
  for (const std::string& e : server_.journal()) {
    EXPECT_EQ(e, "abort " + std::to_string(FI_ECONNREFUSED));
  }
  EXPECT_EQ(cms(client_), std::vector<std::string>{});
}

// =============================================================================================
// Raw peers: authentication as wire.h documents it

class AuthRawPeer {
 public:
  AuthRawPeer(WirePeer* peer, const void* key, size_t key_len) : peer_(peer), key_(key, key_len) {
    for (size_t i = 0; i < sizeof(nonce_c_); ++i) nonce_c_[i] = static_cast<unsigned char>(i * 7);
  }
  // kConnReq with kAuth: the connect data, then Nc. R is the SHA-256 of the whole frame.
  bool send_request(std::string_view data) {
    std::string payload(data);
    payload.append(reinterpret_cast<const char*>(nonce_c_), sizeof(nonce_c_));
    const std::string f = frame({.op = wire::Op::kConnReq,
                                 .flags = wire::kAuth,
                                 .length = static_cast<uint32_t>(payload.size())},
                                payload);
    r_ = core::Sha256::hash(f.data(), f.size());
    return peer_->send_bytes(f);
  }
  // kChallenge: Ns and MAC_s = HMAC(K, "fabq-auth-accept" || Nc || Ns || R), checked.
  void take_challenge() {
    wire::Header h;
    std::string payload;
    ASSERT_TRUE(peer_->recv_frame(&h, &payload));
    ASSERT_EQ(h.op, wire::Op::kChallenge);
    ASSERT_EQ(payload.size(), wire::kChallengeSize);
    std::memcpy(nonce_s_, payload.data(), sizeof(nonce_s_));
    const core::Digest mac_s = mac("fabq-auth-accept");
    EXPECT_EQ(std::memcmp(payload.data() + wire::kNonceSize, mac_s.data(), mac_s.size()), 0)
        << "MAC_s is not what wire.h says";
  }
  // kProof: MAC_c = HMAC(K, "fabq-auth-request" || Nc || Ns || R), or any 32 bytes.
  bool send_proof(bool right) {
    core::Digest proof = mac("fabq-auth-request");
    if (!right) proof.fill(0);
    return peer_->send_frame(
        {.op = wire::Op::kProof, .length = wire::kProofSize},
        std::string_view(reinterpret_cast<const char*>(proof.data()), proof.size()));
  }

 private:
  core::Digest mac(std::string_view label) {
    core::HmacSha256 m = key_;
    m.update(label.data(), label.size());
    m.update(nonce_c_, sizeof(nonce_c_));
    m.update(nonce_s_, sizeof(nonce_s_));
    m.update(r_.data(), r_.size());
    return m.final();
  }

  WirePeer* peer_;
  core::HmacSha256 key_;
  unsigned char nonce_c_[wire::kNonceSize] = {};
  unsigned char nonce_s_[wire::kNonceSize] = {};
  core::Digest r_{};
};

TEST_F(TransportRawTest, RawPeerThatProvesTheSecretAsWireDocumentsIsReportedAndAccepted) {
  const core::HmacSha256 key("shared secret", 13);
  Pair p;
  ASSERT_NO_FATAL_FAILURE(listen(&p, &key));
  WirePeer peer(ticker());
  ASSERT_TRUE(peer.connect_to(p.at));
  AuthRawPeer auth(&peer, "shared secret", 13);
  ASSERT_TRUE(auth.send_request("proven"));
  ASSERT_NO_FATAL_FAILURE(auth.take_challenge());
  settle(milliseconds(20));
  EXPECT_EQ(passive_.request_count(), 0u) << "reported before the proof";
  ASSERT_TRUE(auth.send_proof(true));
  ASSERT_TRUE(pump([&] { return passive_.request_count() == 1; }));
  EXPECT_EQ(passive_.requests()[0].data, "proven") << "the nonce is not the application's data";
  p.server = p.listener->take(passive_.requests()[0].pending);
  ASSERT_NE(p.server, nullptr);
  ASSERT_TRUE(p.server->adopt(&server_, params(&key)));
  ASSERT_EQ(p.server->accept("in", 2), 0);
  wire::Header h;
  std::string payload;
  ASSERT_TRUE(peer.recv_frame(&h, &payload));
  EXPECT_EQ(h.op, wire::Op::kConnAccept);
  EXPECT_EQ(payload, "in");
  ASSERT_TRUE(peer.send_frame({.op = wire::Op::kConnReady}));
  ASSERT_TRUE(pump([&] { return server_.has_cm(FI_CONNECTED); }));
}

TEST_F(TransportRawTest, RawPeerWithAWrongProofIsRejectedAndNeverReported) {
  const core::HmacSha256 key("shared secret", 13);
  Pair p;
  ASSERT_NO_FATAL_FAILURE(listen(&p, &key));
  {
    SCOPED_TRACE("a wrong proof");
    WirePeer peer(ticker());
    ASSERT_TRUE(peer.connect_to(p.at));
    AuthRawPeer auth(&peer, "another secret", 14);
    ASSERT_TRUE(auth.send_request("let me in"));
    wire::Header h;
    std::string payload;
    ASSERT_TRUE(peer.recv_frame(&h, &payload));
    ASSERT_EQ(h.op, wire::Op::kChallenge) << "challenged whatever its key";
    ASSERT_TRUE(auth.send_proof(false));
    ASSERT_TRUE(peer.recv_frame(&h, &payload));
    EXPECT_EQ(h.op, wire::Op::kConnReject);
    EXPECT_EQ(payload, "");
    EXPECT_TRUE(peer.closed_by_peer());
    EXPECT_TRUE(logged_containing("did not prove the secret"));
  }
  {
    SCOPED_TRACE("no authentication at all");
    WirePeer peer(ticker());
    ASSERT_TRUE(peer.connect_to(p.at));
    ASSERT_TRUE(peer.send_frame({.op = wire::Op::kConnReq, .length = 2}, "hi"));
    wire::Header h;
    std::string payload;
    ASSERT_TRUE(peer.recv_frame(&h, &payload));
    EXPECT_EQ(h.op, wire::Op::kConnReject);
    EXPECT_TRUE(peer.closed_by_peer());
  }
  settle(milliseconds(30));
  EXPECT_EQ(passive_.request_count(), 0u);
}

}  // namespace
}  // namespace fabq::xport::testing
