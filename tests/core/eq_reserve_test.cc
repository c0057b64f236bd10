// EventQueue reservations: a producer that can still refuse the operation its event reports
// promises the event a slot first, so a full queue fails the operation instead of overrunning
// (fabq's contract: overrun happens only when an event truly cannot be stored).
#include <gtest/gtest.h>
#include <rdma/fi_eq.h>

#include <cstdint>
#include <memory>
#include <ostream>

#include "core/eq.h"

namespace fabq::core {

void PrintTo(Code c, std::ostream* os) {
  *os << "Code(" << static_cast<int>(c) << ")";
}

namespace {

fid g_owner{};

std::unique_ptr<EventQueue> make_queue(size_t size) {
  EqConfig config;
  config.size = size;
  config.owner = &g_owner;
  auto r = EventQueue::create(config);
  EXPECT_TRUE(r.ok());
  return r.ok() ? std::move(r.value()) : nullptr;
}

Status put(EventQueue& q, uint64_t v) {
  return q.write(FI_NOTIFY, &v, sizeof(v)).status();
}

uint64_t take(EventQueue& q) {
  uint64_t v = UINT64_MAX;
  EXPECT_TRUE(q.read(nullptr, &v, sizeof(v), 0).ok());
  return v;
}

TEST(EqReserve, ReservingInAFullQueueIsAgainAndLeavesItUsable) {
  auto q = make_queue(4);
  for (uint64_t i = 0; i < q->capacity(); ++i) ASSERT_TRUE(put(*q, i).ok());
  EXPECT_EQ(q->reserve().code(), Code::kAgain);
  EXPECT_FALSE(q->overrun()) << "a refused reservation must not overrun the queue";
  EXPECT_EQ(take(*q), 0u);
  EXPECT_TRUE(q->reserve().ok()) << "room again once a reader consumed an event";
  const uint64_t v = 7;
  EXPECT_TRUE(q->write_reserved(FI_NOTIFY, &v, sizeof(v)).ok());
  for (uint64_t i = 1; i < q->capacity(); ++i) EXPECT_EQ(take(*q), i);
  EXPECT_EQ(take(*q), 7u);
}

TEST(EqReserve, APromisedSlotIsNotTakenByAPlainWrite) {
  auto q = make_queue(4);
  for (uint64_t i = 0; i + 1 < q->capacity(); ++i) ASSERT_TRUE(put(*q, i).ok());
  ASSERT_TRUE(q->reserve().ok());
  EXPECT_EQ(put(*q, 99).code(), Code::kOverrun) << "the only free slot is promised";
  const uint64_t v = 5;
  EXPECT_TRUE(q->write_reserved(FI_NOTIFY, &v, sizeof(v)).ok())
      << "the promise holds, even in the overrun state";
  for (uint64_t i = 0; i + 1 < q->capacity(); ++i) EXPECT_EQ(take(*q), i);
  EXPECT_EQ(take(*q), 5u) << "stored ahead of the overrun entry";
  uint64_t v2 = 0;
  EXPECT_EQ(q->read(nullptr, &v2, sizeof(v2), 0).status().code(), Code::kAvail);
}

TEST(EqReserve, WriteLeavingCountsPromisedSlotsAsTaken) {
  auto q = make_queue(4);
  ASSERT_TRUE(q->reserve(q->capacity() - 1).ok());
  const uint64_t v = 1;
  EXPECT_EQ(q->write_leaving(1, FI_NOTIFY, &v, sizeof(v)).status().code(), Code::kAgain);
  EXPECT_TRUE(q->write_leaving(0, FI_NOTIFY, &v, sizeof(v)).ok());
  EXPECT_FALSE(q->overrun());
}

TEST(EqReserve, CancellingGivesTheSlotBack) {
  auto q = make_queue(4);
  ASSERT_TRUE(q->reserve(q->capacity()).ok());
  EXPECT_EQ(q->reserve().code(), Code::kAgain);
  q->cancel_reservation(q->capacity());
  for (uint64_t i = 0; i < q->capacity(); ++i) ASSERT_TRUE(put(*q, i).ok());
  EXPECT_FALSE(q->overrun());
}

TEST(EqReserve, MoreThanTheCapacityIsNeverGranted) {
  auto q = make_queue(4);
  EXPECT_EQ(q->reserve(q->capacity() + 1).code(), Code::kAgain);
  EXPECT_TRUE(q->reserve(q->capacity()).ok());
}

TEST(EqReserve, APendingReservationHoldsNoReaderBack) {
  auto q = make_queue(4);
  ASSERT_TRUE(q->reserve().ok());
  ASSERT_TRUE(put(*q, 1).ok());
  EXPECT_EQ(take(*q), 1u) << "events are stored in the order they are written";
  EqError e{.fid = &g_owner, .err = FI_EIO, .prov_errno = 3};
  ASSERT_TRUE(q->write_error_reserved(e).ok());
  fi_eq_err_entry err{};
  ASSERT_TRUE(q->read_error(&err, 0).ok());
  EXPECT_EQ(err.err, FI_EIO);
  EXPECT_EQ(err.prov_errno, 3);
}

TEST(EqReserve, BadArgumentsLeaveThePromiseStanding) {
  auto q = make_queue(2);
  ASSERT_TRUE(q->reserve().ok());
  EXPECT_EQ(q->write_error_reserved(EqError{.err = 0}).code(), Code::kInval);
  EXPECT_EQ(q->write_reserved(FI_NOTIFY, nullptr, 8).status().code(), Code::kInval);
  const uint64_t v = 3;
  ASSERT_TRUE(q->write_reserved(FI_NOTIFY, &v, sizeof(v)).ok());
  ASSERT_TRUE(put(*q, 4).ok());
  EXPECT_EQ(put(*q, 5).code(), Code::kOverrun) << "two slots: the reserved one, then one more";
}

TEST(EqReserve, OverrunQueueRefusesReservations) {
  auto q = make_queue(2);
  for (uint64_t i = 0; i <= q->capacity(); ++i) (void)put(*q, i);
  ASSERT_TRUE(q->overrun());
  EXPECT_EQ(q->reserve().code(), Code::kOverrun);
}

}  // namespace
}  // namespace fabq::core
