// Misuse of the EQ / CQ / wait-set API through libfabric: every call here breaks a rule of
// fi_eq(3), fi_cq(3), fi_poll(3) or fi_fabq(7) and must come back with the documented negative
// error, without crashing, hanging or changing the object. Every blocking call is bounded.
//
// Wrong-class fids. libfabric's inline wrappers (fi_eq_read, fi_cq_read, ...) dispatch through
// the ops table of the object they are given, so `fi_eq_read((fid_eq*)cq, ...)` never reaches
// fabq's EQ code at all: it calls the CQ's `read` through a function pointer of another type
// (undefined behaviour that no provider can detect). What a provider can and must check is a
// foreign or wrong-class fid reaching one of its entry points, which happens when an
// application mixes objects up in the ops tables (`eq->ops->read(cq-as-eq, ...)`, exactly what
// fi_eq_read expands to with the tables crossed), or passes a fid where another class is
// expected: attr->wait_set, fi_trywait's array, fi_poll_add.
#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <thread>

#include "fabq_fixture.h"

namespace fabq::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr auto kHang = std::chrono::seconds(5);

milliseconds since(Clock::time_point t0) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - t0);
}

constexpr ssize_t kEntrySize = static_cast<ssize_t>(sizeof(fi_eq_entry));

fi_eq_attr eq_attr(uint64_t flags = FI_WRITE, enum fi_wait_obj wait = FI_WAIT_NONE,
                   size_t size = 0) {
  fi_eq_attr attr{};
  attr.flags = flags;
  attr.wait_obj = wait;
  attr.size = size;
  return attr;
}

fi_cq_attr cq_attr(enum fi_wait_obj wait = FI_WAIT_NONE) {
  fi_cq_attr attr{};
  attr.format = FI_CQ_FORMAT_CONTEXT;
  attr.wait_obj = wait;
  return attr;
}

using EntryBuf = std::array<fi_cq_tagged_entry, 4>;

class Misuse : public FabqTest {
 protected:
  void TearDown() override {
    if (cq_ != nullptr) {
      EXPECT_EQ(fi_close(&cq_->fid), 0);
    }
    if (eq_ != nullptr) {
      EXPECT_EQ(fi_close(&eq_->fid), 0);
    }
    FabqTest::TearDown();
  }
  void open_both(enum fi_wait_obj eq_wait = FI_WAIT_NONE, enum fi_wait_obj cq_wait = FI_WAIT_NONE) {
    eq_ = open_eq(eq_attr(FI_WRITE, eq_wait));
    cq_ = open_cq(cq_attr(cq_wait));
    ASSERT_NE(eq_, nullptr);
    ASSERT_NE(cq_, nullptr);
  }
  ssize_t write_entry(uint64_t data) {
    fi_eq_entry e{};
    e.data = data;
    return fi_eq_write(eq_, FI_NOTIFY, &e, sizeof(e), 0);
  }
  void expect_entry(uint64_t data) {
    uint32_t event = 0;
    fi_eq_entry e{};
    ASSERT_EQ(fi_eq_read(eq_, &event, &e, sizeof(e), 0), kEntrySize);
    EXPECT_EQ(e.data, data);
  }
  void expect_eq_empty() {
    uint32_t event = 0;
    fi_eq_entry e{};
    EXPECT_EQ(fi_eq_read(eq_, &event, &e, sizeof(e), 0), -FI_EAGAIN);
  }
  // The CQ still works: an empty read is -FI_EAGAIN.
  void expect_cq_usable(fid_cq* cq) {
    EntryBuf buf{};
    EXPECT_EQ(fi_cq_read(cq, buf.data(), 1), -FI_EAGAIN);
  }

  fid_eq* eq_ = nullptr;
  fid_cq* cq_ = nullptr;
};

// --- NULL attr / NULL output pointer ------------------------------------------------------

TEST_F(Misuse, EqOpenWithNullAttrIsInvalid) {
  fid_eq* eq = reinterpret_cast<fid_eq*>(0x1);
  EXPECT_EQ(fi_eq_open(fabric_, nullptr, &eq, nullptr), -FI_EINVAL);
  EXPECT_EQ(eq, nullptr);
}

