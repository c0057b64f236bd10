// CompletionQueue reads: formats, counts, batching, ordering, readfrom source addresses,
// error ordering and misuse (fi_cq(3): fi_cq_read, fi_cq_readfrom).
#include <gtest/gtest.h>
#include <rdma/fabric.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "core/cq.h"

namespace fabq::core {
namespace {

constexpr unsigned char kCanary = 0xA5;
constexpr fi_addr_t kSentinelAddr = 0x5E5E5E5E5E5E5E5Eull;

std::unique_ptr<CompletionQueue> make_cq(CqFormat format, size_t size = 64) {
  CqConfig config;
  config.size = size;
  config.format = format;
  auto r = CompletionQueue::create(config);
  EXPECT_TRUE(r.ok());
  return r.ok() ? std::move(r.value()) : nullptr;
}

void* ptr(uintptr_t v) {
  return reinterpret_cast<void*>(v);
}

// A completion whose every field differs from every other completion's and from zero.
Completion completion(uint64_t i) {
  Completion c;
  c.op_context = ptr(0x10000 + i * 16);
  c.flags = FI_RECV | FI_MSG | (i % 2 == 0 ? FI_REMOTE_CQ_DATA : FI_TAGGED);
  c.len = 1000 + i;
  c.buf = ptr(0x20000 + i * 8);
  c.data = 0xDA7A0000 + i;
  c.tag = 0x7A90000 + i;
  return c;
}

CompletionError error_entry(uint64_t i) {
  CompletionError e;
  e.completion = completion(i);
  e.err = FI_EIO;
  e.prov_errno = 77;
  return e;
}

void write_n(CompletionQueue& cq, uint64_t first, uint64_t n) {
  for (uint64_t i = first; i < first + n; ++i) ASSERT_TRUE(cq.write(completion(i)).ok());
}

std::vector<fi_cq_entry> read_context(CompletionQueue& cq, size_t count, Status* status) {
  std::vector<fi_cq_entry> out(count);
  Result<size_t> r = cq.read(out.data(), count, nullptr);
  *status = r.status();
  out.resize(r.ok() ? *r : 0);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Formats.

TEST(CqFormat, UnspecSelectsContextFormat) {
  Result<CqFormat> r = cq_format_from_fi(FI_CQ_FORMAT_UNSPEC);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, CqFormat::kContext);
}

TEST(CqFormat, EachLibfabricFormatSelectsItsOwnFormat) {
  const std::pair<fi_cq_format, CqFormat> cases[] = {
      {FI_CQ_FORMAT_CONTEXT, CqFormat::kContext},
      {FI_CQ_FORMAT_MSG, CqFormat::kMsg},
      {FI_CQ_FORMAT_DATA, CqFormat::kData},
      {FI_CQ_FORMAT_TAGGED, CqFormat::kTagged},
  };
  for (const auto& [fi, want] : cases) {
    Result<CqFormat> r = cq_format_from_fi(fi);
    ASSERT_TRUE(r.ok()) << fi;
    EXPECT_EQ(*r, want) << fi;
  }
}

TEST(CqFormat, UndefinedFormatIsInval) {
  Result<CqFormat> r = cq_format_from_fi(static_cast<fi_cq_format>(99));
  EXPECT_EQ(r.status().code(), Code::kInval);
  r = cq_format_from_fi(static_cast<fi_cq_format>(-1));
  EXPECT_EQ(r.status().code(), Code::kInval);
}

TEST(CqFormat, EntrySizeIsTheSizeOfTheLibfabricStruct) {
  EXPECT_EQ(cq_entry_size(CqFormat::kContext), sizeof(fi_cq_entry));
  EXPECT_EQ(cq_entry_size(CqFormat::kMsg), sizeof(fi_cq_msg_entry));
  EXPECT_EQ(cq_entry_size(CqFormat::kData), sizeof(fi_cq_data_entry));
  EXPECT_EQ(cq_entry_size(CqFormat::kTagged), sizeof(fi_cq_tagged_entry));
}

TEST(CqFormat, QueueReportsTheFormatItWasCreatedWith) {
  for (CqFormat f : {CqFormat::kContext, CqFormat::kMsg, CqFormat::kData, CqFormat::kTagged}) {
    auto cq = make_cq(f);
    ASSERT_NE(cq, nullptr);
    EXPECT_EQ(cq->format(), f);
  }
}

TEST(CqRead, ContextFormatCarriesOpContext) {
  auto cq = make_cq(CqFormat::kContext);
  write_n(*cq, 3, 2);
  fi_cq_entry e[2] = {};
  Result<size_t> r = cq->read(e, 2, nullptr);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(*r, 2u);
  EXPECT_EQ(e[0].op_context, completion(3).op_context);
  EXPECT_EQ(e[1].op_context, completion(4).op_context);
}

TEST(CqRead, MsgFormatCarriesContextFlagsAndLen) {
  auto cq = make_cq(CqFormat::kMsg);
  write_n(*cq, 5, 2);
  fi_cq_msg_entry e[2] = {};
  Result<size_t> r = cq->read(e, 2, nullptr);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(*r, 2u);
  for (int i = 0; i < 2; ++i) {
    const Completion c = completion(5 + i);
    EXPECT_EQ(e[i].op_context, c.op_context);
    EXPECT_EQ(e[i].flags, c.flags);
    EXPECT_EQ(e[i].len, c.len);
  }
}

TEST(CqRead, DataFormatCarriesContextFlagsLenBufAndData) {
  auto cq = make_cq(CqFormat::kData);
  write_n(*cq, 7, 2);
  fi_cq_data_entry e[2] = {};
  Result<size_t> r = cq->read(e, 2, nullptr);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(*r, 2u);
  for (int i = 0; i < 2; ++i) {
    const Completion c = completion(7 + i);
    EXPECT_EQ(e[i].op_context, c.op_context);
    EXPECT_EQ(e[i].flags, c.flags);
    EXPECT_EQ(e[i].len, c.len);
    EXPECT_EQ(e[i].buf, c.buf);
    EXPECT_EQ(e[i].data, c.data);
  }
}

TEST(CqRead, TaggedFormatCarriesEveryField) {
  auto cq = make_cq(CqFormat::kTagged);
  write_n(*cq, 9, 2);
  fi_cq_tagged_entry e[2] = {};
  Result<size_t> r = cq->read(e, 2, nullptr);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(*r, 2u);
  for (int i = 0; i < 2; ++i) {
    const Completion c = completion(9 + i);
    EXPECT_EQ(e[i].op_context, c.op_context);
    EXPECT_EQ(e[i].flags, c.flags);
    EXPECT_EQ(e[i].len, c.len);
    EXPECT_EQ(e[i].buf, c.buf);
    EXPECT_EQ(e[i].data, c.data);
    EXPECT_EQ(e[i].tag, c.tag);
  }
}

class CqReadFormat : public ::testing::TestWithParam<CqFormat> {};

TEST_P(CqReadFormat, EntryNeverWritesBeyondItsStructSize) {
  const size_t size = cq_entry_size(GetParam());
  auto cq = make_cq(GetParam());
  write_n(*cq, 0, 1);
  // Room for several entries; only the first may be touched.
  std::vector<unsigned char> buf(4 * size + 64, kCanary);
  Result<size_t> r = cq->read(buf.data(), 1, nullptr);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(*r, 1u);
  void* ctx = nullptr;
  std::memcpy(&ctx, buf.data(), sizeof(ctx));
  EXPECT_EQ(ctx, completion(0).op_context);
  for (size_t i = size; i < buf.size(); ++i) {
    ASSERT_EQ(buf[i], kCanary) << "byte " << i << " written; entry size " << size;
  }
}

TEST_P(CqReadFormat, BatchWritesOnlyTheEntriesItReturns) {
  const size_t size = cq_entry_size(GetParam());
  auto cq = make_cq(GetParam());
  write_n(*cq, 0, 2);
  std::vector<unsigned char> buf(5 * size, kCanary);
  Result<size_t> r = cq->read(buf.data(), 5, nullptr);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(*r, 2u);
  for (size_t i = 2 * size; i < buf.size(); ++i) {
    ASSERT_EQ(buf[i], kCanary) << "byte " << i << " written; entry size " << size;
  }
  // Entries are packed at the format's stride.
  void* ctx = nullptr;
  std::memcpy(&ctx, buf.data() + size, sizeof(ctx));
  EXPECT_EQ(ctx, completion(1).op_context);
}

INSTANTIATE_TEST_SUITE_P(AllFormats, CqReadFormat,
                         ::testing::Values(CqFormat::kContext, CqFormat::kMsg, CqFormat::kData,
                                           CqFormat::kTagged),
                         [](const ::testing::TestParamInfo<CqFormat>& info) {
                           switch (info.param) {
                             case CqFormat::kContext:
                               return "Context";
                             case CqFormat::kMsg:
                               return "Msg";
                             case CqFormat::kData:
                               return "Data";
                             case CqFormat::kTagged:
                               return "Tagged";
                           }
                           return "Unknown";
                         });

// ---------------------------------------------------------------------------------------------
// Counts, batching, ordering.

TEST(CqRead, ReturnsAgainWhenEmpty) {
  auto cq = make_cq(CqFormat::kContext);
  fi_cq_entry e[4];
  EXPECT_EQ(cq->read(e, 4, nullptr).status().code(), Code::kAgain);
}

TEST(CqRead, ReturnsAsManyEntriesAsAreReadyUpToCount) {
  auto cq = make_cq(CqFormat::kContext);
  write_n(*cq, 0, 5);
  Status s;
  auto first = read_context(*cq, 3, &s);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(first.size(), 3u);
  auto rest = read_context(*cq, 10, &s);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(rest.size(), 2u);
}

TEST(CqRead, ReadConsumesWhatItReturns) {
  auto cq = make_cq(CqFormat::kContext);
  write_n(*cq, 0, 3);
  Status s;
  EXPECT_EQ(read_context(*cq, 8, &s).size(), 3u);
  EXPECT_EQ(cq->pending(), 0u);
  fi_cq_entry e;
  EXPECT_EQ(cq->read(&e, 1, nullptr).status().code(), Code::kAgain);
}

TEST(CqRead, ReturnsEntriesInCompletionOrder) {
  auto cq = make_cq(CqFormat::kContext, 128);
  write_n(*cq, 0, 100);
  uint64_t next = 0;
  while (next < 100) {
    Status s;
    auto got = read_context(*cq, 7, &s);
    ASSERT_TRUE(s.ok()) << "after " << next;
    ASSERT_EQ(got.size(), std::min<size_t>(7, 100 - next));
    for (const fi_cq_entry& e : got) EXPECT_EQ(e.op_context, completion(next++).op_context);
  }
  fi_cq_entry e;
  EXPECT_EQ(cq->read(&e, 1, nullptr).status().code(), Code::kAgain);
}

TEST(CqRead, PreservesOrderAcrossRingWrapAround) {
  auto cq = make_cq(CqFormat::kTagged, 8);
  ASSERT_EQ(cq->capacity(), 8u);
  uint64_t written = 0;
  uint64_t read = 0;
  for (int round = 0; round < 50; ++round) {
    const uint64_t n = 1 + round % 8;  // up to a full ring
    write_n(*cq, written, n);
    written += n;
    fi_cq_tagged_entry e[8];
    Result<size_t> r = cq->read(e, 8, nullptr);
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(*r, n);
    for (size_t i = 0; i < *r; ++i) {
      const Completion c = completion(read++);
      EXPECT_EQ(e[i].op_context, c.op_context);
      EXPECT_EQ(e[i].tag, c.tag);
      EXPECT_EQ(e[i].len, c.len);
    }
  }
  EXPECT_EQ(read, written);
}

TEST(CqRead, ReservedButUncompletedOperationsDoNotBlockLaterWrites) {
  // A reservation holds a credit, not a slot: entries completed meanwhile are readable.
  auto cq = make_cq(CqFormat::kContext, 8);
  ASSERT_TRUE(cq->reserve().ok());
  write_n(*cq, 0, 2);
  Status s;
  auto got = read_context(*cq, 8, &s);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(got.size(), 2u);
  cq->complete(completion(2));
  got = read_context(*cq, 8, &s);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].op_context, completion(2).op_context);
}

