// EventQueue: writing and reading normal events (fi_eq_read / fi_eq_write semantics).
#include <gtest/gtest.h>
#include <rdma/fi_eq.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <ostream>
#include <vector>

#include "core/eq.h"

namespace fabq::core {

// Readable gtest output for status codes.
void PrintTo(Code c, std::ostream* os) {
  *os << "Code(" << static_cast<int>(c) << ")";
}

namespace {

std::unique_ptr<EventQueue> make_eq(size_t size) {
  EqConfig config;
  config.size = size;
  auto eq = EventQueue::create(config);
  EXPECT_TRUE(eq.ok());
  if (!eq.ok()) return nullptr;
  return std::move(eq.value());
}

std::vector<unsigned char> pattern(size_t n, unsigned char seed) {
  std::vector<unsigned char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>(seed + i * 7);
  return v;
}

// A read buffer large enough for any event, aligned for the entry structs.
struct alignas(8) Buf {
  unsigned char bytes[kEqMaxEventSize + 64];
};

TEST(EqCreate, ZeroSizeIsInval) {
  EqConfig config;
  config.size = 0;
  auto eq = EventQueue::create(config);
  EXPECT_FALSE(eq.ok());
  EXPECT_EQ(eq.status().code(), Code::kInval);
}

TEST(EqCreate, SizeIsRoundedUpToPowerOfTwo) {
  EXPECT_EQ(make_eq(5)->capacity(), 8u);
  EXPECT_EQ(make_eq(1)->capacity(), 1u);
  EXPECT_EQ(make_eq(8)->capacity(), 8u);
  EXPECT_EQ(make_eq(1000)->capacity(), 1024u);
}

TEST(EqCreate, SizeFiveHoldsEightEventsAndTheNinthOverruns) {
  auto eq = make_eq(5);
  for (uint32_t i = 0; i < 8; ++i) {
    auto w = eq->write(FI_NOTIFY, &i, sizeof(i));
    ASSERT_TRUE(w.ok()) << "write " << i << " failed: " << static_cast<int>(w.status().code());
  }
  EXPECT_FALSE(eq->overrun());
  auto w = eq->write(FI_NOTIFY, "x", 1);
  EXPECT_EQ(w.status().code(), Code::kOverrun);
  // All eight stored events are still there.
  for (uint32_t i = 0; i < 8; ++i) {
    uint32_t v = ~0u;
    auto r = eq->read(nullptr, &v, sizeof(v), 0);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(v, i);
  }
}

TEST(EqWrite, ReturnsTheNumberOfBytesWritten) {
  auto eq = make_eq(8);
  const auto data = pattern(100, 1);
  auto w = eq->write(FI_NOTIFY, data.data(), 37);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(*w, 37u);
  EXPECT_EQ(w.to_fi(), 37);
}

TEST(EqRead, EventsAreReturnedInWriteOrder) {
  auto eq = make_eq(16);
  for (uint32_t i = 0; i < 10; ++i) {
    const uint64_t v = 1000 + i;
    ASSERT_TRUE(eq->write(FI_NOTIFY + i, &v, sizeof(v)).ok());
  }
  for (uint32_t i = 0; i < 10; ++i) {
    uint32_t event = ~0u;
    uint64_t v = 0;
    auto r = eq->read(&event, &v, sizeof(v), 0);
    ASSERT_TRUE(r.ok()) << "read " << i;
    EXPECT_EQ(event, FI_NOTIFY + i);
    EXPECT_EQ(v, 1000u + i);
  }
}

TEST(EqRead, OneEventPerCallReturningItsByteCount) {
  auto eq = make_eq(8);
  const size_t lens[] = {1, 17, 100, 3};
  const auto data = pattern(128, 3);
  for (size_t len : lens) ASSERT_TRUE(eq->write(FI_NOTIFY, data.data(), len).ok());
  for (size_t len : lens) {
    Buf buf;
    std::memset(buf.bytes, 0x5A, sizeof(buf.bytes));
    auto r = eq->read(nullptr, buf.bytes, sizeof(buf.bytes), 0);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, len);
    EXPECT_EQ(std::memcmp(buf.bytes, data.data(), len), 0);
    // Only the event's bytes are written: the next event is not appended.
    for (size_t i = len; i < sizeof(buf.bytes); ++i) {
      ASSERT_EQ(buf.bytes[i], 0x5A) << "byte " << i << " after a " << len << "-byte event";
    }
  }
}

TEST(EqRead, ReportsTheEventIdGivenToWrite) {
  auto eq = make_eq(8);
  const uint32_t ids[] = {FI_CONNREQ,     FI_CONNECTED, FI_SHUTDOWN,
                          FI_MR_COMPLETE, FI_NOTIFY,    0xdeadbeefu};
  for (uint32_t id : ids) ASSERT_TRUE(eq->write(id, &id, sizeof(id)).ok());
  for (uint32_t id : ids) {
    uint32_t event = id ^ 0xffffffffu;
    uint32_t v = 0;
    ASSERT_TRUE(eq->read(&event, &v, sizeof(v), 0).ok());
    EXPECT_EQ(event, id);
    EXPECT_EQ(v, id);
  }
}

TEST(EqRead, PeekLeavesTheEventQueued) {
  auto eq = make_eq(8);
  const uint64_t a = 0x1111, b = 0x2222;
  ASSERT_TRUE(eq->write(FI_CONNECTED, &a, sizeof(a)).ok());
  ASSERT_TRUE(eq->write(FI_SHUTDOWN, &b, sizeof(b)).ok());
  for (int i = 0; i < 3; ++i) {
    uint32_t event = ~0u;
    uint64_t v = 0;
    auto r = eq->read(&event, &v, sizeof(v), FI_PEEK);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, sizeof(v));
    EXPECT_EQ(event, static_cast<uint32_t>(FI_CONNECTED));
    EXPECT_EQ(v, a);
  }
  uint32_t event = ~0u;
  uint64_t v = 0;
  ASSERT_TRUE(eq->read(&event, &v, sizeof(v), 0).ok());
  EXPECT_EQ(event, static_cast<uint32_t>(FI_CONNECTED));
  EXPECT_EQ(v, a);
  ASSERT_TRUE(eq->read(&event, &v, sizeof(v), 0).ok());
  EXPECT_EQ(event, static_cast<uint32_t>(FI_SHUTDOWN));
  EXPECT_EQ(v, b);
  EXPECT_EQ(eq->read(&event, &v, sizeof(v), FI_PEEK).status().code(), Code::kAgain);
}