TEST_F(Misuse, EqOpenWithNullOutputIsInvalid) {
  fi_eq_attr attr = eq_attr();
  EXPECT_EQ(fi_eq_open(fabric_, &attr, nullptr, nullptr), -FI_EINVAL);
}

TEST_F(Misuse, CqOpenWithNullAttrIsInvalid) {
  fid_cq* cq = reinterpret_cast<fid_cq*>(0x1);
  EXPECT_EQ(fi_cq_open(domain_, nullptr, &cq, nullptr), -FI_EINVAL);
  EXPECT_EQ(cq, nullptr);
}

TEST_F(Misuse, CqOpenWithNullOutputIsInvalid) {
  fi_cq_attr attr = cq_attr();
  EXPECT_EQ(fi_cq_open(domain_, &attr, nullptr, nullptr), -FI_EINVAL);
}

TEST_F(Misuse, WaitOpenWithNullAttrOrOutputIsInvalid) {
  fid_wait* ws = reinterpret_cast<fid_wait*>(0x1);
  EXPECT_EQ(fi_wait_open(fabric_, nullptr, &ws), -FI_EINVAL);
  EXPECT_EQ(ws, nullptr);
  fi_wait_attr attr{};
  attr.wait_obj = FI_WAIT_UNSPEC;
  EXPECT_EQ(fi_wait_open(fabric_, &attr, nullptr), -FI_EINVAL);
}

// A C application can store any int in an enum field; the test stores it with memcpy so that
// it never forms an out-of-range C++ enum value itself (the UBSan build checks the provider).
TEST_F(Misuse, WaitOpenWithOutOfRangeWaitObjectIsInvalid) {
  for (int wait : {99, -1}) {
    fi_wait_attr attr{};
    std::memcpy(&attr.wait_obj, &wait, sizeof(wait));
    fid_wait* ws = reinterpret_cast<fid_wait*>(0x1);
    EXPECT_EQ(fi_wait_open(fabric_, &attr, &ws), -FI_EINVAL) << wait;
    EXPECT_EQ(ws, nullptr);
  }
}

TEST_F(Misuse, PollOpenWithNullAttrOrOutputIsInvalid) {
  fid_poll* ps = reinterpret_cast<fid_poll*>(0x1);
  EXPECT_EQ(fi_poll_open(domain_, nullptr, &ps), -FI_EINVAL);
  EXPECT_EQ(ps, nullptr);
  fi_poll_attr attr{};
  EXPECT_EQ(fi_poll_open(domain_, &attr, nullptr), -FI_EINVAL);
}

// --- NULL buffers / bad lengths on the EQ -------------------------------------------------

TEST_F(Misuse, EqWriteWithNullBufferAndNonZeroLenIsInvalid) {
  eq_ = open_eq(eq_attr());
  ASSERT_NE(eq_, nullptr);
  EXPECT_EQ(fi_eq_write(eq_, FI_NOTIFY, nullptr, sizeof(fi_eq_entry), 0), -FI_EINVAL);
  EXPECT_EQ(fi_eq_write(eq_, FI_NOTIFY, nullptr, 1, 0), -FI_EINVAL);
  expect_eq_empty();
  EXPECT_EQ(write_entry(1), kEntrySize) << "the rejected writes must not overrun the EQ";
  expect_entry(1);
}

TEST_F(Misuse, EqWriteWithHugeLenIsInvalid) {
  eq_ = open_eq(eq_attr());
  ASSERT_NE(eq_, nullptr);
  fi_eq_entry e{};
  for (size_t len : {size_t{1} << 20, size_t{1} << 32, SIZE_MAX}) {
    EXPECT_EQ(fi_eq_write(eq_, FI_NOTIFY, &e, len, 0), -FI_EINVAL) << len;
  }
  expect_eq_empty();
  EXPECT_EQ(write_entry(2), kEntrySize);
  expect_entry(2);
}

