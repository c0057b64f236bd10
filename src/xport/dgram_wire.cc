#include "xport/dgram_wire.h"

#include <cstring>

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
}

Refusal decode(const unsigned char* in, size_t size, Header* out) {
  if (size < kHeaderSize) return Refusal::kShort;
  if (get<uint16_t>(in) != kMagic || in[2] != kVersion) return Refusal::kBadMagic;
  if (get<uint32_t>(in + 8) != header_check(in)) return Refusal::kBadCheck;
  const uint8_t flags = in[3];
  const uint64_t data = get<uint64_t>(in + 16);
  if ((flags & ~kDgramData) != 0 || get<uint32_t>(in + 12) != 0 ||
      ((flags & kDgramData) == 0 && data != 0)) {
    return Refusal::kBadFields;
  }
  const uint32_t length = get<uint32_t>(in + 4);
  if (length != size - kHeaderSize) return Refusal::kBadLength;
  *out = {.flags = flags, .length = length, .data = data};
  return Refusal::kNone;
}

}  // namespace fabq::xport::dgram
