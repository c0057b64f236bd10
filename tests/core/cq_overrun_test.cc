// CompletionQueue overrun: entered only through enter_overrun() (fault injection); then the
// queue is dead as fi_cq(3) describes: new work is refused, outstanding work completes into
// nothing, readers drain what is stored and then see FI_EOVERRUN.
#include <gtest/gtest.h>
#include <rdma/fabric.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "core/cq.h"

namespace fabq::core {
namespace {

std::unique_ptr<CompletionQueue> make_cq(size_t size = 8, WaitKind wait = WaitKind::kNone) {
  CqConfig config;
  config.size = size;
  config.format = CqFormat::kMsg;
  config.wait = wait;
  auto r = CompletionQueue::create(config);
  EXPECT_TRUE(r.ok());
  return r.ok() ? std::move(r.value()) : nullptr;
}

Completion completion(uint64_t i) {
  Completion c;
  c.op_context = reinterpret_cast<void*>(0x8000 + i * 16);
  c.flags = FI_RECV | FI_MSG;
  c.len = 10 + i;
  return c;
}

CompletionError error_entry(uint64_t i) {
  CompletionError e;
  e.completion = completion(i);
  e.err = FI_ECANCELED;
  e.prov_errno = 3;
  return e;
}

TEST(CqOverrun, NeverHappensWithoutInjectionEvenWhenFull) {
  auto cq = make_cq(4);
  for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(cq->write(completion(i)).ok());
  for (int i = 0; i < 10; ++i) EXPECT_EQ(cq->write(completion(9)).code(), Code::kAgain);
  EXPECT_EQ(cq->reserve().code(), Code::kAgain);
  EXPECT_FALSE(cq->overrun());
  fi_cq_msg_entry e[8];
  Result<size_t> r = cq->read(e, 8, nullptr);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 4u);
  EXPECT_EQ(cq->read(e, 8, nullptr).status().code(), Code::kAgain);
  fi_cq_err_entry err{};
  EXPECT_EQ(cq->read_error(&err, 0).status().code(), Code::kAgain);
}

TEST(CqOverrun, EnterOverrunSetsTheOverrunState) {
  auto cq = make_cq();
  EXPECT_FALSE(cq->overrun());
  cq->enter_overrun();
  EXPECT_TRUE(cq->overrun());
}

TEST(CqOverrun, ReserveReturnsOverrun) {
  auto cq = make_cq();
  cq->enter_overrun();
  EXPECT_EQ(cq->reserve().code(), Code::kOverrun);
  EXPECT_EQ(cq->reserve(2).code(), Code::kOverrun);
}

TEST(CqOverrun, WriteReturnsOverrunAndStoresNothing) {
  auto cq = make_cq();
  cq->enter_overrun();
  EXPECT_EQ(cq->write(completion(0)).code(), Code::kOverrun);
  EXPECT_EQ(cq->write_error(error_entry(1)).code(), Code::kOverrun);
  EXPECT_EQ(cq->pending(), 0u);
  fi_cq_msg_entry e;
  EXPECT_EQ(cq->read(&e, 1, nullptr).status().code(), Code::kAvail);
}

TEST(CqOverrun, ReserveReturnsOverrunEvenWithCreditsFree) {
  auto cq = make_cq(8);
  ASSERT_TRUE(cq->write(completion(0)).ok());
  cq->enter_overrun();
  EXPECT_EQ(cq->reserve().code(), Code::kOverrun);
}

TEST(CqOverrun, CompleteOfAnOlderReservationStoresNothing) {
  auto cq = make_cq();
  ASSERT_TRUE(cq->write(completion(0)).ok());
  ASSERT_TRUE(cq->reserve(2).ok());
  cq->enter_overrun();
  cq->complete(completion(1));
  cq->complete_error(error_entry(2));
  EXPECT_EQ(cq->pending(), 1u);

  fi_cq_msg_entry e[4];
  Result<size_t> r = cq->read(e, 4, nullptr);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(*r, 1u);
  EXPECT_EQ(e[0].op_context, completion(0).op_context);
  EXPECT_EQ(cq->read(e, 4, nullptr).status().code(), Code::kAvail);
  fi_cq_err_entry err{};
  ASSERT_TRUE(cq->read_error(&err, 0).ok());
  EXPECT_EQ(err.err, FI_EOVERRUN) << "the completed error must not have been stored";
}

TEST(CqOverrun, ReadsDrainTheStoredEntriesInOrderThenReturnAvail) {
  auto cq = make_cq(8);
  for (uint64_t i = 0; i < 6; ++i) ASSERT_TRUE(cq->write(completion(i)).ok());
  cq->enter_overrun();
  fi_cq_msg_entry e[4];
  Result<size_t> r = cq->read(e, 4, nullptr);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(*r, 4u);
  for (uint64_t i = 0; i < 4; ++i) EXPECT_EQ(e[i].op_context, completion(i).op_context);
  r = cq->read(e, 4, nullptr);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(*r, 2u);
  for (uint64_t i = 0; i < 2; ++i) {
    EXPECT_EQ(e[i].op_context, completion(4 + i).op_context);
    EXPECT_EQ(e[i].len, completion(4 + i).len);
  }
  EXPECT_EQ(cq->read(e, 4, nullptr).status().code(), Code::kAvail);
  EXPECT_EQ(cq->read(e, 4, nullptr).status().code(), Code::kAvail);
}

TEST(CqOverrun, ReadErrorReturnsAgainWhileStoredEntriesRemain) {
  auto cq = make_cq();
  ASSERT_TRUE(cq->write(completion(0)).ok());
  cq->enter_overrun();
  fi_cq_err_entry err{};
  EXPECT_EQ(cq->read_error(&err, 0).status().code(), Code::kAgain);
  fi_cq_msg_entry e;
  ASSERT_TRUE(cq->read(&e, 1, nullptr).ok());
  ASSERT_TRUE(cq->read_error(&err, 0).ok());
  EXPECT_EQ(err.err, FI_EOVERRUN);
}

TEST(CqOverrun, ReadErrorYieldsEoverrunOnceDrained) {
  auto cq = make_cq();
  cq->enter_overrun();
  fi_cq_err_entry err{};
  Result<size_t> r = cq->read_error(&err, 0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 1u);
  EXPECT_EQ(err.err, FI_EOVERRUN);
}

TEST(CqOverrun, EoverrunIsStickyOnEveryLaterReadError) {
  auto cq = make_cq();
  cq->enter_overrun();
  for (int i = 0; i < 3; ++i) {
    fi_cq_err_entry err{};
    err.err = 0;
    Result<size_t> r = cq->read_error(&err, 0);
    ASSERT_TRUE(r.ok()) << i;
    EXPECT_EQ(err.err, FI_EOVERRUN) << i;
    fi_cq_msg_entry e;
    EXPECT_EQ(cq->read(&e, 1, nullptr).status().code(), Code::kAvail) << i;
  }
}

TEST(CqOverrun, StoredErrorsAreReadBeforeTheOverrunError) {
  auto cq = make_cq();
  ASSERT_TRUE(cq->write(completion(0)).ok());
  ASSERT_TRUE(cq->write_error(error_entry(1)).ok());
  ASSERT_TRUE(cq->write(completion(2)).ok());
  cq->enter_overrun();

  fi_cq_msg_entry e[4];
  Result<size_t> r = cq->read(e, 4, nullptr);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(*r, 1u);
  EXPECT_EQ(e[0].op_context, completion(0).op_context);
  EXPECT_EQ(cq->read(e, 4, nullptr).status().code(), Code::kAvail);
  fi_cq_err_entry err{};
  ASSERT_TRUE(cq->read_error(&err, 0).ok());
  EXPECT_EQ(err.err, FI_ECANCELED);
  EXPECT_EQ(err.op_context, completion(1).op_context);
  EXPECT_EQ(err.prov_errno, 3);
  // The stored error was consumed; the entry after it is still delivered.
  r = cq->read(e, 4, nullptr);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(*r, 1u);
  EXPECT_EQ(e[0].op_context, completion(2).op_context);
  ASSERT_TRUE(cq->read_error(&err, 0).ok());
  EXPECT_EQ(err.err, FI_EOVERRUN);
}

TEST(CqOverrun, ReservationsCompletedAfterOverrunDoNotResurrectTheQueue) {
  auto cq = make_cq(4);
  ASSERT_TRUE(cq->reserve(4).ok());
  cq->enter_overrun();
  for (uint64_t i = 0; i < 4; ++i) cq->complete(completion(i));
  EXPECT_EQ(cq->reserve().code(), Code::kOverrun);
  EXPECT_EQ(cq->write(completion(9)).code(), Code::kOverrun);
  EXPECT_TRUE(cq->overrun());
  fi_cq_msg_entry e;
  EXPECT_EQ(cq->read(&e, 1, nullptr).status().code(), Code::kAvail);
}

TEST(CqOverrun, SreadDrainsStoredEntriesThenReturnsAvailWithoutWaiting) {
  auto cq = make_cq(8, WaitKind::kUnspec);
  ASSERT_TRUE(cq->write(completion(0)).ok());
  ASSERT_TRUE(cq->write(completion(1)).ok());
  cq->enter_overrun();
  fi_cq_msg_entry e[8];
  // A threshold the dead queue can never reach does not hold the stored entries back until
  // the (long) timeout: the bound below only detects a wait for the whole timeout.
  const auto start = std::chrono::steady_clock::now();
  Result<size_t> r = cq->sread(e, 8, nullptr, 8, 10000);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(*r, 2u);
  EXPECT_EQ(e[0].op_context, completion(0).op_context);
  EXPECT_EQ(e[1].op_context, completion(1).op_context);
  EXPECT_EQ(cq->sread(e, 8, nullptr, 0, 10000).status().code(), Code::kAvail);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

}  // namespace
}  // namespace fabq::core
