// Wire format: encode/decode round trips, each validation rule, the byte layout, and the
// Framer's splitting of a stream into frames however the bytes arrive.
#include "xport/wire.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "wire_ops.h"

namespace fabq::xport::wire {
namespace {

using test_ops::kAllOps;
using test_ops::op_name;

using Bytes = std::vector<unsigned char>;

constexpr size_t kMaxPayload = 4096;  // the receiver's max_msg_size in these tests

constexpr Op kCmDataOps[] = {Op::kConnReq, Op::kConnAccept, Op::kConnReject};
constexpr Op kDataOps[] = {Op::kMsg, Op::kTagged};
constexpr Op kNoPayloadOps[] = {Op::kConnReady, Op::kAckReceived, Op::kAckDelivered, Op::kShutdown};

bool is_data(Op op) {
  return op == Op::kMsg || op == Op::kTagged;
}

// A valid header of `op` with every field the op uses set to something nonzero.
Header full_header(Op op) {
  Header h;
  h.op = op;
  // Only data frames, acknowledgements and one-sided requests and answers are numbered.
  const bool numbered = op == Op::kMsg || op == Op::kTagged || op == Op::kAckReceived ||
                        op == Op::kAckDelivered || op >= Op::kWrite;
  h.seq = numbered ? 0x01020304 : 0;
  switch (op) {
    case Op::kConnReq:
    case Op::kConnAccept:
    case Op::kConnReject:
      h.length = core::kCmDataSize;
      break;
    case Op::kMsg:
    case Op::kTagged:
      h.flags = kDataFlags;
      h.length = kMaxPayload;
      h.data = 0xfeedfacecafebeefull;
      if (op == Op::kTagged) h.tag = 0x8877665544332211ull;
      break;
    case Op::kChallenge:
      h.length = kChallengeSize;
      break;
    case Op::kProof:
      h.length = kProofSize;
      break;
    case Op::kWrite:
      h.flags = kRemoteData;
      h.length = kMaxPayload + 8;
      h.tag = 0x8877665544332211ull;
      h.data = 0xfeedfacecafebeefull;
      break;
    case Op::kReadReq:
      h.length = kReadReqSize;
      h.tag = 0x8877665544332211ull;
      h.data = 0xfeedfacecafebeefull;
      break;
    case Op::kAtomic:
      h.length = kAtomicDescSize + 2 * kMaxAtomicBytes;
      h.tag = 0x8877665544332211ull;
      h.data = 0xfeedfacecafebeefull;
      break;
    case Op::kReadResp:
    case Op::kRmaAck:
    case Op::kAtomicResp:
      // A refusal (the last status there is) carries no payload.
      h.data = kLastRmaStatus;
      break;
    default:
      break;
  }
  return h;
}

Bytes encoded(const Header& h) {
  Bytes b(kHeaderSize);
  encode(h, b.data());
  return b;
}

Violation decode_bytes(const Bytes& b, Header* out = nullptr, size_t max = kMaxPayload) {
  Header ignored;
  return decode(b.data(), max, out != nullptr ? out : &ignored);
}

// Encodes `h`, then `length` payload bytes (0, 1, 2, ...).
void append_frame(Bytes* stream, const Header& h) {
  const Bytes head = encoded(h);
  stream->insert(stream->end(), head.begin(), head.end());
  for (uint32_t i = 0; i < h.length; ++i) stream->push_back(static_cast<unsigned char>(i));
}

struct Frame {
  Header header;
  size_t payload = 0;  // payload bytes the framer gave the frame
};

// Feeds `stream` to `f` in calls of at most `chunk` bytes, the way the transport does, and
// returns the frames it completed.
std::vector<Frame> feed(Framer& f, const Bytes& stream, size_t chunk) {
  std::vector<Frame> frames;
  size_t payload = 0;
  for (size_t pos = 0; pos < stream.size();) {
    size_t avail = std::min(chunk, stream.size() - pos);
    while (avail > 0 && !f.dead()) {
      size_t n;
      if (f.in_header()) {
        n = f.take_header(stream.data() + pos, avail);
      } else {
        n = f.take_payload(avail);
        payload += n;
      }
      pos += n;
      avail -= n;
      if (f.frame_done()) {
        frames.push_back({f.header(), payload});
        payload = 0;
        f.next_frame();
      }
    }
    if (f.dead()) break;
  }
  return frames;
}

// --- encode and decode ---------------------------------------------------------------------

class RoundTrip : public testing::TestWithParam<Op> {};

TEST_P(RoundTrip, DecodeOfEncodeGivesBackEveryField) {
  const Header h = full_header(GetParam());
  Header out;
  ASSERT_EQ(decode_bytes(encoded(h), &out), Violation::kNone);
  EXPECT_EQ(out.op, h.op);
  EXPECT_EQ(out.flags, h.flags);
  EXPECT_EQ(out.length, h.length);
  EXPECT_EQ(out.seq, h.seq);
  EXPECT_EQ(out.tag, h.tag);
  EXPECT_EQ(out.data, h.data);
}

TEST_P(RoundTrip, EncodeOfDecodeGivesBackTheSameBytes) {
  const Bytes b = encoded(full_header(GetParam()));
  Header out;
  ASSERT_EQ(decode_bytes(b, &out), Violation::kNone);
  EXPECT_EQ(encoded(out), b);
}

INSTANTIATE_TEST_SUITE_P(EveryOp, RoundTrip, testing::ValuesIn(kAllOps),
                         [](const testing::TestParamInfo<Op>& info) {
                           return std::string(op_name(info.param));
                         });

// --- the byte layout -----------------------------------------------------------------------

TEST(WireLayout, EncodeWritesEachFieldLittleEndianAtItsDocumentedOffset) {
  Header h;
  h.op = Op::kTagged;
  h.flags = 0x04030201;
  h.length = 0x14131211;
  h.seq = 0x24232221;
  h.tag = 0x3837363534333231ull;
  h.data = 0x4847464544434241ull;
  const Bytes expected = {
      0x46, 0x71,                                      // 0: magic 0x7146
      0x01,                                            // 2: version
      0x06,                                            // 3: op
      0x01, 0x02, 0x03, 0x04,                          // 4: flags
      0x11, 0x12, 0x13, 0x14,                          // 8: length
      0x21, 0x22, 0x23, 0x24,                          // 12: seq
      0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38,  // 16: tag
      0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48,  // 24: data
  };
  EXPECT_EQ(encoded(h), expected);
}

TEST(WireLayout, DecodeReadsEachFieldLittleEndianAtItsDocumentedOffset) {
  const Bytes b = {
      0x46, 0x71, 0x01, 0x05,                          // magic, version, kMsg
      0x01, 0x00, 0x00, 0x00,                          // flags: kRemoteData
      0x00, 0x01, 0x00, 0x00,                          // length 256
      0x78, 0x56, 0x34, 0x12,                          // seq
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // tag
      0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01,  // data
  };
  Header h;
  ASSERT_EQ(decode_bytes(b, &h), Violation::kNone);
  EXPECT_EQ(h.op, Op::kMsg);
  EXPECT_EQ(h.flags, kRemoteData);
  EXPECT_EQ(h.length, 256u);
  EXPECT_EQ(h.seq, 0x12345678u);
  EXPECT_EQ(h.tag, 0u);
  EXPECT_EQ(h.data, 0x0123456789abcdefull);
}

TEST(WireLayout, OpsAndFlagsHaveTheirDocumentedValues) {
  EXPECT_EQ(kHeaderSize, 32u);
  EXPECT_EQ(static_cast<int>(Op::kConnReq), 1);
  EXPECT_EQ(static_cast<int>(Op::kShutdown), 9);
  EXPECT_EQ(static_cast<int>(Op::kChallenge), 10);
  EXPECT_EQ(static_cast<int>(Op::kProof), 11);
  EXPECT_EQ(kAuth, 32u);
  EXPECT_EQ(kChallengeSize, 48u);
  EXPECT_EQ(kProofSize, 32u);
  EXPECT_EQ(kMaxConnReq, core::kCmDataSize + 16);
  EXPECT_EQ(kRemoteData, 1u);
  EXPECT_EQ(kWantReceived, 2u);
  EXPECT_EQ(kWantDelivered, 4u);
  EXPECT_EQ(kShmOffer, 8u);
  EXPECT_EQ(kShmAccept, 16u);
}

// --- each validation rule ------------------------------------------------------------------

TEST(WireDecode, WrongMagicIsBadMagic) {
  Bytes b = encoded(full_header(Op::kMsg));
  b[0] ^= 0x01;
  EXPECT_EQ(decode_bytes(b), Violation::kBadMagic);
  b = encoded(full_header(Op::kMsg));
  std::swap(b[0], b[1]);  // big-endian magic
  EXPECT_EQ(decode_bytes(b), Violation::kBadMagic);
}

TEST(WireDecode, AnyVersionButOneIsBadVersion) {
  for (const unsigned version : {0u, 2u, 255u}) {
    Bytes b = encoded(full_header(Op::kMsg));
    b[2] = static_cast<unsigned char>(version);
    EXPECT_EQ(decode_bytes(b), Violation::kBadVersion) << "version " << version;
  }
}

TEST(WireDecode, OpOutsideOneToSeventeenIsUnknownOp) {
  for (const unsigned op : {0u, 18u, 255u}) {
    Bytes b = encoded(Header{.op = Op::kConnReady});
    b[3] = static_cast<unsigned char>(op);
    EXPECT_EQ(decode_bytes(b), Violation::kUnknownOp) << "op " << op;
  }
}

TEST(WireDecode, AnyFlagOnANonDataOpIsBadFlags) {
  for (const Op op : kAllOps) {
    if (is_data(op)) continue;
    for (const uint32_t flag : {uint32_t{kRemoteData}, uint32_t{kWantReceived}, 1u << 31}) {
      // A remote write may carry CQ data.
      if (op == Op::kWrite && flag == kRemoteData) continue;
      Header h = full_header(op);
      h.flags = flag;
      EXPECT_EQ(decode_bytes(encoded(h)), Violation::kBadFlags) << op_name(op) << " flag " << flag;
    }
  }
}

TEST(WireDecode, UndefinedFlagOnADataOpIsBadFlags) {
  for (const Op op : kDataOps) {
    for (const uint32_t flag : {1u << 3, 1u << 31}) {
      Header h = full_header(op);
      h.flags |= flag;
      EXPECT_EQ(decode_bytes(encoded(h)), Violation::kBadFlags) << op_name(op) << " flag " << flag;
    }
  }
}

TEST(WireDecode, DataOpsAllowEachDataFlagAlone) {
  for (const Op op : kDataOps) {
    for (const uint32_t flag : {uint32_t{kWantReceived}, uint32_t{kWantDelivered}}) {
      Header h = full_header(op);
      h.flags = flag;
      h.data = 0;
      EXPECT_EQ(decode_bytes(encoded(h)), Violation::kNone) << op_name(op) << " flag " << flag;
    }
  }
}

TEST(WireDecode, CmOpsTakeUpToMaxCmDataAndNoMore) {
  for (const Op op : kCmDataOps) {
    Header h = full_header(op);
    h.length = core::kCmDataSize;
    EXPECT_EQ(decode_bytes(encoded(h)), Violation::kNone) << op_name(op);
    h.length = core::kCmDataSize + 1;
    EXPECT_EQ(decode_bytes(encoded(h)), Violation::kTooLong) << op_name(op);
  }
}

TEST(WireDecode, AnAuthenticatingRequestTakesItsNonceBeyondMaxCmData) {
  Header h = full_header(Op::kConnReq);
  h.flags = kAuth;
  h.length = kMaxConnReq;
  EXPECT_EQ(decode_bytes(encoded(h)), Violation::kNone);
  h.length = kMaxConnReq + 1;
  EXPECT_EQ(decode_bytes(encoded(h)), Violation::kTooLong);
  h.flags = kAuth | kShmOffer;
  h.length = kMaxConnReq;
  h.tag = 7;
  h.data = 9;
  EXPECT_EQ(decode_bytes(encoded(h)), Violation::kNone) << "an offer may authenticate too";
}

TEST(WireDecode, AuthOnAnyOpButConnReqIsBadFlags) {
  for (const Op op : kAllOps) {
    if (op == Op::kConnReq) continue;
    Header h = full_header(op);
    h.flags |= kAuth;
    EXPECT_EQ(decode_bytes(encoded(h)), Violation::kBadFlags) << op_name(op);
  }
}

TEST(WireDecode, ChallengeAndProofCarryNoMoreThanTheirFixedSize) {
  for (const Op op : {Op::kChallenge, Op::kProof}) {
    Header h = full_header(op);
    EXPECT_EQ(decode_bytes(encoded(h), nullptr, /*max=*/0), Violation::kNone) << op_name(op);
    ++h.length;
    EXPECT_EQ(decode_bytes(encoded(h), nullptr, /*max=*/1u << 20), Violation::kTooLong)
        << op_name(op);
  }
}

TEST(WireDecode, CmLimitIsKMaxCmDataWhateverTheReceiversMax) {
  Header h = full_header(Op::kConnReq);
  h.length = core::kCmDataSize;
  EXPECT_EQ(decode_bytes(encoded(h), nullptr, /*max=*/0), Violation::kNone);
  h.length = core::kCmDataSize + 1;
  EXPECT_EQ(decode_bytes(encoded(h), nullptr, /*max=*/1u << 20), Violation::kTooLong);
}

TEST(WireDecode, DataOpsTakeUpToTheReceiversMaxAndNoMore) {
  for (const Op op : kDataOps) {
    for (const size_t max : {size_t{0}, size_t{100}, kMaxPayload}) {
      Header h = full_header(op);
      h.length = static_cast<uint32_t>(max);
      EXPECT_EQ(decode_bytes(encoded(h), nullptr, max), Violation::kNone)
          << op_name(op) << " max " << max;
      h.length = static_cast<uint32_t>(max + 1);
      EXPECT_EQ(decode_bytes(encoded(h), nullptr, max), Violation::kTooLong)
          << op_name(op) << " max " << max;
    }
  }
}

TEST(WireDecode, DataOpsUpToFourGiBPassWhenTheReceiversMaxIsLarger) {
  Header h = full_header(Op::kMsg);
  h.length = UINT32_MAX;
  EXPECT_EQ(decode_bytes(encoded(h), nullptr, SIZE_MAX), Violation::kNone);
}

TEST(WireDecode, ReadyAcksAndShutdownCarryNoPayload) {
  for (const Op op : kNoPayloadOps) {
    Header h = full_header(op);
    EXPECT_EQ(decode_bytes(encoded(h)), Violation::kNone) << op_name(op);
    h.length = 1;
    EXPECT_EQ(decode_bytes(encoded(h)), Violation::kTooLong) << op_name(op);
  }
}

// A one-sided request names its region's key in `tag`, its address in `data`.
bool is_request(Op op) {
  return op == Op::kWrite || op == Op::kReadReq || op == Op::kAtomic;
}
bool is_response(Op op) {
  return op == Op::kReadResp || op == Op::kRmaAck || op == Op::kAtomicResp;
}

TEST(WireDecode, TagOnAnUntaggedOpIsUnusedField) {
  for (const Op op : kAllOps) {
    // A read's answer says there where its bytes begin (a piece): below.
    if (op == Op::kTagged || is_request(op) || op == Op::kReadResp) continue;
    Header h = full_header(op);
    h.tag = 1;
    EXPECT_EQ(decode_bytes(encoded(h)), Violation::kUnusedField) << op_name(op);
  }
}

TEST(WireDecode, DataWithoutRemoteDataFlagIsUnusedField) {
  for (const Op op : kAllOps) {
    if (is_request(op) || is_response(op)) continue;
    Header h = full_header(op);
    h.flags &= ~uint32_t{kRemoteData};
    h.data = 1;
    EXPECT_EQ(decode_bytes(encoded(h)), Violation::kUnusedField) << op_name(op);
  }
}

TEST(WireDecode, AnAnswerWithAnUnknownStatusOrARefusalWithBytesIsBadStatus) {
  for (const Op op : {Op::kReadResp, Op::kRmaAck, Op::kAtomicResp}) {
    Header h = full_header(op);
    h.data = kLastRmaStatus + 1;
    EXPECT_EQ(decode_bytes(encoded(h)), Violation::kBadStatus) << op_name(op);
  }
  for (const Op op : {Op::kReadResp, Op::kAtomicResp}) {
    Header h = full_header(op);
    h.data = static_cast<uint64_t>(RmaStatus::kBadKey);
    h.length = 8;
    EXPECT_EQ(decode_bytes(encoded(h)), Violation::kBadStatus) << op_name(op);
  }
}

TEST(WireDecode, AReadRequestIsExactlyItsLengthAndAnAtomicAtLeastItsDescription) {
  Header read = full_header(Op::kReadReq);
  read.length = kReadReqSize - 1;
  EXPECT_EQ(decode_bytes(encoded(read)), Violation::kTooLong);
  Header atomic = full_header(Op::kAtomic);
  atomic.length = kAtomicDescSize - 1;
  EXPECT_EQ(decode_bytes(encoded(atomic)), Violation::kTooLong);
  atomic.length = kAtomicDescSize + 2 * kMaxAtomicBytes + 1;
  EXPECT_EQ(decode_bytes(encoded(atomic)), Violation::kTooLong);
  Header write = full_header(Op::kWrite);
  write.length = kMaxPayload + 9;
  EXPECT_EQ(decode_bytes(encoded(write)), Violation::kTooLong) << "payload and CQ data at most";
}

TEST(WireDecode, DirectRequestsCarryOneToFourEntriesAndTheirAnswerNothing) {
  EXPECT_EQ(kDirect, 64u);
  EXPECT_EQ(kDirectEntrySize, 16u);
  for (uint32_t entries = 0; entries <= kMaxDirectEntries + 1; ++entries) {
    const bool fits = entries >= 1 && entries <= kMaxDirectEntries;
    Header write{.op = Op::kWrite, .flags = kDirect, .length = 16 * entries, .tag = 1, .data = 2};
    EXPECT_EQ(decode_bytes(encoded(write)), fits ? Violation::kNone : Violation::kTooLong)
        << entries << " entries";
    Header read{.op = Op::kReadReq,
                .flags = kDirect,
                .length = static_cast<uint32_t>(kReadReqSize + 16 * entries),
                .tag = 1};
    EXPECT_EQ(decode_bytes(encoded(read)), fits ? Violation::kNone : Violation::kTooLong)
        << entries << " entries";
    for (const Op op : {Op::kMsg, Op::kTagged}) {
      Header msg{.op = op,
                 .flags = kDirect | kWantDelivered,
                 .length = 16 * entries,
                 .tag = op == Op::kTagged ? 7u : 0u};
      EXPECT_EQ(decode_bytes(encoded(msg)), fits ? Violation::kNone : Violation::kTooLong)
          << op_name(op) << ", " << entries << " entries";
    }
  }
  // The entries are whole, whatever the receiver's limit says.
  Header cut{.op = Op::kWrite, .flags = kDirect, .length = 24, .tag = 1};
  EXPECT_EQ(decode_bytes(encoded(cut), nullptr, SIZE_MAX), Violation::kTooLong);
  Header answer{.op = Op::kReadResp, .flags = kDirect, .seq = 3};
  EXPECT_EQ(decode_bytes(encoded(answer)), Violation::kNone);
  answer.length = 1;
  EXPECT_EQ(decode_bytes(encoded(answer)), Violation::kTooLong) << "the bytes are already there";
}

TEST(WireDecode, DirectIsOnlyForMessagesWritesReadsAndReadAnswersAndWritesHaveNoCqData) {
  for (const Op op : kAllOps) {
    if (op == Op::kMsg || op == Op::kTagged || op == Op::kWrite || op == Op::kReadReq ||
        op == Op::kReadResp) {
      continue;
    }
    Header h = full_header(op);
    h.flags = kDirect;
    EXPECT_EQ(decode_bytes(encoded(h)), Violation::kBadFlags) << op_name(op);
  }
  Header h{.op = Op::kWrite, .flags = kDirect | kRemoteData, .length = 16, .tag = 1};
  EXPECT_EQ(decode_bytes(encoded(h)), Violation::kBadFlags) << "no room for a write's CQ data";
  // A message's CQ data is in its header.
  Header msg{.op = Op::kMsg, .flags = kDirect | kRemoteData, .length = 16, .seq = 1, .data = 9};
  EXPECT_EQ(decode_bytes(encoded(msg)), Violation::kNone);
}

TEST(WireDecode, AReadsAnswerInPiecesCarriesEachOffsetInTagAndMoreOnAllButTheLast) {
  EXPECT_EQ(kMore, 128u);
  Header piece{.op = Op::kReadResp, .flags = kMore, .length = 4096, .seq = 3, .tag = 0};
  EXPECT_EQ(decode_bytes(encoded(piece)), Violation::kNone) << "the first piece";
  piece.tag = 4096;
  EXPECT_EQ(decode_bytes(encoded(piece)), Violation::kNone) << "a later piece";
  piece.flags = 0;
  piece.length = 10;
  EXPECT_EQ(decode_bytes(encoded(piece)), Violation::kNone) << "the last piece";
  // The region went away: the answer ends with its status, where the bytes stopped.
  Header refusal{.op = Op::kReadResp, .seq = 3, .tag = 8192, .data = 1};
  EXPECT_EQ(decode_bytes(encoded(refusal)), Violation::kNone);
  refusal.flags = kMore;
  EXPECT_EQ(decode_bytes(encoded(refusal)), Violation::kBadStatus) << "nothing follows a refusal";
  Header empty{.op = Op::kReadResp, .flags = kMore, .seq = 3, .tag = 8192};
  EXPECT_EQ(decode_bytes(encoded(empty)), Violation::kUnusedField) << "a piece has bytes";
  Header direct{.op = Op::kReadResp, .flags = kDirect, .seq = 3, .tag = 8};
  EXPECT_EQ(decode_bytes(encoded(direct)), Violation::kUnusedField) << "a direct answer is whole";
  direct.tag = 0;
  direct.flags = kDirect | kMore;
  EXPECT_EQ(decode_bytes(encoded(direct)), Violation::kBadFlags);
  for (const Op op : kAllOps) {
    if (op == Op::kReadResp) continue;
    Header h = full_header(op);
    h.flags |= kMore;
    EXPECT_EQ(decode_bytes(encoded(h)), Violation::kBadFlags) << op_name(op);
  }
}

TEST(WireDecode, AWriteWithCqDataFitsUnderTheLargestLimitToo) {
  Header h{.op = Op::kWrite, .flags = kRemoteData, .length = 8, .seq = 1, .tag = 1, .data = 1};
  EXPECT_EQ(decode_bytes(encoded(h), nullptr, SIZE_MAX), Violation::kNone)
      << "the 8 bytes of CQ data do not wrap the limit around";
}

TEST(WireDecode, ViolationLeavesTheOutputHeaderAlone) {
  Bytes b = encoded(full_header(Op::kMsg));
  b[2] = 2;
  Header out = full_header(Op::kShutdown);
  ASSERT_EQ(decode(b.data(), kMaxPayload, &out), Violation::kBadVersion);
  EXPECT_EQ(encoded(out), encoded(full_header(Op::kShutdown)));
}

TEST(WireDecode, EveryViolationHasItsOwnDescription) {
  const Violation all[] = {Violation::kNone,        Violation::kBadMagic, Violation::kBadVersion,
                           Violation::kUnknownOp,   Violation::kBadFlags, Violation::kTooLong,
                           Violation::kUnusedField, Violation::kBadStatus};
  std::vector<std::string> seen;
  for (const Violation v : all) {
    const std::string s = violation_str(v);
    EXPECT_FALSE(s.empty());
    for (const std::string& other : seen) EXPECT_NE(s, other);
    seen.push_back(s);
  }
}

// --- the shared-memory offer and its acceptance ---------------------------------------------

// A kConnReq offering segment 0x0000123400000007 with a nonce.
Header shm_offer() {
  Header h = full_header(Op::kConnReq);
  h.flags = kShmOffer;
  h.tag = 0x0000123400000007ull;
  h.data = 0xfedcba9876543210ull;
  return h;
}

TEST(WireShm, ConnReqWithShmOfferCarriesTheSegmentIdInTagAndTheNonceInData) {
  const Header h = shm_offer();
  Header out;
  ASSERT_EQ(decode_bytes(encoded(h), &out), Violation::kNone);
  EXPECT_EQ(out.op, Op::kConnReq);
  EXPECT_EQ(out.flags, uint32_t{kShmOffer});
  EXPECT_EQ(out.tag, h.tag);
  EXPECT_EQ(out.data, h.data);
  EXPECT_EQ(out.length, core::kCmDataSize) << "the connect data still goes along";
}

TEST(WireShm, ConnReqWithoutShmOfferStillRefusesTagAndDataAsUnusedField) {
  Header h = shm_offer();
  h.flags = 0;
  EXPECT_EQ(decode_bytes(encoded(h)), Violation::kUnusedField) << "tag and data";
  h.data = 0;
  EXPECT_EQ(decode_bytes(encoded(h)), Violation::kUnusedField) << "tag alone";
  h = shm_offer();
  h.flags = 0;
  h.tag = 0;
  EXPECT_EQ(decode_bytes(encoded(h)), Violation::kUnusedField) << "data alone";
}

TEST(WireShm, ShmOfferStillRefusesASequenceNumber) {
  Header h = shm_offer();
  h.seq = 1;
  EXPECT_EQ(decode_bytes(encoded(h)), Violation::kUnusedField);
}

TEST(WireShm, ShmOfferOnAnyOpButConnReqIsBadFlags) {
  for (const Op op : kAllOps) {
    if (op == Op::kConnReq) continue;
    Header h = full_header(op);
    h.flags |= kShmOffer;
    EXPECT_EQ(decode_bytes(encoded(h)), Violation::kBadFlags) << op_name(op);
    // Even with the fields an offer fills: the flag is judged first.
    h.tag = 1;
    h.data = 1;
    EXPECT_EQ(decode_bytes(encoded(h)), Violation::kBadFlags) << op_name(op) << " with tag, data";
  }
}

TEST(WireShm, ShmAcceptOnAnyOpButConnAcceptIsBadFlags) {
  for (const Op op : kAllOps) {
    if (op == Op::kConnAccept) continue;
    Header h = full_header(op);
    h.flags |= kShmAccept;
    EXPECT_EQ(decode_bytes(encoded(h)), Violation::kBadFlags) << op_name(op);
  }
  Header offer = shm_offer();
  offer.flags |= kShmAccept;
  EXPECT_EQ(decode_bytes(encoded(offer)), Violation::kBadFlags) << "an offer that accepts itself";
}

TEST(WireShm, ConnAcceptAcceptsShmAccept) {
  Header h = full_header(Op::kConnAccept);
  h.flags = kShmAccept;
  Header out;
  ASSERT_EQ(decode_bytes(encoded(h), &out), Violation::kNone);
  EXPECT_EQ(out.op, Op::kConnAccept);
  EXPECT_EQ(out.flags, uint32_t{kShmAccept});
  EXPECT_EQ(out.length, core::kCmDataSize);
}

TEST(WireShm, ShmAcceptLetsNeitherTagNorDataThrough) {
  Header h = full_header(Op::kConnAccept);
  h.flags = kShmAccept;
  h.tag = 1;
  EXPECT_EQ(decode_bytes(encoded(h)), Violation::kUnusedField) << "tag";
  h.tag = 0;
  h.data = 1;
  EXPECT_EQ(decode_bytes(encoded(h)), Violation::kUnusedField) << "data";
}

TEST(WireShm, ConnReqAndConnAcceptAllowNoFlagBesideTheirShmAndAuthFlags) {
  for (const uint32_t extra : {uint32_t{kRemoteData}, uint32_t{kWantReceived},
                               uint32_t{kWantDelivered}, 1u << 6, 1u << 31}) {
    Header req = shm_offer();
    req.flags |= extra;
    EXPECT_EQ(decode_bytes(encoded(req)), Violation::kBadFlags) << "ConnReq flag " << extra;
    Header acc = full_header(Op::kConnAccept);
    acc.flags = kShmAccept | extra;
    EXPECT_EQ(decode_bytes(encoded(acc)), Violation::kBadFlags) << "ConnAccept flag " << extra;
  }
}

TEST(WireShm, AHandshakeThatTakesTheOfferPassesTheFramer) {
  Header accept = full_header(Op::kConnAccept);
  accept.flags = kShmAccept;
  const Header frames_in[] = {shm_offer(), accept, full_header(Op::kConnReady)};
  Bytes stream;
  for (const Header& h : frames_in) append_frame(&stream, h);
  for (const size_t chunk : {stream.size(), size_t{1}, size_t{13}}) {
    Framer f(kMaxPayload);
    const std::vector<Frame> out = feed(f, stream, chunk);
    EXPECT_FALSE(f.dead()) << violation_str(f.violation());
    ASSERT_EQ(out.size(), std::size(frames_in)) << "chunk " << chunk;
    for (size_t i = 0; i < out.size(); ++i) {
      EXPECT_EQ(encoded(out[i].header), encoded(frames_in[i])) << "chunk " << chunk;
    }
  }
}

// --- the Framer ----------------------------------------------------------------------------

TEST(Framer, FrameArrivingOneByteAtATimeIsAssembled) {
  Header h = full_header(Op::kTagged);
  h.length = 5;
  Bytes stream;
  append_frame(&stream, h);
  Framer f(kMaxPayload);
  for (size_t i = 0; i + 1 < kHeaderSize; ++i) {
    ASSERT_EQ(f.take_header(&stream[i], 1), 1u) << "byte " << i;
    ASSERT_TRUE(f.in_header());
    ASSERT_FALSE(f.frame_done());
  }
  ASSERT_EQ(f.take_header(&stream[kHeaderSize - 1], 1), 1u);
  EXPECT_FALSE(f.in_header());
  EXPECT_EQ(encoded(f.header()), encoded(h));
  for (size_t left = 5; left > 0; --left) {
    EXPECT_EQ(f.payload_left(), left);
    EXPECT_FALSE(f.frame_done());
    EXPECT_EQ(f.take_payload(1), 1u);
  }
  EXPECT_EQ(f.payload_left(), 0u);
  EXPECT_TRUE(f.frame_done());
}

TEST(Framer, TakeHeaderTakesOnlyWhatTheHeaderStillNeeds) {
  Bytes stream;
  append_frame(&stream, full_header(Op::kConnReq));
  Framer f(kMaxPayload);
  EXPECT_EQ(f.take_header(stream.data(), 20), 20u);
  EXPECT_EQ(f.take_header(stream.data() + 20, stream.size() - 20), kHeaderSize - 20);
  EXPECT_FALSE(f.in_header());
  EXPECT_EQ(f.payload_left(), core::kCmDataSize);
}

TEST(Framer, PayloadSplitAcrossCallsIsTakenInPieces) {
  Header h = full_header(Op::kMsg);
  h.length = 1000;
  Bytes stream;
  append_frame(&stream, h);
  Framer f(kMaxPayload);
  ASSERT_EQ(f.take_header(stream.data(), stream.size()), kHeaderSize);
  EXPECT_EQ(f.take_payload(300), 300u);
  EXPECT_EQ(f.payload_left(), 700u);
  EXPECT_FALSE(f.frame_done());
  EXPECT_EQ(f.take_payload(0), 0u);
  EXPECT_EQ(f.take_payload(699), 699u);
  EXPECT_FALSE(f.frame_done());
  EXPECT_EQ(f.take_payload(50), 1u);  // only the frame's last byte
  EXPECT_TRUE(f.frame_done());
  EXPECT_EQ(f.take_payload(50), 0u);  // the next frame's bytes are not this frame's payload
}

TEST(Framer, ZeroLengthFrameIsDoneWhenItsHeaderIs) {
  Bytes stream;
  append_frame(&stream, full_header(Op::kConnReady));
  append_frame(&stream, full_header(Op::kShutdown));
  Framer f(kMaxPayload);
  ASSERT_EQ(f.take_header(stream.data(), stream.size()), kHeaderSize);
  EXPECT_TRUE(f.frame_done());
  EXPECT_EQ(f.header().op, Op::kConnReady);
  EXPECT_EQ(f.payload_left(), 0u);
  EXPECT_EQ(f.take_payload(stream.size() - kHeaderSize), 0u);
  EXPECT_EQ(f.take_header(stream.data() + kHeaderSize, kHeaderSize), 0u)
      << "the next header waits for next_frame()";
  f.next_frame();
  EXPECT_TRUE(f.in_header());
  EXPECT_FALSE(f.frame_done());
  ASSERT_EQ(f.take_header(stream.data() + kHeaderSize, kHeaderSize), kHeaderSize);
  EXPECT_TRUE(f.frame_done());
  EXPECT_EQ(f.header().op, Op::kShutdown);
}

TEST(Framer, SeveralFramesInOneBufferComeOutInOrderWithTheirPayloads) {
  Header msg = full_header(Op::kMsg);
  msg.length = 100;
  Header tagged = full_header(Op::kTagged);
  tagged.length = 1;
  const Header frames_in[] = {full_header(Op::kConnReq),
                              full_header(Op::kConnAccept),
                              full_header(Op::kConnReady),
                              msg,
                              tagged,
                              full_header(Op::kAckReceived),
                              full_header(Op::kAckDelivered),
                              full_header(Op::kShutdown)};
  Bytes stream;
  for (const Header& h : frames_in) append_frame(&stream, h);
  // The whole stream at once, and in pieces that straddle every boundary.
  for (const size_t chunk : {stream.size(), size_t{1}, size_t{7}, size_t{33}, size_t{64}}) {
    Framer f(kMaxPayload);
    const std::vector<Frame> out = feed(f, stream, chunk);
    EXPECT_FALSE(f.dead()) << violation_str(f.violation());
    ASSERT_EQ(out.size(), std::size(frames_in)) << "chunk " << chunk;
    for (size_t i = 0; i < out.size(); ++i) {
      EXPECT_EQ(encoded(out[i].header), encoded(frames_in[i])) << "chunk " << chunk;
      EXPECT_EQ(out[i].payload, frames_in[i].length) << "chunk " << chunk;
    }
  }
}

TEST(Framer, ViolationKillsTheFramerAndLaterCallsTakeNothing) {
  Bytes stream = encoded(full_header(Op::kConnReady));
  stream[0] = 0;
  append_frame(&stream, full_header(Op::kShutdown));
  Framer f(kMaxPayload);
  EXPECT_EQ(f.take_header(stream.data(), 10), 10u);
  EXPECT_FALSE(f.dead()) << "a header is judged when it is whole";
  EXPECT_EQ(f.take_header(stream.data() + 10, stream.size() - 10), kHeaderSize - 10);
  EXPECT_TRUE(f.dead());
  EXPECT_EQ(f.violation(), Violation::kBadMagic);
  EXPECT_EQ(f.take_header(stream.data() + kHeaderSize, kHeaderSize), 0u);
  EXPECT_EQ(f.take_payload(kHeaderSize), 0u);
  f.next_frame();
  EXPECT_TRUE(f.dead()) << "next_frame() does not revive a dead framer";
  EXPECT_EQ(f.take_header(stream.data() + kHeaderSize, kHeaderSize), 0u);
  EXPECT_EQ(f.take_payload(kHeaderSize), 0u);
}

TEST(Framer, LengthAboveItsMaxPayloadKillsTheFramer) {
  Header h = full_header(Op::kMsg);
  h.length = 101;
  const Bytes b = encoded(h);
  Framer f(/*max_payload=*/100);
  EXPECT_EQ(f.take_header(b.data(), b.size()), kHeaderSize);
  EXPECT_TRUE(f.dead());
  EXPECT_EQ(f.violation(), Violation::kTooLong);
  EXPECT_EQ(f.take_payload(101), 0u);
}

TEST(Framer, ANewFramerWaitsForAHeader) {
  Framer f(kMaxPayload);
  EXPECT_TRUE(f.in_header());
  EXPECT_FALSE(f.dead());
  EXPECT_FALSE(f.frame_done());
  EXPECT_EQ(f.violation(), Violation::kNone);
  EXPECT_EQ(f.payload_left(), 0u);
  EXPECT_EQ(f.take_payload(10), 0u) << "no payload before a header";
}

}  // namespace
}  // namespace fabq::xport::wire

namespace {
TEST(Wire, ASequenceNumberOnAnOpThatIsNotNumberedIsAViolation) {
  using namespace fabq::xport::wire;
  for (Op op : {Op::kConnReq, Op::kConnAccept, Op::kConnReject, Op::kConnReady, Op::kShutdown}) {
    Header h;
    h.op = op;
    h.seq = 7;
    unsigned char b[kHeaderSize];
    encode(h, b);
    Header out;
    EXPECT_EQ(decode(b, 1024, &out), Violation::kUnusedField) << static_cast<int>(op);
  }
  for (Op op : {Op::kMsg, Op::kTagged, Op::kAckReceived, Op::kAckDelivered}) {
    Header h;
    h.op = op;
    h.seq = 7;
    unsigned char b[kHeaderSize];
    encode(h, b);
    Header out;
    EXPECT_EQ(decode(b, 1024, &out), Violation::kNone) << static_cast<int>(op);
    EXPECT_EQ(out.seq, 7u);
  }
}
}  // namespace
