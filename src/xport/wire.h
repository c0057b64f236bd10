// fabq transport: the wire format of FI_EP_MSG connections over TCP, and its parser.
//
// A connection's byte stream is a sequence of frames. Each frame is a 32-byte header followed
// by `length` payload bytes. All fields are little-endian:
//
//   offset  size  field
//        0     2  magic    0x7146 ("Fq")
//        2     1  version  1
//        3     1  op       Op below
//        4     4  flags    Flag bits below; only those the op allows
//        8     4  length   payload bytes after the header
//       12     4  seq      the sender's message number (data ops), or the number acked (acks)
//       16     8  tag      tagged messages only; 0 otherwise
//       24     8  data     remote CQ data when kRemoteData is set; 0 otherwise
//
// One-sided operations (fi_rma(3), fi_atomic(3)) name the target's region with its key in `tag`
// and the address in it in `data` (a virtual address or an offset, as the region was
// registered); every request is answered with its `seq`, `data` then holding a Status:
//
//   kWrite     payload: [8 bytes of remote CQ data, kRemoteData only] + the bytes to write
//              -> kRmaAck once they are in the target's memory (or refused)
//   kReadReq   payload: 8 bytes, the length to read      -> kReadResp with the bytes
//   kAtomic    payload: AtomicDesc (8 bytes) + count operands [+ count compare values]
//              -> kAtomicResp with the previous values (fetch and compare forms)
//
// The target checks every request against its registered regions before it touches memory; a
// refused one is answered with its Status and no payload, and the connection goes on.
//
// A read's answer may come in pieces, so that what a peer's reads make the target hold stays
// bounded whatever length they ask for: each piece is a kReadResp of the same `seq` whose `tag`
// is the offset of its bytes in the answer, and every piece but the last carries kMore. The
// pieces of one answer come in order and without a gap, and no other answer in pieces begins
// before the last one; whole answers (offset 0, no kMore) and every other frame may come
// between them. A piece with a Status other than kOk ends the answer: it carries no bytes and
// no kMore (the region went away after the first pieces were sent).
//
// Through shared memory (below), a large write or read may be direct (kDirect): its payload
// describes the initiator's buffers instead of carrying their bytes, as DirectEntry pairs
// (address, length) in the initiator's address space, and the target copies between them and
// its region itself (xport/transport.h DirectCopy, xport/shm.h PeerMemory), then answers as
// above, a direct kReadResp with no payload. Only a peer that announced it serves direct
// requests (shm.h) is sent one; one that did not gets a protocol violation. A large message
// may be direct the same way: its receiver copies it from the sender's buffers into the
// receive buffer, then acknowledges it (kAckReceived, or kAckDelivered when asked for), and
// the sender's buffers are the application's until then.
//
//   kMsg|kDirect, kTagged|kDirect
//                     payload: 1..kMaxIov entries; the message's length is their sum
//   kWrite|kDirect    payload: 1..kMaxIov entries; the length written is their sum
//   kReadReq|kDirect  payload: the length to read (8 bytes), then 1..kMaxIov entries summing
//                     to it                                  -> kReadResp|kDirect, no payload
//
// The connection protocol: the active side sends kConnReq (payload: the application's
// connect data); the passive side answers kConnAccept or kConnReject (payload: accept or reject
// data); the active side confirms an accept with kConnReady, after which both sides are
// connected. kShutdown announces an orderly close: the sender sends nothing after it.
//
// With a shared secret (fi_fabq(7) RELIABILITY AND SECURITY), the two sides prove they hold it
// before anything else happens, without sending it: kConnReq carries kAuth and, after the
// connect data, the active side's nonce Nc; the passive side answers kChallenge (its nonce Ns
// and MAC_s); the active side checks MAC_s and answers kProof (MAC_c); only then does the
// passive side act on the request (report FI_CONNREQ, or accept an RDM peer). With R the
// SHA-256 of the kConnReq frame (header and payload) and K the secret:
//   MAC_s = HMAC-SHA256(K, "fabq-auth-accept" || Nc || Ns || R)
//   MAC_c = HMAC-SHA256(K, "fabq-auth-request" || Nc || Ns || R)
// A side with a secret refuses (kConnReject) a request without kAuth; a side without one refuses
// a request with it; an active side that sent kAuth takes no kConnAccept before kChallenge.
//
// Two endpoints on one host may move their frames through shared memory instead (xport/shm.h):
// kConnReq then carries kShmOffer, `tag` naming the segment and `data` its nonce, and a
// kConnAccept with kShmAccept takes the offer. The frame that ends the handshake in each
// direction (kConnAccept from the accepting side, kConnReady from the connecting side) is the
// last one on the socket; every later frame of that direction is in the segment, and every
// later byte on the socket is a doorbell.
//
// The parser never trusts the peer: an unknown op, a flag the op does not allow, a length above
// the receiver's limit, or a nonzero field an op does not use is a protocol violation, and the
// connection that sent it is failed. Nothing here allocates or blocks.
//
// Thread safety: plain functions and values; a Framer belongs to one connection and is used
// under that connection's lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "core/cm_data.h"
#include "xport/transport.h"