TEST_F(Misuse, EqReadWithLenZeroAndNullBufferOnNonEmptyEqIsTooSmall) {
  eq_ = open_eq(eq_attr());
  ASSERT_NE(eq_, nullptr);
  ASSERT_EQ(write_entry(3), kEntrySize);
  uint32_t event = 0;
  EXPECT_EQ(fi_eq_read(eq_, &event, nullptr, 0, 0), -FI_ETOOSMALL);
  EXPECT_EQ(fi_eq_read(eq_, &event, nullptr, 0, FI_PEEK), -FI_ETOOSMALL);
  EXPECT_EQ(fi_eq_read(eq_, nullptr, nullptr, 0, 0), -FI_ETOOSMALL);
  expect_entry(3);
}

// fabq does not document a NULL buffer with a non-zero len; it must still fail cleanly (the
// buffer cannot hold the event: -FI_ETOOSMALL, or -FI_EINVAL) and consume nothing.
TEST_F(Misuse, EqReadWithNullBufferAndNonZeroLenFailsAndConsumesNothing) {
  eq_ = open_eq(eq_attr());
  ASSERT_NE(eq_, nullptr);
  ASSERT_EQ(write_entry(4), kEntrySize);
  uint32_t event = 0;
  const ssize_t rc = fi_eq_read(eq_, &event, nullptr, sizeof(fi_eq_entry), 0);
  EXPECT_TRUE(rc == -FI_ETOOSMALL || rc == -FI_EINVAL) << rc;
  expect_entry(4);
  // On an empty EQ: still an error, no crash.
  EXPECT_LT(fi_eq_read(eq_, &event, nullptr, sizeof(fi_eq_entry), 0), 0);
}

TEST_F(Misuse, EqSreadWithNullBufferOnNonEmptyEqIsTooSmallPromptly) {
  eq_ = open_eq(eq_attr(FI_WRITE, FI_WAIT_UNSPEC));
  ASSERT_NE(eq_, nullptr);
  ASSERT_EQ(write_entry(5), kEntrySize);
  uint32_t event = 0;
  const auto t0 = Clock::now();
  EXPECT_EQ(fi_eq_sread(eq_, &event, nullptr, 0, 10000, 0), -FI_ETOOSMALL);
  EXPECT_LT(since(t0), kHang);
  expect_entry(5);
}

TEST_F(Misuse, EqSreadWithNegativeTimeoutReturnsAQueuedEvent) {
  eq_ = open_eq(eq_attr(FI_WRITE, FI_WAIT_UNSPEC));
  ASSERT_NE(eq_, nullptr);
  ASSERT_EQ(write_entry(6), kEntrySize);
  uint32_t event = 0;
  fi_eq_entry e{};
  const auto t0 = Clock::now();
  EXPECT_EQ(fi_eq_sread(eq_, &event, &e, sizeof(e), -5, 0), kEntrySize);
  EXPECT_LT(since(t0), kHang);
  EXPECT_EQ(e.data, 6u);
}

TEST_F(Misuse, EqReaderrWithNullBufferIsInvalid) {
  eq_ = open_eq(eq_attr(FI_WRITE, FI_WAIT_NONE, /*size=*/1));
  ASSERT_NE(eq_, nullptr);
  EXPECT_EQ(fi_eq_readerr(eq_, nullptr, 0), -FI_EINVAL);
  // Also with the overrun entry waiting, which must survive the bad call.
  ASSERT_EQ(write_entry(0), kEntrySize);
  size_t stored = 1;
  while (write_entry(stored) == kEntrySize && stored < 4096) ++stored;
  ASSERT_EQ(write_entry(9999), -FI_EOVERRUN);
  for (uint64_t i = 0; i < stored; ++i) expect_entry(i);
  EXPECT_EQ(fi_eq_readerr(eq_, nullptr, 0), -FI_EINVAL);
  fi_eq_err_entry err{};
  EXPECT_EQ(fi_eq_readerr(eq_, &err, 0), static_cast<ssize_t>(sizeof(err)));
  EXPECT_EQ(err.err, FI_EOVERRUN);
}

