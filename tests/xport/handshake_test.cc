// The handshake's state machine without a connection: which frame each state takes (every
// pair of the table), the transitions of a plain, an authenticated, an RDM and a refused
// handshake, the authentication's MACs against HMAC-SHA256 computed here from wire.h's formulas,
// and the refusal of every proof that is not the right one.
#include "xport/handshake.h"

#include <gtest/gtest.h>
#include <netinet/in.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "wire_ops.h"

namespace fabq::xport::handshake {
namespace {

using wire::Header;
using wire::Op;
using wire::test_ops::kAllOps;
using wire::test_ops::op_name;
using Bytes = std::vector<unsigned char>;

constexpr State kAllStates[] = {State::kIdle,     State::kConnecting, State::kRequested,
                                State::kIncoming, State::kProving,    State::kPending,
                                State::kAccepted, State::kConnected,  State::kClosed};

constexpr std::string_view kSecret = "correct horse battery staple";
constexpr std::string_view kOtherSecret = "incorrect horse";
const core::HmacSha256 kKey(kSecret.data(), kSecret.size());
const core::HmacSha256 kOtherKey(kOtherSecret.data(), kOtherSecret.size());

// state_str() capitalised, for test names ("IsAllowedWhileIncoming").
std::string state_name(State s) {
  std::string name = state_str(s);
  name[0] = static_cast<char>(name[0] - 'a' + 'A');
  return name;
}

Header frame(Op op, size_t length = 0, uint32_t flags = 0) {
  Header h;
  h.op = op;
  h.length = static_cast<uint32_t>(length);
  h.flags = flags;
  return h;
}

Nonce nonce(uint8_t first) {
  Nonce n;
  for (size_t i = 0; i < n.size(); ++i) n[i] = static_cast<uint8_t>(first + i);
  return n;
}

Bytes bytes(std::string_view s) {
  return Bytes(s.begin(), s.end());
}

Bytes name_of(uint16_t port) {
  sockaddr_in name{};
  name.sin_family = AF_INET;
  name.sin_port = htons(port);
  name.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  Bytes b(sizeof(name));
  std::memcpy(b.data(), &name, sizeof(name));
  return b;
}

// A kConnReq as the active side `a` sends it: `data`, then (with a key) Nc and kAuth. Tells `a`
// what went out, as Conn::connect does, and returns the frame.
struct Sent {
  Header h;
  Bytes payload;
};
Sent send_request(Handshake& a, const Bytes& data, const Nonce& nc, uint32_t flags = 0) {
  Sent s{frame(Op::kConnReq, data.size(), flags), data};
  if (a.keyed()) {
    s.payload.insert(s.payload.end(), nc.begin(), nc.end());
    s.h.length = static_cast<uint32_t>(s.payload.size());
    s.h.flags |= wire::kAuth;
  }
  a.connecting();
  a.request(s.h, s.payload.data());
  a.sent();
  return s;
}

// A handshake brought to `s` the way a connection brings it there: an MSG side without a
// secret, except kProving, which only a side with one reaches.
Handshake at(State s) {
  Handshake hs;
  const Bytes data = bytes("hello");
  switch (s) {
    case State::kIdle:
      break;
    case State::kConnecting:
      hs.connecting();
      break;
    case State::kRequested:
      send_request(hs, data, {});
      break;
    case State::kIncoming:
      hs.incoming(false, nullptr);
      break;
    case State::kProving: {
      Handshake a(false, &kKey);
      const Sent req = send_request(a, data, nonce(1));
      hs.incoming(false, &kKey);
      hs.on_frame(req.h, req.payload.data());
      break;
    }
    case State::kPending:
    case State::kAccepted:
      hs.incoming(false, nullptr);
      hs.on_frame(frame(Op::kConnReq, data.size()), data.data());
      if (s == State::kAccepted) hs.accept();
      break;
    case State::kConnected:
      send_request(hs, data, {});
      hs.on_frame(frame(Op::kConnAccept), nullptr);
      break;
    case State::kClosed:
      hs.close();
      break;
  }
  return hs;
}

// The table of wire.h's protocol for an MSG side that does not authenticate: the only
// (state, op) pairs a connection takes.
bool in_table(State s, Op op) {
  switch (s) {
    case State::kIncoming:
      return op == Op::kConnReq;
    case State::kRequested:
      return op == Op::kConnAccept || op == Op::kConnReject;
    case State::kProving:
      return op == Op::kProof;
    case State::kAccepted:
      return op == Op::kConnReady;
    case State::kConnected:
      return op == Op::kMsg || op == Op::kTagged || op == Op::kAckReceived ||
             op == Op::kAckDelivered || op == Op::kShutdown || op >= Op::kWrite;
    default:
      return false;
  }
}

// --- the table: every (state, op) pair ----------------------------------------------------

class Table : public testing::TestWithParam<std::tuple<State, Op>> {};

// A forbidden frame that arrives anyway fails the connection.
TEST_P(Table, AnswersAsTheProtocolSays) {
  const auto [s, op] = GetParam();
  Handshake hs = at(s);
  ASSERT_EQ(hs.state(), s);
  EXPECT_EQ(hs.allowed(frame(op)), in_table(s, op));
  if (in_table(s, op)) return;
  const Next next = hs.on_frame(frame(op), nullptr);
  EXPECT_EQ(next.step, Step::kViolation);
  EXPECT_EQ(next.state, State::kClosed);
  EXPECT_EQ(hs.state(), State::kClosed);
  EXPECT_STREQ(next.why, "a frame the connection's state forbids");
}

using Pair = testing::TestParamInfo<std::tuple<State, Op>>;

// "<Op>IsAllowedWhile<State>" or "<Op>IsForbiddenWhile<State>".
std::string pair_name(const Pair& info) {
  const State s = std::get<0>(info.param);
  const Op op = std::get<1>(info.param);
  return std::string(op_name(op)) + (in_table(s, op) ? "IsAllowedWhile" : "IsForbiddenWhile") +
         state_name(s);
}

INSTANTIATE_TEST_SUITE_P(EveryPair, Table,
                         testing::Combine(testing::ValuesIn(kAllStates),
                                          testing::ValuesIn(kAllOps)),
                         pair_name);

// --- the table: what depends on the side --------------------------------------------------

TEST(HandshakeTable, ChallengeIsAllowedWhileRequestedAfterAnAuthenticatingRequest) {
  Handshake a(false, &kKey);
  send_request(a, {}, nonce(1));
  EXPECT_TRUE(a.auth_sent());
  EXPECT_TRUE(a.allowed(frame(Op::kChallenge)));
}

TEST(HandshakeTable, ChallengeIsForbiddenOnceThePeerHasProved) {
  Handshake a(false, &kKey);
  const Sent req = send_request(a, {}, nonce(1));
  Handshake p;
  p.incoming(false, &kKey);
  ASSERT_EQ(p.on_frame(req.h, req.payload.data()).step, Step::kChallenge);
  unsigned char challenge[wire::kChallengeSize];
  p.challenge(nonce(100), challenge);
  ASSERT_EQ(a.on_frame(frame(Op::kChallenge, sizeof(challenge)), challenge).step, Step::kProve);
  EXPECT_FALSE(a.allowed(frame(Op::kChallenge)));
}

TEST(HandshakeTable, ConnAcceptIsForbiddenBeforeThePeerOfAnAuthenticatingRequestHasProved) {
  Handshake a(false, &kKey);
  send_request(a, {}, nonce(1));
  EXPECT_FALSE(a.allowed(frame(Op::kConnAccept)));
  EXPECT_EQ(a.on_frame(frame(Op::kConnAccept), nullptr).step, Step::kViolation);
}

TEST(HandshakeTable, ConnAcceptIsAllowedOnceThePeerHasProved) {
  Handshake a(false, &kKey);
  const Sent req = send_request(a, {}, nonce(1));
  Handshake p;
  p.incoming(false, &kKey);
  p.on_frame(req.h, req.payload.data());
  unsigned char challenge[wire::kChallengeSize];
  p.challenge(nonce(100), challenge);
  a.on_frame(frame(Op::kChallenge, sizeof(challenge)), challenge);
  EXPECT_TRUE(a.allowed(frame(Op::kConnAccept)));
}

TEST(HandshakeTable, ConnRejectIsAllowedBeforeThePeerOfAnAuthenticatingRequestHasProved) {
  Handshake a(false, &kKey);
  send_request(a, {}, nonce(1));
  EXPECT_TRUE(a.allowed(frame(Op::kConnReject)));
}

TEST(HandshakeTable, ChallengeIsForbiddenWhenTheRequestDidNotAuthenticate) {
  Handshake a;  // no secret, so no kAuth
  send_request(a, {}, {});
  EXPECT_FALSE(a.auth_sent());
  EXPECT_FALSE(a.allowed(frame(Op::kChallenge)));
}

TEST(HandshakeTable, MessagesComeBackOnTheConnectingSideOfAnRdmConnectionOnceItIsUp) {
  Handshake a(/*rdm=*/true);
  send_request(a, name_of(7000), {});
  // Not while the request is unanswered.
  EXPECT_FALSE(a.allowed(frame(Op::kMsg)));
  EXPECT_FALSE(a.allowed(frame(Op::kTagged)));
  ASSERT_EQ(a.on_frame(frame(Op::kConnAccept), nullptr).step, Step::kConfirm);
  // The peer answers through the connection this side made, with its acknowledgements.
  EXPECT_TRUE(a.allowed(frame(Op::kMsg)));
  EXPECT_TRUE(a.allowed(frame(Op::kTagged)));
  EXPECT_TRUE(a.allowed(frame(Op::kAckReceived)));
  EXPECT_TRUE(a.allowed(frame(Op::kAckDelivered)));
  EXPECT_TRUE(a.allowed(frame(Op::kShutdown)));
}

TEST(HandshakeTable, MessagesAreAllowedOnTheAcceptingSideOfAnRdmConnection) {
  Handshake p(/*rdm=*/true);
  p.incoming(/*inbound=*/true, nullptr);
  const Bytes name = name_of(7000);
  ASSERT_EQ(p.on_frame(frame(Op::kConnReq, name.size()), name.data()).step, Step::kAcceptPeer);
  ASSERT_EQ(p.on_frame(frame(Op::kConnReady), nullptr).step, Step::kConnected);
  EXPECT_TRUE(p.allowed(frame(Op::kMsg)));
  EXPECT_TRUE(p.allowed(frame(Op::kTagged)));
}

TEST(HandshakeTable, NothingIsAllowedOnceClosedOnAnySide) {
  for (Handshake hs : {Handshake(), Handshake(true), Handshake(false, &kKey)}) {
    hs.close();
    for (Op op : kAllOps) EXPECT_FALSE(hs.allowed(frame(op))) << op_name(op);
  }
}

// --- transitions ---------------------------------------------------------------------------

TEST(HandshakeTransitions, APlainActiveSideConnectsOnTheAcceptAndReportsItsData) {
  Handshake a;
  EXPECT_EQ(a.state(), State::kIdle);
  EXPECT_FALSE(a.passive());
  EXPECT_EQ(a.connecting(), State::kConnecting);
  a.request(frame(Op::kConnReq), nullptr);
  EXPECT_FALSE(a.auth_sent());
  EXPECT_EQ(a.sent(), State::kRequested);
  const Bytes data = bytes("welcome");
  const Next next = a.on_frame(frame(Op::kConnAccept, data.size()), data.data());
  EXPECT_EQ(next.step, Step::kConfirm);
  EXPECT_EQ(next.state, State::kConnected);
  EXPECT_EQ(a.state(), State::kConnected);
  EXPECT_EQ(next.data, data.data());
  EXPECT_EQ(next.len, data.size());
}

TEST(HandshakeTransitions, APlainPassiveSideReportsTheRequestThenConnectsOnTheReady) {
  Handshake p;
  EXPECT_EQ(p.incoming(false, nullptr), State::kIncoming);
  EXPECT_TRUE(p.passive());
  EXPECT_FALSE(p.inbound());
  const Bytes data = bytes("let me in");
  Header req = frame(Op::kConnReq, data.size(), wire::kShmOffer);
  req.tag = 0x1234;
  req.data = 0x5678;
  const Next next = p.on_frame(req, data.data());
  EXPECT_EQ(next.step, Step::kReport);
  EXPECT_EQ(next.state, State::kPending);
  EXPECT_EQ(next.data, data.data());
  EXPECT_EQ(next.len, data.size());
  // The offer goes with the request, for the connection to map.
  EXPECT_EQ(next.request.flags, wire::kShmOffer);
  EXPECT_EQ(next.request.tag, 0x1234u);
  EXPECT_EQ(next.request.data, 0x5678u);
  EXPECT_EQ(p.accept(), State::kAccepted);
  const Next ready = p.on_frame(frame(Op::kConnReady), nullptr);
  EXPECT_EQ(ready.step, Step::kConnected);
  EXPECT_EQ(ready.state, State::kConnected);
}

TEST(HandshakeTransitions, DataAndAcknowledgementsAreNotTheHandshakes) {
  Handshake a = at(State::kConnected);
  for (Op op : {Op::kMsg, Op::kTagged, Op::kAckReceived, Op::kAckDelivered}) {
    const Next next = a.on_frame(frame(op), nullptr);
    EXPECT_EQ(next.step, Step::kNone) << op_name(op);
    EXPECT_EQ(next.state, State::kConnected);
  }
}

TEST(HandshakeTransitions, ShutdownIsThePeersClose) {
  Handshake a = at(State::kConnected);
  const Next next = a.on_frame(frame(Op::kShutdown), nullptr);
  EXPECT_EQ(next.step, Step::kPeerClosed);
  EXPECT_EQ(next.state, State::kClosed);
}

TEST(HandshakeTransitions, AnAuthenticatedHandshakeChallengesProvesThenReportsTheData) {
  Handshake a(false, &kKey);
  Handshake p;
  p.incoming(false, &kKey);
  const Bytes data = bytes("connect data");
  const Sent req = send_request(a, data, nonce(1));
  EXPECT_TRUE(a.auth_sent());
  EXPECT_EQ(req.h.length, data.size() + wire::kNonceSize);

  const Next c = p.on_frame(req.h, req.payload.data());
  EXPECT_EQ(c.step, Step::kChallenge);
  EXPECT_EQ(c.state, State::kProving);
  unsigned char challenge[wire::kChallengeSize];
  p.challenge(nonce(100), challenge);

  const Next pr = a.on_frame(frame(Op::kChallenge, sizeof(challenge)), challenge);
  EXPECT_EQ(pr.step, Step::kProve);
  EXPECT_EQ(pr.state, State::kRequested);
  EXPECT_TRUE(a.peer_proved());
  const core::Digest proof = a.proof();

  EXPECT_FALSE(p.peer_proved());
  const Next r = p.on_frame(frame(Op::kProof, proof.size()), proof.data());
  EXPECT_EQ(r.step, Step::kReport);
  EXPECT_EQ(r.state, State::kPending);
  EXPECT_TRUE(p.peer_proved());
  // The connect data without the nonce, and the request as it came.
  EXPECT_EQ(Bytes(r.data, r.data + r.len), data);
  EXPECT_EQ(r.request.flags, wire::kAuth);
  EXPECT_EQ(r.request.length, req.h.length);

  p.accept();
  EXPECT_EQ(a.on_frame(frame(Op::kConnAccept), nullptr).step, Step::kConfirm);
  EXPECT_EQ(p.on_frame(frame(Op::kConnReady), nullptr).step, Step::kConnected);
  EXPECT_EQ(a.state(), State::kConnected);
  EXPECT_EQ(p.state(), State::kConnected);
  // Both sides saw the same transcript.
  EXPECT_EQ(a.transcript().nc, p.transcript().nc);
  EXPECT_EQ(a.transcript().ns, p.transcript().ns);
  EXPECT_EQ(a.transcript().r, p.transcript().r);
}

TEST(HandshakeTransitions, AnRdmListenerAcceptsThePeerItsRequestNamesAtOnce) {
  Handshake a(/*rdm=*/true);
  Handshake p(/*rdm=*/true);
  p.incoming(/*inbound=*/true, nullptr);
  EXPECT_TRUE(p.inbound());
  const Sent req = send_request(a, name_of(4242), {});
  const Next next = p.on_frame(req.h, req.payload.data());
  EXPECT_EQ(next.step, Step::kAcceptPeer);
  EXPECT_EQ(next.state, State::kAccepted);
  EXPECT_EQ(next.peer.sin_family, AF_INET);
  EXPECT_EQ(ntohs(next.peer.sin_port), 4242);
  EXPECT_EQ(ntohl(next.peer.sin_addr.s_addr), INADDR_LOOPBACK);
  EXPECT_EQ(a.on_frame(frame(Op::kConnAccept), nullptr).step, Step::kConfirm);
  EXPECT_EQ(p.on_frame(frame(Op::kConnReady), nullptr).step, Step::kConnected);
}

TEST(HandshakeTransitions, AnAuthenticatedRdmRequestIsAcceptedOnlyAfterItsProof) {
  Handshake a(/*rdm=*/true, &kKey);
  Handshake p(/*rdm=*/true);
  p.incoming(/*inbound=*/true, &kKey);
  const Sent req = send_request(a, name_of(4242), nonce(7));
  ASSERT_EQ(p.on_frame(req.h, req.payload.data()).step, Step::kChallenge);
  unsigned char challenge[wire::kChallengeSize];
  p.challenge(nonce(77), challenge);
  ASSERT_EQ(a.on_frame(frame(Op::kChallenge, sizeof(challenge)), challenge).step, Step::kProve);
  const core::Digest proof = a.proof();
  const Next next = p.on_frame(frame(Op::kProof, proof.size()), proof.data());
  EXPECT_EQ(next.step, Step::kAcceptPeer);
  EXPECT_EQ(next.state, State::kAccepted);
  EXPECT_EQ(ntohs(next.peer.sin_port), 4242);
}

// A scalable endpoint's peers name the receive context they connect to, and its transmit
// contexts say they take nothing back (wire.h kRdmRequestLong).
TEST(HandshakeTransitions, AnRdmRequestNamesTheReceiveContextAndWhetherItTakesAnswers) {
  sockaddr_in name{};
  name.sin_family = AF_INET;
  name.sin_port = htons(4242);
  name.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (const auto& [rx, one_way] : {std::pair{0u, false}, std::pair{3u, false}, std::pair{0u, true},
                                    std::pair{wire::kRdmRxMask, true}}) {
    const RdmConnectData d = rdm_connect_data(name, rx, one_way);
    EXPECT_EQ(d.len, rx == 0 && !one_way ? sizeof(sockaddr_in) : wire::kRdmRequestLong)
        << "the short form when there is nothing more to say";
    Handshake a(/*rdm=*/true);
    Handshake p(/*rdm=*/true);
    p.incoming(/*inbound=*/true, nullptr);
    const Sent req = send_request(a, Bytes(d.bytes, d.bytes + d.len), {});
    const Next next = p.on_frame(req.h, req.payload.data());
    ASSERT_EQ(next.step, Step::kAcceptPeer) << rx;
    EXPECT_EQ(next.rx, rx);
    EXPECT_EQ(next.one_way, one_way);
    EXPECT_EQ(ntohs(next.peer.sin_port), 4242);
  }
}

TEST(HandshakeTransitions, AnRdmRequestWithoutANameIsAViolation) {
  // Neither length, a name of another family, and a long form whose name is not AF_INET.
  for (const Bytes& data : {Bytes{}, bytes("not a sockaddr_in"), Bytes(sizeof(sockaddr_in)),
                            Bytes(wire::kRdmRequestLong), Bytes(wire::kRdmRequestLong + 1, 2)}) {
    Handshake p(/*rdm=*/true);
    p.incoming(true, nullptr);
    const Next next = p.on_frame(frame(Op::kConnReq, data.size()), data.data());
    EXPECT_EQ(next.step, Step::kViolation);
    EXPECT_EQ(next.state, State::kClosed);
    EXPECT_STREQ(next.why, "an RDM request without a name");
  }
}

TEST(HandshakeTransitions, ARejectIsARefusalWithTheRejectData) {
  Handshake a = at(State::kRequested);
  const Bytes data = bytes("go away");
  const Next next = a.on_frame(frame(Op::kConnReject, data.size()), data.data());
  EXPECT_EQ(next.step, Step::kRefused);
  EXPECT_EQ(next.state, State::kClosed);
  EXPECT_EQ(next.why, nullptr);
  EXPECT_EQ(next.data, data.data());
  EXPECT_EQ(next.len, data.size());
}

TEST(HandshakeTransitions, ARejectFromAPeerThatHasNotProvedTheSecretIsNotReported) {
  Handshake a(false, &kKey);
  send_request(a, {}, nonce(1));
  const Bytes data = bytes("words of a stranger");
  const Next next = a.on_frame(frame(Op::kConnReject, data.size()), data.data());
  EXPECT_EQ(next.step, Step::kRefused);
  EXPECT_EQ(next.data, nullptr);
  EXPECT_EQ(next.len, 0u);
}

TEST(HandshakeTransitions, ARejectAfterTheProofIsReportedWithItsData) {
  Handshake a(false, &kKey);
  const Sent req = send_request(a, {}, nonce(1));
  Handshake p;
  p.incoming(false, &kKey);
  p.on_frame(req.h, req.payload.data());
  unsigned char challenge[wire::kChallengeSize];
  p.challenge(nonce(9), challenge);
  a.on_frame(frame(Op::kChallenge, sizeof(challenge)), challenge);
  const Bytes data = bytes("no thanks");
  const Next next = a.on_frame(frame(Op::kConnReject, data.size()), data.data());
  EXPECT_EQ(next.step, Step::kRefused);
  EXPECT_EQ(next.data, data.data());
  EXPECT_EQ(next.len, data.size());
}

TEST(HandshakeTransitions, APassiveSideWithASecretRejectsARequestWithoutOne) {
  Handshake p;
  p.incoming(false, &kKey);
  const Bytes data = bytes("hi");
  const Next next = p.on_frame(frame(Op::kConnReq, data.size()), data.data());
  EXPECT_EQ(next.step, Step::kReject);
  EXPECT_EQ(next.state, State::kClosed);
  EXPECT_STREQ(next.why, "it does not authenticate and this side holds a secret");
}

TEST(HandshakeTransitions, APassiveSideWithASecretRejectsAnAuthenticatingRequestWithoutANonce) {
  Handshake p;
  p.incoming(false, &kKey);
  const Bytes data(wire::kNonceSize - 1, 0x55);
  const Next next = p.on_frame(frame(Op::kConnReq, data.size(), wire::kAuth), data.data());
  EXPECT_EQ(next.step, Step::kReject);
  EXPECT_STREQ(next.why, "it does not authenticate and this side holds a secret");
}

TEST(HandshakeTransitions, APassiveSideWithoutASecretRejectsAnAuthenticatingRequest) {
  Handshake a(false, &kKey);
  const Sent req = send_request(a, bytes("hi"), nonce(1));
  Handshake p;
  p.incoming(false, nullptr);
  const Next next = p.on_frame(req.h, req.payload.data());
  EXPECT_EQ(next.step, Step::kReject);
  EXPECT_EQ(next.state, State::kClosed);
  EXPECT_STREQ(next.why, "it asks to authenticate and this side holds no secret");
}

TEST(HandshakeTransitions, SharedMemoryTakenButNotOfferedIsAViolation) {
  Handshake a = at(State::kRequested);
  const Next next = a.on_frame(frame(Op::kConnAccept, 0, wire::kShmAccept), nullptr);
  EXPECT_EQ(next.step, Step::kViolation);
  EXPECT_STREQ(next.why, "shared memory taken but not offered");
}

TEST(HandshakeTransitions, SharedMemoryOfferedAndTakenConfirms) {
  Handshake a;
  send_request(a, {}, {}, wire::kShmOffer);
  EXPECT_EQ(a.on_frame(frame(Op::kConnAccept, 0, wire::kShmAccept), nullptr).step, Step::kConfirm);
}

TEST(HandshakeTransitions, OwnTransitionsMoveOnlyFromTheStateTheyName) {
  for (State s : kAllStates) {
    Handshake hs = at(s);
    EXPECT_EQ(hs.connecting(), s == State::kIdle ? State::kConnecting : s) << state_name(s);
    hs = at(s);
    EXPECT_EQ(hs.sent(), s == State::kConnecting ? State::kRequested : s) << state_name(s);
    hs = at(s);
    EXPECT_EQ(hs.incoming(false, nullptr), s == State::kIdle ? State::kIncoming : s)
        << state_name(s);
    hs = at(s);
    EXPECT_EQ(hs.accept(), s == State::kPending ? State::kAccepted : s) << state_name(s);
    hs = at(s);
    EXPECT_EQ(hs.close(), State::kClosed) << state_name(s);
  }
}

TEST(HandshakeTransitions, NothingLeavesClosed) {
  Handshake hs = at(State::kClosed);
  EXPECT_EQ(hs.connecting(), State::kClosed);
  EXPECT_EQ(hs.sent(), State::kClosed);
  EXPECT_EQ(hs.incoming(true, &kKey), State::kClosed);
  EXPECT_EQ(hs.accept(), State::kClosed);
  for (Op op : kAllOps) {
    const Header h = frame(op);
    EXPECT_EQ(hs.on_frame(h, nullptr).state, State::kClosed) << op_name(op);
  }
}

// --- authentication ------------------------------------------------------------------------

// HMAC-SHA256(K, label || Nc || Ns || R), written out from wire.h in one call.
core::Digest expected_mac(std::string_view secret, std::string_view label, const Nonce& nc,
                          const Nonce& ns, const core::Digest& r) {
  Bytes msg(label.begin(), label.end());
  msg.insert(msg.end(), nc.begin(), nc.end());
  msg.insert(msg.end(), ns.begin(), ns.end());
  msg.insert(msg.end(), r.begin(), r.end());
  return core::HmacSha256::mac(secret.data(), secret.size(), msg.data(), msg.size());
}

// R, written out: SHA-256 of the frame's bytes, header then payload.
core::Digest expected_digest(const Header& h, const Bytes& payload) {
  Bytes f(wire::kHeaderSize);
  wire::encode(h, f.data());
  f.insert(f.end(), payload.begin(), payload.end());
  return core::Sha256::hash(f.data(), f.size());
}

TEST(HandshakeAuth, TheLabelsAreThoseOfWireH) {
  EXPECT_EQ(kAcceptLabel, "fabq-auth-accept");
  EXPECT_EQ(kRequestLabel, "fabq-auth-request");
}

TEST(HandshakeAuth, TheRequestDigestIsTheSha256OfTheWholeFrame) {
  Bytes payload = bytes("data");
  const Nonce nc = nonce(3);
  payload.insert(payload.end(), nc.begin(), nc.end());
  Header h = frame(Op::kConnReq, payload.size(), wire::kAuth | wire::kShmOffer);
  h.tag = 0xabcdef;
  h.data = 0x123456789;
  EXPECT_EQ(request_digest(h, payload.data()), expected_digest(h, payload));
}

TEST(HandshakeAuth, MacSAndMacCAreHmacSha256OfTheirLabelNoncesAndDigest) {
  Transcript t{nonce(1), nonce(50), core::Sha256::hash("R", 1)};
  EXPECT_EQ(accept_mac(kKey, t), expected_mac(kSecret, "fabq-auth-accept", t.nc, t.ns, t.r));
  EXPECT_EQ(request_mac(kKey, t), expected_mac(kSecret, "fabq-auth-request", t.nc, t.ns, t.r));
  EXPECT_NE(accept_mac(kKey, t), request_mac(kKey, t));
  EXPECT_NE(accept_mac(kKey, t), accept_mac(kOtherKey, t));
}

TEST(HandshakeAuth, TheHandshakesFramesCarryTheMacsOfWhatWasSent) {
  Handshake a(false, &kKey);
  const Sent req = send_request(a, bytes("who"), nonce(11));
  const core::Digest r = expected_digest(req.h, req.payload);
  EXPECT_EQ(a.transcript().r, r);
  EXPECT_EQ(a.transcript().nc, nonce(11));

  Handshake p;
  p.incoming(false, &kKey);
  p.on_frame(req.h, req.payload.data());
  EXPECT_EQ(p.transcript().r, r);
  unsigned char challenge[wire::kChallengeSize];
  p.challenge(nonce(200), challenge);
  // Ns, then MAC_s.
  const Nonce ns = nonce(200);
  EXPECT_EQ(Bytes(challenge, challenge + wire::kNonceSize), Bytes(ns.begin(), ns.end()));
  const core::Digest mac_s = expected_mac(kSecret, "fabq-auth-accept", nonce(11), ns, r);
  EXPECT_EQ(Bytes(challenge + wire::kNonceSize, challenge + sizeof(challenge)),
            Bytes(mac_s.begin(), mac_s.end()));

  a.on_frame(frame(Op::kChallenge, sizeof(challenge)), challenge);
  EXPECT_EQ(a.proof(), expected_mac(kSecret, "fabq-auth-request", nonce(11), ns, r));
}

TEST(HandshakeAuth, CheckChallengeAndCheckProofTakeOnlyTheRightMacOfTheRightSize) {
  Transcript t{nonce(1), nonce(2), core::Sha256::hash("R", 1)};
  unsigned char challenge[wire::kChallengeSize];
  make_challenge(kKey, t, challenge);
  Transcript mine{t.nc, {}, t.r};
  EXPECT_TRUE(check_challenge(kKey, challenge, sizeof(challenge), &mine));
  EXPECT_EQ(mine.ns, t.ns);
  EXPECT_FALSE(check_challenge(kOtherKey, challenge, sizeof(challenge), &mine));
  EXPECT_FALSE(check_challenge(kKey, challenge, sizeof(challenge) - 1, &mine));
  challenge[sizeof(challenge) - 1] ^= 1;
  EXPECT_FALSE(check_challenge(kKey, challenge, sizeof(challenge), &mine));

  const core::Digest proof = request_mac(kKey, t);
  EXPECT_TRUE(check_proof(kKey, t, proof.data(), proof.size()));
  EXPECT_FALSE(check_proof(kOtherKey, t, proof.data(), proof.size()));
  EXPECT_FALSE(check_proof(kKey, t, proof.data(), proof.size() - 1));
  // MAC_s is not MAC_c: the passive side's own MAC sent back proves nothing.
  const core::Digest reflected = accept_mac(kKey, t);
  EXPECT_FALSE(check_proof(kKey, t, reflected.data(), reflected.size()));
}

// A passive side that challenged the request `req` of a side with `key`.
Handshake challenged(const core::HmacSha256* key, Handshake* a) {
  *a = Handshake(false, key);
  const Sent req = send_request(*a, bytes("let me in"), nonce(1));
  Handshake p;
  p.incoming(false, &kKey);
  EXPECT_EQ(p.on_frame(req.h, req.payload.data()).step, Step::kChallenge);
  return p;
}

void expect_proof_rejected(Handshake& p, const unsigned char* proof, size_t len) {
  const Next next = p.on_frame(frame(Op::kProof, len), proof);
  EXPECT_EQ(next.step, Step::kReject);
  EXPECT_EQ(next.state, State::kClosed);
  EXPECT_STREQ(next.why, "it did not prove the secret");
  EXPECT_FALSE(p.peer_proved());
}

TEST(HandshakeAuth, AProofUnderAnotherSecretIsRejected) {
  Handshake a;
  Handshake p = challenged(&kOtherKey, &a);
  unsigned char challenge[wire::kChallengeSize];
  p.challenge(nonce(5), challenge);
  // The other side sees through the challenge first ...
  Handshake a2 = a;
  EXPECT_EQ(a2.on_frame(frame(Op::kChallenge, sizeof(challenge)), challenge).step, Step::kRefused);
  // ... and a proof it makes anyway is refused.
  Transcript t = p.transcript();
  const core::Digest proof = request_mac(kOtherKey, t);
  expect_proof_rejected(p, proof.data(), proof.size());
}

TEST(HandshakeAuth, AProofWithOneBitWrongIsRejected) {
  Handshake a;
  Handshake p = challenged(&kKey, &a);
  unsigned char challenge[wire::kChallengeSize];
  p.challenge(nonce(5), challenge);
  ASSERT_EQ(a.on_frame(frame(Op::kChallenge, sizeof(challenge)), challenge).step, Step::kProve);
  core::Digest proof = a.proof();
  proof[17] ^= 0x04;
  expect_proof_rejected(p, proof.data(), proof.size());
}

TEST(HandshakeAuth, TheChallengesOwnMacSentBackIsRejected) {
  Handshake a;
  Handshake p = challenged(&kKey, &a);
  unsigned char challenge[wire::kChallengeSize];
  p.challenge(nonce(5), challenge);
  expect_proof_rejected(p, challenge + wire::kNonceSize, wire::kMacSize);
}

TEST(HandshakeAuth, AShortProofIsRejected) {
  Handshake a;
  Handshake p = challenged(&kKey, &a);
  unsigned char challenge[wire::kChallengeSize];
  p.challenge(nonce(5), challenge);
  a.on_frame(frame(Op::kChallenge, sizeof(challenge)), challenge);
  const core::Digest proof = a.proof();
  expect_proof_rejected(p, proof.data(), proof.size() - 1);
}

TEST(HandshakeAuth, AChallengeWithAWrongMacIsARefusalWithoutData) {
  Handshake a(false, &kKey);
  send_request(a, {}, nonce(1));
  unsigned char challenge[wire::kChallengeSize] = {};
  const Next next = a.on_frame(frame(Op::kChallenge, sizeof(challenge)), challenge);
  EXPECT_EQ(next.step, Step::kRefused);
  EXPECT_EQ(next.state, State::kClosed);
  EXPECT_STREQ(next.why, "the peer did not prove the secret");
  EXPECT_EQ(next.data, nullptr);
  EXPECT_FALSE(a.peer_proved());
}

TEST(HandshakeAuth, AChallengeOfTheWrongSizeIsAViolation) {
  Handshake a(false, &kKey);
  send_request(a, {}, nonce(1));
  unsigned char challenge[wire::kChallengeSize] = {};
  const Next next = a.on_frame(frame(Op::kChallenge, sizeof(challenge) - 1), challenge);
  EXPECT_EQ(next.step, Step::kViolation);
  EXPECT_STREQ(next.why, "a challenge of the wrong size");
}

}  // namespace
}  // namespace fabq::xport::handshake
