// The handshake of a connection (xport/wire.h): connecting, being accepted, accepting,
// rejecting, and proving the shared secret both ways.
#include <arpa/inet.h>
#include <rdma/fi_eq.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "fabq/fi_fabq.h"
#include "xport/conn.h"
#include "xport/listener.h"
#include "xport/socket_util.h"

namespace fabq::xport {
namespace {

// What each MAC of the authentication says (xport/wire.h), so that neither passes for the other.
constexpr std::string_view kAcceptLabel = "fabq-auth-accept";
constexpr std::string_view kRequestLabel = "fabq-auth-request";

}  // namespace

int Conn::connect(const sockaddr_in& peer, const void* data, size_t len) {
  std::lock_guard lock(mu_);
  if (state() != State::kIdle) return -FI_EISCONN;
  peer_ = peer;
  switch (owner_->take_net_fault()) {
    case core::NetFault::kReject:
      // Injected: refused as if the peer had called fi_reject without data.
      set_state(State::kClosed);
      reported_ = true;
      refused_locked(FI_ECONNREFUSED, nullptr, 0);
      return 0;
    case core::NetFault::kTimeout:
      // Injected: the request never gets an answer; the connect timer ends it.
      set_state(State::kConnecting);
      engine_->set_deadline(this, engine_->connect_deadline());
      return 0;
    default:
      break;
  }
  core::UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) {
    if (!rdm_) return -FI_EIO;
    set_state(State::kClosed);
    refused_locked(FI_EIO, nullptr, 0);
    return 0;
  }
  set_socket_options(fd.get(), engine_->config().keepalive_ms);
  // An RDM endpoint's source address is its listener's; it connects from any port.
  if (const sockaddr_in& src = params_.src; src.sin_port != 0 && !rdm_) {
    // A source port was asked for (fi_getinfo's service, or a passive endpoint's address
    // taken over through info->handle): connect from it.
    const int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&src), sizeof(src)) != 0) {
      return errno == EADDRINUSE ? -FI_EADDRINUSE : -FI_EINVAL;
    }
  }
  peer_ = peer;
  // A peer on this host is offered shared memory; it takes it or not in its answer.
  if (engine_->config().shm && is_local(peer)) seg_ = shm::Segment::create();
  uint32_t flags = seg_.valid() ? uint32_t{wire::kShmOffer} : 0u;
  unsigned char req[wire::kMaxConnReq];
  if (len > 0) std::memcpy(req, data, len);
  size_t req_len = len;
  if (auth_ != nullptr) {
    // With a secret, the request carries this side's nonce and waits for a challenge.
    if (!core::fill_random(nonce_c_, sizeof(nonce_c_)).ok()) {
      if (!rdm_) return -FI_EIO;
      set_state(State::kClosed);
      refused_locked(FI_EIO, nullptr, 0);
      return 0;
    }
    std::memcpy(req + len, nonce_c_, sizeof(nonce_c_));
    req_len += sizeof(nonce_c_);
    flags |= wire::kAuth;
    auth_sent_ = true;
  }
  queue_ctrl_locked(wire::Op::kConnReq, 0, req, req_len, flags, seg_.valid() ? seg_.id() : 0,
                    seg_.valid() ? seg_.nonce() : 0);
  if (auth_sent_) {
    // What both MACs vouch for: the request as it went out (name, data, offer and nonce).
    const size_t frame = wire::kHeaderSize + req_len;
    req_digest_ = core::Sha256::hash(ctrl_.data() + ctrl_.size() - frame, frame);
  }
  const int rc = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&peer), sizeof(peer));
  const int e = rc == 0 ? 0 : errno;
  fd_ = std::move(fd);
  if (rc != 0 && e != EINPROGRESS) {
    // Refused at once (nobody listens on a local port): reported like any other refusal.
    set_state(State::kClosed);
    reported_ = true;
    refused_locked(fi_errno_of(e), nullptr, 0);
    return 0;
  }
  set_state(State::kConnecting);
  writing_ = true;
  update_interest_locked();
  engine_->set_deadline(this, engine_->connect_deadline());
  if (registered_) return 0;
  if (!rdm_) return -FI_EIO;
  close_socket_locked();
  refused_locked(FI_EIO, nullptr, 0);
  return 0;
}