TEST_F(Misuse, EqReaderrWithBadFlagsIsBadFlags) {
  eq_ = open_eq(eq_attr());
  ASSERT_NE(eq_, nullptr);
  fi_eq_err_entry err{};
  EXPECT_EQ(fi_eq_readerr(eq_, &err, FI_SEND), -FI_EBADFLAGS);
}

TEST_F(Misuse, StrerrorWithNullBufferAndNonZeroLenReturnsAString) {
  open_both();
  EXPECT_NE(fi_eq_strerror(eq_, FI_EOVERRUN, nullptr, nullptr, 100), nullptr);
  EXPECT_NE(fi_cq_strerror(cq_, FI_EOVERRUN, nullptr, nullptr, 100), nullptr);
  EXPECT_NE(fi_eq_strerror(eq_, 77777, nullptr, nullptr, SIZE_MAX), nullptr);
  EXPECT_NE(fi_cq_strerror(cq_, -1, nullptr, nullptr, SIZE_MAX), nullptr);
}

// --- NULL buffers / counts on the CQ ------------------------------------------------------

TEST_F(Misuse, CqReadWithNullBufferIsInvalid) {
  cq_ = open_cq(cq_attr());
  ASSERT_NE(cq_, nullptr);
  fi_addr_t src[4] = {};
  EXPECT_EQ(fi_cq_read(cq_, nullptr, 4), -FI_EINVAL);
  EXPECT_EQ(fi_cq_readfrom(cq_, nullptr, 4, src), -FI_EINVAL);
  expect_cq_usable(cq_);
}

TEST_F(Misuse, CqReadWithHugeCountOnEmptyCqIsAgainAndWritesNothing) {
  cq_ = open_cq(cq_attr());
  ASSERT_NE(cq_, nullptr);
  std::array<unsigned char, 64> buf;
  buf.fill(0x3C);
  for (size_t count : {SIZE_MAX, static_cast<size_t>(-1) / 2, size_t{1} << 40}) {
    EXPECT_EQ(fi_cq_read(cq_, buf.data(), count), -FI_EAGAIN) << count;
    EXPECT_EQ(fi_cq_readfrom(cq_, buf.data(), count, nullptr), -FI_EAGAIN) << count;
  }
  for (unsigned char c : buf) ASSERT_EQ(c, 0x3C);
}

TEST_F(Misuse, CqReaderrWithNullBufferIsInvalid) {
  cq_ = open_cq(cq_attr());
  ASSERT_NE(cq_, nullptr);
  EXPECT_EQ(fi_cq_readerr(cq_, nullptr, 0), -FI_EINVAL);
}

TEST_F(Misuse, CqReaderrWithBadFlagsIsBadFlags) {
  cq_ = open_cq(cq_attr());
  ASSERT_NE(cq_, nullptr);
  fi_cq_err_entry err{};
  EXPECT_EQ(fi_cq_readerr(cq_, &err, FI_SEND), -FI_EBADFLAGS);
}

TEST_F(Misuse, CqSreadWithNullBufferOrZeroCountIsInvalidPromptly) {
  cq_ = open_cq(cq_attr(FI_WAIT_UNSPEC));
  ASSERT_NE(cq_, nullptr);
  EntryBuf buf{};
  const auto t0 = Clock::now();
  EXPECT_EQ(fi_cq_sread(cq_, nullptr, 1, nullptr, 10000), -FI_EINVAL);
  EXPECT_EQ(fi_cq_sread(cq_, buf.data(), 0, nullptr, 10000), -FI_EINVAL);
  EXPECT_EQ(fi_cq_sreadfrom(cq_, nullptr, 1, nullptr, nullptr, 10000), -FI_EINVAL);
  EXPECT_LT(since(t0), kHang);
}

