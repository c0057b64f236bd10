#include "xport/handshake.h"

#include <cstring>
#include <optional>

namespace fabq::xport::handshake {

const char* state_str(State s) {
  switch (s) {
    case State::kIdle:
      return "idle";
    case State::kConnecting:
      return "connecting";
    case State::kRequested:
      return "requested";
    case State::kIncoming:
      return "incoming";
    case State::kProving:
      return "proving";
    case State::kPending:
      return "pending";
    case State::kAccepted:
      return "accepted";
    case State::kConnected:
      return "connected";
    case State::kClosed:
      return "closed";
  }
  return "unknown";
}

// --- Authentication

core::Digest request_digest(const wire::Header& h, const unsigned char* payload) {
  unsigned char hdr[wire::kHeaderSize];
  wire::encode(h, hdr);
  core::Sha256 digest;
  digest.update(hdr, sizeof(hdr));
  digest.update(payload, h.length);
  return digest.final();
}

core::Digest auth_mac(const core::HmacSha256& key, std::string_view label, const Transcript& t) {
  core::HmacSha256 m = key;
  m.update(label.data(), label.size());
  m.update(t.nc.data(), t.nc.size());
  m.update(t.ns.data(), t.ns.size());
  m.update(t.r.data(), t.r.size());
  return m.final();
}

void make_challenge(const core::HmacSha256& key, const Transcript& t,
                    unsigned char out[wire::kChallengeSize]) {
  std::memcpy(out, t.ns.data(), t.ns.size());
  const core::Digest mac = accept_mac(key, t);
  std::memcpy(out + t.ns.size(), mac.data(), mac.size());
}

bool check_challenge(const core::HmacSha256& key, const unsigned char* payload, size_t len,
                     Transcript* t) {
  if (len != wire::kChallengeSize) return false;
  std::memcpy(t->ns.data(), payload, t->ns.size());
  return core::mac_equal(accept_mac(key, *t).data(), payload + t->ns.size());
}

bool check_proof(const core::HmacSha256& key, const Transcript& t, const unsigned char* payload,
                 size_t len) {
  return len == wire::kProofSize && core::mac_equal(request_mac(key, t).data(), payload);
}

// --- Handshake

State Handshake::connecting() {
  if (state_ == State::kIdle) state_ = State::kConnecting;
  return state_;
}

State Handshake::sent() {
  if (state_ == State::kConnecting) state_ = State::kRequested;
  return state_;
}

State Handshake::incoming(bool inbound, const core::HmacSha256* key) {
  if (state_ != State::kIdle) return state_;
  passive_ = true;
  inbound_ = inbound;
  key_ = key;
  state_ = State::kIncoming;
  return state_;
}

State Handshake::accept() {
  if (state_ == State::kPending) state_ = State::kAccepted;
  return state_;
}

State Handshake::close() {
  state_ = State::kClosed;
  return state_;
}

void Handshake::request(const wire::Header& h, const unsigned char* payload) {
  offered_shm_ = (h.flags & wire::kShmOffer) != 0;
  if (key_ == nullptr || (h.flags & wire::kAuth) == 0 || h.length < wire::kNonceSize) return;
  // What both MACs vouch for: the request as it went out (name, data, offer and nonce).
  auth_sent_ = true;
  std::memcpy(t_.nc.data(), payload + h.length - wire::kNonceSize, wire::kNonceSize);
  t_.r = request_digest(h, payload);
}

bool Handshake::allowed(const wire::Header& h) const {
  const State s = state_;
  switch (h.op) {
    case wire::Op::kConnReq:
      return s == State::kIncoming;
    case wire::Op::kConnAccept:
      // A side that asked to authenticate takes no accept from a peer that has not proved it
      // holds the secret.
      return s == State::kRequested && (!auth_sent_ || proved_);
    case wire::Op::kConnReject:
      return s == State::kRequested;
    case wire::Op::kChallenge:
      return s == State::kRequested && auth_sent_ && !proved_;
    case wire::Op::kProof:
      return s == State::kProving;
    case wire::Op::kConnReady:
      return s == State::kAccepted;
    case wire::Op::kMsg:
    case wire::Op::kTagged:
      // Both ways, on RDM connections too: an endpoint answers a peer through the connection
      // that peer made.
      return s == State::kConnected;
    default:
      return s == State::kConnected;
  }
}

Next Handshake::end(Step step, const char* why, const unsigned char* data, size_t len) {
  state_ = State::kClosed;
  return {.step = step, .state = state_, .why = why, .data = data, .len = len};
}

// A request, authenticated if this side holds a secret: reported (MSG) or accepted (RDM).
Next Handshake::take_request(const wire::Header& h, const unsigned char* data, size_t len) {
  Next next{.request = h, .data = data, .len = len};
  if (rdm_) {
    // The peer endpoint's name (and the receive context it connects to), then accepted at
    // once: an RDM endpoint takes every peer.
    const std::optional<wire::RdmRequest> req = wire::parse_rdm_request(data, len);
    if (!req) return end(Step::kViolation, "an RDM request without a name");
    next.step = Step::kAcceptPeer;
    next.peer = req->name;
    next.rx = req->rx;
    next.one_way = req->one_way;
    state_ = State::kAccepted;
  } else {
    next.step = Step::kReport;
    state_ = State::kPending;
  }
  next.state = state_;
  return next;
}

Next Handshake::on_frame(const wire::Header& h, const unsigned char* payload) {
  if (!allowed(h)) return end(Step::kViolation, "a frame the connection's state forbids");
  switch (h.op) {
    case wire::Op::kConnReq: {
      if (key_ == nullptr && (h.flags & wire::kAuth) == 0)
        return take_request(h, payload, h.length);
      if (key_ == nullptr || (h.flags & wire::kAuth) == 0 || h.length < wire::kNonceSize) {
        // One side holds a secret and the other does not: no connection either way.
        return end(Step::kReject, key_ == nullptr
                                      ? "it asks to authenticate and this side holds no secret"
                                      : "it does not authenticate and this side holds a secret");
      }
      // Kept, unreported, until the peer answers the challenge.
      held_req_ = h;
      const size_t data_len = h.length - wire::kNonceSize;
      std::memcpy(held_data_, payload, data_len);
      std::memcpy(t_.nc.data(), payload + data_len, wire::kNonceSize);
      t_.r = request_digest(h, payload);
      state_ = State::kProving;
      return {.step = Step::kChallenge, .state = state_};
    }
    case wire::Op::kChallenge:
      // The peer proves it holds the secret, then this side does.
      if (h.length != wire::kChallengeSize) {
        return end(Step::kViolation, "a challenge of the wrong size");
      }
      if (!check_challenge(*key_, payload, h.length, &t_)) {
        return end(Step::kRefused, "the peer did not prove the secret");
      }
      proved_ = true;
      return {.step = Step::kProve, .state = state_};
    case wire::Op::kProof:
      // Only a right proof gets the request acted on.
      if (!check_proof(*key_, t_, payload, h.length)) {
        return end(Step::kReject, "it did not prove the secret");
      }
      proved_ = true;
      return take_request(held_req_, held_data_, held_req_.length - wire::kNonceSize);
    case wire::Op::kConnAccept:
      if ((h.flags & wire::kShmAccept) != 0 && !offered_shm_) {
        return end(Step::kViolation, "shared memory taken but not offered");
      }
      state_ = State::kConnected;
      return {.step = Step::kConfirm, .state = state_, .data = payload, .len = h.length};
    case wire::Op::kConnReject:
      // A peer that has not proved the secret refuses, but its words are not reported.
      if (auth_sent_ && !proved_) return end(Step::kRefused, nullptr);
      return end(Step::kRefused, nullptr, payload, h.length);
    case wire::Op::kConnReady:
      state_ = State::kConnected;
      return {.step = Step::kConnected, .state = state_};
    case wire::Op::kShutdown:
      return end(Step::kPeerClosed, nullptr);
    default:
      return {.step = Step::kNone, .state = state_};
  }
}

void Handshake::challenge(const Nonce& ns, unsigned char out[wire::kChallengeSize]) {
  t_.ns = ns;
  make_challenge(*key_, t_, out);
}

core::Digest Handshake::proof() const {
  return request_mac(*key_, t_);
}

}  // namespace fabq::xport::handshake
