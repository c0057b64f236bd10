// libFuzzer target for the wire parser of connections: a peer's byte stream, cut into reads of
// any size, fed to a Framer the way the TCP transport feeds it. Any broken invariant traps.
// (Datagrams have their own target: dgram_fuzz.)
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
//   - payload_left() never exceeds the frame's limit (wire.h, restated in length_limit() below):
//     max_payload for messages and read answers, max_payload and 8 bytes of CQ data for a
//     kWrite with kRemoteData, core::kCmDataSize for connect, accept and reject data (and a
//     nonce more for an authenticating request), the fixed sizes of kChallenge, kProof and
//     kReadReq, an atomic's description and two operand arrays for kAtomic, one array for
//     kAtomicResp, 0 for the rest; a direct message, kWrite or kReadReq (kDirect) exactly 1 to
//     kMaxIov entries of 16 bytes (after a read's 8-byte length) whatever max_payload says, and a
//     direct kReadResp nothing;
//   - a completed header re-encodes to the stream's bytes, and obeys every rule of decode():
//     the flags of its op, its length, `tag` only where a key, a tag, a segment or a piece's
//     offset goes, `data` only where CQ data, an address, a Status or a nonce goes, a Status
//     that exists and no payload (nor kMore) with a refusal, bytes in a piece with kMore, `seq`
//     only where a number goes;
//   - a refused header breaks the rule its Violation names;
//   - a dead framer reports the violation decode() finds in the header's bytes, and takes
//     nothing afterwards, not even after next_frame();
//   - decode() of any 32 bytes returns kNone with a header that re-encodes to the same bytes,
//     or a violation, and then leaves its output alone;
//   - the 8-byte description at the front of a kAtomic payload decodes only with a kind that
//     exists and a zero reserved byte, and then re-encodes to the same bytes; put_u64() and
//     get_u64() are inverses.
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

// One-sided requests name a region (`tag`) and an address in it (`data`); their answers carry a
// Status in `data`.
bool is_request(Op op) {
  return op == Op::kWrite || op == Op::kReadReq || op == Op::kAtomic;
}

bool is_answer(Op op) {
  return op == Op::kReadResp || op == Op::kRmaAck || op == Op::kAtomicResp;
}

// a + b, or SIZE_MAX when that does not fit: a limit is a number, not a size_t that wraps.
size_t sat_add(size_t a, size_t b) {
  return a > SIZE_MAX - b ? SIZE_MAX : a + b;
}

// The length limit of a header: core::kCmDataSize for connect, accept and reject data (plus a nonce
// for an authenticating request), the receiver's max_payload for messages and read answers (plus
// the 8 bytes of CQ data of a kWrite that carries them), the fixed sizes of kChallenge, kProof and
// kReadReq, an atomic's description and operands and compare values, an atomic's previous values,
// 0 for the rest.
size_t length_limit(const Header& h, size_t max_payload) {
  if ((h.flags & kDirect) != 0) {
    // The buffers a direct request names, whatever max_payload says; its answer carries none.
    if (h.op == Op::kReadResp) return 0;
    return (h.op == Op::kReadReq ? 8 : 0) + kMaxIov * kDirectEntrySize;
  }
  switch (h.op) {
    case Op::kConnReq:
      return (h.flags & kAuth) != 0 ? core::kCmDataSize + kNonceSize : core::kCmDataSize;
    case Op::kConnAccept:
    case Op::kConnReject:
      return core::kCmDataSize;
    case Op::kMsg:
    case Op::kTagged:
    case Op::kReadResp:
      return max_payload;
    case Op::kWrite:
      return sat_add(max_payload, (h.flags & kRemoteData) != 0 ? 8 : 0);
    case Op::kChallenge:
      return kNonceSize + kMacSize;
    case Op::kProof:
      return kMacSize;
    case Op::kReadReq:
      return 8;
    case Op::kAtomic:
      return 8 + 2 * kMaxAtomicBytes;
    case Op::kAtomicResp:
      return kMaxAtomicBytes;
    default:
      return 0;
  }
}

// The least length of a header's op: the fixed size of kReadReq, the description of kAtomic.
size_t length_floor(const Header& h) {
  if (h.op == Op::kReadReq || h.op == Op::kAtomic) return 8;
  return 0;
}

uint32_t allowed_flags(Op op) {
  if (is_data(op)) return kDataFlags | kDirect;
  if (op == Op::kConnReq) return kShmOffer | kAuth;
  if (op == Op::kConnAccept) return kShmAccept;
  if (op == Op::kWrite) return kRemoteData | kDirect;
  if (op == Op::kReadReq) return kDirect;
  if (op == Op::kReadResp) return kDirect | kMore;
  return 0;
}

bool known_op(uint8_t op) {
  return op >= static_cast<uint8_t>(Op::kConnReq) && op <= static_cast<uint8_t>(Op::kAtomicResp);
}

// Each rule of wire.h, restated; a header decode() accepted keeps them all, and one it refused
// breaks the rule its Violation names.
bool flags_ok(const Header& h) {
  // A direct write has no room for CQ data; a message carries its own in the header.
  const bool both = (h.flags & kDirect) != 0 && (h.flags & kRemoteData) != 0 && !is_data(h.op);
  // A direct answer is whole: never a piece.
  const bool direct_piece = (h.flags & kDirect) != 0 && (h.flags & kMore) != 0;
  return (h.flags & ~allowed_flags(h.op)) == 0 && !both && !direct_piece;
}