TEST_F(Misuse, CqSreadWithHugeCountTimesOut) {
  cq_ = open_cq(cq_attr(FI_WAIT_UNSPEC));
  ASSERT_NE(cq_, nullptr);
  EntryBuf buf{};
  const auto t0 = Clock::now();
  EXPECT_EQ(fi_cq_sread(cq_, buf.data(), SIZE_MAX, nullptr, 0), -FI_EAGAIN);
  EXPECT_EQ(fi_cq_sread(cq_, buf.data(), SIZE_MAX, nullptr, 20), -FI_EAGAIN);
  EXPECT_LT(since(t0), kHang);
}

TEST_F(Misuse, CqSreadWithHugeThresholdTimesOut) {
  fi_cq_attr attr = cq_attr(FI_WAIT_UNSPEC);
  attr.wait_cond = FI_CQ_COND_THRESHOLD;
  cq_ = open_cq(attr);
  ASSERT_NE(cq_, nullptr);
  EntryBuf buf{};
  const auto t0 = Clock::now();
  EXPECT_EQ(fi_cq_sread(cq_, buf.data(), 4, reinterpret_cast<void*>(UINTPTR_MAX), 50), -FI_EAGAIN);
  const auto elapsed = since(t0);
  EXPECT_GE(elapsed, milliseconds(50));
  EXPECT_LT(elapsed, kHang);
}

// --- fi_control ---------------------------------------------------------------------------

