#include "xport/wire.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>

namespace fabq::xport::wire {
namespace {

// Every header crosses these twice per message: one unaligned word move on a little-endian
// host (the byte loops they replace cost about 100 instructions a header), a byte swap on a
// big-endian one.
template <class T>
T to_little(T v) {
  if constexpr (std::endian::native == std::endian::little || sizeof(T) == 1) {
    return v;
  } else if constexpr (sizeof(T) == 2) {
    return static_cast<T>(__builtin_bswap16(v));
  } else if constexpr (sizeof(T) == 4) {
    return static_cast<T>(__builtin_bswap32(v));
  } else {
    return static_cast<T>(__builtin_bswap64(v));
  }
}

template <class T>
void put(unsigned char* p, T v) {
  v = to_little(v);
  std::memcpy(p, &v, sizeof(T));
}

template <class T>
T get(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return to_little(v);
}

bool is_data(Op op) {
  return op == Op::kMsg || op == Op::kTagged;
}

size_t length_limit(const Header& h, size_t max_payload) {
  switch (h.op) {
    case Op::kConnReq:
      return (h.flags & kAuth) != 0 ? kMaxConnReq : core::kCmDataSize;
    case Op::kConnAccept:
    case Op::kConnReject:
      return core::kCmDataSize;
    case Op::kMsg:
    case Op::kTagged:
      return max_payload;
    case Op::kChallenge:
      return kChallengeSize;
    case Op::kProof:
      return kProofSize;
    case Op::kWrite:
      // The CQ data comes on top of the bytes written (without wrapping: a limit of SIZE_MAX
      // stays that).
      return (h.flags & kRemoteData) != 0 && max_payload <= SIZE_MAX - 8 ? max_payload + 8
                                                                         : max_payload;
    case Op::kReadReq:
      return kReadReqSize;
    case Op::kReadResp:
      return max_payload;
    case Op::kAtomic:
      return kAtomicDescSize + 2 * kMaxAtomicBytes;
    case Op::kAtomicResp:
      return kMaxAtomicBytes;
    default:
      return 0;
  }
}

bool is_request(Op op) {
  return op == Op::kWrite || op == Op::kReadReq || op == Op::kAtomic;
}

bool is_response(Op op) {
  return op == Op::kReadResp || op == Op::kRmaAck || op == Op::kAtomicResp;
}

}  // namespace

const char* violation_str(Violation v) {
  switch (v) {
    case Violation::kNone:
      return "no violation";
    case Violation::kBadMagic:
      return "bad magic";
    case Violation::kBadVersion:
      return "unsupported protocol version";
    case Violation::kUnknownOp:
      return "unknown opcode";
    case Violation::kBadFlags:
      return "flags the opcode does not allow";
    case Violation::kTooLong:
      return "length beyond the receiver's limit";
    case Violation::kUnusedField:
      return "a field the opcode does not use is set";
    case Violation::kBadStatus:
      return "a response with an unknown status, or a payload with a refusal";
  }
  return "unknown violation";
}

void encode(const Header& h, unsigned char* out) {
  put<uint16_t>(out + 0, kMagic);
  out[2] = kVersion;
  out[3] = static_cast<unsigned char>(h.op);
  put<uint32_t>(out + 4, h.flags);
  put<uint32_t>(out + 8, h.length);
  put<uint32_t>(out + 12, h.seq);
  put<uint64_t>(out + 16, h.tag);
  put<uint64_t>(out + 24, h.data);
}

Violation decode(const unsigned char* in, size_t max_payload, Header* out) {
  if (get<uint16_t>(in) != kMagic) return Violation::kBadMagic;
  if (in[2] != kVersion) return Violation::kBadVersion;
  const uint8_t op = in[3];
  if (op < static_cast<uint8_t>(Op::kConnReq) || op > static_cast<uint8_t>(kLastOp)) {
    return Violation::kUnknownOp;
  }
  Header h;
  h.op = static_cast<Op>(op);
  h.flags = get<uint32_t>(in + 4);
  h.length = get<uint32_t>(in + 8);
  h.seq = get<uint32_t>(in + 12);
  h.tag = get<uint64_t>(in + 16);
  h.data = get<uint64_t>(in + 24);
  if (is_data(h.op) && (h.flags & ~kDataFlags) == 0 && h.length <= max_payload &&
      (h.tag == 0 || h.op == Op::kTagged) && (h.data == 0 || (h.flags & kRemoteData) != 0)) {
    // The frame of almost every message, valid by the rules below (which it need not walk).
    *out = h;
    return Violation::kNone;
  }
  uint32_t allowed = 0;
  if (is_data(h.op)) allowed = kDataFlags | kDirect;
  if (h.op == Op::kConnReq) allowed = kShmOffer | kAuth;
  if (h.op == Op::kConnAccept) allowed = kShmAccept;
  if (h.op == Op::kWrite) allowed = kRemoteData | kDirect;
  if (h.op == Op::kReadReq) allowed = kDirect;
  if (h.op == Op::kReadResp) allowed = kDirect | kMore;
  if ((h.flags & ~allowed) != 0) return Violation::kBadFlags;
  const bool direct = (h.flags & kDirect) != 0;
  const bool more = (h.flags & kMore) != 0;
  if (direct && more) return Violation::kBadFlags;
  // A message's CQ data is in the header; a direct write has no room for its own.
  if (direct && (h.flags & kRemoteData) != 0 && !is_data(h.op)) return Violation::kBadFlags;
  if (direct) {
    // Entries only (after a read's length); an answer carries nothing.
    const size_t fixed = h.op == Op::kReadReq ? kReadReqSize : 0;
    const size_t entries = h.length >= fixed ? h.length - fixed : 0;
    const bool form = h.op == Op::kReadResp ? h.length == 0
                                            : h.length > fixed && entries % kDirectEntrySize == 0 &&
                                                  entries / kDirectEntrySize <= kMaxDirectEntries;
    if (!form) return Violation::kTooLong;
  } else {
    if (h.length > length_limit(h, max_payload)) return Violation::kTooLong;
    if (h.op == Op::kReadReq && h.length != kReadReqSize) return Violation::kTooLong;
  }
  if (h.op == Op::kAtomic && h.length < kAtomicDescSize) return Violation::kTooLong;
  // A shared-memory offer names its segment in `tag` and proves it with `data`; a one-sided
  // request names its region and address there, and a response its Status in `data`.
  const bool offer = (h.flags & kShmOffer) != 0;
  const bool request = is_request(h.op);
  const bool response = is_response(h.op);
  // A piece of a read's answer: its offset in `tag`; a direct answer has no bytes to place.
  const bool piece = h.op == Op::kReadResp && !direct;
  if (h.tag != 0 && h.op != Op::kTagged && !offer && !request && !piece) {
    return Violation::kUnusedField;
  }
  if (h.data != 0 && (h.flags & kRemoteData) == 0 && !offer && !request && !response) {
    return Violation::kUnusedField;
  }
  if (response && (h.data > kLastRmaStatus || (h.data != 0 && (h.length != 0 || more)))) {
    return Violation::kBadStatus;
  }
  if (more && h.length == 0) return Violation::kUnusedField;
  const bool numbered =
      is_data(h.op) || h.op == Op::kAckReceived || h.op == Op::kAckDelivered || request || response;
  if (h.seq != 0 && !numbered) return Violation::kUnusedField;
  *out = h;
  return Violation::kNone;
}

void put_u64(unsigned char* out, uint64_t v) {
  put<uint64_t>(out, v);
}

uint64_t get_u64(const unsigned char* in) {
  return get<uint64_t>(in);
}

void encode_atomic(const AtomicDesc& d, unsigned char* out) {
  out[0] = d.op;
  out[1] = d.datatype;
  out[2] = static_cast<unsigned char>(d.kind);
  out[3] = 0;
  put<uint32_t>(out + 4, d.count);
}

bool decode_atomic(const unsigned char* in, AtomicDesc* out) {
  if (in[2] > static_cast<uint8_t>(AtomicKind::kCompare) || in[3] != 0) return false;
  out->op = in[0];
  out->datatype = in[1];
  out->kind = static_cast<AtomicKind>(in[2]);
  out->count = get<uint32_t>(in + 4);
  return true;
}

void Framer::next_frame() {
  done_ = false;
  in_payload_ = false;
  held_ = 0;
  payload_left_ = 0;
}

size_t Framer::take_header(const unsigned char* p, size_t n) {
  if (dead() || in_payload_ || done_) return 0;
  const size_t take = std::min(n, kHeaderSize - held_);
  if (take == 0) return 0;
  const unsigned char* whole = p;  // a header that came in one piece is read where it is
  if (held_ != 0 || take < kHeaderSize) {
    std::memcpy(buf_ + held_, p, take);
    whole = buf_;
  }
  held_ += take;
  if (held_ < kHeaderSize) return take;
  violation_ = decode(whole, max_payload_, &header_);
  if (dead()) return take;
  payload_left_ = header_.length;
  in_payload_ = true;
  done_ = payload_left_ == 0;
  return take;
}

size_t rdm_request(const sockaddr_in& name, uint32_t rx, bool one_way,
                   unsigned char out[kRdmRequestLong]) {
  std::memcpy(out, &name, sizeof(name));
  if (rx == 0 && !one_way) return kRdmRequestShort;
  put<uint32_t>(out + kRdmRequestShort, (rx & kRdmRxMask) | (one_way ? kRdmOneWay : 0));
  return kRdmRequestLong;
}

std::optional<RdmRequest> parse_rdm_request(const unsigned char* data, size_t len) {
  if (len != kRdmRequestShort && len != kRdmRequestLong) return std::nullopt;
  RdmRequest r;
  std::memcpy(&r.name, data, sizeof(r.name));
  if (r.name.sin_family != AF_INET) return std::nullopt;
  if (len == kRdmRequestLong) {
    const uint32_t word = get<uint32_t>(data + kRdmRequestShort);
    r.rx = word & kRdmRxMask;
    r.one_way = (word & kRdmOneWay) != 0;
  }
  return r;
}

size_t Framer::take_payload(size_t n) {
  if (dead() || !in_payload_ || done_) return 0;
  const size_t take = std::min(n, payload_left_);
  payload_left_ -= take;
  done_ = payload_left_ == 0;
  return take;
}

}  // namespace fabq::xport::wire

namespace fabq::xport {

static_assert(sizeof(RdmConnectData::bytes) == wire::kRdmRequestLong);

RdmConnectData rdm_connect_data(const sockaddr_in& name, uint32_t rx, bool one_way) {
  RdmConnectData d{};
  d.len = wire::rdm_request(name, rx, one_way, d.bytes);
  return d;
}

void put_prefix_u64(TxOp* op, uint64_t v) {
  wire::put_u64(op->prefix, v);
}

void put_prefix_atomic(TxOp* op, uint8_t fi_op, uint8_t datatype, AtomicKind kind, uint32_t count) {
  wire::encode_atomic({.op = fi_op, .datatype = datatype, .kind = kind, .count = count},
                      op->prefix);
}

}  // namespace fabq::xport
