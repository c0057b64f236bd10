// fabq transport: the wire format of FI_EP_DGRAM datagrams over UDP, its parser, and the
// authentication of datagrams under a shared secret (the MAC and the receiver's replay guard).
//
// Each UDP datagram is one message: a 24-byte header, then the payload. Little-endian:
//
//   offset  size  field
//        0     2  magic    0x6446 ("Fd")
//        2     1  version  1
//        3     1  flags    kDgramData, kDgramAuth
//        4     4  length   payload bytes after the header (and its authentication)
//        8     4  check    header_check() of the header's other bytes
//       12     4  zero
//       16     8  data     remote CQ data with kDgramData; 0 otherwise
//
// The check covers the header, so that a damaged header (a net=corrupt fault, or anything
// else) is never taken for another message: its datagram is dropped. Without a secret the
// payload's integrity is UDP's checksum's, as for any UDP application. A datagram whose magic,
// version, flags, length, check or zero fields are wrong, or that is shorter than a header, is
// not fabq's (a stray or hostile sender, a damaged one) and is dropped: nothing of it reaches a
// receive.
//
// Authenticated datagrams (endpoints with a shared secret, fi_fabq(7) RELIABILITY AND
// SECURITY) carry kDgramAuth and 40 more bytes between the header and the payload:
//
//       24     8  epoch    the sending socket's, random, drawn when it opened
//       32     8  seq      the sending socket's count of datagrams, from 1, whatever their
//                          destination
//       40     8  time     when it was sent: microseconds since 1970 by the sender's clock
//       48    16  mac      HMAC-SHA256, truncated to 128 bits, under the datagram key (a key
//                          derived from the secret for datagrams alone, DgramKey), of
//                          Ends (the sender's address and port, the destination's: 12 bytes as
//                          they are in a sockaddr_in) || bytes 0..48 || the payload
//
// so that a stranger can neither make a datagram an endpoint takes, nor change one on the way,
// nor take one addressed to another endpoint (or group) or sent by another to an endpoint as
// its own. A receiver that holds the secret takes only such datagrams, each at most once
// (ReplayGuard); one without it takes none of them. Without a secret nothing of this is on the
// wire.
//
// Thread safety: plain functions; a DgramKey is immutable once made (any thread may use it);
// a ReplayGuard is one thread's at a time (the engine lock, xport/dgram.h).
#pragma once

#include <netinet/in.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/hmac.h"
#include "xport/transport.h"

namespace fabq::xport::dgram {

inline constexpr size_t kHeaderSize = 24;
inline constexpr uint16_t kMagic = 0x6446;
inline constexpr uint8_t kVersion = 1;
inline constexpr uint8_t kDgramData = 1u << 0;  // `data` is FI_REMOTE_CQ_DATA
inline constexpr uint8_t kDgramAuth = 1u << 1;  // authenticated: epoch, seq, time and mac follow
// The authentication after the header, and the whole header of an authenticated datagram.
inline constexpr size_t kAuthSize = 40;
inline constexpr size_t kAuthHeaderSize = kHeaderSize + kAuthSize;
inline constexpr size_t kMacOffset = 48;  // the MAC's bytes; what is before them is under it
inline constexpr size_t kMacSize = 16;    // 128 bits of HMAC-SHA256
static_assert(kMacOffset + kMacSize == kAuthHeaderSize);
// The largest UDP payload over IPv4 (65535 - 20 - 8), and so the largest message.
inline constexpr size_t kMaxDatagram = 65507;
inline constexpr size_t kMaxPayload = kMaxDatagram - kHeaderSize;
inline constexpr size_t kMaxAuthPayload = kMaxDatagram - kAuthHeaderSize;
static_assert(kMaxPayload == kMaxDgramPayload, "xport/transport.h says so");
static_assert(kMaxAuthPayload == kMaxAuthDgramPayload, "xport/transport.h says so");

struct Header {
  uint8_t flags = 0;
  uint32_t length = 0;
  uint64_t data = 0;
  // kDgramAuth only:
  uint64_t epoch = 0;
  uint64_t seq = 0;
  uint64_t time_us = 0;
};

// The bytes before the payload of a datagram with `flags`: kHeaderSize, or kAuthHeaderSize.
constexpr size_t header_size(uint8_t flags) {
  return (flags & kDgramAuth) != 0 ? kAuthHeaderSize : kHeaderSize;
}

// Writes `h` into out[0..header_size(h.flags)), magic, version and check included; an
// authenticated header's MAC is left zero for DgramKey::seal().
void encode(const Header& h, unsigned char* out);

// Why a datagram was refused.
enum class Refusal : uint8_t {
  kNone = 0,
  kShort,      // fewer bytes than its header
  kBadMagic,   // magic or version: not a fabq datagram
  kBadCheck,   // the check does not match: damaged
  kBadFields,  // an unknown flag, a nonzero zero field, data without kDgramData
  kBadLength,  // length is not what follows the header
};

// Reads and validates the datagram of `size` bytes at in[0..size): its header, and its
// authentication's fields (not the MAC: DgramKey::verify()). kNone and *out filled, or why not
// and *out untouched.
Refusal decode(const unsigned char* in, size_t size, Header* out);

// Who sent a datagram and where to, as the MAC covers them and the replay guard tells senders
// apart: IPv4 addresses and ports in network byte order, as a sockaddr_in holds them.
struct Ends {
  uint32_t src_addr = 0;
  uint32_t dst_addr = 0;
  uint16_t src_port = 0;
  uint16_t dst_port = 0;