TEST_F(Misuse, ControlWithNullArgumentIsInvalid) {
  open_both(FI_WAIT_FD, FI_WAIT_FD);
  EXPECT_EQ(fi_control(&eq_->fid, FI_GETWAIT, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_control(&eq_->fid, FI_GETWAITOBJ, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_control(&cq_->fid, FI_GETWAIT, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_control(&cq_->fid, FI_GETWAITOBJ, nullptr), -FI_EINVAL);
}

TEST_F(Misuse, ControlWithUnknownCommandFails) {
  open_both(FI_WAIT_FD, FI_WAIT_FD);
  int arg = 0;
  EXPECT_LT(fi_control(&eq_->fid, 0x7fff, &arg), 0);
  EXPECT_LT(fi_control(&cq_->fid, 0x7fff, &arg), 0);
}

TEST_F(Misuse, GetWaitPollFdWithTooFewEntriesIsTooSmall) {
  eq_ = open_eq(eq_attr(FI_WRITE, FI_WAIT_POLLFD));
  ASSERT_NE(eq_, nullptr);
  fi_wait_pollfd pfd{};
  pfd.nfds = 0;
  pfd.fd = nullptr;
  EXPECT_EQ(fi_control(&eq_->fid, FI_GETWAIT, &pfd), -FI_ETOOSMALL);
  EXPECT_GE(pfd.nfds, 1u) << "nfds reports how many entries are needed";
}

// --- fi_trywait ---------------------------------------------------------------------------

TEST_F(Misuse, TrywaitWithNullArrayAndPositiveCountIsInvalid) {
  EXPECT_EQ(fi_trywait(fabric_, nullptr, 1), -FI_EINVAL);
  EXPECT_EQ(fi_trywait(fabric_, nullptr, 1000), -FI_EINVAL);
}

TEST_F(Misuse, TrywaitWithNegativeCountIsInvalid) {
  eq_ = open_eq(eq_attr(FI_WRITE, FI_WAIT_FD));
  ASSERT_NE(eq_, nullptr);
  fid* fids[] = {&eq_->fid};
  EXPECT_EQ(fi_trywait(fabric_, fids, -1), -FI_EINVAL);
  EXPECT_EQ(fi_trywait(fabric_, fids, INT32_MIN), -FI_EINVAL);
}

TEST_F(Misuse, TrywaitOnWaitNoneIsNoSys) {
  open_both(FI_WAIT_NONE, FI_WAIT_NONE);
  fid* eqs[] = {&eq_->fid};
  EXPECT_EQ(fi_trywait(fabric_, eqs, 1), -FI_ENOSYS);
  fid* cqs[] = {&cq_->fid};
  EXPECT_EQ(fi_trywait(fabric_, cqs, 1), -FI_ENOSYS);
}

TEST_F(Misuse, TrywaitWithWrongClassOrNullFidIsInvalid) {
  eq_ = open_eq(eq_attr(FI_WRITE, FI_WAIT_FD));
  ASSERT_NE(eq_, nullptr);
  for (fid* bad : {&domain_->fid, &fabric_->fid, static_cast<fid*>(nullptr)}) {
    fid* fids[] = {&eq_->fid, bad};
    EXPECT_EQ(fi_trywait(fabric_, fids, 2), -FI_EINVAL);
  }
}

TEST_F(Misuse, TrywaitWithForeignFidIsInvalid) {
  // Looks like an EQ (right class) but is not one of fabq's.
  fi_ops foreign_ops{};
  foreign_ops.size = sizeof(foreign_ops);
  fid_eq fake{};
  fake.fid.fclass = FI_CLASS_EQ;
  fake.fid.ops = &foreign_ops;
  fid* fids[] = {&fake.fid};
  EXPECT_EQ(fi_trywait(fabric_, fids, 1), -FI_EINVAL);
}

// --- wrong-class fids where another class is expected -------------------------------------

TEST_F(Misuse, EqFidAsCqWaitSetIsInvalid) {
  eq_ = open_eq(eq_attr(FI_WRITE, FI_WAIT_FD));
  ASSERT_NE(eq_, nullptr);
  fi_cq_attr attr = cq_attr(FI_WAIT_SET);
  attr.wait_set = reinterpret_cast<fid_wait*>(eq_);
  fid_cq* cq = reinterpret_cast<fid_cq*>(0x1);
  EXPECT_EQ(fi_cq_open(domain_, &attr, &cq, nullptr), -FI_EINVAL);
  EXPECT_EQ(cq, nullptr);
}

TEST_F(Misuse, WrongClassWaitSetIsInvalidForEqAndCq) {
  open_both(FI_WAIT_FD, FI_WAIT_FD);
  fi_ops foreign_ops{};
  fid_wait fake{};
  fake.fid.fclass = FI_CLASS_WAIT;
  fake.fid.ops = &foreign_ops;
  for (fid_wait* bad : {reinterpret_cast<fid_wait*>(eq_), reinterpret_cast<fid_wait*>(cq_),
                        reinterpret_cast<fid_wait*>(domain_), reinterpret_cast<fid_wait*>(fabric_),
                        &fake, static_cast<fid_wait*>(nullptr)}) {
    fi_eq_attr ea = eq_attr(FI_WRITE, FI_WAIT_SET);
    ea.wait_set = bad;
    fid_eq* eq = reinterpret_cast<fid_eq*>(0x1);
    EXPECT_EQ(fi_eq_open(fabric_, &ea, &eq, nullptr), -FI_EINVAL);
    EXPECT_EQ(eq, nullptr);
    fi_cq_attr ca = cq_attr(FI_WAIT_SET);
    ca.wait_set = bad;
    fid_cq* cq = reinterpret_cast<fid_cq*>(0x1);
    EXPECT_EQ(fi_cq_open(domain_, &ca, &cq, nullptr), -FI_EINVAL);
    EXPECT_EQ(cq, nullptr);
  }
}

TEST_F(Misuse, EqFidAddedToPollSetIsInvalid) {
  eq_ = open_eq(eq_attr(FI_WRITE, FI_WAIT_FD));
  ASSERT_NE(eq_, nullptr);
  fi_poll_attr pattr{};
  fid_poll* ps = nullptr;
  ASSERT_EQ(fi_poll_open(domain_, &pattr, &ps), 0);
  EXPECT_EQ(fi_poll_add(ps, &eq_->fid, 0), -FI_EINVAL);
  EXPECT_EQ(fi_poll_add(ps, &domain_->fid, 0), -FI_EINVAL);
  void* ctx[4] = {};
  EXPECT_EQ(fi_poll(ps, ctx, 4), 0);
  EXPECT_EQ(fi_poll(ps, nullptr, 4), -FI_EINVAL);
  EXPECT_EQ(fi_poll(ps, ctx, 0), -FI_EINVAL);
  EXPECT_EQ(fi_poll(ps, ctx, -1), -FI_EINVAL);
  EXPECT_EQ(fi_close(&ps->fid), 0);
  // The EQ is unaffected: it can still be closed (TearDown).
}

TEST_F(Misuse, CqFidThroughEqOpsIsInvalid) {
  open_both(FI_WAIT_UNSPEC, FI_WAIT_UNSPEC);
  fid_eq* as_eq = reinterpret_cast<fid_eq*>(cq_);
  uint32_t event = 0;
  fi_eq_entry e{};
  fi_eq_err_entry err{};
  char text[32];
  const auto t0 = Clock::now();
  // What fi_eq_read(as_eq, ...) would do if as_eq carried the EQ ops table.
  EXPECT_EQ(eq_->ops->read(as_eq, &event, &e, sizeof(e), 0), -FI_EINVAL);
  EXPECT_EQ(eq_->ops->read(as_eq, &event, &e, sizeof(e), FI_PEEK), -FI_EINVAL);
  EXPECT_EQ(eq_->ops->readerr(as_eq, &err, 0), -FI_EINVAL);
  EXPECT_EQ(eq_->ops->write(as_eq, FI_NOTIFY, &e, sizeof(e), 0), -FI_EINVAL);
  EXPECT_EQ(eq_->ops->sread(as_eq, &event, &e, sizeof(e), 10000, 0), -FI_EINVAL);
  EXPECT_LT(since(t0), kHang);
  EXPECT_NE(eq_->ops->strerror(as_eq, FI_EOVERRUN, nullptr, text, sizeof(text)), nullptr);
  enum fi_wait_obj kind = FI_WAIT_NONE;
  EXPECT_EQ(eq_->fid.ops->control(&cq_->fid, FI_GETWAITOBJ, &kind), -FI_EINVAL);
  EXPECT_EQ(eq_->fid.ops->close(&cq_->fid), -FI_EINVAL);
  // Both objects are intact.
  expect_cq_usable(cq_);
  expect_eq_empty();
}

TEST_F(Misuse, EqFidThroughCqOpsIsInvalid) {
  open_both(FI_WAIT_UNSPEC, FI_WAIT_UNSPEC);
  ASSERT_EQ(write_entry(11), kEntrySize);
  fid_cq* as_cq = reinterpret_cast<fid_cq*>(eq_);
  EntryBuf buf{};
  fi_addr_t src[4] = {};
  fi_cq_err_entry err{};
  const auto t0 = Clock::now();
  EXPECT_EQ(cq_->ops->read(as_cq, buf.data(), 1), -FI_EINVAL);
  EXPECT_EQ(cq_->ops->readfrom(as_cq, buf.data(), 1, src), -FI_EINVAL);
  EXPECT_EQ(cq_->ops->readerr(as_cq, &err, 0), -FI_EINVAL);
  EXPECT_EQ(cq_->ops->sread(as_cq, buf.data(), 1, nullptr, 10000), -FI_EINVAL);
  EXPECT_EQ(cq_->ops->sreadfrom(as_cq, buf.data(), 1, src, nullptr, 10000), -FI_EINVAL);
  EXPECT_EQ(cq_->ops->signal(as_cq), -FI_EINVAL);
  EXPECT_LT(since(t0), kHang);
  enum fi_wait_obj kind = FI_WAIT_NONE;
  EXPECT_EQ(cq_->fid.ops->control(&eq_->fid, FI_GETWAITOBJ, &kind), -FI_EINVAL);
  EXPECT_EQ(cq_->fid.ops->close(&eq_->fid), -FI_EINVAL);
  expect_entry(11);  // the EQ's event was not touched
  expect_cq_usable(cq_);
}

TEST_F(Misuse, ForeignFidThroughEqAndCqOpsIsInvalid) {
  open_both();
  // Right class, wrong ops table: not one of fabq's objects.
  fi_ops foreign_ops{};
  fid_eq fake_eq{};
  fake_eq.fid.fclass = FI_CLASS_EQ;
  fake_eq.fid.ops = &foreign_ops;
  fake_eq.ops = eq_->ops;
  uint32_t event = 0;
  fi_eq_entry e{};
  EXPECT_EQ(fi_eq_read(&fake_eq, &event, &e, sizeof(e), 0), -FI_EINVAL);
  EXPECT_EQ(fi_eq_write(&fake_eq, FI_NOTIFY, &e, sizeof(e), 0), -FI_EINVAL);
  fid_cq fake_cq{};
  fake_cq.fid.fclass = FI_CLASS_CQ;
  fake_cq.fid.ops = &foreign_ops;
  fake_cq.ops = cq_->ops;
  EntryBuf buf{};
  EXPECT_EQ(fi_cq_read(&fake_cq, buf.data(), 1), -FI_EINVAL);
  EXPECT_EQ(fi_cq_signal(&fake_cq), -FI_EINVAL);
}

TEST_F(Misuse, WrongClassParentThroughFabricAndDomainOpsIsInvalid) {
  // What fi_eq_open / fi_wait_open / fi_trywait / fi_cq_open would do with a fid of another
  // class that carried the right ops table.
  fi_eq_attr ea = eq_attr();
  fid_eq* eq = reinterpret_cast<fid_eq*>(0x1);
  EXPECT_EQ(fabric_->ops->eq_open(reinterpret_cast<fid_fabric*>(domain_), &ea, &eq, nullptr),
            -FI_EINVAL);
  EXPECT_EQ(eq, nullptr);
  fi_wait_attr wa{};
  wa.wait_obj = FI_WAIT_UNSPEC;
  fid_wait* ws = reinterpret_cast<fid_wait*>(0x1);
  EXPECT_EQ(fabric_->ops->wait_open(reinterpret_cast<fid_fabric*>(domain_), &wa, &ws), -FI_EINVAL);
  EXPECT_EQ(ws, nullptr);
  EXPECT_EQ(fabric_->ops->trywait(reinterpret_cast<fid_fabric*>(domain_), nullptr, 0), -FI_EINVAL);
  fi_cq_attr ca = cq_attr();
  fid_cq* cq = reinterpret_cast<fid_cq*>(0x1);
  EXPECT_EQ(domain_->ops->cq_open(reinterpret_cast<fid_domain*>(fabric_), &ca, &cq, nullptr),
            -FI_EINVAL);
  EXPECT_EQ(cq, nullptr);
}

// --- closing in the wrong order -----------------------------------------------------------

TEST_F(Misuse, ClosingAWaitSetWithAMemberIsBusy) {
  fi_wait_attr wa{};
  wa.wait_obj = FI_WAIT_UNSPEC;
  fid_wait* ws = nullptr;
  ASSERT_EQ(fi_wait_open(fabric_, &wa, &ws), 0);
  fi_cq_attr ca = cq_attr(FI_WAIT_SET);
  ca.wait_set = ws;
  fid_cq* cq = open_cq(ca);
  ASSERT_NE(cq, nullptr);
  fi_eq_attr ea = eq_attr(FI_WRITE, FI_WAIT_SET);
  ea.wait_set = ws;
  fid_eq* eq = open_eq(ea);
  ASSERT_NE(eq, nullptr);
  EXPECT_EQ(fi_close(&ws->fid), -FI_EBUSY);
  EXPECT_EQ(fi_close(&cq->fid), 0);
  EXPECT_EQ(fi_close(&ws->fid), -FI_EBUSY) << "the EQ is still a member";
  EXPECT_EQ(fi_close(&eq->fid), 0);
  EXPECT_EQ(fi_close(&ws->fid), 0);
}

TEST_F(Misuse, ClosingParentsWithChildrenIsBusy) {
  open_both();
  EXPECT_EQ(fi_close(&domain_->fid), -FI_EBUSY) << "a CQ is open on the domain";
  EXPECT_EQ(fi_close(&fabric_->fid), -FI_EBUSY) << "an EQ and a domain are open on the fabric";
  // Nothing was closed: both still work.
  expect_cq_usable(cq_);
  EXPECT_EQ(write_entry(12), kEntrySize);
  expect_entry(12);
}

}  // namespace
}  // namespace fabq::testing