TEST(EqRead, ShortBufferReturnsTooSmallAndKeepsEvent) {
  auto eq = make_eq(8);
  const auto data = pattern(64, 9);
  ASSERT_TRUE(eq->write(FI_CONNREQ, data.data(), data.size()).ok());
  unsigned char small[63];
  uint32_t event = ~0u;
  auto r = eq->read(&event, small, sizeof(small), 0);
  EXPECT_EQ(r.status().code(), Code::kTooSmall);
  EXPECT_EQ(r.to_fi(), -FI_ETOOSMALL);
  EXPECT_EQ(eq->pending(), 1u);
  // Asking again changes nothing.
  EXPECT_EQ(eq->read(&event, small, sizeof(small), 0).status().code(), Code::kTooSmall);
  EXPECT_EQ(eq->read(&event, small, 0, 0).status().code(), Code::kTooSmall);
}

TEST(EqRead, AfterTooSmallABigEnoughBufferReadsTheSameEvent) {
  auto eq = make_eq(8);
  const auto data = pattern(64, 9);
  const uint64_t next = 77;
  ASSERT_TRUE(eq->write(FI_CONNREQ, data.data(), data.size()).ok());
  ASSERT_TRUE(eq->write(FI_NOTIFY, &next, sizeof(next)).ok());
  unsigned char small[10];
  ASSERT_EQ(eq->read(nullptr, small, sizeof(small), 0).status().code(), Code::kTooSmall);
  unsigned char exact[64];
  uint32_t event = ~0u;
  auto r = eq->read(&event, exact, sizeof(exact), 0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 64u);
  EXPECT_EQ(event, static_cast<uint32_t>(FI_CONNREQ));
  EXPECT_EQ(std::memcmp(exact, data.data(), 64), 0);
  uint64_t v = 0;
  ASSERT_TRUE(eq->read(&event, &v, sizeof(v), 0).ok());
  EXPECT_EQ(event, static_cast<uint32_t>(FI_NOTIFY));
  EXPECT_EQ(v, next);
}

TEST(EqRead, PeekWithShortBufferReturnsTooSmall) {
  auto eq = make_eq(8);
  const uint64_t v = 5;
  ASSERT_TRUE(eq->write(FI_NOTIFY, &v, sizeof(v)).ok());
  uint32_t small = 0;
  EXPECT_EQ(eq->read(nullptr, &small, sizeof(small), FI_PEEK).status().code(), Code::kTooSmall);
  uint64_t out = 0;
  ASSERT_TRUE(eq->read(nullptr, &out, sizeof(out), 0).ok());
  EXPECT_EQ(out, v);
}