// ---------------------------------------------------------------------------------------------
// Error entries and ordering.

TEST(CqRead, StopsBeforeFirstErrorEntry) {
  auto cq = make_cq(CqFormat::kContext);
  write_n(*cq, 0, 2);
  ASSERT_TRUE(cq->write_error(error_entry(2)).ok());
  write_n(*cq, 3, 2);
  Status s;
  auto got = read_context(*cq, 10, &s);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].op_context, completion(0).op_context);
  EXPECT_EQ(got[1].op_context, completion(1).op_context);
}

TEST(CqRead, ReturnsAvailWhenAnErrorEntryIsFirst) {
  auto cq = make_cq(CqFormat::kContext);
  ASSERT_TRUE(cq->write_error(error_entry(0)).ok());
  write_n(*cq, 1, 2);
  fi_cq_entry e[4];
  EXPECT_EQ(cq->read(e, 4, nullptr).status().code(), Code::kAvail);
  // Still there: reading again gives the same answer, nothing was consumed.
  EXPECT_EQ(cq->read(e, 4, nullptr).status().code(), Code::kAvail);
  EXPECT_EQ(cq->pending(), 3u);
}

TEST(CqRead, ReturnsAvailAfterTheEntriesBeforeAnErrorWereRead) {
  auto cq = make_cq(CqFormat::kContext);
  write_n(*cq, 0, 1);
  ASSERT_TRUE(cq->write_error(error_entry(1)).ok());
  Status s;
  EXPECT_EQ(read_context(*cq, 4, &s).size(), 1u);
  fi_cq_entry e[4];
  EXPECT_EQ(cq->read(e, 4, nullptr).status().code(), Code::kAvail);
}

