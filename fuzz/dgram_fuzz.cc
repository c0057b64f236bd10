// libFuzzer target for what a datagram endpoint does with a datagram (xport/dgram_wire.h): the
// header check (decode()), the MAC (DgramKey) and the replay guard (ReplayGuard), each alone and
// in the order the socket runs them (xport/dgram.cc DgramSocket::authentic). Any broken
// invariant traps.
//
// Input layout:
//   byte 0        bits 0-2: the guard's capacity less 1 (1 to 8 senders, so that it fills);
//                 bit 3: seal the datagram under the fuzzer's key before it is read (else the
//                 bytes are read as they came, as from a stranger)
//   bytes 1-2     n, little-endian: the datagram's size (at most what follows)
//   n bytes       the datagram, as recvfrom() gives it
//   the rest      guard operations of 6 bytes each: the sender (bits 0-1: one of four pairs of
//                 addresses; bits 2-3: one of four epochs; bit 4: check() only), its number and
//                 its time (16 bits each, little-endian: small, so that they meet)
//
// Invariants checked:
//   - decode(): a refusal leaves its output alone; what it takes has only known flags, data only
//     with kDgramData, the length that follows its header (header_size() of its flags), and
//     re-encodes to the same header bytes (its authentication's too, but for the MAC, which
//     encode() leaves zero);
//   - the MAC: verify() of what decode() took (authenticated) is true exactly when its MAC is
//     what seal() makes of the same bytes, addresses and key; a sealed datagram verifies under
//     its addresses and key, and under no other addresses, no other key, and with any one byte
//     changed; verify() never reads past the datagram, whatever its size;
//   - the receive path: a sealed datagram is taken once (decode, check, verify, accept), and the
//     same bytes again are refused;
//   - the guard: check() changes nothing and agrees with accept() (a refusal by check() is
//     accept()'s too; what check() finds fresh accept() takes, or refuses as kStale when the
//     table is full); no (addresses, epoch, number, time) is ever taken twice, tracked,
//     forgotten or taken in again; it never tracks more senders than its capacity, and its floor
//     never falls.
#include <netinet/in.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <set>
#include <tuple>
#include <vector>

#include "xport/dgram_wire.h"

