// The handshake of a connection (xport/wire.h): connecting, being accepted, accepting,
// rejecting, and doing what the connection's Handshake (xport/handshake.h) decides about each
// frame of it.
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

using handshake::Step;

int Conn::connect(const sockaddr_in& peer, const void* data, size_t len) {
  core::MutexLock lock(mu_);
  if (state() != State::kIdle) return -FI_EISCONN;
  peer_ = peer;
  // RDM: what comes back through it is from the endpoint named by the address connected to.
  if (rdm_) peer_name_ = peer;
  switch (owner()->take_net_fault()) {
    case core::NetFault::kReject:
      // Injected: refused as if the peer had called fi_reject without data.
      set_state(hs_.close());
      reported_ = true;
      refused_locked(FI_ECONNREFUSED, nullptr, 0);
      return 0;
    case core::NetFault::kTimeout:
      // Injected: the request never gets an answer; the connect timer ends it.
      set_state(hs_.connecting());
      engine_->set_deadline(this, engine_->connect_deadline());
      return 0;
    default:
      break;
  }
  core::UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) {
    if (!rdm_) return -FI_EIO;
    set_state(hs_.close());
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
  wire::Header rh{.op = wire::Op::kConnReq,
                  .flags = seg_.valid() ? uint32_t{wire::kShmOffer} : 0u,
                  .length = static_cast<uint32_t>(len),
                  .tag = seg_.valid() ? seg_.id() : 0,
                  .data = seg_.valid() ? seg_.nonce() : 0};
  unsigned char req[wire::kMaxConnReq];
  if (len > 0) std::memcpy(req, data, len);
  if (hs_.keyed()) {
    // With a secret, the request carries this side's nonce and waits for a challenge.
    handshake::Nonce nc;
    if (!core::fill_random(nc.data(), nc.size()).ok()) {
      if (!rdm_) return -FI_EIO;
      set_state(hs_.close());
      refused_locked(FI_EIO, nullptr, 0);
      return 0;
    }
    std::memcpy(req + len, nc.data(), nc.size());
    rh.length += static_cast<uint32_t>(nc.size());
    rh.flags |= wire::kAuth;
  }
  queue_ctrl_locked(rh.op, 0, req, rh.length, rh.flags, rh.tag, rh.data);
  hs_.request(rh, req);
  const int rc = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&peer), sizeof(peer));
  const int e = rc == 0 ? 0 : errno;
  fd_ = std::move(fd);
  if (rc != 0 && e != EINPROGRESS) {
    // Refused at once (nobody listens on a local port): reported like any other refusal.
    set_state(hs_.close());
    reported_ = true;
    refused_locked(fi_errno_of(e), nullptr, 0);
    return 0;
  }
  set_state(hs_.connecting());
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
  if (owner() == nullptr) return;
  if (rdm_) {
    send_count_ = 0;
    mid_frame_ = false;
    owner()->abort_sends(this, err);
  } else {
    owner()->cm_event({.err = err, .data = data, .len = len});
    owner()->connection_ended();
  }
}

void Conn::start_accepted(Acceptor* acceptor, PassiveAcceptor* passive) {
  core::MutexLock lock(mu_);
  acceptor_ = acceptor;
  passive_ = passive;
  set_socket_options(fd_.get(), engine_->config().keepalive_ms);
  touch();
  socklen_t len = sizeof(peer_);
  getpeername(fd_.get(), reinterpret_cast<sockaddr*>(&peer_), &len);
  // An RDM listener's connection carries the peer's messages in; the secret is the listener's.
  set_state(hs_.incoming(/*inbound=*/passive == nullptr,
                         passive != nullptr ? passive->auth_key() : params_.auth));
  update_interest_locked();
  engine_->set_deadline(this, engine_->connect_deadline());
}

bool Conn::in_handshake() const {
  const State s = state();
  return s == State::kIncoming || s == State::kProving || s == State::kPending ||
         s == State::kAccepted;
}

bool Conn::adopt(Owner* to, const ConnParams& params) {
  core::MutexLock lock(mu_);
  acceptor_ = nullptr;  // handed over: the owner owns it now
  passive_ = nullptr;
  if (state() != State::kPending || owner() != nullptr) return false;
  owner_.store(to, std::memory_order_release);
  params_ = params;
  hs_.set_key(params.auth);  // the passive endpoint's may go before it
  framer_ = wire::Framer(params.max_msg_size);
  return true;
}

int Conn::accept(const void* data, size_t len) {
  core::MutexLock lock(mu_);
  if (state() != State::kPending || owner() == nullptr) {
    return state() == State::kClosed ? -FI_ECONNABORTED : -FI_EOPBADSTATE;
  }
  queue_accept_locked(data, len);
  set_state(hs_.accept());
  update_interest_locked();
  engine_->set_deadline(this, engine_->connect_deadline());
  flush_locked();
  // The peer may have answered already: look at the socket at the next progress.
  engine_->schedule(this);
  return 0;
}

