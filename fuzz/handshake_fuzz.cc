// libFuzzer target for the handshake's state machine (xport/handshake.h): a peer's byte stream
// goes through a Framer the way the TCP transport reads it, and every header and whole frame
// through a Handshake, on either side of a connection, with or without a secret. The harness
// does what the connection does with each answer (challenge, prove, accept, close) and checks
// it against the protocol of wire.h, restated here. Any broken invariant traps.
//
// Input layout:
//   byte 0       the side under test: bit 0 passive (else active), bit 1 RDM, bit 2 it holds the
//                secret, bit 3 the peer holds one, bit 4 the peer's is another, bit 5 the
//                request offers shared memory
//   byte 1       the read size (0: all the bytes that wait, at once)
//   the rest     records, each a tag byte t and what t % 4 says:
//     0  raw stream: a length n, then n bytes
//     1  the peer's next frame, made right, with MACs under the peer's secret; an option byte o
//        follows. (t >> 2) % 8 picks it: 0 the request (active peer) or the challenge (passive
//        peer), 1 the proof or the accept (kShmAccept if o & 1), 2 kConnReady or kConnReject,
//        3 kShutdown, 4 a message of o % 64 bytes, 5 an acknowledgement, 6 a one-sided request
//        (o % 3: kWrite, kReadReq, kAtomic), 7 an answer to one (o % 3: kRmaAck, kReadResp,
//        kAtomicResp; a refusal when o & 4)
//     2  a frame with a well-formed header: op (any of wire.h's), flags, a length n, then n
//        bytes of payload
//     3  the connection on its own: fi_accept ((t >> 2) even) or a close (odd)
//
// Invariants checked:
//   - allowed() answers wire.h's table; when it says no, on_frame() says kViolation, and the
//     connection fails;
//   - every move is an edge of the protocol, nothing leaves kClosed, and a Next's state is the
//     handshake's; the steps that end the connection, and only those, leave it in kClosed;
//   - each whole frame gets the step wire.h gives it (data, acknowledgements, one-sided requests
//     and their answers none: the connection, not the handshake, acts on them; kShutdown
//     the peer's close; a request reported, accepted, challenged or refused by who holds a
//     secret; an RDM request only with a name);
//   - kConnected only after the protocol's frames in order: the active side after [kChallenge]
//     kConnAccept, the passive side after kConnReq [kProof], the accept (fi_accept, or at once
//     for RDM) and kConnReady;
//   - with a secret, MAC_s, MAC_c, the challenge and the proof are HMAC-SHA256 of wire.h's
//     formula computed here; the active side proves only after a right MAC_s and connects only
//     after proving; the passive side acts on a request only after a right proof, and never
//     reports the data of a refusal from a peer that has not proved the secret.
#include <netinet/in.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "xport/handshake.h"

