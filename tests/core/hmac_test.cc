// SHA-256, HMAC-SHA256, mac_equal and fill_random: the primitives of the peer authentication
// in the connection handshake.
#include "core/hmac.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace fabq::core {
namespace {

std::string to_hex(const uint8_t* p, size_t len) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < len; ++i) {
    out += kDigits[p[i] >> 4];
    out += kDigits[p[i] & 0xf];
  }
  return out;
}
std::string to_hex(const Digest& d) {
  return to_hex(d.data(), d.size());
}

Digest sha256(std::string_view s) {
  return Sha256::hash(s.data(), s.size());
}
Digest hmac(const std::vector<uint8_t>& key, std::string_view data) {
  return HmacSha256::mac(key.data(), key.size(), data.data(), data.size());
}
// Appends the characters of `s` (without a terminator) to the message of `h`.
template <class H>
void update(H& h, std::string_view s) {
  h.update(s.data(), s.size());
}
std::vector<uint8_t> bytes(std::string_view s) {
  return std::vector<uint8_t>(s.begin(), s.end());
}
std::string repeated(char c, size_t n) {
  return std::string(n, c);
}

// --- Sha256: FIPS 180-2 appendix B and NIST's example vectors -------------------------------

TEST(Sha256, EmptyMessageHasTheFipsDigest) {
  EXPECT_EQ(to_hex(sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(Sha256, NullPointerWithLengthZeroIsTheEmptyMessage) {
  Sha256 h;
  h.update(nullptr, 0);
  EXPECT_EQ(h.final(), sha256(""));
  EXPECT_EQ(Sha256::hash(nullptr, 0), sha256(""));
}

TEST(Sha256, OneBlockMessageAbcHasTheFipsDigest) {
  EXPECT_EQ(to_hex(sha256("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Sha256, MultiBlock448BitMessageHasTheFipsDigest) {
  EXPECT_EQ(to_hex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256, OneMillionLetterAsHaveTheFipsDigestInOneCallAndInPieces) {
  const char* want = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";
  EXPECT_EQ(to_hex(sha256(repeated('a', 1'000'000))), want);
  const std::string thousand = repeated('a', 1000);
  Sha256 h;
  for (int i = 0; i < 1000; ++i) h.update(thousand.data(), thousand.size());
  EXPECT_EQ(to_hex(h.final()), want);
}

// Lengths where the padding fits in the last block or needs one more. Digests from an
// independent implementation (Python's hashlib) of the bytes (7i + 1) mod 256.
TEST(Sha256, MessagesAroundTheBlockBoundaryArePaddedCorrectly) {
  struct Case {
    size_t len;
    const char* digest;
  };
  const Case cases[] = {
      {55, "16fa57a0a3423a715d594516339f36189d6b5f93754a9714fef202616a9fabfe"},
      {56, "c37b44e5f1b18554b36966f4f8e08bfbf3164c4b6c10374d12d89850892073c5"},
      {57, "12b234922502022f755ab8550a3d4e202ad39c81d961a4f59ec39d5fd83d15a7"},
      {63, "bbba992d2c85af960fb2987a1fd05e0aa82a3db3c740dd8982a9e273b75e36a3"},
      {64, "66bd4633ed6f71c4ecfa4763bf7ba1c8ec7612de9aa6c0578a7b675207c71e0b"},
      {65, "9f7dc47107b750a1f3d35db5d9547f24ef40da5b731b9540d4f43710a154f6c9"},
      {119, "a3ed307b730fa77c07531300c6e4a282330011d4d4caf6bb7b63ae05950f4b66"},
      {120, "8e3b15d9fea7472655aa069620b7f8c2e55ee1499f763200a7515fe826e99d20"},
  };
  for (const Case& c : cases) {
    std::vector<uint8_t> msg(c.len);
    for (size_t i = 0; i < c.len; ++i) msg[i] = static_cast<uint8_t>(i * 7 + 1);
    EXPECT_EQ(to_hex(Sha256::hash(msg.data(), msg.size())), c.digest) << "length " << c.len;
  }
}

// --- Sha256: the incremental interface ----------------------------------------------------------

TEST(Sha256, EverySplitOfA200ByteMessageGivesTheOneCallDigest) {
  std::array<uint8_t, 200> msg;
  for (size_t i = 0; i < msg.size(); ++i) msg[i] = static_cast<uint8_t>(i * 31 + 5);
  const Digest want = Sha256::hash(msg.data(), msg.size());
  // Three pieces [0, i), [i, j), [j, 200) for every 0 <= i <= j <= 200: every split into two
  // pieces, empty pieces, and pieces that start and end anywhere in a block.
  Sha256 h;
  for (size_t i = 0; i <= msg.size(); ++i) {
    for (size_t j = i; j <= msg.size(); ++j) {
      h.update(msg.data(), i);
      h.update(msg.data() + i, j - i);
      h.update(msg.data() + j, msg.size() - j);
      const Digest got = h.final();
      ASSERT_EQ(got, want) << "split at " << i << " and " << j;
    }
  }
}

TEST(Sha256, ByteAtATimeGivesTheOneCallDigest) {
  const std::string msg = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  Sha256 h;
  for (char c : msg) h.update(&c, 1);
  EXPECT_EQ(h.final(), sha256(msg));
}

TEST(Sha256, FinalStartsANewEmptyMessage) {
  Sha256 h;
  update(h, "abc");
  EXPECT_EQ(h.final(), sha256("abc"));
  EXPECT_EQ(h.final(), sha256(""));
  update(h, "abc");
  EXPECT_EQ(h.final(), sha256("abc"));
}

TEST(Sha256, InitForgetsWhatWasHashed) {
  Sha256 h;
  update(h, "something else entirely, longer than one block of sixty-four bytes....");
  h.init();
  update(h, "abc");
  EXPECT_EQ(h.final(), sha256("abc"));
}

TEST(Sha256, CopyContinuesIndependentlyFromTheSameState) {
  Sha256 a;
  update(a, "ab");
  Sha256 b = a;
  update(a, "c");
  update(b, "d");
  EXPECT_EQ(a.final(), sha256("abc"));
  EXPECT_EQ(b.final(), sha256("abd"));
}

// --- HmacSha256: RFC 4231 section 4 -------------------------------------------------------------

TEST(HmacSha256, Rfc4231Case1TwentyByteKey) {
  EXPECT_EQ(to_hex(hmac(std::vector<uint8_t>(20, 0x0b), "Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
}

TEST(HmacSha256, Rfc4231Case2KeyShorterThanTheDigest) {
  EXPECT_EQ(to_hex(hmac(bytes("Jefe"), "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(HmacSha256, Rfc4231Case3CombinedKeyAndDataLongerThan64Bytes) {
  EXPECT_EQ(to_hex(hmac(std::vector<uint8_t>(20, 0xaa), std::string(50, '\xdd'))),
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
}

TEST(HmacSha256, Rfc4231Case4KeyOfCountingBytesAndDataLongerThan64Bytes) {
  std::vector<uint8_t> key(25);
  for (size_t i = 0; i < key.size(); ++i) key[i] = static_cast<uint8_t>(i + 1);  // 0x01..0x19
  EXPECT_EQ(to_hex(hmac(key, std::string(50, '\xcd'))),
            "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
}

TEST(HmacSha256, Rfc4231Case5TruncatedTo128Bits) {
  const Digest mac = hmac(std::vector<uint8_t>(20, 0x0c), "Test With Truncation");
  EXPECT_EQ(to_hex(mac.data(), 16), "a3b6167473100ee06e0c796c2955552b");
}

TEST(HmacSha256, Rfc4231Case6KeyLongerThanTheBlockIsHashedFirst) {
  EXPECT_EQ(to_hex(hmac(std::vector<uint8_t>(131, 0xaa),
                        "Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

constexpr std::string_view kCase7Data =
    "This is a test using a larger than block-size key and a larger than block-size data. The "
    "key needs to be hashed before being used by the HMAC algorithm.";
constexpr const char* kCase7Mac =
    "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2";

TEST(HmacSha256, Rfc4231Case7KeyAndDataLongerThanTheBlock) {
  EXPECT_EQ(to_hex(hmac(std::vector<uint8_t>(131, 0xaa), kCase7Data)), kCase7Mac);
}

// --- HmacSha256: keys and the incremental interface ---------------------------------------------

TEST(HmacSha256, KeyLongerThanTheBlockActsAsItsSha256Digest) {
  const std::vector<uint8_t> key(65, 0x42);
  const Digest hashed = Sha256::hash(key.data(), key.size());
  const std::vector<uint8_t> hashed_key(hashed.begin(), hashed.end());
  EXPECT_EQ(hmac(key, "message"), hmac(hashed_key, "message"));
}

TEST(HmacSha256, KeyOfExactlyTheBlockSizeIsUsedAsIs) {
  const std::vector<uint8_t> key(64, 0x42);
  const Digest hashed = Sha256::hash(key.data(), key.size());
  const std::vector<uint8_t> hashed_key(hashed.begin(), hashed.end());
  EXPECT_NE(hmac(key, "message"), hmac(hashed_key, "message"));
}

TEST(HmacSha256, EmptyKeyAndEmptyMessageHaveTheReferenceMac) {
  // From an independent implementation (Python's hmac module).
  HmacSha256 h(nullptr, 0);
  h.update(nullptr, 0);
  EXPECT_EQ(to_hex(h.final()), "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
}

TEST(HmacSha256, EverySplitOfTheMessageGivesTheOneCallMac) {
  const std::vector<uint8_t> key(131, 0xaa);
  HmacSha256 h(key.data(), key.size());
  for (size_t i = 0; i <= kCase7Data.size(); ++i) {
    h.update(kCase7Data.data(), i);
    h.update(kCase7Data.data() + i, kCase7Data.size() - i);
    ASSERT_EQ(to_hex(h.final()), kCase7Mac) << "split at " << i;
  }
}

TEST(HmacSha256, FinalStartsANewMessageUnderTheSameKey) {
  const std::vector<uint8_t> key = bytes("Jefe");
  HmacSha256 h(key.data(), key.size());
  update(h, "first message");
  EXPECT_EQ(h.final(), hmac(key, "first message"));
  update(h, "what do ya want for nothing?");
  EXPECT_EQ(to_hex(h.final()), "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(HmacSha256, InitWithAnotherKeyForgetsTheOldKeyAndMessage) {
  const std::vector<uint8_t> old_key(131, 0xaa);
  HmacSha256 h(old_key.data(), old_key.size());
  update(h, "half a message");
  const std::vector<uint8_t> key(20, 0x0b);
  h.init(key.data(), key.size());
  update(h, "Hi There");
  EXPECT_EQ(to_hex(h.final()), "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
}

TEST(HmacSha256, CopyOfAKeyedObjectMacsAnotherMessageIndependently) {
  const std::vector<uint8_t> key = bytes("shared secret");
  const HmacSha256 keyed(key.data(), key.size());
  HmacSha256 a = keyed;
  HmacSha256 b = keyed;
  update(a, "nonce A");
  update(b, "nonce B");
  EXPECT_EQ(a.final(), hmac(key, "nonce A"));
  EXPECT_EQ(b.final(), hmac(key, "nonce B"));
}

TEST(HmacSha256, DifferentKeysGiveDifferentMacs) {
  EXPECT_NE(hmac(bytes("key one"), "message"), hmac(bytes("key two"), "message"));
}

// --- mac_equal ----------------------------------------------------------------------------------

Digest pattern() {
  Digest d;
  for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<uint8_t>(0xa5 ^ (i * 13));
  return d;
}

TEST(MacEqual, IdenticalMacsAreEqual) {
  const Digest a = pattern();
  const Digest b = pattern();
  EXPECT_TRUE(mac_equal(a, b));
  EXPECT_TRUE(mac_equal(a.data(), b.data()));
  EXPECT_TRUE(mac_equal(a.data(), a.data()));
}

TEST(MacEqual, DifferenceOnlyInTheLastByteIsFound) {
  const Digest a = pattern();
  Digest b = pattern();
  b[kSha256DigestSize - 1] ^= 0x01;
  EXPECT_FALSE(mac_equal(a, b));
  EXPECT_FALSE(mac_equal(b.data(), a.data()));
}

TEST(MacEqual, DifferenceOnlyInTheFirstByteIsFound) {
  const Digest a = pattern();
  Digest b = pattern();
  b[0] ^= 0x80;
  EXPECT_FALSE(mac_equal(a, b));
}

TEST(MacEqual, EverySingleBitDifferenceIsFound) {
  const Digest a = pattern();
  for (size_t byte = 0; byte < kSha256DigestSize; ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      Digest b = a;
      b[byte] ^= static_cast<uint8_t>(1u << bit);
      EXPECT_FALSE(mac_equal(a, b)) << "byte " << byte << " bit " << bit;
    }
  }
}

TEST(MacEqual, AllZerosAndAllOnesDiffer) {
  Digest zeros{};
  Digest ones;
  ones.fill(0xff);
  EXPECT_FALSE(mac_equal(zeros, ones));
  EXPECT_TRUE(mac_equal(zeros, Digest{}));
}

TEST(MacEqual, ATruncatedMacComparesItsLeftmostBytesOnly) {
  const Digest a = pattern();
  Digest b = a;
  b[16] ^= 0x01;  // past a 128-bit MAC
  EXPECT_TRUE(mac_equal(a.data(), b.data(), 16));
  EXPECT_FALSE(mac_equal(a.data(), b.data(), 17));
  for (size_t byte = 0; byte < 16; ++byte) {
    Digest c = a;
    c[byte] ^= 0x40;
    EXPECT_FALSE(mac_equal(a.data(), c.data(), 16)) << "byte " << byte;
  }
  EXPECT_TRUE(mac_equal(a.data(), b.data(), 0));
}

// --- fill_random --------------------------------------------------------------------------------

TEST(FillRandom, TwoCallsGiveDifferentBytes) {
  std::array<uint8_t, 32> a{};
  std::array<uint8_t, 32> b{};
  ASSERT_TRUE(fill_random(a.data(), a.size()).ok());
  ASSERT_TRUE(fill_random(b.data(), b.size()).ok());
  EXPECT_NE(a, b);  // equal with probability 2^-256
  EXPECT_NE(a, decltype(a){}) << "nothing was written";
}

TEST(FillRandom, LengthZeroSucceedsAndAcceptsANullBuffer) {
  EXPECT_TRUE(fill_random(nullptr, 0).ok());
}

TEST(FillRandom, LargeBufferIsFilledToTheEnd) {
  // Larger than one getrandom() call is guaranteed to return at once (256 bytes), so a short
  // read that was not retried would leave a tail of zeros.
  std::vector<uint8_t> buf(1 << 20, 0);
  ASSERT_TRUE(fill_random(buf.data(), buf.size()).ok());
  const std::array<uint8_t, 32> zeros{};
  for (size_t off = 0; off < buf.size(); off += zeros.size()) {
    ASSERT_NE(std::memcmp(buf.data() + off, zeros.data(), zeros.size()), 0) << "at " << off;
  }
}

}  // namespace
}  // namespace fabq::core