void Conn::refused_locked(int err, const void* data, size_t len) {
  if (owner_ == nullptr) return;
  if (rdm_) {
    send_count_ = 0;
    mid_frame_ = false;
    owner_->abort_sends(this, err);
  } else {
    owner_->cm_event({.err = err, .data = data, .len = len});
    owner_->connection_ended();
  }
}

void Conn::start_accepted(Acceptor* acceptor, PassiveAcceptor* passive) {
  std::lock_guard lock(mu_);
  acceptor_ = acceptor;
  passive_ = passive;
  if (passive != nullptr) auth_ = passive->auth_key();
  inbound_ = passive == nullptr;
  set_socket_options(fd_.get(), engine_->config().keepalive_ms);
  socklen_t len = sizeof(peer_);
  getpeername(fd_.get(), reinterpret_cast<sockaddr*>(&peer_), &len);
  set_state(State::kIncoming);
  update_interest_locked();
  engine_->set_deadline(this, engine_->connect_deadline());
}

bool Conn::in_handshake() const {
  const State s = state();
  return s == State::kIncoming || s == State::kProving || s == State::kPending ||
         s == State::kAccepted;
}

bool Conn::adopt(Owner* owner, const ConnParams& params) {
  std::lock_guard lock(mu_);
  acceptor_ = nullptr;  // handed over: the owner owns it now
  passive_ = nullptr;
  if (state() != State::kPending || owner_ != nullptr) return false;
  owner_ = owner;
  params_ = params;
  auth_ = params.auth;  // the passive endpoint's may go before it
  framer_ = wire::Framer(params.max_msg_size);
  return true;
}

int Conn::accept(const void* data, size_t len) {
  std::lock_guard lock(mu_);
  if (state() != State::kPending || owner_ == nullptr) {
    return state() == State::kClosed ? -FI_ECONNABORTED : -FI_EOPBADSTATE;
  }
  queue_accept_locked(data, len);
  set_state(State::kAccepted);
  update_interest_locked();
  engine_->set_deadline(this, engine_->connect_deadline());
  flush_locked();
  // The peer may have answered already: look at the socket at the next progress.
  engine_->schedule(this);
  return 0;
}

int Conn::reject(const void* data, size_t len) {
  std::lock_guard lock(mu_);
  acceptor_ = nullptr;  // handed over to fi_reject, which frees it
  passive_ = nullptr;
  if (state() != State::kPending) return -FI_EOPBADSTATE;
  return reject_locked(data, len);
}

int Conn::reject_locked(const void* data, size_t len) {
  queue_ctrl_locked(wire::Op::kConnReject, 0, data, len);
  flush_locked();
  close_socket_locked();
  return 0;
}

// A request, authenticated if this side holds a secret: reported (MSG) or accepted (RDM).
bool Conn::take_request_locked(const wire::Header& h, const unsigned char* data, size_t len) {
  if (rdm_) {
    // The peer endpoint's name, then accepted at once: an RDM endpoint takes every peer.
    sockaddr_in name{};
    if (len == sizeof(name)) std::memcpy(&name, data, sizeof(name));
    if (name.sin_family != AF_INET) {
      fail_locked(FI_EREMOTEIO, FI_FABQ_EVENT_EP_REQ_ERR, "an RDM request without a name");
      return false;
    }
    peer_name_ = name;
    map_offer_locked(h);
    queue_accept_locked(nullptr, 0);
    set_state(State::kAccepted);
    engine_->set_deadline(this, engine_->connect_deadline());
    return flush_locked();
  }
  // Mapped now, taken (or dropped) by fi_accept / fi_reject.
  map_offer_locked(h);
  set_state(State::kPending);
  engine_->set_deadline(this, 0);
  update_interest_locked();
  // A request the passive endpoint cannot queue is refused at once: the peer is told, and
  // nothing of it stays behind.
  if (passive_ == nullptr || !passive_->request(this, peer_, data, len)) reject_locked(nullptr, 0);
  return false;
}