bool length_ok(const Header& h, size_t max_payload) {
  if ((h.flags & kDirect) != 0) {
    if (h.op == Op::kReadResp) return h.length == 0;
    const size_t fixed = h.op == Op::kReadReq ? 8 : 0;
    if (h.length <= fixed) return false;
    const size_t entries = h.length - fixed;
    return entries % kDirectEntrySize == 0 && entries / kDirectEntrySize <= kMaxIov;
  }
  return h.length <= length_limit(h, max_payload) && h.length >= length_floor(h);
}

// A Status that exists, and a payload (or more pieces) only with kOk.
bool status_ok(const Header& h) {
  if (!is_answer(h.op)) return true;
  return h.data <= static_cast<uint64_t>(RmaStatus::kCopyFailed) &&
         (h.data == 0 || (h.length == 0 && (h.flags & kMore) == 0));
}

bool fields_ok(const Header& h) {
  // A shared-memory offer names its segment in `tag` and carries its nonce in `data`.
  const bool offer = h.op == Op::kConnReq && (h.flags & kShmOffer) != 0;
  // A read's answer that is not direct may be a piece: its offset in `tag`.
  const bool piece = h.op == Op::kReadResp && (h.flags & kDirect) == 0;
  if (h.tag != 0 && h.op != Op::kTagged && !offer && !is_request(h.op) && !piece) return false;
  // A piece that says more follow carries bytes.
  if ((h.flags & kMore) != 0 && h.length == 0) return false;
  if (h.data != 0 && (h.flags & kRemoteData) == 0 && !offer && !is_request(h.op) &&
      !is_answer(h.op)) {
    return false;
  }
  const bool numbered = is_data(h.op) || h.op == Op::kAckReceived || h.op == Op::kAckDelivered ||
                        is_request(h.op) || is_answer(h.op);
  if (h.seq != 0 && !numbered) return false;
  return true;
}

bool obeys_rules(const Header& h, size_t max_payload) {
  return known_op(static_cast<uint8_t>(h.op)) && flags_ok(h) && length_ok(h, max_payload) &&
         status_ok(h) && fields_ok(h);
}

// The fields of 32 raw bytes, without a verdict.
Header raw_header(const unsigned char* in) {
  auto get = [in](size_t at, size_t n) {
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(in[at + i]) << (8 * i);
    return v;
  };
  Header h;
  h.op = static_cast<Op>(in[3]);
  h.flags = static_cast<uint32_t>(get(4, 4));
  h.length = static_cast<uint32_t>(get(8, 4));
  h.seq = static_cast<uint32_t>(get(12, 4));
  h.tag = get(16, 8);
  h.data = get(24, 8);
  return h;
}

// The bytes decode() refused with `v` break the rule `v` names.
bool breaks(const unsigned char* in, size_t max_payload, Violation v) {
  const Header h = raw_header(in);
  const bool magic = in[0] == (kMagic & 0xff) && in[1] == (kMagic >> 8);
  switch (v) {
    case Violation::kBadMagic:
      return !magic;
    case Violation::kBadVersion:
      return magic && in[2] != kVersion;
    case Violation::kUnknownOp:
      return !known_op(in[3]);
    case Violation::kBadFlags:
      return known_op(in[3]) && !flags_ok(h);
    case Violation::kTooLong:
      return known_op(in[3]) && !length_ok(h, max_payload);
    case Violation::kBadStatus:
      return known_op(in[3]) && !status_ok(h);
    case Violation::kUnusedField:
      return known_op(in[3]) && !fields_ok(h);
    default:
      return false;
  }
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
    check(breaks(in, max_payload, v));
    check(same_header(h, sentinel));
  }
  check(violation_str(v) != nullptr);
  *out = h;
  return v;
}

// The first 8 payload bytes of a kAtomic (an AtomicDesc), or of a kReadReq (its length).
void check_prefix(Op op, const unsigned char* p) {
  if (op == Op::kAtomic) {
    AtomicDesc sentinel;
    sentinel.op = 0xa5;
    sentinel.count = 0x5e471e1;
    AtomicDesc d = sentinel;
    const bool ok = decode_atomic(p, &d);
    check(ok == (p[2] <= static_cast<uint8_t>(AtomicKind::kCompare) && p[3] == 0));
    if (!ok) {
      check(d.op == sentinel.op && d.count == sentinel.count);
      return;
    }
    unsigned char again[kAtomicDescSize];
    encode_atomic(d, again);
    check(std::memcmp(again, p, kAtomicDescSize) == 0);
    check(d.op == p[0] && d.datatype == p[1] && static_cast<uint8_t>(d.kind) == p[2]);
  } else if (op == Op::kReadReq) {
    unsigned char again[8];
    put_u64(again, get_u64(p));
    check(std::memcmp(again, p, sizeof(again)) == 0);
  }
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
        const Header& done = f.header();
        if (done.length >= 8) check_prefix(done.op, stream + frame_start + kHeaderSize);
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
