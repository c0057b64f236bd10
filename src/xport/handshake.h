// fabq transport: the connection handshake of xport/wire.h as a pure state machine.
//
// A Handshake is one connection's side of the protocol: which frames it may take in which
// state, and what each whole handshake frame means for it. It does no I/O, holds no lock and
// knows no owner: the connection (xport/conn.h) reads the bytes, asks allowed() of every header
// and on_frame() of every whole frame, and does what the answer (a Next) says: send a frame,
// report an event, close. The authentication arithmetic of wire.h (the request digest R, MAC_s,
// MAC_c, the kChallenge and kProof payloads) is here too, as plain functions.
//
//   active (fi_connect):  kIdle -> kConnecting -> kRequested [kChallenge in, kProof out]
//                         -> kConnAccept in, kConnReady out -> kConnected
//   passive (accepted):   kIdle -> kIncoming -> kConnReq in [kChallenge out -> kProving,
//                         kProof in] -> kPending (MSG: FI_CONNREQ, fi_accept) or at once (RDM)
//                         -> kConnAccept out -> kAccepted -> kConnReady in -> kConnected
//
// Every state ends in kClosed (refused, failed, shut down, timed out), which nothing leaves.
//
// Thread safety: a plain value, used under its connection's lock.
#pragma once

#include <netinet/in.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/cm_data.h"
#include "core/hmac.h"
#include "xport/wire.h"

namespace fabq::xport::handshake {

enum class State : uint8_t {
  kIdle,        // made for fi_connect, nothing sent
  kConnecting,  // TCP connect in progress
  kRequested,   // kConnReq sent, waiting for accept or reject
  kIncoming,    // passive: waiting for the peer's kConnReq
  kProving,     // passive: kChallenge sent, waiting for the peer's kProof
  kPending,     // passive: kConnReq reported; waiting for fi_accept / fi_reject
  kAccepted,    // passive: kConnAccept sent, waiting for kConnReady
  kConnected,
  kClosed,  // shut down, refused or failed: nothing more moves
};
const char* state_str(State s);

// --- Authentication (xport/wire.h): what the two MACs are made of, and the payloads that
// carry them. Pure functions of their arguments.

using Nonce = std::array<uint8_t, wire::kNonceSize>;

// What each MAC says, so that neither passes for the other.
inline constexpr std::string_view kAcceptLabel = "fabq-auth-accept";
inline constexpr std::string_view kRequestLabel = "fabq-auth-request";

// What both MACs vouch for: the active side's nonce Nc, the passive side's Ns, and R.
struct Transcript {
  Nonce nc{};
  Nonce ns{};
  core::Digest r{};
};

// R: the SHA-256 of a kConnReq frame, its header `h` (as encode() writes it) and its h.length
// payload bytes.
core::Digest request_digest(const wire::Header& h, const unsigned char* payload);
// HMAC-SHA256(key, label || Nc || Ns || R).
core::Digest auth_mac(const core::HmacSha256& key, std::string_view label, const Transcript& t);
// MAC_s, the passive side's (kChallenge), and MAC_c, the active side's (kProof).
inline core::Digest accept_mac(const core::HmacSha256& key, const Transcript& t) {
  return auth_mac(key, kAcceptLabel, t);
}
inline core::Digest request_mac(const core::HmacSha256& key, const Transcript& t) {
  return auth_mac(key, kRequestLabel, t);
}
// The kChallenge payload: t.ns, then MAC_s.
void make_challenge(const core::HmacSha256& key, const Transcript& t,
                    unsigned char out[wire::kChallengeSize]);
// The active side: takes Ns from a kChallenge payload of `len` bytes into t->ns. True when the
// payload has kChallengeSize bytes and its MAC_s is right.
bool check_challenge(const core::HmacSha256& key, const unsigned char* payload, size_t len,
                     Transcript* t);
// The kProof payload is MAC_c. True when a kProof payload of `len` bytes is exactly that.
bool check_proof(const core::HmacSha256& key, const Transcript& t, const unsigned char* payload,
                 size_t len);

// --- The state machine.

// What the connection must do about a whole frame (Handshake::on_frame).
enum class Step : uint8_t {
  kNone,        // not the handshake's: a message or an acknowledgement, for the data path
  kReport,      // passive MSG: report the request (Next::request, data, len); now kPending
  kAcceptPeer,  // passive RDM: accept the peer named Next::peer at once (kConnAccept); kAccepted
  kChallenge,   // passive: draw Ns and send kChallenge with challenge(Ns); now kProving
  kProve,       // active: the peer proved the secret; send kProof with proof()
  kConfirm,     // active: accepted; send kConnReady, then FI_CONNECTED with Next::data; kConnected
  kConnected,   // passive: the peer confirmed the accept; FI_CONNECTED; kConnected
  kReject,      // passive: refuse with kConnReject without data, and close (Next::why)
  kRefused,     // active: refused (FI_ECONNREFUSED with Next::data, which may be null); close
  kPeerClosed,  // kShutdown: the peer closed
  kViolation,   // a protocol violation (Next::why): fail the connection
};

struct Next {
  Step step = Step::kNone;
  // The handshake's state after the frame: kClosed for the steps that end the connection.
  State state = State::kIdle;
  // kReject, kRefused, kViolation: why, for the log (kRefused: null when the peer said so).
  const char* why = nullptr;
  // kReport, kAcceptPeer: the request's header (its shared-memory offer).
  wire::Header request{};
  // kReport: the connect data; kConfirm: the accept data; kRefused: the reject data to report
  // (null: none). In the payload on_frame() was given, or in the Handshake (a request held
  // until its proof): valid until the next call on either.
  const unsigned char* data = nullptr;
  size_t len = 0;
  // kAcceptPeer: the name the peer endpoint announced, the receive context it connects to and
  // whether it takes messages back through the connection (wire::kRdmOneWay).
  sockaddr_in peer{};
  uint32_t rx = 0;
  bool one_way = false;
};

class Handshake {
 public:
  // The side of a connection made to connect (kIdle). `rdm`: an RDM endpoint's connection;
  // `key`: the secret this side proves (null: peers are not authenticated), which must outlive
  // its use here.
  explicit Handshake(bool rdm = false, const core::HmacSha256* key = nullptr)
      : rdm_(rdm), key_(key) {}