namespace fabq::xport::handshake {
namespace {

using wire::Header;
using wire::Op;
using Bytes = std::vector<unsigned char>;

constexpr std::string_view kSecret = "the fuzzer's secret";
constexpr std::string_view kOtherSecret = "somebody else's";
constexpr size_t kMaxPayload = 4096;  // the receiver's max_msg_size

void check(bool ok) {
  if (!ok) __builtin_trap();
}

bool same(const void* a, const void* b, size_t n) {
  return n == 0 || std::memcmp(a, b, n) == 0;
}

// Frames whose payload the handshake reads (the connection keeps it in a buffer of
// wire::kMaxConnReq bytes); the others' payload is placed, collected or dropped by the connection.
bool is_handshake(Op op) {
  return op == Op::kConnReq || op == Op::kConnAccept || op == Op::kConnReject ||
         op == Op::kChallenge || op == Op::kProof;
}

bool same_header(const Header& a, const Header& b) {
  return a.op == b.op && a.flags == b.flags && a.length == b.length && a.seq == b.seq &&
         a.tag == b.tag && a.data == b.data;
}

Bytes encoded(const Header& h, const Bytes& payload) {
  Bytes f(wire::kHeaderSize);
  wire::encode(h, f.data());
  f.insert(f.end(), payload.begin(), payload.end());
  return f;
}

// HMAC-SHA256(K, label || Nc || Ns || R), as wire.h writes it, in one call.
core::Digest mac_of(std::string_view secret, std::string_view label, const uint8_t* nc,
                    const uint8_t* ns, const Bytes& request_frame) {
  const core::Digest r = core::Sha256::hash(request_frame.data(), request_frame.size());
  Bytes msg(label.begin(), label.end());
  msg.insert(msg.end(), nc, nc + wire::kNonceSize);
  msg.insert(msg.end(), ns, ns + wire::kNonceSize);
  msg.insert(msg.end(), r.begin(), r.end());
  return core::HmacSha256::mac(secret.data(), secret.size(), msg.data(), msg.size());
}

// The protocol's edges: where each state may go (besides staying, and kClosed).
bool legal_edge(State a, State b) {
  if (a == b || b == State::kClosed) return true;
  switch (a) {
    case State::kIdle:
      return b == State::kConnecting || b == State::kIncoming;
    case State::kConnecting:
      return b == State::kRequested;
    case State::kRequested:
      return b == State::kConnected;
    case State::kIncoming:
      return b == State::kProving || b == State::kPending || b == State::kAccepted;
    case State::kProving:
      return b == State::kPending || b == State::kAccepted;
    case State::kPending:
      return b == State::kAccepted;
    case State::kAccepted:
      return b == State::kConnected;
    default:
      return false;
  }
}

bool ends(Step s) {
  return s == Step::kReject || s == Step::kRefused || s == Step::kPeerClosed ||
         s == Step::kViolation;
}

struct Input {
  const uint8_t* p;
  size_t n;
  uint8_t byte() {
    if (n == 0) return 0;
    --n;
    return *p++;
  }
  Bytes take(size_t k) {
    k = std::min(k, n);
    Bytes b(p, p + k);
    p += k;
    n -= k;
    return b;
  }
};

Bytes name_of(uint16_t port) {
  sockaddr_in name{};
  name.sin_family = AF_INET;
  name.sin_port = htons(port);
  name.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  Bytes b(sizeof(name));
  std::memcpy(b.data(), &name, sizeof(name));
  return b;
}

class Run {
 public:
  explicit Run(uint8_t config, uint8_t read_size)
      : passive_((config & 1) != 0),
        rdm_((config & 2) != 0),
        keyed_((config & 4) != 0),
        peer_secret_((config & 8) == 0    ? std::string_view()
                     : (config & 16) != 0 ? kOtherSecret
                                          : kSecret),
        shm_offer_((config & 32) != 0),
        chunk_(read_size == 0 ? SIZE_MAX : read_size),
        key_(kSecret.data(), kSecret.size()),
        hs_(rdm_, !passive_ && keyed_ ? &key_ : nullptr) {
    if (passive_) {
      // An RDM listener's connection carries messages in; a passive endpoint's is MSG.
      step_to(hs_.incoming(/*inbound=*/rdm_, keyed_ ? &key_ : nullptr), State::kIdle);
      check(hs_.passive() && hs_.inbound() == rdm_);
      return;
    }
    check(hs_.connecting() == State::kConnecting);
    // The request as the connection sends it: the name or the data, the offer, then Nc.
    Bytes payload = rdm_ ? name_of(5000) : Bytes{'h', 'e', 'l', 'l', 'o'};
    Header h;
    h.op = Op::kConnReq;
    if (shm_offer_) {
      h.flags = wire::kShmOffer;
      h.tag = 0x5e9;
      h.data = 0xc0ffee;
    }
    if (keyed_) {
      nc_sent_ = nonce();
      payload.insert(payload.end(), nc_sent_.begin(), nc_sent_.end());
      h.flags |= wire::kAuth;
    }
    h.length = static_cast<uint32_t>(payload.size());
    sent_req_ = encoded(h, payload);
    hs_.request(h, payload.data());
    check(hs_.sent() == State::kRequested);
    check(hs_.auth_sent() == keyed_);
  }

