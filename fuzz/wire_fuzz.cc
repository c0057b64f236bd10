// libFuzzer target for the wire parser: a peer's byte stream, cut into reads of any size, fed
// to a Framer the way the TCP transport feeds it. Any broken invariant traps.
//
// Input layout:
//   byte 0        the receiver's max_payload, an index into kMaxPayloads
//   byte 1        k, the number of read sizes (k % 16; 0: the whole stream in one read)
//   bytes 2..2+k  the read sizes, used in turn; 0 is a read that brought nothing
//   the rest      the stream
//
// Invariants checked:
//   - take_header() takes exactly what the header still needs of what it is offered, never more;
//     take_payload() takes min(offered, payload_left()), never more;
//   - payload_left() never exceeds the frame's limit: max_payload for messages, core::kCmDataSize
//   for
//     connect, accept and reject data (and a nonce more for an authenticating request), the
//     fixed sizes of kChallenge and kProof, 0 for the rest;
//   - a completed header re-encodes to the stream's bytes, and obeys every rule of decode();
//   - a dead framer reports the violation decode() finds in the header's bytes, and takes
//     nothing afterwards, not even after next_frame();
//   - decode() of any 32 bytes returns kNone with a header that re-encodes to the same bytes,
//     or a violation, and then leaves its output alone.
#include "xport/wire.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>