core::Digest Conn::auth_mac_locked(std::string_view label) const {
  core::HmacSha256 m = *auth_;
  m.update(label.data(), label.size());
  m.update(nonce_c_, sizeof(nonce_c_));
  m.update(nonce_s_, sizeof(nonce_s_));
  m.update(req_digest_.data(), req_digest_.size());
  return m.final();
}

// The passive side of a request that must be authenticated: it is kept, unreported, until the
// peer answers the challenge.
bool Conn::challenge_locked(const wire::Header& h) {
  if (auth_ == nullptr || (h.flags & wire::kAuth) == 0 || h.length < wire::kNonceSize) {
    // One side holds a secret and the other does not: no connection either way.
    engine_->log(LogLevel::kWarn, "connection from %s:%u refused: %s\n", inet_ntoa(peer_.sin_addr),
                 ntohs(peer_.sin_port),
                 auth_ == nullptr ? "it asks to authenticate and this side holds no secret"
                                  : "it does not authenticate and this side holds a secret");
    reject_locked(nullptr, 0);
    return false;
  }
  held_req_ = h;
  const size_t data_len = h.length - wire::kNonceSize;
  std::memcpy(held_data_, cm_buf_, data_len);
  std::memcpy(nonce_c_, cm_buf_ + data_len, wire::kNonceSize);
  unsigned char hdr[wire::kHeaderSize];
  wire::encode(h, hdr);
  core::Sha256 digest;
  digest.update(hdr, sizeof(hdr));
  digest.update(cm_buf_, h.length);
  req_digest_ = digest.final();
  if (!core::fill_random(nonce_s_, sizeof(nonce_s_)).ok()) {
    reject_locked(nullptr, 0);
    return false;
  }
  unsigned char challenge[wire::kChallengeSize];
  std::memcpy(challenge, nonce_s_, sizeof(nonce_s_));
  const core::Digest mac = auth_mac_locked(kAcceptLabel);
  std::memcpy(challenge + sizeof(nonce_s_), mac.data(), mac.size());
  queue_ctrl_locked(wire::Op::kChallenge, 0, challenge, sizeof(challenge));
  set_state(State::kProving);
  return flush_locked();
}

// The active side, challenged: the peer proves it holds the secret, then this side does.
bool Conn::prove_locked() {
  if (framer_.header().length != wire::kChallengeSize) {
    fail_locked(FI_EREMOTEIO, FI_FABQ_EVENT_EP_REQ_ERR, "a challenge of the wrong size");
    return false;
  }
  std::memcpy(nonce_s_, cm_buf_, sizeof(nonce_s_));
  if (!core::mac_equal(auth_mac_locked(kAcceptLabel).data(), cm_buf_ + sizeof(nonce_s_))) {
    engine_->log(LogLevel::kWarn,
                 "connection to %s:%u refused: the peer did not prove the secret\n",
                 inet_ntoa(peer_.sin_addr), ntohs(peer_.sin_port));
    reported_ = true;
    close_socket_locked();
    refused_locked(FI_ECONNREFUSED, nullptr, 0);
    return false;
  }
  challenged_ = true;
  const core::Digest proof = auth_mac_locked(kRequestLabel);
  queue_ctrl_locked(wire::Op::kProof, 0, proof.data(), proof.size());
  return flush_locked();
}

// Acts on a complete frame. False when the connection ended or stalled.

// The passive side: the peer's proof; only a right one gets the request acted on.
bool Conn::take_proof_locked(const wire::Header& h) {
  if (h.length != wire::kProofSize ||
      !core::mac_equal(auth_mac_locked(kRequestLabel).data(), cm_buf_)) {
    engine_->log(LogLevel::kWarn, "connection from %s:%u refused: it did not prove the secret\n",
                 inet_ntoa(peer_.sin_addr), ntohs(peer_.sin_port));
    reject_locked(nullptr, 0);
    return false;
  }
  return take_request_locked(held_req_, held_data_, held_req_.length - wire::kNonceSize);
}

}  // namespace fabq::xport