  void record(Input& in) {
    const uint8_t t = in.byte();
    switch (t % 4) {
      case 0:
        push(in.take(in.byte()));
        break;
      case 1:
        honest((t >> 2) % 8, in.byte());
        break;
      case 2: {
        Header h;
        h.op = static_cast<Op>(in.byte() % static_cast<uint8_t>(wire::kLastOp) + 1);
        h.flags = in.byte() & 0x3f;
        const Bytes payload = in.take(in.byte());
        h.length = static_cast<uint32_t>(payload.size());
        push(encoded(h, payload));
        break;
      }
      default:
        if (((t >> 2) & 1) == 0) {
          const State before = hs_.state();
          const State after = hs_.accept();
          check(after == (before == State::kPending ? State::kAccepted : before));
          if (after != before) accepted_ = true;
          step_to(after, before);
        } else {
          close();
        }
        pump();
        break;
    }
  }

 private:
  Nonce nonce() {
    Nonce n;
    ++counter_;
    for (size_t i = 0; i < n.size(); ++i) n[i] = static_cast<uint8_t>(counter_ * 31 + i);
    return n;
  }

  // Everything a move must respect; `after` is the state a call returned.
  void step_to(State after, State before) {
    check(after == hs_.state());
    check(legal_edge(before, after));
    if (after != State::kClosed) return;
    // Nothing leaves kClosed, and nothing is allowed there.
    Handshake copy = hs_;
    check(copy.connecting() == State::kClosed);
    check(copy.sent() == State::kClosed);
    check(copy.incoming(true, nullptr) == State::kClosed);
    check(copy.accept() == State::kClosed);
    for (uint8_t op = 1; op <= static_cast<uint8_t>(wire::kLastOp); ++op) {
      Header h;
      h.op = static_cast<Op>(op);
      check(!copy.allowed(h));
      check(copy.on_frame(h, nullptr).state == State::kClosed);
    }
  }

  void push(const Bytes& b) {
    inq_.insert(inq_.end(), b.begin(), b.end());
    pump();
  }

  // The peer's next frame, made as an honest peer with its secret makes it.
  void honest(unsigned which, uint8_t o) {
    Header h;
    Bytes payload;
    switch (which) {
      case 0:
        if (passive_) {
          // An active peer's request.
          h.op = Op::kConnReq;
          payload = rdm_ ? name_of(6000) : Bytes(o % 8, 'd');
          if (shm_offer_) {
            h.flags = wire::kShmOffer;
            h.tag = 7;
            h.data = 9;
          }
          if (!peer_secret_.empty()) {
            peer_nc_ = nonce();
            payload.insert(payload.end(), peer_nc_.begin(), peer_nc_.end());
            h.flags |= wire::kAuth;
          }
          h.length = static_cast<uint32_t>(payload.size());
          peer_req_ = encoded(h, payload);
        } else {
          // A passive peer's challenge: Ns and MAC_s of the request this side sent.
          h.op = Op::kChallenge;
          const Nonce ns = nonce();
          const core::Digest mac =
              mac_of(peer_secret_, "fabq-auth-accept", nc_sent_.data(), ns.data(), sent_req_);
          payload.assign(ns.begin(), ns.end());
          payload.insert(payload.end(), mac.begin(), mac.end());
        }
        break;
      case 1:
        if (passive_) {
          // MAC_c over what the peer sent and the Ns it was challenged with.
          h.op = Op::kProof;
          const core::Digest mac = mac_of(peer_secret_, "fabq-auth-request", peer_nc_.data(),
                                          peer_ns_.data(), peer_req_);
          payload.assign(mac.begin(), mac.end());
        } else {
          h.op = Op::kConnAccept;
          if ((o & 1) != 0) h.flags = wire::kShmAccept;
          payload.assign(o % 5, 'a');
        }
        break;
      case 2:
        h.op = passive_ ? Op::kConnReady : Op::kConnReject;
        if (!passive_) payload.assign(o % 7, 'r');
        break;
      case 3:
        h.op = Op::kShutdown;
        break;
      case 4:
        h.op = Op::kMsg;
        h.seq = ++counter_;
        payload.assign(o % 64, 'm');
        break;
      case 5:
        h.op = Op::kAckReceived;
        h.seq = o;
        break;
      case 6: {
        // A one-sided request: a region's key in `tag`, an address in `data`.
        static constexpr Op kRequests[] = {Op::kWrite, Op::kReadReq, Op::kAtomic};
        h.op = kRequests[o % 3];
        h.seq = ++counter_;
        h.tag = 0x6b6579;
        h.data = o;
        if (h.op == Op::kWrite) {
          if ((o & 4) != 0) {
            h.flags = wire::kRemoteData;
            payload.assign(8, 'c');  // the CQ data
          }
          payload.insert(payload.end(), o % 16, 'w');
        } else if (h.op == Op::kReadReq) {
          payload.resize(wire::kReadReqSize);
          wire::put_u64(payload.data(), o % 32);
        } else {
          payload.resize(wire::kAtomicDescSize);
          wire::encode_atomic({.op = 0, .datatype = 0, .kind = AtomicKind::kPlain, .count = 1},
                              payload.data());
          payload.push_back(o);
        }
        break;
      }
      default: {
        // An answer: a Status in `data`, and bytes only with kOk.
        static constexpr Op kAnswers[] = {Op::kRmaAck, Op::kReadResp, Op::kAtomicResp};
        h.op = kAnswers[o % 3];
        h.seq = o;
        if ((o & 4) != 0) {
          h.data = static_cast<uint64_t>(RmaStatus::kBadKey);
        } else if (h.op != Op::kRmaAck) {
          payload.assign(o % 8, 'r');
        }
        break;
      }
    }
    h.length = static_cast<uint32_t>(payload.size());
    push(encoded(h, payload));
  }