TEST(CqRead, EntriesAfterAnErrorAreReadInOrderOnceTheErrorIsRead) {
  auto cq = make_cq(CqFormat::kContext);
  write_n(*cq, 0, 1);
  ASSERT_TRUE(cq->write_error(error_entry(1)).ok());
  ASSERT_TRUE(cq->write_error(error_entry(2)).ok());
  write_n(*cq, 3, 2);

  Status s;
  auto got = read_context(*cq, 8, &s);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].op_context, completion(0).op_context);

  for (uint64_t i = 1; i <= 2; ++i) {
    fi_cq_entry e[8];
    EXPECT_EQ(cq->read(e, 8, nullptr).status().code(), Code::kAvail);
    fi_cq_err_entry err{};
    Result<size_t> r = cq->read_error(&err, 0);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(err.op_context, completion(i).op_context);
  }

  got = read_context(*cq, 8, &s);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].op_context, completion(3).op_context);
  EXPECT_EQ(got[1].op_context, completion(4).op_context);
}

// ---------------------------------------------------------------------------------------------
// readfrom: source addresses.

TEST(CqReadFrom, SrcAddrIsTheSourceRecordedWithEachEntry) {
  auto cq = make_cq(CqFormat::kMsg);
  for (uint64_t i = 0; i < 4; ++i) {
    Completion c = completion(i);
    c.src_addr = 100 + i;
    ASSERT_TRUE(cq->write(c).ok());
  }
  fi_cq_msg_entry e[4];
  fi_addr_t src[4];
  std::fill(std::begin(src), std::end(src), kSentinelAddr);
  Result<size_t> r = cq->read(e, 4, src);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(*r, 4u);
  for (uint64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(src[i], 100 + i);
    EXPECT_EQ(e[i].op_context, completion(i).op_context);
  }
}