TEST(EqRead, NullBufferForNonEmptyEventIsTooSmall) {
  auto eq = make_eq(8);
  const uint32_t v = 5;
  ASSERT_TRUE(eq->write(FI_NOTIFY, &v, sizeof(v)).ok());
  EXPECT_EQ(eq->read(nullptr, nullptr, 0, 0).status().code(), Code::kTooSmall);
  EXPECT_EQ(eq->pending(), 1u);
}

TEST(EqRead, EmptyQueueReturnsAgain) {
  auto eq = make_eq(8);
  uint32_t event = ~0u;
  uint64_t v = 0;
  auto r = eq->read(&event, &v, sizeof(v), 0);
  EXPECT_EQ(r.status().code(), Code::kAgain);
  EXPECT_EQ(r.to_fi(), -FI_EAGAIN);
  EXPECT_EQ(eq->read(&event, &v, sizeof(v), FI_PEEK).status().code(), Code::kAgain);
  // Drained again after one event.
  ASSERT_TRUE(eq->write(FI_NOTIFY, &v, sizeof(v)).ok());
  ASSERT_TRUE(eq->read(&event, &v, sizeof(v), 0).ok());
  EXPECT_EQ(eq->read(&event, &v, sizeof(v), 0).status().code(), Code::kAgain);
}

TEST(EqRead, NullEventPointerIsAllowed) {
  auto eq = make_eq(8);
  const uint64_t v = 0xabcdef;
  ASSERT_TRUE(eq->write(FI_NOTIFY, &v, sizeof(v)).ok());
  uint64_t out = 0;
  auto r = eq->read(nullptr, &out, sizeof(out), 0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, sizeof(out));
  EXPECT_EQ(out, v);
  EXPECT_EQ(eq->pending(), 0u);
}

TEST(EqWrite, ZeroLengthEventIsReadBackWithZeroBytes) {
  auto eq = make_eq(8);
  auto w = eq->write(FI_SHUTDOWN, nullptr, 0);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(*w, 0u);
  uint32_t event = ~0u;
  auto r = eq->read(&event, nullptr, 0, 0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 0u);
  EXPECT_EQ(event, static_cast<uint32_t>(FI_SHUTDOWN));
  EXPECT_EQ(eq->read(&event, nullptr, 0, 0).status().code(), Code::kAgain);
}

TEST(EqWrite, ZeroLengthEventWithNonNullBufferReadsIntoAnyBuffer) {
  auto eq = make_eq(8);
  const char dummy = 'q';
  ASSERT_TRUE(eq->write(FI_NOTIFY, &dummy, 0).ok());
  unsigned char buf[16];
  std::memset(buf, 0x5A, sizeof(buf));
  uint32_t event = ~0u;
  auto r = eq->read(&event, buf, sizeof(buf), 0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 0u);
  EXPECT_EQ(event, static_cast<uint32_t>(FI_NOTIFY));
  for (unsigned char c : buf) EXPECT_EQ(c, 0x5A);
}

TEST(EqWrite, LongerThanMaxEventSizeIsInval) {
  auto eq = make_eq(8);
  const auto data = pattern(kEqMaxEventSize + 1, 5);
  auto w = eq->write(FI_NOTIFY, data.data(), data.size());
  EXPECT_EQ(w.status().code(), Code::kInval);
  EXPECT_EQ(w.to_fi(), -FI_EINVAL);
  // Nothing was queued, and the queue is not overrun.
  EXPECT_EQ(eq->pending(), 0u);
  EXPECT_FALSE(eq->overrun());
  Buf buf;
  EXPECT_EQ(eq->read(nullptr, buf.bytes, sizeof(buf.bytes), 0).status().code(), Code::kAgain);
}

TEST(EqWrite, MaxEventSizeRoundTrips) {
  auto eq = make_eq(8);
  const auto data = pattern(kEqMaxEventSize, 11);
  auto w = eq->write(FI_NOTIFY, data.data(), data.size());
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(*w, kEqMaxEventSize);
  Buf buf;
  auto r = eq->read(nullptr, buf.bytes, sizeof(buf.bytes), 0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, kEqMaxEventSize);
  EXPECT_EQ(std::memcmp(buf.bytes, data.data(), kEqMaxEventSize), 0);
}

TEST(EqWrite, NullBufferWithNonZeroLengthIsInval) {
  auto eq = make_eq(8);
  EXPECT_EQ(eq->write(FI_NOTIFY, nullptr, 8).status().code(), Code::kInval);
  EXPECT_EQ(eq->pending(), 0u);
}