namespace fabq::xport::wire {
namespace {

constexpr size_t kMaxPayloads[] = {0,    1,        31,         32,      core::kCmDataSize,
                                   4096, 1u << 20, UINT32_MAX, SIZE_MAX};

void check(bool ok) {
  if (!ok) __builtin_trap();
}

bool is_data(Op op) {
  return op == Op::kMsg || op == Op::kTagged;
}

// The length limit of a header: core::kCmDataSize for connect, accept and reject data (plus a nonce
// for an authenticating request), the receiver's max_payload for messages, the fixed sizes of
// kChallenge and kProof, 0 for the rest.
size_t length_limit(const Header& h, size_t max_payload) {
  switch (h.op) {
    case Op::kConnReq:
      return (h.flags & kAuth) != 0 ? core::kCmDataSize + kNonceSize : core::kCmDataSize;
    case Op::kConnAccept:
    case Op::kConnReject:
      return core::kCmDataSize;
    case Op::kMsg:
    case Op::kTagged:
      return max_payload;
    case Op::kChallenge:
      return kNonceSize + kMacSize;
    case Op::kProof:
      return kMacSize;
    default:
      return 0;
  }
}

// The rules of wire.h, restated: what a header decode() accepted must satisfy.
bool obeys_rules(const Header& h, size_t max_payload) {
  const uint8_t op = static_cast<uint8_t>(h.op);
  if (op < static_cast<uint8_t>(Op::kConnReq) || op > static_cast<uint8_t>(Op::kProof)) {
    return false;
  }
  uint32_t allowed = 0;
  if (is_data(h.op)) allowed = kDataFlags;
  if (h.op == Op::kConnReq) allowed = kShmOffer | kAuth;
  if (h.op == Op::kConnAccept) allowed = kShmAccept;
  if ((h.flags & ~allowed) != 0) return false;
  if (h.length > length_limit(h, max_payload)) return false;
  // A shared-memory offer names its segment in `tag` and carries its nonce in `data`.
  const bool offer = h.op == Op::kConnReq && (h.flags & kShmOffer) != 0;
  if (h.tag != 0 && h.op != Op::kTagged && !offer) return false;
  if (h.data != 0 && (h.flags & kRemoteData) == 0 && !offer) return false;
  const bool numbered = is_data(h.op) || h.op == Op::kAckReceived || h.op == Op::kAckDelivered;
  if (h.seq != 0 && !numbered) return false;
  return true;
}

bool same_header(const Header& a, const Header& b) {
  return a.op == b.op && a.flags == b.flags && a.length == b.length && a.seq == b.seq &&
         a.tag == b.tag && a.data == b.data;
}

// decode() of 32 arbitrary bytes; returns its verdict.
Violation check_decode(const unsigned char* in, size_t max_payload, Header* out) {
  Header sentinel;
  sentinel.op = Op::kShutdown;
  sentinel.seq = 0x5e471e1;
  Header h = sentinel;
  const Violation v = decode(in, max_payload, &h);
  if (v == Violation::kNone) {
    unsigned char again[kHeaderSize];
    encode(h, again);
    check(std::memcmp(again, in, kHeaderSize) == 0);
    check(obeys_rules(h, max_payload));
  } else {
    check(v <= Violation::kUnusedField);
    check(same_header(h, sentinel));
  }
  check(violation_str(v) != nullptr);
  *out = h;
  return v;
}

// A dead framer takes nothing of the n bytes at p, not even after next_frame().
void check_takes_nothing_when_dead(Framer& f, const unsigned char* p, size_t n) {
  check(f.take_header(p, n) == 0);
  check(f.take_payload(n) == 0);
  f.next_frame();
  check(f.dead());
  check(f.take_header(p, n) == 0);
  check(f.take_payload(n) == 0);
}

void run(const uint8_t* data, size_t size) {
  if (size < 2) return;
  const size_t max_payload = kMaxPayloads[data[0] % std::size(kMaxPayloads)];
  size_t k = data[1] % 16;
  if (k > size - 2) k = size - 2;
  const uint8_t* sizes = data + 2;
  const unsigned char* stream = data + 2 + k;
  const size_t stream_size = size - 2 - k;

  bool any_nonzero = false;
  for (size_t i = 0; i < k; ++i) any_nonzero |= sizes[i] != 0;
  if (!any_nonzero) k = 0;  // reads that never bring anything would never end

  Framer f(max_payload);
  size_t frame_start = 0;  // stream offset of the current frame's header
  size_t header_held = 0;  // header bytes of the current frame the framer has taken
  size_t pos = 0;
  for (size_t read = 0; pos < stream_size; ++read) {
    size_t avail = stream_size - pos;
    if (k != 0 && sizes[read % k] < avail) avail = sizes[read % k];
    if (avail == 0) {  // a read that brought nothing: nothing is taken
      check(f.take_header(stream + pos, 0) == 0);
      check(f.take_payload(0) == 0);
      continue;
    }
    while (avail > 0) {
      if (f.dead()) {
        check_takes_nothing_when_dead(f, stream + pos, avail);
        return;
      }
      size_t took;
      if (f.in_header()) {
        const size_t want = kHeaderSize - header_held;
        took = f.take_header(stream + pos, avail);
        check(took == (avail < want ? avail : want));
        header_held += took;
        if (header_held == kHeaderSize) {
          Header h;
          const Violation v = check_decode(stream + frame_start, max_payload, &h);
          check(f.violation() == v);
          if (v == Violation::kNone) {
            check(!f.in_header());
            check(same_header(f.header(), h));
            check(f.payload_left() == h.length);
            check(f.frame_done() == (h.length == 0));
          }
        } else {
          check(f.in_header() && !f.dead() && !f.frame_done());
        }
      } else {
        const size_t left = f.payload_left();
        check(left > 0 && !f.frame_done());
        took = f.take_payload(avail);
        check(took == (avail < left ? avail : left));
        check(f.payload_left() == left - took);
        check(f.frame_done() == (f.payload_left() == 0));
      }
      // The payload still to come is within the limit of the frame's op.
      if (f.in_header()) {
        check(f.payload_left() == 0);
      } else {
        check(f.payload_left() <= length_limit(f.header(), max_payload));
      }
      pos += took;
      avail -= took;
      if (f.frame_done()) {
        // Nothing more belongs to this frame until the transport has acted on it.
        check(f.take_header(stream + pos, avail) == 0);
        check(f.take_payload(avail) == 0);
        f.next_frame();
        check(f.in_header() && !f.frame_done() && f.payload_left() == 0);
        frame_start = pos;
        header_held = 0;
      }
    }
  }
  // The stream may end with the header that killed the framer.
  if (f.dead()) check_takes_nothing_when_dead(f, data, size);
}

}  // namespace
}  // namespace fabq::xport::wire

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fabq::xport::wire::run(data, size);
  return 0;
}
