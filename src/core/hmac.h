// fabq core: SHA-256, HMAC-SHA256, constant-time MAC comparison and random bytes, the pieces
// the TCP connection handshake needs to authenticate a peer with a shared secret by
// challenge and response: each side sends a fresh random nonce and answers the other's with
// HMAC-SHA256(secret, ...); the secret itself never crosses the wire.
//
// This is not a general cryptographic library. It implements exactly SHA-256 (FIPS 180-4) and
// HMAC (RFC 2104) over it, checked against the FIPS 180-2 and RFC 4231 vectors, and nothing
// else: no other hashes, no ciphers, no key derivation, no hardware acceleration. Inputs are
// byte strings shorter than 2^61 bytes.
//
// Thread safety: a Sha256 or HmacSha256 object is a plain value used by one thread at a time
// (the caller serializes calls on one object; distinct objects are independent). Every other
// function is reentrant and may be called from any thread: no shared mutable state.
//
// Ownership: the caller owns every buffer passed in and out; no call keeps a pointer beyond
// its return. An HmacSha256 holds state derived from its key (never the key bytes themselves,
// but state that is as good as the key for computing MACs); it and Sha256 wipe their state
// when destroyed. Copying an object copies that state: a keyed HmacSha256 may be copied to
// MAC several messages with the same key.
//
// No call allocates memory or throws.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "core/status.h"

namespace fabq::core {

inline constexpr size_t kSha256DigestSize = 32;  // bytes of a digest and of a full MAC
inline constexpr size_t kSha256BlockSize = 64;   // bytes of one compression block

// A SHA-256 digest or an HMAC-SHA256 tag.
using Digest = std::array<uint8_t, kSha256DigestSize>;

// Incremental SHA-256: init(), any number of update(), final(). A new object is already
// initialized. The digest does not depend on how the message is split into update() calls.
class Sha256 {
 public:
  Sha256() { init(); }
  Sha256(const Sha256&) = default;
  Sha256& operator=(const Sha256&) = default;
  ~Sha256();

  // Forgets anything hashed so far and starts a new, empty message.
  void init();
  // Appends `len` bytes at `data` to the message. `data` may be null when `len` is 0.
  void update(const void* data, size_t len);
  // Returns the digest of the message appended since init(), then init()s again, so that the
  // object is ready for the next message.
  [[nodiscard]] Digest final();

  // The digest of `len` bytes at `data` in one call.
  [[nodiscard]] static Digest hash(const void* data, size_t len);

 private:
  void compress(const uint8_t* block);

  std::array<uint32_t, 8> state_;
  std::array<uint8_t, kSha256BlockSize> buffer_;  // a partial block, buffered_ bytes of it
  size_t buffered_;
  uint64_t length_;  // bytes appended since init()
};

// Incremental HMAC-SHA256 (RFC 2104 with H = SHA-256, B = 64, L = 32): init(key), any number
// of update(), final(). Keys of any length are accepted; a key longer than 64 bytes is first
// replaced by its SHA-256 digest, as RFC 2104 says. A key of 0 bytes is valid but useless:
// authenticating with it proves nothing.
class HmacSha256 {
 public:
  // Keyed with `key_len` bytes at `key` (which may be null when key_len is 0); ready for the
  // first message.
  explicit HmacSha256(const void* key, size_t key_len) { init(key, key_len); }
  HmacSha256(const HmacSha256&) = default;
  HmacSha256& operator=(const HmacSha256&) = default;
  ~HmacSha256();

  // Discards the current key and message and keys the object with `key_len` bytes at `key`.
  void init(const void* key, size_t key_len);
  // Appends `len` bytes at `data` to the message. `data` may be null when `len` is 0.
  void update(const void* data, size_t len);
  // Returns the MAC of the message appended since the object was keyed or since the last
  // final(), then starts a new message under the same key.
  [[nodiscard]] Digest final();

  // The MAC of `len` bytes at `data` under `key_len` bytes of `key`, in one call.
  [[nodiscard]] static Digest mac(const void* key, size_t key_len, const void* data, size_t len);

 private:
  Sha256 inner_start_;  // after H(K xor ipad): where each message's inner hash starts
  Sha256 outer_start_;  // after H(K xor opad): where each message's outer hash starts
  Sha256 inner_;        // the inner hash of the current message
};

// True when the kSha256DigestSize bytes at `a` and at `b` are equal. Always reads and compares
// every byte, whatever the bytes, so that the time taken says nothing about where two MACs
// first differ. Use it, never memcmp or ==, to check a MAC received from a peer.
[[nodiscard]] bool mac_equal(const uint8_t* a, const uint8_t* b);
[[nodiscard]] inline bool mac_equal(const Digest& a, const Digest& b) {
  return mac_equal(a.data(), b.data());
}
// The same for the first `len` bytes (at most kSha256DigestSize): a MAC truncated to its leftmost
// bytes, as RFC 2104 section 5 allows (RFC 4868 sends HMAC-SHA256 truncated to 128 bits).
[[nodiscard]] bool mac_equal(const uint8_t* a, const uint8_t* b, size_t len);

// Fills `len` bytes at `buf` with random bytes from the kernel's generator (getrandom(2), the
// same source as /dev/urandom; fit for nonces and keys). Retries when interrupted by a signal
// and after short reads. May block only at early boot, until the kernel's generator is first
// seeded. Returns:
//   OkStatus()   all `len` bytes were written (always when len is 0; buf may then be null)
//   Code::kIo    getrandom failed for another reason (e.g. ENOSYS); the contents of `buf` are
//                unspecified and must not be used
[[nodiscard]] Status fill_random(void* buf, size_t len);

}  // namespace fabq::core