  void close() {
    const State before = hs_.state();
    step_to(hs_.close(), before);
  }

  // The connection fails: it closes, and reads nothing more.
  void fail() {
    close();
    pos_ = inq_.size();
  }

  // Reads what waits, as the connection does: not while pending (until fi_accept), nothing
  // once closed.
  void pump() {
    while (pos_ < inq_.size()) {
      const State s = hs_.state();
      if (s == State::kClosed) {
        pos_ = inq_.size();
        return;
      }
      if (s == State::kPending) return;
      const size_t avail = std::min(chunk_, inq_.size() - pos_);
      const unsigned char* p = inq_.data() + pos_;
      if (framer_.in_header()) {
        const size_t took = framer_.take_header(p, avail);
        hdr_.insert(hdr_.end(), p, p + took);
        pos_ += took;
        if (framer_.dead()) {
          fail();
          continue;
        }
        if (framer_.in_header() || !header_allowed()) continue;
      } else {
        const size_t took = framer_.take_payload(avail);
        if (is_handshake(framer_.header().op)) {
          check(got_ + took <= sizeof(payload_));
          std::memcpy(payload_ + got_, p, took);
        }
        got_ += took;
        pos_ += took;
      }
      if (framer_.frame_done()) {
        act();
        framer_.next_frame();
        hdr_.clear();
        got_ = 0;
      }
    }
  }

  // wire.h's table, restated: may a frame of `op` come now?
  bool expect_allowed(Op op) const {
    const State s = hs_.state();
    const bool auth_sent = !passive_ && keyed_;
    switch (op) {
      case Op::kConnReq:
        return s == State::kIncoming;
      case Op::kConnAccept:
        return s == State::kRequested && (!auth_sent || proved_);
      case Op::kConnReject:
        return s == State::kRequested;
      case Op::kChallenge:
        return s == State::kRequested && auth_sent && !proved_;
      case Op::kProof:
        return s == State::kProving;
      case Op::kConnReady:
        return s == State::kAccepted;
      case Op::kMsg:
      case Op::kTagged:
        return s == State::kConnected;  // both ways, on RDM connections too
      default:
        return s == State::kConnected;
    }
  }

