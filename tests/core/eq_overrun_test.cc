// EventQueue: the overrun state machine (fi_eq(3): an EQ that cannot store an event is overrun).
#include <gtest/gtest.h>
#include <rdma/fi_eq.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <ostream>

#include "core/eq.h"

namespace fabq::core {

// Readable gtest output for status codes.
void PrintTo(Code c, std::ostream* os) {
  *os << "Code(" << static_cast<int>(c) << ")";
}

namespace {

struct Fixture {
  fid owner_fid{};
  std::unique_ptr<EventQueue> eq;

  explicit Fixture(size_t size, WaitKind wait = WaitKind::kNone, bool provider_owned = false) {
    EqConfig config;
    config.size = size;
    config.wait = wait;
    config.provider_owned_err_data = provider_owned;
    config.owner = &owner_fid;
    auto r = EventQueue::create(config);
    EXPECT_TRUE(r.ok());
    if (r.ok()) eq = std::move(r.value());
  }

  // Writes events 0..n-1 (id and 8-byte payload = index); all must succeed.
  void fill(uint64_t n, uint64_t first = 0) {
    for (uint64_t i = first; i < first + n; ++i) {
      auto w = eq->write(static_cast<uint32_t>(FI_NOTIFY + i), &i, sizeof(i));
      ASSERT_TRUE(w.ok()) << "write " << i;
    }
  }

  // Writes one more event into a full queue: it must overrun.
  void overrun() {
    const uint64_t v = 0xdead;
    auto w = eq->write(FI_NOTIFY, &v, sizeof(v));
    ASSERT_EQ(w.status().code(), Code::kOverrun);
    ASSERT_TRUE(eq->overrun());
  }

