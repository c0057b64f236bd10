// Datagram wire format (xport/dgram_wire.h): the byte layout, round trips, and each reason a
// datagram is refused, including every single-bit flip of a valid header.
#include "xport/dgram_wire.h"

#include <gtest/gtest.h>

#include <cstdint>
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
  Bytes d = datagram({.flags = 0x02, .length = 0}, 0);
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

}  // namespace
}  // namespace fabq::xport::dgram