  Ends() = default;
  Ends(const sockaddr_in& from, const sockaddr_in& to)
      : src_addr(from.sin_addr.s_addr),
        dst_addr(to.sin_addr.s_addr),
        src_port(from.sin_port),
        dst_port(to.sin_port) {}
  bool operator==(const Ends&) const = default;
};

// The key of datagrams under one shared secret: HMAC-SHA256(secret, "fabq-dgram-key"), so that
// no MAC of the connection handshake (xport/handshake.h) is ever a datagram's, nor the reverse.
// Immutable once made; seal() and verify() work on a copy of the keyed state (no allocation).
class DgramKey {
 public:
  explicit DgramKey(const core::HmacSha256& secret);

  // Writes the MAC of the authenticated datagram whose header (encode(): kAuthHeaderSize bytes)
  // is `header` and whose payload is iov[0..iov_count), sent along `ends`, into the header.
  // The payload is read where it is, never copied.
  void seal(const Ends& ends, unsigned char* header, const iovec* iov, size_t iov_count) const;
  // True when the authenticated datagram of `size` bytes at `in` (decode() took it) that came
  // along `ends` carries the MAC seal() gives it. Compares in constant time.
  [[nodiscard]] bool verify(const Ends& ends, const unsigned char* in, size_t size) const;

 private:
  core::Digest mac(const Ends& ends, const unsigned char* header, const iovec* iov,
                   size_t iov_count) const;
  core::HmacSha256 key_;
};

// What a receiver makes of an authenticated datagram's (ends, epoch, seq, time).
enum class Replay : uint8_t {
  kFresh = 0,  // never seen: take it
  kSeen,       // this sender's datagram of that number came already
  kTooOld,     // behind this sender's window: whether it came cannot be told any more
  kStale,      // no later than the floor (see below): a forgotten sender's past
};

// The replay guard of one datagram endpoint (its socket and its group memberships): at most
// `capacity` senders, each a (Ends, epoch) — its address, its epoch, and the address it sent to
// (the socket's own, or a group's: the datagrams of one sender reach the socket and each
// membership in orders of their own, so each has its own window) — with a
// window of the last kWindow sequence numbers below the highest taken. A datagram is taken once:
// a number above the highest moves the window; one inside it is taken if its bit is clear;
// one below it is refused. Only a datagram whose MAC was verified may enter (accept()), so a
// stranger can neither add a sender nor move a window; check() looks without changing anything,
// so that what is surely refused costs no MAC.
//
// Full: a new sender takes the place of the one heard from least recently, whose latest time
// raises the floor; a sender not tracked is taken only with a time after the floor, so that
// nothing of a forgotten sender's past (its time no later than the floor) is taken again, and
// once taken in, nothing no later than the floor it was taken over (its past, if it was
// forgotten before). A sender still tracked is otherwise judged by its window alone, however
// full the table. What it costs: one sender evicted for another, and a sender whose clock is
// behind a forgotten one's (or a datagram delayed past an eviction) refused until its time
// passes the floor.
//
// Memory: everything is allocated by the constructor (120 bytes per sender, and 8 to 16 of
// index); nothing afterwards. Thread safety: one thread at a time.
class ReplayGuard {
 public:
  static constexpr size_t kWindow = 512;  // sequence numbers a window remembers
  static constexpr size_t kMaxCapacity = size_t{1} << 16;

  // `capacity` senders (1 to kMaxCapacity; clamped).
  explicit ReplayGuard(size_t capacity);
  ReplayGuard(const ReplayGuard&) = delete;
  ReplayGuard& operator=(const ReplayGuard&) = delete;
  ~ReplayGuard();

  // What accept() would say, without changing anything (a sender not tracked is judged against
  // the floor only: whether it would evict is accept()'s to find).
  [[nodiscard]] Replay check(const Ends& ends, uint64_t epoch, uint64_t seq,
                             uint64_t time_us) const;
  // For a datagram whose MAC is verified: kFresh, and it is noted (the sender tracked, evicting
  // one if full; its window moved), or why it is refused, and nothing changes.
  Replay accept(const Ends& ends, uint64_t epoch, uint64_t seq, uint64_t time_us);

  size_t size() const { return count_; }
  size_t capacity() const { return capacity_; }
  uint64_t floor() const { return floor_; }
  uint64_t evictions() const { return evictions_; }

 private:
  struct Sender;
  static constexpr uint32_t kEmpty = 0;  // an index slot that names no sender

  static Replay judge(const Sender& s, uint64_t seq, uint64_t time_us);
  size_t home(const Ends& ends, uint64_t epoch) const;
  // The position in index_ of the sender, or of the empty slot where it would go.
  size_t find(const Ends& ends, uint64_t epoch) const;
  void unindex(size_t pos);

  const size_t capacity_;
  size_t count_ = 0;
  std::unique_ptr<Sender[]> senders_;
  // Open addressing with linear probing over a power of two at least twice the capacity:
  // sender number + 1, or kEmpty.
  const size_t mask_;
  std::unique_ptr<uint32_t[]> index_;
  uint64_t tick_ = 0;  // counts accepted datagrams: how recently each sender was heard
  uint64_t floor_ = 0;
  uint64_t evictions_ = 0;
};

}  // namespace fabq::xport::dgram
