// Datagram wire format (xport/dgram_wire.h): the byte layout, round trips, and each reason a
// datagram is refused, including every single-bit flip of a valid header; authenticated
// datagrams: their layout, the MAC (what it covers, what breaks it) and the replay guard (its
// window, its bounded table and what a full one does).
#include "xport/dgram_wire.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace fabq::xport::dgram {
namespace {

using Bytes = std::vector<unsigned char>;

Bytes datagram(const Header& h, size_t payload) {
  Bytes d(kHeaderSize + payload, 0x5a);
  encode(h, d.data());
  return d;
}

TEST(DgramWire, TheHeaderIsMagicVersionFlagsLengthCheckAndDataLittleEndian) {
  const Bytes d = datagram({.flags = kDgramData, .length = 3, .data = 0x0102030405060708}, 3);
  EXPECT_EQ(d[0], 0x46);
  EXPECT_EQ(d[1], 0x64);
  EXPECT_EQ(d[2], kVersion);
  EXPECT_EQ(d[3], kDgramData);
  EXPECT_EQ(d[4], 3);
  EXPECT_EQ(d[5] | d[6] | d[7], 0);
  EXPECT_EQ(d[12] | d[13] | d[14] | d[15], 0);
  EXPECT_EQ(d[16], 0x08);
  EXPECT_EQ(d[23], 0x01);
}

TEST(DgramWire, WhatIsEncodedDecodesToTheSameHeader) {
  for (const Header h : {Header{.flags = 0, .length = 0, .data = 0},
                         Header{.flags = kDgramData, .length = 100, .data = ~uint64_t{0}},
                         Header{.flags = kDgramData, .length = kMaxPayload, .data = 1}}) {
    const Bytes d = datagram(h, h.length);
    Header out;
    ASSERT_EQ(decode(d.data(), d.size(), &out), Refusal::kNone);
    EXPECT_EQ(out.flags, h.flags);
    EXPECT_EQ(out.length, h.length);
    EXPECT_EQ(out.data, h.data);
  }
}

TEST(DgramWire, ADatagramShorterThanAHeaderOrOfAnotherLengthIsRefused) {
  const Bytes d = datagram({.length = 8}, 8);
  Header out{.flags = 7, .length = 7, .data = 7};
  EXPECT_EQ(decode(d.data(), kHeaderSize - 1, &out), Refusal::kShort);
  EXPECT_EQ(decode(d.data(), d.size() - 1, &out), Refusal::kBadLength) << "cut short";
  Bytes longer = d;
  longer.push_back(0);
  EXPECT_EQ(decode(longer.data(), longer.size(), &out), Refusal::kBadLength) << "bytes added";
  EXPECT_EQ(out.length, 7u) << "a refusal leaves *out alone";
}

TEST(DgramWire, UnknownFlagsDataWithoutItsFlagAndNonzeroReservedBytesAreRefused) {
  // encode() gives each a valid check: only the field rule can refuse it.
  Header out;
  Bytes d = datagram({.flags = 0x04, .length = 0}, 0);
  EXPECT_EQ(decode(d.data(), d.size(), &out), Refusal::kBadFields);
  d = datagram({.flags = 0x80, .length = 0}, 0);
  EXPECT_EQ(decode(d.data(), d.size(), &out), Refusal::kBadFields);
  d = datagram({.flags = 0, .length = 0, .data = 5}, 0);
  EXPECT_EQ(decode(d.data(), d.size(), &out), Refusal::kBadFields);
}

TEST(DgramWire, AnyOneFlippedBitOfTheHeaderIsRefused) {
  const Bytes good = datagram({.flags = kDgramData, .length = 4, .data = 0x1234}, 4);
  for (size_t bit = 0; bit < kHeaderSize * 8; ++bit) {
    Bytes d = good;
    d[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
    Header out;
    EXPECT_NE(decode(d.data(), d.size(), &out), Refusal::kNone) << "bit " << bit;
  }
}

TEST(DgramWire, AnotherProtocolsBytesAreNotFabqs) {
  Bytes d(64, 0);
  Header out;
  EXPECT_EQ(decode(d.data(), d.size(), &out), Refusal::kBadMagic);
  d = datagram({.length = 0}, 0);
  d[2] = kVersion + 1;
  EXPECT_EQ(decode(d.data(), d.size(), &out), Refusal::kBadMagic);
}

// --- Authenticated datagrams ---------------------------------------------------------------------

const core::HmacSha256 kSecret("correct horse battery staple", 28);

sockaddr_in addr(const char* ip, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  inet_pton(AF_INET, ip, &a.sin_addr);
  a.sin_port = htons(port);
  return a;
}

const Ends kEnds(addr("10.0.0.1", 4000), addr("10.0.0.2", 5000));

// A sealed datagram: header, authentication, payload.
Bytes sealed(const DgramKey& key, const Ends& ends, const Header& h, const std::string& payload) {
  Bytes d(kAuthHeaderSize + payload.size());
  Header a = h;
  a.flags |= kDgramAuth;
  a.length = static_cast<uint32_t>(payload.size());
  encode(a, d.data());
  std::memcpy(d.data() + kAuthHeaderSize, payload.data(), payload.size());
  const iovec iov{d.data() + kAuthHeaderSize, payload.size()};
  key.seal(ends, d.data(), &iov, 1);
  return d;
}

TEST(DgramAuthWire, TheAuthenticationFollowsTheHeaderAndTheLengthIsThePayloadsAlone) {
  const DgramKey key(kSecret);
  const Bytes d = sealed(key, kEnds,
                         {.flags = kDgramData,
                          .data = 9,
                          .epoch = 0x1122334455667788,
                          .seq = 3,
                          .time_us = 0x0102030405060708},
                         "abc");
  ASSERT_EQ(d.size(), kAuthHeaderSize + 3);
  EXPECT_EQ(d[3], kDgramData | kDgramAuth);
  EXPECT_EQ(d[4], 3) << "length: the payload's bytes";
  EXPECT_EQ(d[24], 0x88);
  EXPECT_EQ(d[31], 0x11);
  EXPECT_EQ(d[32], 3);
  EXPECT_EQ(d[40], 0x08);
  Header out;
  ASSERT_EQ(decode(d.data(), d.size(), &out), Refusal::kNone);
  EXPECT_EQ(out.flags, kDgramData | kDgramAuth);
  EXPECT_EQ(out.length, 3u);
  EXPECT_EQ(out.data, 9u);
  EXPECT_EQ(out.epoch, 0x1122334455667788u);
  EXPECT_EQ(out.seq, 3u);
  EXPECT_EQ(out.time_us, 0x0102030405060708u);
  EXPECT_EQ(header_size(out.flags), kAuthHeaderSize);
  EXPECT_TRUE(key.verify(kEnds, d.data(), d.size()));
}

TEST(DgramAuthWire, AnAuthenticatedDatagramShorterThanItsHeaderIsRefused) {
  const Bytes d = sealed(DgramKey(kSecret), kEnds, {}, "");
  Header out;
  EXPECT_EQ(decode(d.data(), kAuthHeaderSize - 1, &out), Refusal::kShort);
  EXPECT_EQ(decode(d.data(), kHeaderSize, &out), Refusal::kShort);
}

TEST(DgramAuthWire, TheMacIsTheSameWhateverTheIovecsTheSenderSplitsThePayloadInto) {
  const DgramKey key(kSecret);
  const Bytes whole = sealed(key, kEnds, {.seq = 1}, "one two three");
  Bytes split(whole.begin(), whole.begin() + kAuthHeaderSize);
  std::memset(split.data() + kMacOffset, 0, kMacSize);
  char a[] = "one ", b[] = "two ", c[] = "three";
  const iovec iov[3] = {{a, 4}, {b, 4}, {c, 5}};
  key.seal(kEnds, split.data(), iov, 3);
  EXPECT_EQ(std::memcmp(split.data(), whole.data(), kAuthHeaderSize), 0);
}

TEST(DgramAuthWire, AnyFlippedBitOfHeaderAuthenticationOrPayloadFailsTheMac) {
  const DgramKey key(kSecret);
  const Bytes good = sealed(
      key, kEnds, {.flags = kDgramData, .data = 5, .epoch = 7, .seq = 9, .time_us = 11}, "payload");
  ASSERT_TRUE(key.verify(kEnds, good.data(), good.size()));
  for (size_t bit = 0; bit < good.size() * 8; ++bit) {
    Bytes d = good;
    d[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
    EXPECT_FALSE(key.verify(kEnds, d.data(), d.size())) << "bit " << bit;
  }
}

TEST(DgramAuthWire, TheMacCoversBothAddressesAndPortsAndTheSecret) {
  const DgramKey key(kSecret);
  const Bytes d = sealed(key, kEnds, {.epoch = 1, .seq = 1}, "x");
  const sockaddr_in from = addr("10.0.0.1", 4000), to = addr("10.0.0.2", 5000);
  EXPECT_TRUE(key.verify(Ends(from, to), d.data(), d.size()));
  EXPECT_FALSE(key.verify(Ends(addr("10.0.0.3", 4000), to), d.data(), d.size()));
  EXPECT_FALSE(key.verify(Ends(addr("10.0.0.1", 4001), to), d.data(), d.size()));
  EXPECT_FALSE(key.verify(Ends(from, addr("10.0.0.4", 5000)), d.data(), d.size()));
  EXPECT_FALSE(key.verify(Ends(from, addr("10.0.0.2", 5001)), d.data(), d.size()));
  EXPECT_FALSE(key.verify(Ends(to, from), d.data(), d.size())) << "the other way round";
  const DgramKey other(core::HmacSha256("incorrect horse battery staple", 30));
  EXPECT_FALSE(other.verify(kEnds, d.data(), d.size()));
}

// The datagram key is derived from the secret, never the secret itself: a MAC under the secret
// (what the handshake computes) is not a datagram's.
TEST(DgramAuthWire, TheDatagramKeyIsNotTheSecret) {
  const DgramKey key(kSecret);
  const DgramKey same(kSecret);
  Bytes d = sealed(key, kEnds, {.seq = 1}, "p");
  EXPECT_TRUE(same.verify(kEnds, d.data(), d.size()));
  unsigned char pseudo[12];
  std::memcpy(pseudo, &kEnds.src_addr, 4);
  std::memcpy(pseudo + 4, &kEnds.src_port, 2);
  std::memcpy(pseudo + 6, &kEnds.dst_addr, 4);
  std::memcpy(pseudo + 10, &kEnds.dst_port, 2);
  core::HmacSha256 raw = kSecret;
  raw.update(pseudo, sizeof(pseudo));
  raw.update(d.data(), kMacOffset);
  raw.update(d.data() + kAuthHeaderSize, 1);
  const core::Digest under_secret = raw.final();
  std::memcpy(d.data() + kMacOffset, under_secret.data(), kMacSize);
  EXPECT_FALSE(key.verify(kEnds, d.data(), d.size()));
}

TEST(ReplayGuard, EachNumberIsTakenOnceInAnyOrderWithinTheWindow) {
  ReplayGuard g(4);
  EXPECT_EQ(g.accept(kEnds, 1, 100, 1), Replay::kFresh);
  EXPECT_EQ(g.accept(kEnds, 1, 100, 1), Replay::kSeen);
  EXPECT_EQ(g.check(kEnds, 1, 100, 1), Replay::kSeen);
  EXPECT_EQ(g.check(kEnds, 1, 99, 1), Replay::kFresh);
  EXPECT_EQ(g.check(kEnds, 1, 99, 1), Replay::kFresh) << "check() changes nothing";
  EXPECT_EQ(g.accept(kEnds, 1, 99, 1), Replay::kFresh) << "one that overtook another";
  EXPECT_EQ(g.accept(kEnds, 1, 99, 1), Replay::kSeen);
  EXPECT_EQ(g.accept(kEnds, 1, 105, 1), Replay::kFresh);
  for (uint64_t s : {101, 104, 102, 103}) EXPECT_EQ(g.accept(kEnds, 1, s, 1), Replay::kFresh);
  for (uint64_t s = 99; s <= 105; ++s) EXPECT_EQ(g.accept(kEnds, 1, s, 1), Replay::kSeen) << s;
  EXPECT_EQ(g.size(), 1u);
}

TEST(ReplayGuard, ANumberBehindTheWindowIsRefusedAndItsEdgeIsExact) {
  ReplayGuard g(1);
  const uint64_t top = 10 * ReplayGuard::kWindow;
  ASSERT_EQ(g.accept(kEnds, 1, top, 1), Replay::kFresh);
  EXPECT_EQ(g.accept(kEnds, 1, top - ReplayGuard::kWindow, 1), Replay::kTooOld);
  EXPECT_EQ(g.accept(kEnds, 1, top - ReplayGuard::kWindow + 1, 1), Replay::kFresh);
  EXPECT_EQ(g.accept(kEnds, 1, 1, 1), Replay::kTooOld);
  EXPECT_EQ(g.accept(kEnds, 1, 0, 1), Replay::kTooOld);
}

// The window slides by any amount, across its words: what was seen stays seen while inside.
TEST(ReplayGuard, TheWindowSlidesByAnyAmountAndRemembersWhatStaysInside) {
  for (uint64_t jump : {1, 2, 63, 64, 65, 127, 128, 200, 511, 512, 513, 4096}) {
    ReplayGuard g(1);
    const uint64_t base = 1000;
    for (uint64_t s = base; s < base + 8; ++s) ASSERT_EQ(g.accept(kEnds, 1, s, 1), Replay::kFresh);
    const uint64_t top = base + 7 + jump;
    ASSERT_EQ(g.accept(kEnds, 1, top, 1), Replay::kFresh);
    for (uint64_t s = base; s < base + 8; ++s) {
      const Replay want = top - s >= ReplayGuard::kWindow ? Replay::kTooOld : Replay::kSeen;
      EXPECT_EQ(g.check(kEnds, 1, s, 1), want) << "jump " << jump << " seq " << s;
    }
    for (uint64_t s = base + 8; s < top && top - s < ReplayGuard::kWindow; ++s) {
      ASSERT_EQ(g.check(kEnds, 1, s, 1), Replay::kFresh) << "jump " << jump << " seq " << s;
    }
  }
}

TEST(ReplayGuard, SendersAreTheirAddressesEpochAndDestination) {
  ReplayGuard g(8);
  const Ends to_group(addr("10.0.0.1", 4000), addr("239.255.0.1", 6000));
  const Ends from_another(addr("10.0.0.3", 4000), addr("10.0.0.2", 5000));
  ASSERT_EQ(g.accept(kEnds, 1, 5, 1), Replay::kFresh);
  EXPECT_EQ(g.accept(kEnds, 2, 5, 1), Replay::kFresh) << "another epoch: a new socket";
  EXPECT_EQ(g.accept(to_group, 1, 5, 1), Replay::kFresh) << "to a group: its own window";
  EXPECT_EQ(g.accept(from_another, 1, 5, 1), Replay::kFresh);
  EXPECT_EQ(g.size(), 4u);
  for (const Ends& e : {kEnds, to_group, from_another}) {
    EXPECT_EQ(g.accept(e, 1, 5, 1), Replay::kSeen);
  }
}

// Full: the sender heard from least recently is forgotten, and its past with it (the floor);
// the senders still tracked are judged by their windows alone.
TEST(ReplayGuard, AFullTableForgetsTheSenderHeardLeastRecentlyAndNeverTakesItsPastAgain) {
  ReplayGuard g(3);
  for (uint64_t e = 1; e <= 3; ++e) ASSERT_EQ(g.accept(kEnds, e, 10, 100 * e), Replay::kFresh);
  ASSERT_EQ(g.accept(kEnds, 1, 11, 150), Replay::kFresh);  // epoch 2 is now the least recent
  ASSERT_EQ(g.accept(kEnds, 4, 1, 400), Replay::kFresh);
  EXPECT_EQ(g.size(), 3u);
  EXPECT_EQ(g.evictions(), 1u);
  EXPECT_EQ(g.floor(), 200u) << "epoch 2's latest time";
  // Epoch 2's datagrams, as replayed: their times are no later than the floor.
  EXPECT_EQ(g.accept(kEnds, 2, 10, 200), Replay::kStale);
  EXPECT_EQ(g.accept(kEnds, 2, 9, 150), Replay::kStale);
  // Those still tracked: their windows, whatever their times.
  EXPECT_EQ(g.accept(kEnds, 1, 11, 150), Replay::kSeen);
  EXPECT_EQ(g.accept(kEnds, 3, 10, 300), Replay::kSeen);
  EXPECT_EQ(g.accept(kEnds, 3, 11, 50), Replay::kFresh);
  // Epoch 2 sending again, later: heard again (in the place of the least recent, epoch 1).
  EXPECT_EQ(g.accept(kEnds, 2, 11, 500), Replay::kFresh);
  EXPECT_EQ(g.floor(), 200u);
  EXPECT_EQ(g.accept(kEnds, 1, 12, 160), Replay::kStale) << "epoch 1 forgotten at time 150";
}

// A sender forgotten and heard again starts a new window: its past, behind the floor of the
// moment it came back, is refused however the new window would judge its numbers.
TEST(ReplayGuard, ASenderHeardAgainAfterBeingForgottenNeverHasItsPastTakenAgain) {
  ReplayGuard g(1);
  ASSERT_EQ(g.accept(kEnds, 1, 5, 100), Replay::kFresh);
  ASSERT_EQ(g.accept(kEnds, 2, 1, 200), Replay::kFresh);  // epoch 1 forgotten: floor 100
  ASSERT_EQ(g.accept(kEnds, 1, 7, 300), Replay::kFresh);  // back, in epoch 2's place
  EXPECT_EQ(g.check(kEnds, 1, 5, 100), Replay::kStale);
  EXPECT_EQ(g.accept(kEnds, 1, 5, 100), Replay::kStale) << "number 5 of before, replayed";
  EXPECT_EQ(g.accept(kEnds, 1, 6, 250), Replay::kFresh) << "one sent since, overtaken";
  EXPECT_EQ(g.accept(kEnds, 1, 7, 300), Replay::kSeen);
}

TEST(ReplayGuard, ANewcomerNoLaterThanTheSenderItWouldEvictIsRefusedAndEvictsNobody) {
  ReplayGuard g(2);
  ASSERT_EQ(g.accept(kEnds, 1, 1, 1000), Replay::kFresh);
  ASSERT_EQ(g.accept(kEnds, 2, 1, 2000), Replay::kFresh);
  EXPECT_EQ(g.check(kEnds, 3, 1, 1000), Replay::kFresh) << "check() judges by the floor alone";
  EXPECT_EQ(g.accept(kEnds, 3, 1, 1000), Replay::kStale);
  EXPECT_EQ(g.evictions(), 0u);
  EXPECT_EQ(g.floor(), 0u);
  EXPECT_EQ(g.accept(kEnds, 1, 1, 1000), Replay::kSeen) << "epoch 1 still tracked";
}

// The table's index survives many evictions: each sender tracked is found, none forgotten is.
TEST(ReplayGuard, ManyEvictionsKeepEveryTrackedSenderFindableAndTheTableBounded) {
  constexpr size_t kCap = 37;
  ReplayGuard g(kCap);
  uint64_t time = 1;
  for (uint64_t e = 1; e <= 5000; ++e) {
    ASSERT_EQ(g.accept(kEnds, e, 1, ++time), Replay::kFresh) << e;
    ASSERT_LE(g.size(), kCap);
    // The last kCap epochs are tracked: each one's number 1 is seen.
    if (e % 97 == 0) {
      for (uint64_t k = e >= kCap ? e - kCap + 1 : 1; k <= e; ++k) {
        ASSERT_EQ(g.check(kEnds, k, 1, time + 1), Replay::kSeen) << "epoch " << k << " at " << e;
      }
    }
  }
  EXPECT_EQ(g.size(), kCap);
  EXPECT_EQ(g.evictions(), 5000 - kCap);
  EXPECT_EQ(g.accept(kEnds, 1, 1, 3), Replay::kStale);
}

TEST(ReplayGuard, CapacityIsClampedToItsBounds) {
  EXPECT_EQ(ReplayGuard(0).capacity(), 1u);
  EXPECT_EQ(ReplayGuard(ReplayGuard::kMaxCapacity + 1).capacity(), ReplayGuard::kMaxCapacity);
}

}  // namespace
}  // namespace fabq::xport::dgram
