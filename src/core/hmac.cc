// SHA-256 as FIPS 180-4 specifies it (sections 4.1.2, 4.2.2, 5.1.1, 5.3.3, 6.2), HMAC as
// RFC 2104 specifies it.
#include "core/hmac.h"

#include <errno.h>
#include <string.h>
#include <sys/random.h>

#include <algorithm>
#include <bit>
#include <cstring>

namespace fabq::core {
namespace {

// FIPS 180-4 4.2.2: the first 32 bits of the fractional parts of the cube roots of the first
// 64 primes.
constexpr std::array<uint32_t, 64> kRound = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

// FIPS 180-4 5.3.3: the first 32 bits of the fractional parts of the square roots of the first
// 8 primes.
constexpr std::array<uint32_t, 8> kInitial = {
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
};

// FIPS 180-4 4.1.2.
constexpr uint32_t ch(uint32_t x, uint32_t y, uint32_t z) {
  return (x & y) ^ (~x & z);
}
constexpr uint32_t maj(uint32_t x, uint32_t y, uint32_t z) {
  return (x & y) ^ (x & z) ^ (y & z);
}
constexpr uint32_t big_sigma0(uint32_t x) {
  return std::rotr(x, 2) ^ std::rotr(x, 13) ^ std::rotr(x, 22);
}
constexpr uint32_t big_sigma1(uint32_t x) {
  return std::rotr(x, 6) ^ std::rotr(x, 11) ^ std::rotr(x, 25);
}
constexpr uint32_t small_sigma0(uint32_t x) {
  return std::rotr(x, 7) ^ std::rotr(x, 18) ^ (x >> 3);
}
constexpr uint32_t small_sigma1(uint32_t x) {
  return std::rotr(x, 17) ^ std::rotr(x, 19) ^ (x >> 10);
}

uint32_t load_be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}
void store_be32(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 24);
  p[1] = static_cast<uint8_t>(v >> 16);
  p[2] = static_cast<uint8_t>(v >> 8);
  p[3] = static_cast<uint8_t>(v);
}

// Overwrites `len` bytes at `p` with zeros in a way the compiler may not drop as a dead store.
void wipe(void* p, size_t len) {
  explicit_bzero(p, len);
}

constexpr uint8_t kIpad = 0x36;
constexpr uint8_t kOpad = 0x5c;

}  // namespace

// --- Sha256 -------------------------------------------------------------------------------------

Sha256::~Sha256() {
  wipe(state_.data(), sizeof(state_));
  wipe(buffer_.data(), sizeof(buffer_));
}

void Sha256::init() {
  state_ = kInitial;
  buffer_.fill(0);
  buffered_ = 0;
  length_ = 0;
}