  State state() const { return state_; }
  bool rdm() const { return rdm_; }
  bool passive() const { return passive_; }
  bool inbound() const { return inbound_; }  // RDM: accepted by the endpoint's listener
  bool keyed() const { return key_ != nullptr; }
  bool auth_sent() const { return auth_sent_; }  // active: kConnReq carried kAuth
  // Active: the peer's MAC_s was right (kProof follows); passive: the peer's kProof was right.
  bool peer_proved() const { return proved_; }
  const Transcript& transcript() const { return t_; }

  // The transitions a connection makes on its own. Each moves only from the state it names
  // (else changes nothing) and returns the state after.
  State connecting();  // kIdle -> kConnecting: fi_connect
  State sent();        // kConnecting -> kRequested: connected; the request goes out
  // kIdle -> kIncoming: an accepted socket waits for its request; this side is passive now.
  // `inbound`: an RDM listener's (messages flow in); `key` as for the constructor.
  State incoming(bool inbound, const core::HmacSha256* key);
  State accept();  // kPending -> kAccepted: fi_accept
  State close();   // anything -> kClosed
  // The active side's kConnReq (h, and h.length payload bytes) as it goes out: with kAuth (and
  // a key), the payload ends with Nc, and R is its digest.
  void request(const wire::Header& h, const unsigned char* payload);
  // The secret from now on (the passive side's may go once the request is taken).
  void set_key(const core::HmacSha256* key) { key_ = key; }

  // Whether a frame with header `h` may arrive now. False: the connection fails.
  bool allowed(const wire::Header& h) const;
  // A whole frame, h.length bytes at `payload`: the state after it, and what to do.
  Next on_frame(const wire::Header& h, const unsigned char* payload);
  // After Step::kChallenge: the kChallenge payload, with this side's fresh nonce `ns`.
  void challenge(const Nonce& ns, unsigned char out[wire::kChallengeSize]);
  // After Step::kProve: the kProof payload (MAC_c).
  core::Digest proof() const;

 private:
  Next take_request(const wire::Header& h, const unsigned char* data, size_t len);
  Next end(Step step, const char* why, const unsigned char* data = nullptr, size_t len = 0);

  State state_ = State::kIdle;
  bool rdm_ = false;
  bool passive_ = false;
  bool inbound_ = false;
  bool auth_sent_ = false;
  bool offered_shm_ = false;  // active: kConnReq carried kShmOffer
  bool proved_ = false;
  const core::HmacSha256* key_ = nullptr;
  Transcript t_;
  // Passive: the authenticated request, held until its proof arrives.
  wire::Header held_req_{};
  unsigned char held_data_[core::kCmDataSize] = {};
};

}  // namespace fabq::xport::handshake