namespace fabq::xport::wire {

inline constexpr size_t kHeaderSize = 32;
inline constexpr uint16_t kMagic = 0x7146;
inline constexpr uint8_t kVersion = 1;
// Authentication (kAuth): a nonce, a MAC, and what they make of the frames.
inline constexpr size_t kNonceSize = 16;
inline constexpr size_t kMacSize = 32;
inline constexpr size_t kMaxConnReq = core::kCmDataSize + kNonceSize;  // kConnReq with kAuth
inline constexpr size_t kChallengeSize = kNonceSize + kMacSize;
inline constexpr size_t kProofSize = kMacSize;

// An RDM endpoint's kConnReq: its connect data is the connecting endpoint's name (a
// sockaddr_in, 16 bytes), optionally followed by one 32-bit word, little endian: the receive
// context of the peer the connection is for (bits 0-30; a scalable endpoint's fi_rx_context;
// 0 without the word) and kRdmOneWay (bit 31): the connecting side takes no message back
// through this connection (a scalable endpoint's transmit context, which receives nothing), so
// the peer makes its own to answer. Any other length is a violation.
inline constexpr size_t kRdmRequestShort = sizeof(sockaddr_in);
inline constexpr size_t kRdmRequestLong = kRdmRequestShort + sizeof(uint32_t);
inline constexpr uint32_t kRdmOneWay = 1u << 31;
inline constexpr uint32_t kRdmRxMask = kRdmOneWay - 1;
// The connect data for `name`, receive context `rx` (at most kRdmRxMask) and `one_way`: written
// to `out`, whose length it returns (the short form when rx is 0 and not one_way).
size_t rdm_request(const sockaddr_in& name, uint32_t rx, bool one_way,
                   unsigned char out[kRdmRequestLong]);
// What an RDM kConnReq's connect data says; nullopt unless it has one of the two lengths and
// names an AF_INET address.
struct RdmRequest {
  sockaddr_in name{};
  uint32_t rx = 0;
  bool one_way = false;
};
std::optional<RdmRequest> parse_rdm_request(const unsigned char* data, size_t len);

enum class Op : uint8_t {
  kConnReq = 1,       // payload: connect data (<= core::kCmDataSize)
  kConnAccept = 2,    // payload: accept data (<= core::kCmDataSize)
  kConnReject = 3,    // payload: reject data (<= core::kCmDataSize)
  kConnReady = 4,     // no payload: the active side saw the accept
  kMsg = 5,           // payload: an untagged message (<= the receiver's max_msg_size)
  kTagged = 6,        // payload: a tagged message; `tag` holds its tag
  kAckReceived = 7,   // no payload: message `seq` reached the peer's transport
  kAckDelivered = 8,  // no payload: message `seq` was placed in a receive buffer (or failed there)
  kShutdown = 9,      // no payload: the sender has closed its side
  kChallenge = 10,    // payload: exactly kChallengeSize (Ns, MAC_s)
  kProof = 11,        // payload: exactly kProofSize (MAC_c)
  kWrite = 12,        // payload: [CQ data] + bytes for region `tag` at `data`
  kReadReq = 13,      // payload: exactly kReadReqSize (the length) from region `tag` at `data`
  kReadResp = 14,     // payload: the bytes read (none when `data`, the Status, is not kOk);
                      // `tag`: their offset in the answer (a piece)
  kRmaAck = 15,       // no payload: kWrite `seq` is done; `data` is its Status
  kAtomic = 16,       // payload: AtomicDesc + operands for region `tag` at `data`
  kAtomicResp = 17,   // payload: the previous values (fetch and compare forms, kOk only)
};
inline constexpr Op kLastOp = Op::kAtomicResp;

// `data` of kRmaAck, kReadResp and kAtomicResp is an RmaStatus (xport/transport.h).
inline constexpr size_t kReadReqSize = 8;
// One buffer of a direct request: address (u64), length (u64).
inline constexpr size_t kDirectEntrySize = 16;
inline constexpr size_t kMaxDirectEntries = kMaxIov;
// An atomic's description, the first 8 bytes of kAtomic's payload: op (fi_op), datatype
// (fi_datatype), kind (AtomicKind), a zero byte, count (u32).
inline constexpr size_t kAtomicDescSize = 8;
// The operand bytes of one atomic (count * datatype size) are at most kMaxAtomicBytes.
struct AtomicDesc {
  uint8_t op = 0;
  uint8_t datatype = 0;
  AtomicKind kind = AtomicKind::kPlain;
  uint32_t count = 0;
};
void encode_atomic(const AtomicDesc& d, unsigned char* out);
// False for a kind byte out of range or a nonzero reserved byte.
bool decode_atomic(const unsigned char* in, AtomicDesc* out);
void put_u64(unsigned char* out, uint64_t v);
uint64_t get_u64(const unsigned char* in);

// Flags: kMsg and kTagged allow the data flags and kDirect, kWrite kRemoteData or kDirect (not
// both), kReadReq kDirect, kReadResp kDirect or kMore (not both), kConnReq kShmOffer and kAuth,
// kConnAccept kShmAccept; other ops allow none.
enum Flag : uint32_t {
  kRemoteData = 1u << 0,     // `data` is FI_REMOTE_CQ_DATA for the receiver's completion
  kWantReceived = 1u << 1,   // the sender waits for kAckReceived (FI_TRANSMIT_COMPLETE)
  kWantDelivered = 1u << 2,  // the sender waits for kAckDelivered (FI_DELIVERY_COMPLETE)
  kShmOffer = 1u << 3,       // kConnReq only: a shared-memory segment is offered (tag, data)
  kShmAccept = 1u << 4,      // kConnAccept only: the offered segment is taken
  kAuth = 1u << 5,           // kConnReq only: the payload ends with Nc; answer with kChallenge
  kDirect = 1u << 6,  // kMsg, kTagged, kWrite, kReadReq, kReadResp: a direct request and its answer
  kMore = 1u << 7,    // kReadResp only: a piece of an answer, and more pieces follow (with bytes)
};
inline constexpr uint32_t kDataFlags = kRemoteData | kWantReceived | kWantDelivered;

struct Header {
  Op op = Op::kMsg;
  uint32_t flags = 0;
  uint32_t length = 0;
  uint32_t seq = 0;
  uint64_t tag = 0;
  uint64_t data = 0;
};

// Why a header was refused.
enum class Violation : uint8_t {
  kNone = 0,
  kBadMagic,
  kBadVersion,
  kUnknownOp,
  kBadFlags,     // a flag the op does not allow
  kTooLong,      // length above the limit of the op (core::kCmDataSize, max_payload, the fixed size
                 // of kChallenge, kProof and kReadReq, the atomic limit, or 0), or not the form
                 // of a direct request's entries
  kBadStatus,    // a response whose Status is unknown, or kOk-less with a payload or kMore
  kUnusedField,  // tag, data or seq nonzero where the op does not use it (a piece's offset
                 // included: a direct answer, or a kMore piece with no bytes)
};
const char* violation_str(Violation v);

// Writes `h` (with magic and version) into out[0..kHeaderSize).
void encode(const Header& h, unsigned char* out);

// Reads and validates the header at in[0..kHeaderSize). `max_payload` bounds the length of
// kMsg, kTagged, kReadResp and kWrite (plus its CQ data). kNone and *out filled, or the first
// violation found and *out untouched.
Violation decode(const unsigned char* in, size_t max_payload, Header* out);

// Splits one connection's stream into frames, incrementally: the transport hands it whatever
// bytes it has, and the framer says what they are. It keeps the header bytes of a frame that
// arrived in pieces; payload bytes are never copied here, the transport places them.
//
//   while bytes remain:
//     if (f.in_header())  n = f.take_header(p, avail)    -> header complete? f.header() is valid
//     else                n = f.take_payload(avail)      -> how many payload bytes are the frame's
//
// After a violation the framer is dead: every later call takes nothing.
class Framer {
 public:
  explicit Framer(size_t max_payload) : max_payload_(max_payload) {}