TEST(CqReadFrom, SrcAddrIsNotAvailWhenTheProducerSetNone) {
  auto cq = make_cq(CqFormat::kContext);
  write_n(*cq, 0, 3);  // Completion::src_addr left at its default
  fi_cq_entry e[3];
  fi_addr_t src[3];
  std::fill(std::begin(src), std::end(src), kSentinelAddr);
  Result<size_t> r = cq->read(e, 3, src);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(*r, 3u);
  for (fi_addr_t a : src) EXPECT_EQ(a, FI_ADDR_NOTAVAIL);
}

TEST(CqReadFrom, SrcAddrIsWrittenForEveryReturnedEntryKnownOrNot) {
  auto cq = make_cq(CqFormat::kData);
  for (uint64_t i = 0; i < 6; ++i) {
    Completion c = completion(i);
    if (i % 2 == 1) c.src_addr = 40 + i;
    ASSERT_TRUE(cq->write(c).ok());
  }
  fi_cq_data_entry e[6];
  fi_addr_t src[6];
  std::fill(std::begin(src), std::end(src), kSentinelAddr);
  // Two batches: the second must index src_addr from its own start.
  Result<size_t> r = cq->read(e, 4, src);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(*r, 4u);
  EXPECT_EQ(src[0], FI_ADDR_NOTAVAIL);
  EXPECT_EQ(src[1], 41u);
  EXPECT_EQ(src[2], FI_ADDR_NOTAVAIL);
  EXPECT_EQ(src[3], 43u);
  std::fill(std::begin(src), std::end(src), kSentinelAddr);
  r = cq->read(e, 6, src);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(*r, 2u);
  EXPECT_EQ(src[0], FI_ADDR_NOTAVAIL);
  EXPECT_EQ(src[1], 45u);
}