// An fi_eq_cm_entry followed by `cm_len` bytes of connection data, as a CM event is written.
std::vector<unsigned char> cm_event(fid_t fid, fi_info* info, size_t cm_len, unsigned char seed) {
  std::vector<unsigned char> ev(sizeof(fi_eq_cm_entry) + cm_len);
  fi_eq_cm_entry entry{};
  entry.fid = fid;
  entry.info = info;
  std::memcpy(ev.data(), &entry, sizeof(entry));
  const auto data = pattern(cm_len, seed);
  if (cm_len > 0) std::memcpy(ev.data() + sizeof(entry), data.data(), cm_len);
  return ev;
}

TEST(EqRead, CmEntryWithMaximumConnectionDataRoundTrips) {
  auto eq = make_eq(4);
  fid fake_fid{};
  fi_info fake_info{};
  const auto ev = cm_event(&fake_fid, &fake_info, kCmDataSize, 21);
  auto w = eq->write(FI_CONNREQ, ev.data(), ev.size());
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(*w, sizeof(fi_eq_cm_entry) + kCmDataSize);

  Buf buf;
  uint32_t event = ~0u;
  auto r = eq->read(&event, buf.bytes, sizeof(buf.bytes), 0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, sizeof(fi_eq_cm_entry) + kCmDataSize);
  EXPECT_EQ(event, static_cast<uint32_t>(FI_CONNREQ));
  fi_eq_cm_entry entry;
  std::memcpy(&entry, buf.bytes, sizeof(entry));
  EXPECT_EQ(entry.fid, &fake_fid);
  EXPECT_EQ(entry.info, &fake_info);
  EXPECT_EQ(std::memcmp(buf.bytes + sizeof(entry), ev.data() + sizeof(entry), kCmDataSize), 0);
}

TEST(EqRead, CmEntriesWithDifferentConnectionDataSizesKeepTheirOwnSizes) {
  auto eq = make_eq(4);
  fid fid_a{}, fid_b{}, fid_c{};
  const auto a = cm_event(&fid_a, nullptr, 0, 1);
  const auto b = cm_event(&fid_b, nullptr, 13, 2);
  const auto c = cm_event(&fid_c, nullptr, 200, 3);
  ASSERT_TRUE(eq->write(FI_CONNECTED, a.data(), a.size()).ok());
  ASSERT_TRUE(eq->write(FI_CONNREQ, b.data(), b.size()).ok());
  ASSERT_TRUE(eq->write(FI_CONNREQ, c.data(), c.size()).ok());
  for (const auto* ev : {&a, &b, &c}) {
    Buf buf;
    auto r = eq->read(nullptr, buf.bytes, sizeof(buf.bytes), 0);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, ev->size());
    EXPECT_EQ(std::memcmp(buf.bytes, ev->data(), ev->size()), 0);
  }
}

TEST(EqRead, CmEntryIntoBufferWithoutRoomForConnectionDataIsTooSmall) {
  auto eq = make_eq(4);
  fid fake_fid{};
  const auto ev = cm_event(&fake_fid, nullptr, 16, 4);
  ASSERT_TRUE(eq->write(FI_CONNREQ, ev.data(), ev.size()).ok());
  fi_eq_cm_entry entry;  // no room for the 16 bytes of connection data
  EXPECT_EQ(eq->read(nullptr, &entry, sizeof(entry), 0).status().code(), Code::kTooSmall);
  Buf buf;
  auto r = eq->read(nullptr, buf.bytes, sizeof(buf.bytes), 0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, ev.size());
}

TEST(EqRead, ManyLapsAroundASmallQueueKeepOrder) {
  auto eq = make_eq(4);
  uint64_t next_write = 0;
  uint64_t next_read = 0;
  for (int round = 0; round < 500; ++round) {
    const int batch = 1 + round % 4;
    for (int i = 0; i < batch; ++i, ++next_write) {
      ASSERT_TRUE(eq->write(static_cast<uint32_t>(next_write), &next_write, 8).ok());
    }
    for (int i = 0; i < batch; ++i, ++next_read) {
      uint32_t event = ~0u;
      uint64_t v = ~uint64_t{0};
      ASSERT_TRUE(eq->read(&event, &v, sizeof(v), 0).ok());
      ASSERT_EQ(event, static_cast<uint32_t>(next_read));
      ASSERT_EQ(v, next_read);
    }
    uint64_t v = 0;
    ASSERT_EQ(eq->read(nullptr, &v, sizeof(v), 0).status().code(), Code::kAgain);
  }
  EXPECT_FALSE(eq->overrun());
}

}  // namespace
}  // namespace fabq::core