  Code read_code() {
    uint64_t v = 0;
    return eq->read(nullptr, &v, sizeof(v), 0).status().code();
  }
};

fi_eq_err_entry garbage_entry() {
  fi_eq_err_entry e;
  std::memset(&e, 0xA5, sizeof(e));
  e.err_data = nullptr;
  e.err_data_size = 0;
  return e;
}

TEST(EqOverrun, FullQueueThatIsReadBeforeTheNextWriteDoesNotOverrun) {
  Fixture f(4);
  f.fill(4);
  EXPECT_FALSE(f.eq->overrun());
  uint64_t v = 0;
  ASSERT_TRUE(f.eq->read(nullptr, &v, sizeof(v), 0).ok());
  const uint64_t w = 4;
  EXPECT_TRUE(f.eq->write(FI_NOTIFY, &w, sizeof(w)).ok());
  EXPECT_FALSE(f.eq->overrun());
}

TEST(EqOverrun, WriteThatCannotBeStoredFailsWithOverrun) {
  Fixture f(4);
  f.fill(4);
  EXPECT_FALSE(f.eq->overrun());
  const uint64_t v = 4;
  auto w = f.eq->write(FI_NOTIFY, &v, sizeof(v));
  EXPECT_EQ(w.status().code(), Code::kOverrun);
  EXPECT_EQ(w.to_fi(), -FI_EOVERRUN);
  EXPECT_TRUE(f.eq->overrun());
}

TEST(EqOverrun, EveryLaterWriteFailsWithOverrun) {
  Fixture f(4);
  f.fill(4);
  f.overrun();
  for (int i = 0; i < 5; ++i) {
    const uint64_t v = 100 + static_cast<uint64_t>(i);
    EXPECT_EQ(f.eq->write(FI_NOTIFY, &v, sizeof(v)).status().code(), Code::kOverrun);
    EXPECT_EQ(f.eq->write(FI_NOTIFY, nullptr, 0).status().code(), Code::kOverrun);
  }
}

TEST(EqOverrun, LaterWritesFailEvenAfterTheQueueIsDrained) {
  Fixture f(4);
  f.fill(4);
  f.overrun();
  for (int i = 0; i < 4; ++i) ASSERT_EQ(f.read_code(), Code::kOk);
  ASSERT_EQ(f.eq->pending(), 0u);  // every slot is free again
  const uint64_t v = 7;
  EXPECT_EQ(f.eq->write(FI_NOTIFY, &v, sizeof(v)).status().code(), Code::kOverrun);
  EXPECT_EQ(f.eq->pending(), 0u);
  EXPECT_TRUE(f.eq->overrun());
}

TEST(EqOverrun, AllStoredEventsAreReadInWriteOrderFirst) {
  Fixture f(4);
  f.fill(4);
  f.overrun();
  for (uint64_t i = 0; i < 4; ++i) {
    uint32_t event = ~0u;
    uint64_t v = ~uint64_t{0};
    auto r = f.eq->read(&event, &v, sizeof(v), 0);
    ASSERT_TRUE(r.ok()) << "stored event " << i << " not returned";
    EXPECT_EQ(*r, sizeof(v));
    EXPECT_EQ(event, static_cast<uint32_t>(FI_NOTIFY + i));
    EXPECT_EQ(v, i);
  }
}

TEST(EqOverrun, ReadErrorIsAgainWhileStoredNormalEventsRemain) {
  Fixture f(2);
  f.fill(2);
  f.overrun();
  fi_eq_err_entry entry = garbage_entry();
  EXPECT_EQ(f.eq->read_error(&entry, 0).status().code(), Code::kAgain);
  uint64_t v = 0;
  ASSERT_TRUE(f.eq->read(nullptr, &v, sizeof(v), 0).ok());
  EXPECT_EQ(f.eq->read_error(&entry, 0).status().code(), Code::kAgain);
  ASSERT_TRUE(f.eq->read(nullptr, &v, sizeof(v), 0).ok());
  EXPECT_EQ(v, 1u);
}

TEST(EqOverrun, ReadReturnsAvailAfterTheLastStoredEvent) {
  Fixture f(4);
  f.fill(4);
  f.overrun();
  for (int i = 0; i < 4; ++i) ASSERT_EQ(f.read_code(), Code::kOk);
  uint64_t v = 0;
  auto r = f.eq->read(nullptr, &v, sizeof(v), 0);
  EXPECT_EQ(r.status().code(), Code::kAvail);
  EXPECT_EQ(r.to_fi(), -FI_EAVAIL);
  EXPECT_EQ(f.eq->read(nullptr, &v, sizeof(v), FI_PEEK).status().code(), Code::kAvail);
  EXPECT_EQ(f.eq->read(nullptr, nullptr, 0, 0).status().code(), Code::kAvail);
}

TEST(EqOverrun, ReadErrorYieldsOverrunEntryWithOwnerFid) {
  Fixture f(4);
  f.fill(4);
  f.overrun();
  for (int i = 0; i < 4; ++i) ASSERT_EQ(f.read_code(), Code::kOk);
  fi_eq_err_entry entry = garbage_entry();
  auto r = f.eq->read_error(&entry, 0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, sizeof(fi_eq_err_entry));
  EXPECT_EQ(entry.err, FI_EOVERRUN);
  EXPECT_EQ(entry.fid, &f.owner_fid);
  EXPECT_EQ(entry.err_data_size, 0u);
}

TEST(EqOverrun, OverrunEntryIsStickyForReadError) {
  Fixture f(4);
  f.fill(4);
  f.overrun();
  for (int i = 0; i < 4; ++i) ASSERT_EQ(f.read_code(), Code::kOk);
  for (int i = 0; i < 4; ++i) {
    fi_eq_err_entry entry = garbage_entry();
    ASSERT_TRUE(f.eq->read_error(&entry, 0).ok()) << "read_error #" << i;
    EXPECT_EQ(entry.err, FI_EOVERRUN);
    EXPECT_EQ(entry.fid, &f.owner_fid);
    EXPECT_EQ(f.read_code(), Code::kAvail);
  }
  fi_eq_err_entry entry = garbage_entry();
  ASSERT_TRUE(f.eq->read_error(&entry, FI_PEEK).ok());
  EXPECT_EQ(entry.err, FI_EOVERRUN);
}

TEST(EqOverrun, OverrunEntryWithUserErrDataBufferReportsNoErrData) {
  Fixture f(1);
  f.fill(1);
  f.overrun();
  ASSERT_EQ(f.read_code(), Code::kOk);
  unsigned char user[16];
  std::memset(user, 0x5A, sizeof(user));
  fi_eq_err_entry entry = garbage_entry();
  entry.err_data = user;
  entry.err_data_size = sizeof(user);
  ASSERT_TRUE(f.eq->read_error(&entry, 0).ok());
  EXPECT_EQ(entry.err, FI_EOVERRUN);
  EXPECT_EQ(entry.err_data_size, 0u);
  for (unsigned char c : user) EXPECT_EQ(c, 0x5A);
}

TEST(EqOverrun, OverrunEntryInProviderOwnedModeReportsNoErrData) {
  Fixture f(1, WaitKind::kNone, /*provider_owned=*/true);
  f.fill(1);
  f.overrun();
  ASSERT_EQ(f.read_code(), Code::kOk);
  fi_eq_err_entry entry = garbage_entry();
  ASSERT_TRUE(f.eq->read_error(&entry, 0).ok());
  EXPECT_EQ(entry.err, FI_EOVERRUN);
  EXPECT_EQ(entry.fid, &f.owner_fid);
  EXPECT_EQ(entry.err_data_size, 0u);
}

TEST(EqOverrun, WriteErrorIntoAFullQueueOverruns) {
  Fixture f(2);
  f.fill(2);
  EqError e;
  e.err = FI_EIO;
  EXPECT_EQ(f.eq->write_error(e).code(), Code::kOverrun);
  EXPECT_TRUE(f.eq->overrun());
  const uint64_t v = 1;
  EXPECT_EQ(f.eq->write(FI_NOTIFY, &v, sizeof(v)).status().code(), Code::kOverrun);
}

TEST(EqOverrun, WriteErrorAlsoFailsWithOverrunBeforeAndAfterDraining) {
  Fixture f(2);
  f.fill(2);
  f.overrun();
  EqError e;
  e.err = FI_ECONNRESET;
  EXPECT_EQ(f.eq->write_error(e).code(), Code::kOverrun);
  ASSERT_EQ(f.read_code(), Code::kOk);
  ASSERT_EQ(f.read_code(), Code::kOk);
  EXPECT_EQ(f.eq->write_error(e).code(), Code::kOverrun);
  EXPECT_EQ(f.eq->write_error(e).to_fi(), -FI_EOVERRUN);
  // Still only the overrun entry is reported, not the rejected error.
  fi_eq_err_entry entry = garbage_entry();
  ASSERT_TRUE(f.eq->read_error(&entry, 0).ok());
  EXPECT_EQ(entry.err, FI_EOVERRUN);
}

TEST(EqOverrun, StoredErrorsAreDeliveredInOrderBeforeTheOverrunEntry) {
  Fixture f(4);
  const uint64_t a = 10, b = 20, c = 30;
  fid err_fid{};
  ASSERT_TRUE(f.eq->write(FI_CONNECTED, &a, sizeof(a)).ok());
  EqError e;
  e.fid = &err_fid;
  e.err = FI_ECONNREFUSED;
  e.prov_errno = 12;
  ASSERT_TRUE(f.eq->write_error(e).ok());
  ASSERT_TRUE(f.eq->write(FI_CONNECTED, &b, sizeof(b)).ok());
  ASSERT_TRUE(f.eq->write(FI_SHUTDOWN, &c, sizeof(c)).ok());
  f.overrun();

  uint64_t v = 0;
  fi_eq_err_entry entry = garbage_entry();
  ASSERT_TRUE(f.eq->read(nullptr, &v, sizeof(v), 0).ok());
  EXPECT_EQ(v, a);
  EXPECT_EQ(f.read_code(), Code::kAvail);
  ASSERT_TRUE(f.eq->read_error(&entry, 0).ok());
  EXPECT_EQ(entry.err, FI_ECONNREFUSED);  // the stored error, not the overrun entry
  EXPECT_EQ(entry.fid, &err_fid);
  EXPECT_EQ(entry.prov_errno, 12);
  EXPECT_EQ(f.eq->read_error(&entry, 0).status().code(), Code::kAgain);
  ASSERT_TRUE(f.eq->read(nullptr, &v, sizeof(v), 0).ok());
  EXPECT_EQ(v, b);
  ASSERT_TRUE(f.eq->read(nullptr, &v, sizeof(v), 0).ok());
  EXPECT_EQ(v, c);
  EXPECT_EQ(f.read_code(), Code::kAvail);
  entry = garbage_entry();
  ASSERT_TRUE(f.eq->read_error(&entry, 0).ok());
  EXPECT_EQ(entry.err, FI_EOVERRUN);
  EXPECT_EQ(entry.fid, &f.owner_fid);
}

TEST(EqOverrun, TooSmallBufferWhileOverrunKeepsTheStoredEvent) {
  Fixture f(1);
  f.fill(1);
  f.overrun();
  uint32_t small = 0;
  EXPECT_EQ(f.eq->read(nullptr, &small, sizeof(small), 0).status().code(), Code::kTooSmall);
  uint64_t v = ~uint64_t{0};
  ASSERT_TRUE(f.eq->read(nullptr, &v, sizeof(v), 0).ok());
  EXPECT_EQ(v, 0u);
  EXPECT_EQ(f.read_code(), Code::kAvail);
}

TEST(EqOverrun, OverrunOfSizeOneQueueIsReportedAfterItsOnlyEvent) {
  Fixture f(1);
  f.fill(1);
  f.overrun();
  EXPECT_EQ(f.read_code(), Code::kOk);
  EXPECT_EQ(f.read_code(), Code::kAvail);
}

TEST(EqOverrun, TryWaitOnEmptyFdQueueSucceeds) {
  // Control for the test below: try_wait on an FD queue with nothing queued arms and succeeds.
  Fixture f(2, WaitKind::kFd);
  ASSERT_NE(f.eq, nullptr);
  EXPECT_TRUE(f.eq->try_wait().ok());
}

TEST(EqOverrun, TryWaitOnOverrunFdQueueReturnsAgain) {
  Fixture f(2, WaitKind::kFd);
  ASSERT_NE(f.eq, nullptr);
  f.fill(2);
  f.overrun();
  EXPECT_EQ(f.eq->try_wait().code(), Code::kAgain);
  // Drained of stored events: the overrun entry is still there to be read.
  ASSERT_EQ(f.read_code(), Code::kOk);
  ASSERT_EQ(f.read_code(), Code::kOk);
  EXPECT_EQ(f.eq->try_wait().code(), Code::kAgain);
  EXPECT_EQ(f.eq->try_wait().to_fi(), -FI_EAGAIN);
  // And after the overrun entry was read (it is sticky).
  fi_eq_err_entry entry = garbage_entry();
  ASSERT_TRUE(f.eq->read_error(&entry, 0).ok());
  EXPECT_EQ(f.eq->try_wait().code(), Code::kAgain);
}

}  // namespace
}  // namespace fabq::core