  bool header_allowed() {
    const Header& h = framer_.header();
    const bool ok = hs_.allowed(h);
    check(ok == expect_allowed(h.op));
    check(hs_.peer_proved() == proved_);
    if (ok) return true;
    // A forbidden frame fails the connection, whatever follows it.
    Handshake copy = hs_;
    const Next next = copy.on_frame(h, nullptr);
    check(next.step == Step::kViolation && next.state == State::kClosed);
    fail();
    return false;
  }

  // A request acted on (reported or accepted): as wire.h says, with its data and offer. An RDM
  // request is a name, alone or followed by a little-endian word: the receive context in its
  // low 31 bits, "takes nothing back" in its top one.
  void check_taken(const Next& next, const Header& req, const unsigned char* data, size_t len) {
    if (rdm_) {
      sockaddr_in name{};
      const bool sized = len == wire::kRdmRequestShort || len == wire::kRdmRequestLong;
      if (sized) std::memcpy(&name, data, sizeof(name));
      if (name.sin_family != AF_INET) {
        check(next.step == Step::kViolation);
        return;
      }
      check(next.step == Step::kAcceptPeer && next.state == State::kAccepted);
      check(std::memcmp(&next.peer, &name, sizeof(name)) == 0);
      uint32_t word = 0;
      for (size_t i = sizeof(name); i < len; ++i) {
        word |= static_cast<uint32_t>(data[i]) << (8 * (i - sizeof(name)));
      }
      check(next.rx == (word & wire::kRdmRxMask) &&
            next.one_way == ((word & wire::kRdmOneWay) != 0));
    } else {
      check(next.step == Step::kReport && next.state == State::kPending);
    }
    check(same_header(next.request, req));
    check(next.len == len && same(next.data, data, len));
  }

  // A whole frame: what the handshake says of it, and doing it.
  void act() {
    const Header h = framer_.header();
    const State before = hs_.state();
    const Next next = hs_.on_frame(h, payload_);
    step_to(next.state, before);
    check(ends(next.step) == (next.state == State::kClosed));
    const size_t len = h.length;
    switch (h.op) {
      case Op::kMsg:
      case Op::kTagged:
      case Op::kAckReceived:
      case Op::kAckDelivered:
      case Op::kWrite:
      case Op::kReadReq:
      case Op::kReadResp:
      case Op::kRmaAck:
      case Op::kAtomic:
      case Op::kAtomicResp:
        // The connection's to act on, once connected: nothing of the handshake's.
        check(next.step == Step::kNone && next.state == before);
        check(before == State::kConnected);
        break;
      case Op::kShutdown:
        check(next.step == Step::kPeerClosed);
        break;
      case Op::kConnReq: {
        check(passive_);
        const bool auth = (h.flags & wire::kAuth) != 0;
        if (!keyed_ && !auth) {
          check_taken(next, h, payload_, len);
        } else if (keyed_ && auth && len >= wire::kNonceSize) {
          check(next.step == Step::kChallenge && next.state == State::kProving);
          taken_hdr_ = h;
          taken_req_ = hdr_;
          taken_req_.insert(taken_req_.end(), payload_, payload_ + len);
          // The challenge: Ns, then MAC_s of the request as it came.
          ns_given_ = nonce();
          unsigned char challenge[wire::kChallengeSize];
          hs_.challenge(ns_given_, challenge);
          const unsigned char* nc = payload_ + len - wire::kNonceSize;
          const core::Digest mac =
              mac_of(kSecret, "fabq-auth-accept", nc, ns_given_.data(), taken_req_);
          check(same(challenge, ns_given_.data(), wire::kNonceSize));
          check(same(challenge + wire::kNonceSize, mac.data(), mac.size()));
          peer_ns_ = ns_given_;  // the peer reads it
        } else {
          check(next.step == Step::kReject && next.why != nullptr);
        }
        break;
      }
      case Op::kProof: {
        check(passive_ && keyed_);
        const size_t data_len = taken_hdr_.length - wire::kNonceSize;
        const unsigned char* nc = taken_req_.data() + wire::kHeaderSize + data_len;
        const core::Digest mac =
            mac_of(kSecret, "fabq-auth-request", nc, ns_given_.data(), taken_req_);
        const bool right = len == mac.size() && same(payload_, mac.data(), mac.size());
        if (!right) {
          check(next.step == Step::kReject);
          break;
        }
        proved_ = true;
        check(hs_.peer_proved());
        check_taken(next, taken_hdr_, taken_req_.data() + wire::kHeaderSize, data_len);
        break;
      }
      case Op::kChallenge: {
        check(!passive_ && keyed_);
        if (len != wire::kChallengeSize) {
          check(next.step == Step::kViolation);
          break;
        }
        const core::Digest mac =
            mac_of(kSecret, "fabq-auth-accept", nc_sent_.data(), payload_, sent_req_);
        if (!same(payload_ + wire::kNonceSize, mac.data(), mac.size())) {
          check(next.step == Step::kRefused && next.data == nullptr && next.len == 0);
          break;
        }
        check(next.step == Step::kProve && next.state == State::kRequested);
        proved_ = true;
        // The proof: MAC_c over what this side sent and the Ns it was challenged with.
        const core::Digest proof = hs_.proof();
        const core::Digest want =
            mac_of(kSecret, "fabq-auth-request", nc_sent_.data(), payload_, sent_req_);
        check(proof == want);
        break;
      }
      case Op::kConnAccept:
        check(!passive_ && (!keyed_ || proved_));
        if ((h.flags & wire::kShmAccept) != 0 && !shm_offer_) {
          check(next.step == Step::kViolation);
          break;
        }
        check(next.step == Step::kConfirm && next.state == State::kConnected);
        check(next.data == payload_ && next.len == len);
        // In order: the challenge answered, if the request authenticated; nothing else.
        check(taken_.size() == (keyed_ ? 1u : 0u));
        if (keyed_) check(taken_[0] == Op::kChallenge);
        break;
      case Op::kConnReject:
        check(!passive_ && next.step == Step::kRefused && next.why == nullptr);
        if (keyed_ && !proved_) {
          // A peer that has not proved the secret: its words are not reported.
          check(next.data == nullptr && next.len == 0);
        } else {
          check(next.data == payload_ && next.len == len);
        }
        break;
      case Op::kConnReady:
        check(passive_ && next.step == Step::kConnected && next.state == State::kConnected);
        // In order: the request, its proof if this side holds a secret, the accept.
        check(taken_.size() == (keyed_ ? 2u : 1u) && taken_[0] == Op::kConnReq);
        if (keyed_) check(taken_[1] == Op::kProof && proved_);
        check(accepted_ != rdm_);
        break;
    }
    if (!ends(next.step) && next.step != Step::kNone) taken_.push_back(h.op);
  }

