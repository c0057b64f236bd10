#include "xport/wire.h"

#include <algorithm>
#include <cstring>

namespace fabq::xport::wire {
namespace {

template <class T>
void put(unsigned char* p, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

template <class T>
T get(const unsigned char* p) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(p[i]) << (8 * i);
  return v;
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
    default:
      return 0;
  }
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
  if (op < static_cast<uint8_t>(Op::kConnReq) || op > static_cast<uint8_t>(Op::kProof)) {
    return Violation::kUnknownOp;
  }
  Header h;
  h.op = static_cast<Op>(op);
  h.flags = get<uint32_t>(in + 4);
  h.length = get<uint32_t>(in + 8);
  h.seq = get<uint32_t>(in + 12);
  h.tag = get<uint64_t>(in + 16);
  h.data = get<uint64_t>(in + 24);
  uint32_t allowed = 0;
  if (is_data(h.op)) allowed = kDataFlags;
  if (h.op == Op::kConnReq) allowed = kShmOffer | kAuth;
  if (h.op == Op::kConnAccept) allowed = kShmAccept;
  if ((h.flags & ~allowed) != 0) return Violation::kBadFlags;
  if (h.length > length_limit(h, max_payload)) return Violation::kTooLong;
  // A shared-memory offer names its segment in `tag` and proves it with `data`.
  const bool offer = (h.flags & kShmOffer) != 0;
  if (h.tag != 0 && h.op != Op::kTagged && !offer) return Violation::kUnusedField;
  if (h.data != 0 && (h.flags & kRemoteData) == 0 && !offer) return Violation::kUnusedField;
  const bool numbered = is_data(h.op) || h.op == Op::kAckReceived || h.op == Op::kAckDelivered;
  if (h.seq != 0 && !numbered) return Violation::kUnusedField;
  *out = h;
  return Violation::kNone;
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
  std::memcpy(buf_ + held_, p, take);
  held_ += take;
  if (held_ < kHeaderSize) return take;
  violation_ = decode(buf_, max_payload_, &header_);
  if (dead()) return take;
  payload_left_ = header_.length;
  in_payload_ = true;
  done_ = payload_left_ == 0;
  return take;
}

size_t Framer::take_payload(size_t n) {
  if (dead() || !in_payload_ || done_) return 0;
  const size_t take = std::min(n, payload_left_);
  payload_left_ -= take;
  done_ = payload_left_ == 0;
  return take;
}

}  // namespace fabq::xport::wire
