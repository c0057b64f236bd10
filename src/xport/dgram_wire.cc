#include "xport/dgram_wire.h"

#include <string.h>

#include <algorithm>
#include <cstring>
#include <string_view>

namespace fabq::xport::dgram {
namespace {

template <class T>
void put(unsigned char* out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
}

template <class T>
T get(const unsigned char* in) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(in[i]) << (8 * i);
  return v;
}

// A 32-bit mix of the header's bytes other than the check itself (bytes 8..12). Every bit of
// the input reaches every bit of the result, so a flipped bit is caught.
uint32_t header_check(const unsigned char* h) {
  uint64_t x = 0x9e3779b97f4a7c15ULL;
  const uint64_t words[3] = {get<uint32_t>(h) | (uint64_t{get<uint32_t>(h + 12)} << 32),
                             get<uint64_t>(h + 16), get<uint32_t>(h + 4)};
  for (uint64_t w : words) {
    x ^= w;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 31;
  }
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 29;
  return static_cast<uint32_t>(x ^ (x >> 32));
}

constexpr uint8_t kKnownFlags = kDgramData | kDgramAuth;

// What the datagram key is derived with (DgramKey): a label no handshake MAC starts with.
constexpr std::string_view kKeyLabel = "fabq-dgram-key";

}  // namespace

void encode(const Header& h, unsigned char* out) {
  put<uint16_t>(out, kMagic);
  out[2] = kVersion;
  out[3] = h.flags;
  put<uint32_t>(out + 4, h.length);
  put<uint32_t>(out + 8, 0);
  put<uint32_t>(out + 12, 0);
  put<uint64_t>(out + 16, h.data);
  put<uint32_t>(out + 8, header_check(out));
  if ((h.flags & kDgramAuth) != 0) {
    put<uint64_t>(out + 24, h.epoch);
    put<uint64_t>(out + 32, h.seq);
    put<uint64_t>(out + 40, h.time_us);
    std::memset(out + kMacOffset, 0, kMacSize);
  }
}

Refusal decode(const unsigned char* in, size_t size, Header* out) {
  if (size < kHeaderSize) return Refusal::kShort;
  if (get<uint16_t>(in) != kMagic || in[2] != kVersion) return Refusal::kBadMagic;
  if (get<uint32_t>(in + 8) != header_check(in)) return Refusal::kBadCheck;
  const uint8_t flags = in[3];
  const uint64_t data = get<uint64_t>(in + 16);
  if ((flags & ~kKnownFlags) != 0 || get<uint32_t>(in + 12) != 0 ||
      ((flags & kDgramData) == 0 && data != 0)) {
    return Refusal::kBadFields;
  }
  const size_t header = header_size(flags);
  if (size < header) return Refusal::kShort;
  const uint32_t length = get<uint32_t>(in + 4);
  if (length != size - header) return Refusal::kBadLength;
  Header h{.flags = flags, .length = length, .data = data};
  if ((flags & kDgramAuth) != 0) {
    h.epoch = get<uint64_t>(in + 24);
    h.seq = get<uint64_t>(in + 32);
    h.time_us = get<uint64_t>(in + 40);
  }
  *out = h;
  return Refusal::kNone;
}

// --- DgramKey ------------------------------------------------------------------------------------

DgramKey::DgramKey(const core::HmacSha256& secret) : key_(nullptr, 0) {
  core::HmacSha256 derive = secret;
  derive.update(kKeyLabel.data(), kKeyLabel.size());
  core::Digest k = derive.final();
  key_.init(k.data(), k.size());
  explicit_bzero(k.data(), k.size());
}

core::Digest DgramKey::mac(const Ends& ends, const unsigned char* header, const iovec* iov,
                           size_t iov_count) const {
  // The addresses as a sockaddr_in holds them, so that both ends write the same bytes.
  unsigned char pseudo[12];
  std::memcpy(pseudo, &ends.src_addr, 4);
  std::memcpy(pseudo + 4, &ends.src_port, 2);
  std::memcpy(pseudo + 6, &ends.dst_addr, 4);
  std::memcpy(pseudo + 10, &ends.dst_port, 2);
  core::HmacSha256 h = key_;  // the keyed state, on the stack: seal() and verify() are const
  h.update(pseudo, sizeof(pseudo));
  h.update(header, kMacOffset);
  for (size_t i = 0; i < iov_count; ++i) h.update(iov[i].iov_base, iov[i].iov_len);
  return h.final();
}

void DgramKey::seal(const Ends& ends, unsigned char* header, const iovec* iov,
                    size_t iov_count) const {
  const core::Digest d = mac(ends, header, iov, iov_count);
  std::memcpy(header + kMacOffset, d.data(), kMacSize);
}

bool DgramKey::verify(const Ends& ends, const unsigned char* in, size_t size) const {
  if (size < kAuthHeaderSize) return false;
  const iovec payload{const_cast<unsigned char*>(in + kAuthHeaderSize), size - kAuthHeaderSize};
  const core::Digest d = mac(ends, in, &payload, 1);
  return core::mac_equal(d.data(), in + kMacOffset, kMacSize);
}

// --- ReplayGuard ---------------------------------------------------------------------------------

struct ReplayGuard::Sender {
  Ends ends;
  uint64_t epoch = 0;
  uint64_t top = 0;      // the highest sequence number taken
  uint64_t time_us = 0;  // the latest time taken
  // The floor when it was taken in: what it sent before it was last forgotten (if it was) is
  // no later than that, and no window of this one knows it.
  uint64_t since = 0;
  uint64_t heard = 0;  // tick_ when it was last taken from
  // Bit d (word d / 64, bit d % 64): number top - d was taken.
  uint64_t seen[kWindow / 64] = {};
};