  const bool passive_;
  const bool rdm_;
  const bool keyed_;
  const std::string_view peer_secret_;  // empty: the peer holds none
  const bool shm_offer_;
  const size_t chunk_;
  const core::HmacSha256 key_;
  Handshake hs_;
  wire::Framer framer_{kMaxPayload};
  Bytes inq_;  // the stream; pos_ is read up to there
  size_t pos_ = 0;
  Bytes hdr_;  // the current frame's header bytes, as they came
  unsigned char payload_[wire::kMaxConnReq] = {};
  size_t got_ = 0;
  uint32_t counter_ = 0;
  std::vector<Op> taken_;  // the handshake's frames acted on, in order
  bool proved_ = false;    // the MAC the peer owed was right (checked here)
  bool accepted_ = false;  // fi_accept moved it
  // Active: the request sent and its Nc.
  Bytes sent_req_;
  Nonce nc_sent_{};
  // Passive: the request taken with a nonce, and the Ns it was challenged with.
  Header taken_hdr_{};
  Bytes taken_req_;
  Nonce ns_given_{};
  // The peer's side, for the frames it makes.
  Bytes peer_req_;
  Nonce peer_nc_{};
  Nonce peer_ns_{};
};

void run(const uint8_t* data, size_t size) {
  if (size < 2) return;
  Run r(data[0], data[1]);
  Input in{data + 2, size - 2};
  while (in.n > 0) r.record(in);
}

}  // namespace
}  // namespace fabq::xport::handshake

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fabq::xport::handshake::run(data, size);
  return 0;
}