  bool in_header() const { return !in_payload_; }
  // No byte of a frame has been taken since the last whole one.
  bool between_frames() const { return held_ == 0 && !in_payload_ && !dead(); }
  bool dead() const { return violation_ != Violation::kNone; }
  Violation violation() const { return violation_; }
  // The current frame's header; valid from the moment take_header() completes it until the
  // frame's last payload byte is taken.
  const Header& header() const { return header_; }
  // Payload bytes of the current frame not yet taken.
  size_t payload_left() const { return payload_left_; }
  // True once when a frame has been taken whole (header and payload): the transport acts on
  // it, then calls next_frame().
  bool frame_done() const { return done_; }
  void next_frame();
  // Between frames, with a whole valid frame (header and payload) at p[0..n): true and its
  // header in *h, the framer untouched (the caller acts on the frame and skips its bytes).
  // Otherwise false: take the bytes the usual way (a bad header is caught there).
  bool whole_frame(const unsigned char* p, size_t n, Header* h) const {
    return between_frames() && n >= kHeaderSize && decode(p, max_payload_, h) == Violation::kNone &&
           n - kHeaderSize >= h->length;
  }

  // Takes up to kHeaderSize - (bytes held) header bytes from p[0..n). Returns how many it took.
  // When the header is complete it is validated: a violation kills the framer.
  size_t take_header(const unsigned char* p, size_t n);
  // Takes up to payload_left() of the n available payload bytes; returns how many.
  size_t take_payload(size_t n);

 private:
  size_t max_payload_;
  unsigned char buf_[kHeaderSize] = {};
  size_t held_ = 0;
  bool in_payload_ = false;
  bool done_ = false;
  size_t payload_left_ = 0;
  Header header_{};
  Violation violation_ = Violation::kNone;
};

}  // namespace fabq::xport::wire
