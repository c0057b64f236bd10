// EventQueue::write_leaving() and write_error_leaving(): the event of an operation its producer
// can still refuse or undo (a connection request, a memory registration with FI_REG_MR, a
// multicast join) is refused with kAgain by a queue without room, instead of overrunning it
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

TEST(EqRefusable, AnEventOrErrorThatFindsTheQueueFullIsAgainAndTheQueueStaysUsable) {
  auto q = make_queue(4);
  for (uint64_t i = 0; i < q->capacity(); ++i) ASSERT_TRUE(put(*q, i).ok());
  const uint64_t v = 7;
  EXPECT_EQ(q->write_leaving(0, FI_NOTIFY, &v, sizeof(v)).status().code(), Code::kAgain);
  EXPECT_EQ(q->write_error_leaving(0, EqError{.fid = &g_owner, .err = FI_EIO}).code(),
            Code::kAgain);
  EXPECT_FALSE(q->overrun()) << "a refused event must not overrun the queue";
  EXPECT_EQ(take(*q), 0u);
  ASSERT_TRUE(
      q->write_error_leaving(0, EqError{.fid = &g_owner, .err = FI_EIO, .prov_errno = 3}).ok())
      << "room again once a reader consumed an event";
  for (uint64_t i = 1; i < q->capacity(); ++i) EXPECT_EQ(take(*q), i);
  fi_eq_err_entry err{};
  ASSERT_TRUE(q->read_error(&err, 0).ok());
  EXPECT_EQ(err.err, FI_EIO);
  EXPECT_EQ(err.prov_errno, 3);
}

TEST(EqRefusable, TheRoomAskedToBeLeftIsLeft) {
  auto q = make_queue(4);
  for (uint64_t i = 0; i + 2 < q->capacity(); ++i) ASSERT_TRUE(put(*q, i).ok());
  const uint64_t v = 1;
  EXPECT_EQ(q->write_leaving(2, FI_NOTIFY, &v, sizeof(v)).status().code(), Code::kAgain);
  EXPECT_EQ(q->write_error_leaving(2, EqError{.err = FI_EIO}).code(), Code::kAgain);
  EXPECT_TRUE(q->write_error_leaving(1, EqError{.err = FI_EIO}).ok());
  EXPECT_TRUE(q->write_leaving(0, FI_NOTIFY, &v, sizeof(v)).ok());
  EXPECT_FALSE(q->overrun());
}

TEST(EqRefusable, AnOverrunQueueRefusesWithOverrunAndBadArgumentsWithInval) {
  auto q = make_queue(2);
  EXPECT_EQ(q->write_error_leaving(0, EqError{.err = 0}).code(), Code::kInval);
  for (uint64_t i = 0; i <= q->capacity(); ++i) (void)put(*q, i);
  ASSERT_TRUE(q->overrun());
  const uint64_t v = 1;
  EXPECT_EQ(q->write_leaving(0, FI_NOTIFY, &v, sizeof(v)).status().code(), Code::kOverrun);
  EXPECT_EQ(q->write_error_leaving(0, EqError{.err = FI_EIO}).code(), Code::kOverrun);
}

}  // namespace
}  // namespace fabq::core