namespace {

constexpr size_t kWords = ReplayGuard::kWindow / 64;

// The window after its top rose by `by`: number top - d is now bit d + by.
void slide(uint64_t* w, uint64_t by) {
  if (by >= ReplayGuard::kWindow) {
    std::fill(w, w + kWords, 0);
    return;
  }
  const size_t words = by / 64;
  const unsigned bits = by % 64;
  for (size_t i = kWords; i-- > 0;) {
    uint64_t v = 0;
    if (i >= words) {
      v = w[i - words] << bits;
      if (bits != 0 && i > words) v |= w[i - words - 1] >> (64 - bits);
    }
    w[i] = v;
  }
}

size_t index_size(size_t capacity) {
  size_t n = 2;
  while (n < 2 * capacity) n *= 2;
  return n;
}

}  // namespace

ReplayGuard::ReplayGuard(size_t capacity)
    : capacity_(std::clamp<size_t>(capacity, 1, kMaxCapacity)),
      senders_(new Sender[capacity_]),
      mask_(index_size(capacity_) - 1),
      index_(new uint32_t[mask_ + 1]()) {
  static_assert(sizeof(Sender) == 120, "dgram_wire.h says what a sender costs");
}

ReplayGuard::~ReplayGuard() = default;

size_t ReplayGuard::home(const Ends& ends, uint64_t epoch) const {
  // Only authenticated senders are ever stored, and their epochs are random: a stranger can
  // choose what it looks up, never what collides with what is there.
  uint64_t x = epoch ^ ((uint64_t{ends.src_addr} << 32) | ends.dst_addr) * 0x9e3779b97f4a7c15ULL;
  x ^= ((uint64_t{ends.src_port} << 16) | ends.dst_port) * 0xc2b2ae3d27d4eb4fULL;
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 29;
  return static_cast<size_t>(x) & mask_;
}

size_t ReplayGuard::find(const Ends& ends, uint64_t epoch) const {
  // At most half of the slots are used: the probe ends at an empty one.
  for (size_t pos = home(ends, epoch);; pos = (pos + 1) & mask_) {
    const uint32_t v = index_[pos];
    if (v == kEmpty) return pos;
    const Sender& s = senders_[v - 1];
    if (s.epoch == epoch && s.ends == ends) return pos;
  }
}

// Linear probing's deletion without tombstones: the slots after `pos` up to the next empty one
// move back into the hole when their home is not between it and them.
void ReplayGuard::unindex(size_t pos) {
  size_t hole = pos;
  for (size_t j = (pos + 1) & mask_; index_[j] != kEmpty; j = (j + 1) & mask_) {
    const Sender& s = senders_[index_[j] - 1];
    const size_t k = home(s.ends, s.epoch);
    const bool stays = hole <= j ? (hole < k && k <= j) : (hole < k || k <= j);
    if (stays) continue;
    index_[hole] = index_[j];
    hole = j;
  }
  index_[hole] = kEmpty;
}

Replay ReplayGuard::judge(const Sender& s, uint64_t seq, uint64_t time_us) {
  if (time_us <= s.since) return Replay::kStale;
  if (seq > s.top) return Replay::kFresh;
  const uint64_t d = s.top - seq;
  if (d >= kWindow) return Replay::kTooOld;
  return (s.seen[d / 64] >> (d % 64)) & 1 ? Replay::kSeen : Replay::kFresh;
}

Replay ReplayGuard::check(const Ends& ends, uint64_t epoch, uint64_t seq, uint64_t time_us) const {
  const uint32_t v = index_[find(ends, epoch)];
  if (v != kEmpty) {
    return judge(senders_[v - 1], seq, time_us);
  }
  return time_us > floor_ ? Replay::kFresh : Replay::kStale;
}

Replay ReplayGuard::accept(const Ends& ends, uint64_t epoch, uint64_t seq, uint64_t time_us) {
  size_t pos = find(ends, epoch);
  if (index_[pos] != kEmpty) {
    Sender& s = senders_[index_[pos] - 1];
    const Replay r = judge(s, seq, time_us);
    if (r != Replay::kFresh) return r;
    if (seq > s.top) {
      slide(s.seen, seq - s.top);
      s.top = seq;
    }
    const uint64_t d = s.top - seq;
    s.seen[d / 64] |= uint64_t{1} << (d % 64);
    s.time_us = std::max(s.time_us, time_us);
    s.heard = ++tick_;
    return Replay::kFresh;
  }
  if (time_us <= floor_) return Replay::kStale;
  size_t slot = count_;
  if (count_ < capacity_) {
    ++count_;
  } else {
    // The sender heard from least recently makes room, unless the newcomer is no later than
    // its latest datagram: then nothing could tell the newcomer from that sender's past, and
    // the newcomer is refused instead (the table unchanged).
    slot = 0;
    for (size_t i = 1; i < capacity_; ++i) {
      if (senders_[i].heard < senders_[slot].heard) slot = i;
    }
    const Sender& victim = senders_[slot];
    if (time_us <= std::max(floor_, victim.time_us)) return Replay::kStale;
    floor_ = std::max(floor_, victim.time_us);
    unindex(find(victim.ends, victim.epoch));
    ++evictions_;
    pos = find(ends, epoch);  // the deletion may have moved the slot it would take
  }
  Sender& s = senders_[slot];
  s = Sender{.ends = ends,
             .epoch = epoch,
             .top = seq,
             .time_us = time_us,
             .since = floor_,
             .heard = ++tick_};
  s.seen[0] = 1;
  index_[pos] = static_cast<uint32_t>(slot + 1);
  return Replay::kFresh;
}

}  // namespace fabq::xport::dgram