TEST(CqReadFrom, SrcAddrFollowsEntriesAcrossAnErrorEntry) {
  auto cq = make_cq(CqFormat::kContext);
  Completion a = completion(0);
  a.src_addr = 7;
  ASSERT_TRUE(cq->write(a).ok());
  ASSERT_TRUE(cq->write_error(error_entry(1)).ok());
  Completion b = completion(2);
  b.src_addr = 9;
  ASSERT_TRUE(cq->write(b).ok());

  fi_cq_entry e[4];
  fi_addr_t src[4];
  std::fill(std::begin(src), std::end(src), kSentinelAddr);
  Result<size_t> r = cq->read(e, 4, src);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(*r, 1u);
  EXPECT_EQ(src[0], 7u);
  fi_cq_err_entry err{};
  ASSERT_TRUE(cq->read_error(&err, 0).ok());
  std::fill(std::begin(src), std::end(src), kSentinelAddr);
  r = cq->read(e, 4, src);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(*r, 1u);
  EXPECT_EQ(src[0], 9u);
  EXPECT_EQ(e[0].op_context, b.op_context);
}

// ---------------------------------------------------------------------------------------------
// Misuse.

// fi_cq(3) lets a read of nothing drive progress: it reads nothing and tells what waits.
TEST(CqRead, ZeroCountReadsNothingAndSaysACompletionIsReady) {
  auto cq = make_cq(CqFormat::kContext);
  write_n(*cq, 0, 2);
  fi_cq_entry e[2];
  Result<size_t> r = cq->read(e, 0, nullptr);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value(), 0u);
  EXPECT_EQ(cq->read(nullptr, 0, nullptr).value(), 0u);
  // Nothing was consumed.
  EXPECT_EQ(cq->pending(), 2u);
}

TEST(CqRead, ZeroCountWithAnErrorAtTheHeadIsAvail) {
  auto cq = make_cq(CqFormat::kContext);
  ASSERT_TRUE(cq->write_error({.completion = {.op_context = nullptr}, .err = FI_EIO}).ok());
  EXPECT_EQ(cq->read(nullptr, 0, nullptr).status().code(), Code::kAvail);
  EXPECT_EQ(cq->pending(), 1u);
}

TEST(CqRead, NullBufIsInval) {
  auto cq = make_cq(CqFormat::kContext);
  write_n(*cq, 0, 2);
  fi_addr_t src[2];
  EXPECT_EQ(cq->read(nullptr, 2, nullptr).status().code(), Code::kInval);
  EXPECT_EQ(cq->read(nullptr, 2, src).status().code(), Code::kInval);
  EXPECT_EQ(cq->pending(), 2u);
  Status s;
  EXPECT_EQ(read_context(*cq, 2, &s).size(), 2u);
}

TEST(CqRead, ZeroCountOnAnEmptyQueueIsAgain) {
  auto cq = make_cq(CqFormat::kContext);
  fi_cq_entry e;
  EXPECT_EQ(cq->read(&e, 0, nullptr).status().code(), Code::kAgain);
  EXPECT_EQ(cq->read(nullptr, 0, nullptr).status().code(), Code::kAgain);
  EXPECT_EQ(cq->read(nullptr, 1, nullptr).status().code(), Code::kInval);
}

TEST(CqCreate, ZeroSizeIsInval) {
  CqConfig config;
  config.size = 0;
  EXPECT_EQ(CompletionQueue::create(config).status().code(), Code::kInval);
}

}  // namespace
}  // namespace fabq::core
