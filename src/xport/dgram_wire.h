// fabq transport: the wire format of FI_EP_DGRAM datagrams over UDP, and its parser.
//
// Each UDP datagram is one message: a 24-byte header, then the payload. Little-endian:
//
//   offset  size  field
//        0     2  magic    0x6446 ("Fd")
//        2     1  version  1
//        3     1  flags    kDgramData only
//        4     4  length   payload bytes after the header: the datagram's size minus 24
//        8     4  check    header_check() of the header's other bytes
//       12     4  zero
//       16     8  data     remote CQ data with kDgramData; 0 otherwise
//
// The check covers the header, so that a damaged header (a net=corrupt fault, or anything
// else) is never taken for another message: its datagram is dropped. The payload's integrity
// is UDP's checksum's, as for any UDP application. A datagram whose magic, version, flags,
// length, check or zero fields are wrong, or that is shorter than a header, is not fabq's (a
// stray or hostile sender, a damaged one) and is dropped: nothing of it reaches a receive.
//
// Thread safety: plain functions.
#pragma once

#include <cstddef>
#include <cstdint>

#include "xport/transport.h"

namespace fabq::xport::dgram {

inline constexpr size_t kHeaderSize = 24;
inline constexpr uint16_t kMagic = 0x6446;
inline constexpr uint8_t kVersion = 1;
inline constexpr uint8_t kDgramData = 1u << 0;  // `data` is FI_REMOTE_CQ_DATA
// The largest UDP payload over IPv4 (65535 - 20 - 8), and so the largest message.
inline constexpr size_t kMaxDatagram = 65507;
inline constexpr size_t kMaxPayload = kMaxDatagram - kHeaderSize;
static_assert(kMaxPayload == kMaxDgramPayload, "xport/transport.h says so");

struct Header {
  uint8_t flags = 0;
  uint32_t length = 0;
  uint64_t data = 0;
};

// Writes `h` into out[0..kHeaderSize), magic, version and check included.
void encode(const Header& h, unsigned char* out);

// Why a datagram was refused.
enum class Refusal : uint8_t {
  kNone = 0,
  kShort,      // fewer bytes than a header
  kBadMagic,   // magic or version: not a fabq datagram
  kBadCheck,   // the check does not match: damaged
  kBadFields,  // an unknown flag, a nonzero zero field, data without kDgramData
  kBadLength,  // length is not what follows the header
};

// Reads and validates the datagram of `size` bytes at in[0..size). kNone and *out filled, or
// why not and *out untouched.
Refusal decode(const unsigned char* in, size_t size, Header* out);

}  // namespace fabq::xport::dgram