int Conn::reject(const void* data, size_t len) {
  core::MutexLock lock(mu_);
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
bool Conn::take_request_locked(const handshake::Next& next) {
  if (next.step == Step::kAcceptPeer) {
    // An RDM endpoint takes every peer, at once, through the receive context it asks for.
    Owner* const to = owner()->route(next.rx);
    if (to == nullptr) {
      engine_->log(LogLevel::kWarn, "connection from %s:%u refused: no receive context %u\n",
                   inet_ntoa(peer_.sin_addr), ntohs(peer_.sin_port), next.rx);
      reject_locked(nullptr, 0);
      return false;
    }
    owner_.store(to, std::memory_order_release);
    one_way_ = next.one_way;
    peer_name_ = next.peer;
    map_offer_locked(next.request);
    queue_accept_locked(nullptr, 0);
    set_state(next.state);
    engine_->set_deadline(this, engine_->connect_deadline());
    return flush_locked();
  }
  // Mapped now, taken (or dropped) by fi_accept / fi_reject.
  map_offer_locked(next.request);
  set_state(next.state);
  engine_->set_deadline(this, 0);
  update_interest_locked();
  // A request the passive endpoint cannot queue is refused at once: the peer is told, and
  // nothing of it stays behind.
  if (passive_ == nullptr || !passive_->request(this, peer_, next.data, next.len)) {
    reject_locked(nullptr, 0);
  }
  return false;
}

// The passive side of a request that must be authenticated: it is kept, unreported, until the
// peer answers the challenge.
bool Conn::challenge_locked() {
  handshake::Nonce ns;
  if (!core::fill_random(ns.data(), ns.size()).ok()) {
    reject_locked(nullptr, 0);
    return false;
  }
  unsigned char challenge[wire::kChallengeSize];
  hs_.challenge(ns, challenge);
  queue_ctrl_locked(wire::Op::kChallenge, 0, challenge, sizeof(challenge));
  set_state(hs_.state());
  return flush_locked();
}

// Acts on a complete frame of the handshake. False when the connection ended or stalled.
bool Conn::handshake_frame_locked(const wire::Header& h) {
  const handshake::Next next = hs_.on_frame(h, cm_buf_);
  switch (next.step) {
    case Step::kNone:
      return true;
    case Step::kReport:
    case Step::kAcceptPeer:
      return take_request_locked(next);
    case Step::kChallenge:
      return challenge_locked();
    case Step::kProve: {
      // The peer proved it holds the secret; now this side does.
      const core::Digest proof = hs_.proof();
      queue_ctrl_locked(wire::Op::kProof, 0, proof.data(), proof.size());
      return flush_locked();
    }
    case Step::kConfirm:
      if ((h.flags & wire::kShmAccept) != 0) {
        // The peer's frames come through the ring from here on; ours after kConnReady.
        shm_agreed_locked(/*connecting=*/true);
        rx_shm_ = true;
      } else {
        seg_ = {};  // declined (another host, or shared memory off there)
      }
      engine_->set_deadline(this, 0);
      was_connected_ = true;
      set_state(next.state);
      queue_ctrl_locked(wire::Op::kConnReady, 0, nullptr, 0);
      if (shm_agreed_) tx_switch_at_ = ctrl_.size();
      update_interest_locked();
      // kConnReady goes to the kernel before the application hears FI_CONNECTED (as verbs
      // sends its RTU before ESTABLISHED): an application that exits at once must not leave
      // the peer with a handshake cut short.
      if (!flush_locked()) return false;  // and the sends queued while connecting
      if (!rdm_) owner()->cm_event({.event = FI_CONNECTED, .data = next.data, .len = next.len});
      return true;
    case Step::kConnected:
      engine_->set_deadline(this, 0);
      was_connected_ = true;
      set_state(next.state);
      if (shm_agreed_) rx_shm_ = true;  // the peer's next frame is in the ring
      update_interest_locked();
      if (rdm_) {
        // Replies go through it only when it comes from the host its peer's name is on: a
        // peer that announced another endpoint's name gets no message meant for that one.
        if (!one_way_ && peer_.sin_addr.s_addr == peer_name_.sin_addr.s_addr) {
          owner()->inbound_ready(this, peer_name_);
        }
        // One more up: its listener keeps to its bound (Acceptor::on_ready()).
        if (acceptor_ != nullptr) acceptor_->came_up(this);
      } else {
        owner()->cm_event({.event = FI_CONNECTED});
      }
      return true;
    case Step::kReject:
      engine_->log(LogLevel::kWarn, "connection from %s:%u refused: %s\n",
                   inet_ntoa(peer_.sin_addr), ntohs(peer_.sin_port), next.why);
      reject_locked(nullptr, 0);
      return false;
    case Step::kRefused:
      if (next.why != nullptr) {
        engine_->log(LogLevel::kWarn, "connection to %s:%u refused: %s\n",
                     inet_ntoa(peer_.sin_addr), ntohs(peer_.sin_port), next.why);
      }
      reported_ = true;
      close_socket_locked();
      refused_locked(FI_ECONNREFUSED, next.data, next.len);
      return false;
    case Step::kPeerClosed:
      peer_closed_locked();
      return false;
    case Step::kViolation:
      fail_locked(FI_EREMOTEIO, FI_FABQ_EVENT_EP_REQ_ERR, next.why);
      return false;
  }
  return true;
}

}  // namespace fabq::xport