// FIPS 180-4 6.2.2: one block of the message schedule and the 64 rounds.
void Sha256::compress(const uint8_t* block) {
  std::array<uint32_t, 64> w;
  for (size_t t = 0; t < 16; ++t) w[t] = load_be32(block + 4 * t);
  for (size_t t = 16; t < 64; ++t) {
    w[t] = small_sigma1(w[t - 2]) + w[t - 7] + small_sigma0(w[t - 15]) + w[t - 16];
  }
  uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
  uint32_t e = state_[4], f = state_[5], g = state_[6], h = state_[7];
  for (size_t t = 0; t < 64; ++t) {
    const uint32_t t1 = h + big_sigma1(e) + ch(e, f, g) + kRound[t] + w[t];
    const uint32_t t2 = big_sigma0(a) + maj(a, b, c);
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  state_[0] += a;
  state_[1] += b;
  state_[2] += c;
  state_[3] += d;
  state_[4] += e;
  state_[5] += f;
  state_[6] += g;
  state_[7] += h;
  wipe(w.data(), sizeof(w));  // the schedule is derived from the message (maybe a key)
}

void Sha256::update(const void* data, size_t len) {
  if (len == 0) return;
  auto* p = static_cast<const uint8_t*>(data);
  length_ += len;
  if (buffered_ > 0) {  // complete the partial block first
    const size_t take = std::min(len, kSha256BlockSize - buffered_);
    std::memcpy(buffer_.data() + buffered_, p, take);
    buffered_ += take;
    p += take;
    len -= take;
    if (buffered_ < kSha256BlockSize) return;
    compress(buffer_.data());
    buffered_ = 0;
  }
  for (; len >= kSha256BlockSize; p += kSha256BlockSize, len -= kSha256BlockSize) compress(p);
  if (len > 0) {
    std::memcpy(buffer_.data(), p, len);
    buffered_ = len;
  }
}

// FIPS 180-4 5.1.1: append a 1 bit, zeros up to 56 bytes mod 64, then the message length in
// bits as a 64-bit big-endian number.
Digest Sha256::final() {
  const uint64_t bits = length_ * 8;
  buffer_[buffered_++] = 0x80;
  if (buffered_ > kSha256BlockSize - 8) {  // no room for the length: pad out this block
    std::memset(buffer_.data() + buffered_, 0, kSha256BlockSize - buffered_);
    compress(buffer_.data());
    buffered_ = 0;
  }
  std::memset(buffer_.data() + buffered_, 0, kSha256BlockSize - 8 - buffered_);
  store_be32(buffer_.data() + kSha256BlockSize - 8, static_cast<uint32_t>(bits >> 32));
  store_be32(buffer_.data() + kSha256BlockSize - 4, static_cast<uint32_t>(bits));
  compress(buffer_.data());
  Digest out;
  for (size_t i = 0; i < state_.size(); ++i) store_be32(out.data() + 4 * i, state_[i]);
  init();
  return out;
}

Digest Sha256::hash(const void* data, size_t len) {
  Sha256 h;
  h.update(data, len);
  return h.final();
}

// --- HmacSha256 ---------------------------------------------------------------------------------

HmacSha256::~HmacSha256() = default;  // each Sha256 member wipes itself

// RFC 2104: HMAC(K, m) = H((K0 xor opad) || H((K0 xor ipad) || m)), where K0 is K (or H(K)
// when K is longer than the block) padded with zeros to the block size. The two hashes of the
// padded key are computed here once, so that each message costs only its own blocks.
void HmacSha256::init(const void* key, size_t key_len) {
  std::array<uint8_t, kSha256BlockSize> block{};
  if (key_len > kSha256BlockSize) {
    const Digest hashed = Sha256::hash(key, key_len);
    std::memcpy(block.data(), hashed.data(), hashed.size());
  } else if (key_len > 0) {
    std::memcpy(block.data(), key, key_len);
  }
  for (uint8_t& byte : block) byte ^= kIpad;
  inner_start_.init();
  inner_start_.update(block.data(), block.size());
  for (uint8_t& byte : block) byte ^= kIpad ^ kOpad;
  outer_start_.init();
  outer_start_.update(block.data(), block.size());
  wipe(block.data(), block.size());
  inner_ = inner_start_;
}

void HmacSha256::update(const void* data, size_t len) {
  inner_.update(data, len);
}

Digest HmacSha256::final() {
  Digest inner_digest = inner_.final();
  Sha256 outer = outer_start_;
  outer.update(inner_digest.data(), inner_digest.size());
  wipe(inner_digest.data(), inner_digest.size());
  inner_ = inner_start_;
  return outer.final();
}

Digest HmacSha256::mac(const void* key, size_t key_len, const void* data, size_t len) {
  HmacSha256 h(key, key_len);
  h.update(data, len);
  return h.final();
}

// --- mac_equal, fill_random ---------------------------------------------------------------------

bool mac_equal(const uint8_t* a, const uint8_t* b) {
  return mac_equal(a, b, kSha256DigestSize);
}

bool mac_equal(const uint8_t* a, const uint8_t* b, size_t len) {
  uint8_t diff = 0;
  for (size_t i = 0; i < std::min(len, kSha256DigestSize); ++i) {
    diff |= static_cast<uint8_t>(a[i] ^ b[i]);
    // An empty barrier: the compiler can no longer know `diff`, so it cannot stop the loop
    // early once a difference is seen.
    __asm__ volatile("" : "+r"(diff));
  }
  return diff == 0;
}

Status fill_random(void* buf, size_t len) {
  auto* p = static_cast<uint8_t*>(buf);
  while (len > 0) {
    const ssize_t n = getrandom(p, len, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Code::kIo;
    }
    p += n;
    len -= static_cast<size_t>(n);
  }
  return OkStatus();
}

}  // namespace fabq::core