namespace fabq::xport::dgram {
namespace {

using Bytes = std::vector<unsigned char>;

void check(bool ok) {
  if (!ok) __builtin_trap();
}

sockaddr_in addr(uint32_t host, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(host);
  a.sin_port = htons(port);
  return a;
}

// Four pairs of (from, to), two of them to a multicast group, and each differs from another in
// one field only.
const Ends kEnds[4] = {
    Ends(addr(0x0a000001, 4000), addr(0x0a000002, 5000)),
    Ends(addr(0x0a000001, 4001), addr(0x0a000002, 5000)),
    Ends(addr(0x0a000001, 4000), addr(0xefff0001, 6000)),
    Ends(addr(0x0a000003, 4000), addr(0xefff0001, 6000)),
};
constexpr uint64_t kEpochs[4] = {1, 2, 0x8000000000000000ULL, ~uint64_t{0}};

const core::HmacSha256& secret() {
  static const core::HmacSha256 s("the fuzzer's secret", 19);
  return s;
}
const core::HmacSha256& other_secret() {
  static const core::HmacSha256 s("somebody else's", 15);
  return s;
}

uint16_t le16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}

// The datagram's header as decode() read it must be the bytes it came in.
void check_decode(const Bytes& d, const Header& out) {
  const size_t header = header_size(out.flags);
  check((out.flags & ~(kDgramData | kDgramAuth)) == 0);
  check((out.flags & kDgramData) != 0 || out.data == 0);
  check(d.size() >= header && out.length == d.size() - header);
  check((out.flags & kDgramAuth) != 0 || (out.epoch == 0 && out.seq == 0 && out.time_us == 0));
  unsigned char again[kAuthHeaderSize];
  encode(out, again);
  const size_t compared = (out.flags & kDgramAuth) != 0 ? kMacOffset : kHeaderSize;
  check(std::memcmp(again, d.data(), compared) == 0);
  if ((out.flags & kDgramAuth) != 0) {
    for (size_t i = kMacOffset; i < kAuthHeaderSize; ++i) check(again[i] == 0);
  }
}

// What a socket with the fuzzer's key does with `d`, arrived along `ends`: decode, the guard's
// look, the MAC, the guard's note. True when it would reach the owner.
bool receive(const DgramKey& key, ReplayGuard* guard, const Ends& ends, const Bytes& d) {
  Header h;
  if (decode(d.data(), d.size(), &h) != Refusal::kNone) return false;
  if ((h.flags & kDgramAuth) == 0) return false;
  if (guard->check(ends, h.epoch, h.seq, h.time_us) != Replay::kFresh) return false;
  if (!key.verify(ends, d.data(), d.size())) return false;
  return guard->accept(ends, h.epoch, h.seq, h.time_us) == Replay::kFresh;
}

void run_datagram(Bytes d, bool seal, ReplayGuard* guard) {
  const DgramKey key(secret());
  const Ends& ends = kEnds[0];
  if (seal) {
    // The fuzzer's bytes as an authentic datagram: its header (auth flag set, length made
    // right) and payload, sealed.
    if (d.size() < kAuthHeaderSize) d.resize(kAuthHeaderSize, 0);
    Header h{};
    const Refusal r = decode(d.data(), d.size(), &h);
    if (r != Refusal::kNone || (h.flags & kDgramAuth) == 0) {
      h = Header{.flags = static_cast<uint8_t>((d[3] & kDgramData) | kDgramAuth),
                 .length = static_cast<uint32_t>(d.size() - kAuthHeaderSize),
                 .data = (d[3] & kDgramData) != 0 ? uint64_t{d[16]} : 0,
                 .epoch = uint64_t{d[24]},
                 .seq = uint64_t{d[32]},
                 .time_us = uint64_t{d[40]} + 1};
    }
    // A sender's clock is never at 1970: time 0 is no later than an empty guard's floor.
    h.time_us = std::max<uint64_t>(h.time_us, 1);
    encode(h, d.data());
    const iovec payload{d.data() + kAuthHeaderSize, d.size() - kAuthHeaderSize};
    key.seal(ends, d.data(), &payload, 1);
    check(key.verify(ends, d.data(), d.size()));
    check(!key.verify(kEnds[1], d.data(), d.size()));
    check(!key.verify(kEnds[2], d.data(), d.size()));
    check(!DgramKey(other_secret()).verify(ends, d.data(), d.size()));
    // One byte changed, wherever (chosen by the bytes themselves): the MAC fails.
    Bytes bent = d;
    bent[d[d.size() - 1] % d.size()] ^= static_cast<unsigned char>(1u << (d[0] % 8));
    check(!key.verify(ends, bent.data(), bent.size()));
    // The receive path (its guard still empty) takes it, once.
    check(guard->size() == 0);
    check(receive(key, guard, ends, d));
    check(!receive(key, guard, ends, d));
  }
  const Header untouched{.flags = 0xff, .length = 0xdeadbeef, .data = 42, .epoch = 7};
  Header out = untouched;
  if (decode(d.data(), d.size(), &out) != Refusal::kNone) {
    check(out.flags == untouched.flags && out.length == untouched.length &&
          out.data == untouched.data && out.epoch == untouched.epoch);
    return;
  }
  check_decode(d, out);
  if ((out.flags & kDgramAuth) == 0) return;
  // verify() says yes exactly for the MAC seal() makes of the same bytes.
  Bytes resealed = d;
  const iovec payload{resealed.data() + kAuthHeaderSize, resealed.size() - kAuthHeaderSize};
  key.seal(ends, resealed.data(), &payload, 1);
  const bool same = std::memcmp(resealed.data() + kMacOffset, d.data() + kMacOffset, kMacSize) == 0;
  check(key.verify(ends, d.data(), d.size()) == same);
}

// The guard against its specification: every tuple it ever took, in a set.
void run_guard(ReplayGuard* guard, const uint8_t* ops, size_t size) {
  std::set<std::tuple<int, uint64_t, uint64_t, uint64_t>> taken;
  uint64_t floor = guard->floor();
  for (; size >= 6; ops += 6, size -= 6) {
    const int who = ops[0] & 0x0f;
    const bool look_only = (ops[0] & 0x10) != 0;
    const Ends& ends = kEnds[who & 3];
    const uint64_t epoch = kEpochs[who >> 2];
    const uint64_t seq = le16(ops + 1);
    const uint64_t time = le16(ops + 3);
    const size_t before = guard->size();
    const Replay looked = guard->check(ends, epoch, seq, time);
    check(guard->check(ends, epoch, seq, time) == looked);
    check(guard->size() == before && guard->floor() == floor);
    if (look_only) continue;
    const Replay r = guard->accept(ends, epoch, seq, time);
    if (looked != Replay::kFresh) {
      check(r == looked);
    } else {
      check(r == Replay::kFresh || (r == Replay::kStale && before == guard->capacity()));
    }
    const auto tuple = std::make_tuple(who, seq, time, epoch);
    if (r == Replay::kFresh) {
      check(taken.insert(tuple).second);  // never twice
      check(guard->check(ends, epoch, seq, time) != Replay::kFresh);
    } else {
      check(guard->size() == before);
    }
    check(guard->size() <= guard->capacity());
    check(guard->floor() >= floor);
    floor = guard->floor();
  }
}

}  // namespace
}  // namespace fabq::xport::dgram

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fabq::xport::dgram;
  if (size < 3) return 0;
  ReplayGuard guard((data[0] & 7) + 1);
  const bool seal = (data[0] & 8) != 0;
  const size_t n = std::min<size_t>(fabq::xport::dgram::le16(data + 1), size - 3);
  run_datagram(Bytes(data + 3, data + 3 + n), seal, &guard);
  run_guard(&guard, data + 3 + n, size - 3 - n);
  return 0;
}
