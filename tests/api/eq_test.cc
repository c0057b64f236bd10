// fi_eq(3) through libfabric: read / write / peek / too-small / overrun / readerr / strerror /
// sread / FI_GETWAIT, as fabq's contract (fi_fabq(7)) states them.
//
// The only error entry an application can provoke through the API is the overrun entry, so
// readerr semantics (err, fid, err_data handling) are checked with it.
#include <fcntl.h>
#include <poll.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "fabq_fixture.h"
#include "signal_fixture.h"

namespace fabq::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Generous bound that separates "returned" from "hung" on a loaded 2-core machine.
constexpr auto kHang = std::chrono::seconds(5);
// Upper bound on the number of writes any fill loop attempts (the largest EQ here is 1024).
constexpr size_t kFillLimit = size_t{1} << 16;
// The largest event fabq stores (fi_fabq(7), LIMITS).
constexpr size_t kMaxEvent = 304;

milliseconds since(Clock::time_point t0) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - t0);
}

fi_eq_attr eq_attr(uint64_t flags = FI_WRITE, size_t size = 0,
                   enum fi_wait_obj wait = FI_WAIT_NONE) {
  fi_eq_attr attr{};
  attr.flags = flags;
  attr.size = size;
  attr.wait_obj = wait;
  return attr;
}

fi_eq_entry entry(uint64_t data) {
  fi_eq_entry e{};
  e.data = data;
  e.context = reinterpret_cast<void*>(static_cast<uintptr_t>(0x1000 + data));
  return e;
}

constexpr ssize_t kEntrySize = static_cast<ssize_t>(sizeof(fi_eq_entry));

// Writes fi_eq_entry events with data 0, 1, ... until the EQ overruns. Returns how many were
// stored (kFillLimit if it never overran).
size_t fill_until_overrun(fid_eq* eq) {
  for (size_t i = 0; i < kFillLimit; ++i) {
    const fi_eq_entry e = entry(i);
    const ssize_t rc = fi_eq_write(eq, FI_NOTIFY, &e, sizeof(e), 0);
    if (rc == -FI_EOVERRUN) return i;
    EXPECT_EQ(rc, kEntrySize) << "write " << i;
    if (rc != kEntrySize) return kFillLimit;
  }
  return kFillLimit;
}

class Eq : public FabqTest {
 protected:
  void TearDown() override {
    if (eq_ != nullptr) {
      EXPECT_EQ(fi_close(&eq_->fid), 0);
    }
    FabqTest::TearDown();
  }
  void open(fi_eq_attr attr) {
    eq_ = open_eq(attr, &eq_);
    ASSERT_NE(eq_, nullptr);
  }
  ssize_t write_entry(uint64_t data, uint32_t event = FI_NOTIFY) {
    const fi_eq_entry e = entry(data);
    return fi_eq_write(eq_, event, &e, sizeof(e), 0);
  }
  // Reads one fi_eq_entry and checks it carries `data`.
  void expect_entry(uint64_t data, uint64_t flags = 0) {
    uint32_t event = 0;
    fi_eq_entry e{};
    ASSERT_EQ(fi_eq_read(eq_, &event, &e, sizeof(e), flags), kEntrySize) << "data " << data;
    EXPECT_EQ(event, static_cast<uint32_t>(FI_NOTIFY));
    EXPECT_EQ(e.data, data);
    EXPECT_EQ(e.context, entry(data).context);
  }
  void expect_empty() {
    uint32_t event = 0;
    fi_eq_entry e{};
    EXPECT_EQ(fi_eq_read(eq_, &event, &e, sizeof(e), 0), -FI_EAGAIN);
  }

  fid_eq* eq_ = nullptr;
};

// --- write / read -------------------------------------------------------------------------

TEST_F(Eq, WriteReturnsLengthAndReadReturnsTheEvent) {
  open(eq_attr());
  fi_eq_entry in{};
  in.fid = &fabric_->fid;
  in.context = &in;
  in.data = 0xfeedULL;
  EXPECT_EQ(fi_eq_write(eq_, FI_MR_COMPLETE, &in, sizeof(in), 0), kEntrySize);
  uint32_t event = 0;
  fi_eq_entry out{};
  EXPECT_EQ(fi_eq_read(eq_, &event, &out, sizeof(out), 0), kEntrySize);
  EXPECT_EQ(event, static_cast<uint32_t>(FI_MR_COMPLETE));
  EXPECT_EQ(out.fid, in.fid);
  EXPECT_EQ(out.context, in.context);
  EXPECT_EQ(out.data, in.data);
  expect_empty();
}

TEST_F(Eq, ReadOnEmptyEqIsAgain) {
  open(eq_attr());
  expect_empty();
  uint32_t event = 0;
  fi_eq_entry e{};
  EXPECT_EQ(fi_eq_read(eq_, &event, &e, sizeof(e), FI_PEEK), -FI_EAGAIN);
}

TEST_F(Eq, ReadReturnsOneEventPerCallInOrder) {
  open(eq_attr());
  for (uint64_t i = 0; i < 3; ++i) ASSERT_EQ(write_entry(i), kEntrySize);
  for (uint64_t i = 0; i < 3; ++i) {
    // A buffer large enough for all three events still gets exactly one.
    std::array<fi_eq_entry, 3> buf{};
    uint32_t event = 0;
    ASSERT_EQ(fi_eq_read(eq_, &event, buf.data(), sizeof(buf), 0), kEntrySize);
    EXPECT_EQ(buf[0].data, i);
    EXPECT_EQ(buf[1].data, 0u) << "a second event was copied";
  }
  expect_empty();
}

TEST_F(Eq, ReadReturnsEachEventsOwnSize) {
  open(eq_attr());
  const std::vector<size_t> sizes = {1, 8, sizeof(fi_eq_entry), 100, kMaxEvent};
  for (size_t n : sizes) {
    std::vector<unsigned char> payload(n, static_cast<unsigned char>(n));
    ASSERT_EQ(fi_eq_write(eq_, FI_NOTIFY, payload.data(), n, 0), static_cast<ssize_t>(n));
  }
  for (size_t n : sizes) {
    std::vector<unsigned char> buf(kMaxEvent + 16, 0xEE);
    uint32_t event = 0;
    ASSERT_EQ(fi_eq_read(eq_, &event, buf.data(), buf.size(), 0), static_cast<ssize_t>(n));
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(buf[i], static_cast<unsigned char>(n)) << i;
    for (size_t i = n; i < buf.size(); ++i) ASSERT_EQ(buf[i], 0xEE) << "written beyond " << n;
  }
  expect_empty();
}

TEST_F(Eq, EventLargerThanTheLargestEventIsRejected) {
  open(eq_attr());
  std::vector<unsigned char> big(kMaxEvent + 1, 1);
  EXPECT_EQ(fi_eq_write(eq_, FI_NOTIFY, big.data(), big.size(), 0), -FI_EINVAL);
  expect_empty();
  // The rejection is not an overrun: the EQ still works.
  EXPECT_EQ(write_entry(7), kEntrySize);
  expect_entry(7);
}

TEST_F(Eq, WriteWithNonZeroFlagsIsBadFlags) {
  open(eq_attr());
  const fi_eq_entry e = entry(1);
  for (uint64_t flags :
       std::initializer_list<uint64_t>{FI_PEEK, FI_WRITE, FI_SEND, uint64_t{1} << 63}) {
    EXPECT_EQ(fi_eq_write(eq_, FI_NOTIFY, &e, sizeof(e), flags), -FI_EBADFLAGS) << flags;
  }
  expect_empty();
}

TEST_F(Eq, WriteWithoutFiWriteIsInvalidAndQueuesNothing) {
  open(eq_attr(/*flags=*/0));
  EXPECT_EQ(write_entry(1), -FI_EINVAL);
  expect_empty();
}

TEST_F(Eq, ReadWithFlagsOtherThanPeekIsBadFlags) {
  open(eq_attr());
  ASSERT_EQ(write_entry(5), kEntrySize);
  for (uint64_t flags :
       std::initializer_list<uint64_t>{FI_SEND, FI_WRITE, FI_PEEK | FI_SEND, uint64_t{1} << 63}) {
    uint32_t event = 0;
    fi_eq_entry e{};
    EXPECT_EQ(fi_eq_read(eq_, &event, &e, sizeof(e), flags), -FI_EBADFLAGS) << flags;
  }
  expect_entry(5);  // nothing was consumed
  // Also on an empty EQ: flags are checked, not hidden behind -FI_EAGAIN.
  uint32_t event = 0;
  fi_eq_entry e{};
  EXPECT_EQ(fi_eq_read(eq_, &event, &e, sizeof(e), FI_SEND), -FI_EBADFLAGS);
}

// --- peek / too small ---------------------------------------------------------------------

TEST_F(Eq, PeekLeavesTheEventQueued) {
  open(eq_attr());
  ASSERT_EQ(write_entry(1), kEntrySize);
  ASSERT_EQ(write_entry(2), kEntrySize);
  expect_entry(1, FI_PEEK);
  expect_entry(1, FI_PEEK);
  expect_entry(1);
  expect_entry(2, FI_PEEK);
  expect_entry(2);
  expect_empty();
}

TEST_F(Eq, BufferTooSmallIsTooSmallAndConsumesNothing) {
  open(eq_attr());
  ASSERT_EQ(write_entry(9), kEntrySize);
  std::array<unsigned char, sizeof(fi_eq_entry)> buf{};
  uint32_t event = 0;
  for (size_t len : {size_t{0}, size_t{1}, sizeof(fi_eq_entry) - 1}) {
    EXPECT_EQ(fi_eq_read(eq_, &event, buf.data(), len, 0), -FI_ETOOSMALL) << len;
    EXPECT_EQ(fi_eq_read(eq_, &event, buf.data(), len, FI_PEEK), -FI_ETOOSMALL) << len;
  }
  expect_entry(9);
  expect_empty();
}

// --- readerr ------------------------------------------------------------------------------

TEST_F(Eq, ReaderrOnEmptyEqIsAgain) {
  open(eq_attr());
  fi_eq_err_entry err{};
  EXPECT_EQ(fi_eq_readerr(eq_, &err, 0), -FI_EAGAIN);
  EXPECT_EQ(fi_eq_readerr(eq_, &err, FI_PEEK), -FI_EAGAIN);
}

TEST_F(Eq, ReaderrWithAnEventAtTheHeadIsAgainAndConsumesNothing) {
  open(eq_attr());
  ASSERT_EQ(write_entry(3), kEntrySize);
  fi_eq_err_entry err{};
  EXPECT_EQ(fi_eq_readerr(eq_, &err, 0), -FI_EAGAIN);
  expect_entry(3);
}

// --- overrun ------------------------------------------------------------------------------

TEST_F(Eq, OverrunFailsWritesKeepsEveryEventThenReportsOverrun) {
  open(eq_attr(FI_WRITE, /*size=*/4));
  const size_t stored = fill_until_overrun(eq_);
  ASSERT_GE(stored, 4u);
  ASSERT_LT(stored, kFillLimit);
  // Every later write fails too.
  EXPECT_EQ(write_entry(1000), -FI_EOVERRUN);
  EXPECT_EQ(write_entry(1001), -FI_EOVERRUN);
  // Every stored event is still returned, in order.
  for (uint64_t i = 0; i < stored; ++i) {
    if (i == 1) {
      // Room has been made, but the overrun state is permanent.
      EXPECT_EQ(write_entry(2000), -FI_EOVERRUN);
    }
    expect_entry(i);
  }
  // After the last one: -FI_EAVAIL, and the overrun error entry.
  uint32_t event = 0;
  fi_eq_entry e{};
  EXPECT_EQ(fi_eq_read(eq_, &event, &e, sizeof(e), 0), -FI_EAVAIL);
  EXPECT_EQ(fi_eq_read(eq_, &event, &e, sizeof(e), FI_PEEK), -FI_EAVAIL);
  for (int round = 0; round < 3; ++round) {
    fi_eq_err_entry err{};
    ASSERT_EQ(fi_eq_readerr(eq_, &err, 0), static_cast<ssize_t>(sizeof(fi_eq_err_entry)))
        << "round " << round;
    EXPECT_EQ(err.err, FI_EOVERRUN);
    EXPECT_EQ(err.fid, &eq_->fid);
    // It stays: reads still report it.
    EXPECT_EQ(fi_eq_read(eq_, &event, &e, sizeof(e), 0), -FI_EAVAIL);
  }
  EXPECT_EQ(write_entry(3000), -FI_EOVERRUN);
}

TEST_F(Eq, OverrunKeepsEventsOfEverySizeInOrder) {
  open(eq_attr(FI_WRITE, /*size=*/8));
  std::vector<size_t> sizes;
  for (size_t i = 0; i < kFillLimit; ++i) {
    const size_t n = 1 + (i * 37) % kMaxEvent;
    std::vector<unsigned char> payload(n, static_cast<unsigned char>(i));
    const ssize_t rc = fi_eq_write(eq_, static_cast<uint32_t>(i), payload.data(), n, 0);
    if (rc == -FI_EOVERRUN) break;
    ASSERT_EQ(rc, static_cast<ssize_t>(n));
    sizes.push_back(n);
  }
  ASSERT_GE(sizes.size(), 8u);
  ASSERT_LT(sizes.size(), kFillLimit);
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::vector<unsigned char> buf(kMaxEvent, 0);
    uint32_t event = ~0u;
    ASSERT_EQ(fi_eq_read(eq_, &event, buf.data(), buf.size(), 0), static_cast<ssize_t>(sizes[i]));
    EXPECT_EQ(event, static_cast<uint32_t>(i));
    for (size_t k = 0; k < sizes[i]; ++k) ASSERT_EQ(buf[k], static_cast<unsigned char>(i));
  }
  uint32_t event = 0;
  std::vector<unsigned char> buf(kMaxEvent, 0);
  EXPECT_EQ(fi_eq_read(eq_, &event, buf.data(), buf.size(), 0), -FI_EAVAIL);
}

TEST_F(Eq, OverrunEntryWhileEventsRemainIsNotYetReported) {
  open(eq_attr(FI_WRITE, /*size=*/2));
  const size_t stored = fill_until_overrun(eq_);
  ASSERT_GE(stored, 2u);
  ASSERT_LT(stored, kFillLimit);
  fi_eq_err_entry err{};
  EXPECT_EQ(fi_eq_readerr(eq_, &err, 0), -FI_EAGAIN) << "valid events come first";
  for (uint64_t i = 0; i < stored; ++i) expect_entry(i);
  EXPECT_EQ(fi_eq_readerr(eq_, &err, 0), static_cast<ssize_t>(sizeof(fi_eq_err_entry)));
  EXPECT_EQ(err.err, FI_EOVERRUN);
}

TEST_F(Eq, OverrunEntryWithPeekIsReturned) {
  open(eq_attr(FI_WRITE, /*size=*/1));
  const size_t stored = fill_until_overrun(eq_);
  ASSERT_GE(stored, 1u);
  for (uint64_t i = 0; i < stored; ++i) expect_entry(i);
  fi_eq_err_entry err{};
  EXPECT_EQ(fi_eq_readerr(eq_, &err, FI_PEEK), static_cast<ssize_t>(sizeof(fi_eq_err_entry)));
  EXPECT_EQ(err.err, FI_EOVERRUN);
  err = {};
  EXPECT_EQ(fi_eq_readerr(eq_, &err, 0), static_cast<ssize_t>(sizeof(fi_eq_err_entry)));
  EXPECT_EQ(err.err, FI_EOVERRUN);
  EXPECT_EQ(err.fid, &eq_->fid);
}

// fi_eq(3): "if err_data_size is 0 on input ... err_data will be set to a data buffer owned by
// the provider". The overrun entry has no data, so NULL (or a provider buffer) is allowed; the
// caller's stale pointer is not.
TEST_F(Eq, ReaderrWithZeroErrDataSizeSetsErrDataToProviderBufferOrNull) {
  open(eq_attr(FI_WRITE, /*size=*/1));
  ASSERT_LT(fill_until_overrun(eq_), kFillLimit);
  expect_entry(0);
  std::array<unsigned char, 16> stale{};
  fi_eq_err_entry err{};
  err.err_data = stale.data();
  err.err_data_size = 0;
  ASSERT_EQ(fi_eq_readerr(eq_, &err, 0), static_cast<ssize_t>(sizeof(fi_eq_err_entry)));
  EXPECT_EQ(err.err, FI_EOVERRUN);
  EXPECT_NE(err.err_data, static_cast<void*>(stale.data()))
      << "err_data must be set (provider buffer or NULL), not left as the caller's pointer";
  EXPECT_EQ(err.err_data_size, 0u);
}

TEST_F(Eq, ReaderrWithUserErrDataBufferSetsCopiedSize) {
  open(eq_attr(FI_WRITE, /*size=*/1));
  ASSERT_LT(fill_until_overrun(eq_), kFillLimit);
  expect_entry(0);
  for (int round = 0; round < 2; ++round) {
    std::array<unsigned char, 32> user;
    user.fill(0xA5);
    fi_eq_err_entry err{};
    err.err_data = user.data();
    err.err_data_size = user.size();
    ASSERT_EQ(fi_eq_readerr(eq_, &err, 0), static_cast<ssize_t>(sizeof(fi_eq_err_entry)));
    EXPECT_EQ(err.err, FI_EOVERRUN);
    EXPECT_EQ(err.fid, &eq_->fid);
    EXPECT_EQ(err.err_data_size, 0u) << "nothing is copied for an overrun";
    EXPECT_EQ(err.err_data, static_cast<void*>(user.data()));
    for (unsigned char c : user) ASSERT_EQ(c, 0xA5) << "err_data buffer written";
  }
}

// --- strerror -----------------------------------------------------------------------------

constexpr unsigned char kCanary = 0x5A;

TEST_F(Eq, StrerrorNeverWritesBeyondLenAndAlwaysTerminates) {
  open(eq_attr());
  for (int prov_errno : {0, int{FI_EOVERRUN}, int{FI_EAGAIN}, 123456, -7}) {
    for (size_t len : {size_t{1}, size_t{5}, size_t{64}}) {
      std::array<char, 128> buf;
      buf.fill(static_cast<char>(kCanary));
      const char* s = fi_eq_strerror(eq_, prov_errno, nullptr, buf.data(), len);
      ASSERT_NE(s, nullptr) << prov_errno << " len " << len;
      EXPECT_EQ(s, buf.data()) << "the text goes into the caller's buffer";
      EXPECT_LT(strnlen(buf.data(), len), len) << "not terminated within len: " << prov_errno;
      for (size_t i = len; i < buf.size(); ++i) {
        ASSERT_EQ(static_cast<unsigned char>(buf[i]), kCanary)
            << "wrote byte " << i << " with len " << len << " prov_errno " << prov_errno;
      }
    }
  }
}

TEST_F(Eq, StrerrorWithLenZeroWritesNothing) {
  open(eq_attr());
  std::array<char, 16> buf;
  buf.fill(static_cast<char>(kCanary));
  const char* s = fi_eq_strerror(eq_, FI_EOVERRUN, nullptr, buf.data(), 0);
  EXPECT_NE(s, nullptr);
  for (char c : buf) ASSERT_EQ(static_cast<unsigned char>(c), kCanary);
}

TEST_F(Eq, StrerrorWithNullBufferReturnsAString) {
  open(eq_attr());
  for (int prov_errno : {0, int{FI_EOVERRUN}, 123456}) {
    const char* s = fi_eq_strerror(eq_, prov_errno, nullptr, nullptr, 0);
    ASSERT_NE(s, nullptr) << prov_errno;
    EXPECT_GT(std::strlen(s), 0u);
    s = fi_eq_strerror(eq_, prov_errno, nullptr, nullptr, 64);
    ASSERT_NE(s, nullptr) << prov_errno;
  }
  const char* s = fi_eq_strerror(eq_, FI_EOVERRUN, nullptr, nullptr, 0);
  ASSERT_NE(s, nullptr);
  EXPECT_NE(std::string(s).find("overrun"), std::string::npos) << s;
}

TEST_F(Eq, StrerrorOfOverrunMentionsOverrun) {
  open(eq_attr());
  std::array<char, 64> buf{};
  const char* s = fi_eq_strerror(eq_, FI_EOVERRUN, nullptr, buf.data(), buf.size());
  ASSERT_NE(s, nullptr);
  EXPECT_NE(std::string(s).find("overrun"), std::string::npos) << s;
}

// --- sread --------------------------------------------------------------------------------

TEST_F(Eq, SreadOnWaitNoneIsNoSys) {
  open(eq_attr(FI_WRITE, 0, FI_WAIT_NONE));
  uint32_t event = 0;
  fi_eq_entry e{};
  const auto t0 = Clock::now();
  EXPECT_EQ(fi_eq_sread(eq_, &event, &e, sizeof(e), 10000, 0), -FI_ENOSYS);
  EXPECT_LT(since(t0), kHang);
}

TEST_F(Eq, SreadOnWaitSetIsNoSys) {
  fi_wait_attr wattr{};
  wattr.wait_obj = FI_WAIT_UNSPEC;
  fid_wait* ws = nullptr;
  ASSERT_EQ(fi_wait_open(fabric_, &wattr, &ws), 0);
  fi_eq_attr attr = eq_attr(FI_WRITE, 0, FI_WAIT_SET);
  attr.wait_set = ws;
  open(attr);
  uint32_t event = 0;
  fi_eq_entry e{};
  const auto t0 = Clock::now();
  EXPECT_EQ(fi_eq_sread(eq_, &event, &e, sizeof(e), 10000, 0), -FI_ENOSYS);
  EXPECT_LT(since(t0), kHang);
  ASSERT_EQ(fi_close(&eq_->fid), 0);
  eq_ = nullptr;
  EXPECT_EQ(fi_close(&ws->fid), 0);
}

TEST_F(Eq, SreadOnOverrunEqReturnsAvailAtOnce) {
  open(eq_attr(FI_WRITE, 1, FI_WAIT_UNSPEC));
  ASSERT_LT(fill_until_overrun(eq_), kFillLimit);
  expect_entry(0);
  uint32_t event = 0;
  fi_eq_entry e{};
  const auto t0 = Clock::now();
  EXPECT_EQ(fi_eq_sread(eq_, &event, &e, sizeof(e), 10000, 0), -FI_EAVAIL);
  EXPECT_LT(since(t0), kHang);
}

class EqWait : public Eq, public ::testing::WithParamInterface<enum fi_wait_obj> {};

std::string wait_name(const ::testing::TestParamInfo<enum fi_wait_obj>& info) {
  switch (info.param) {
    case FI_WAIT_NONE:
      return "None";
    case FI_WAIT_UNSPEC:
      return "Unspec";
    case FI_WAIT_SET:
      return "Set";
    case FI_WAIT_FD:
      return "Fd";
    case FI_WAIT_MUTEX_COND:
      return "MutexCond";
    case FI_WAIT_YIELD:
      return "Yield";
    case FI_WAIT_POLLFD:
      return "PollFd";
  }
  return "Unknown";
}

TEST_P(EqWait, SreadTimeoutZeroIsAgain) {
  open(eq_attr(FI_WRITE, 0, GetParam()));
  uint32_t event = 0;
  fi_eq_entry e{};
  const auto t0 = Clock::now();
  EXPECT_EQ(fi_eq_sread(eq_, &event, &e, sizeof(e), 0, 0), -FI_EAGAIN);
  EXPECT_LT(since(t0), kHang);
}

TEST_P(EqWait, SreadTimeoutFiftyMsIsAgainAfterTheTimeout) {
  open(eq_attr(FI_WRITE, 0, GetParam()));
  uint32_t event = 0;
  fi_eq_entry e{};
  const auto t0 = Clock::now();
  EXPECT_EQ(fi_eq_sread(eq_, &event, &e, sizeof(e), 50, 0), -FI_EAGAIN);
  const auto elapsed = since(t0);
  EXPECT_GE(elapsed, milliseconds(50));
  EXPECT_LT(elapsed, kHang);
}

TEST_P(EqWait, SreadReturnsAQueuedEventAtOnce) {
  open(eq_attr(FI_WRITE, 0, GetParam()));
  ASSERT_EQ(write_entry(4), kEntrySize);
  uint32_t event = 0;
  fi_eq_entry e{};
  const auto t0 = Clock::now();
  EXPECT_EQ(fi_eq_sread(eq_, &event, &e, sizeof(e), 10000, 0), kEntrySize);
  EXPECT_LT(since(t0), kHang);
  EXPECT_EQ(e.data, 4u);
  expect_empty();
}

TEST_P(EqWait, SreadWakesWhenAnotherThreadWrites) {
  open(eq_attr(FI_WRITE, 0, GetParam()));
  std::thread writer([this] {
    std::this_thread::sleep_for(milliseconds(50));
    const fi_eq_entry e = entry(42);
    EXPECT_EQ(fi_eq_write(eq_, FI_NOTIFY, &e, sizeof(e), 0), kEntrySize);
  });
  uint32_t event = 0;
  fi_eq_entry e{};
  const auto t0 = Clock::now();
  const ssize_t rc = fi_eq_sread(eq_, &event, &e, sizeof(e), 10000, 0);
  const auto elapsed = since(t0);
  writer.join();
  EXPECT_EQ(rc, kEntrySize);
  EXPECT_EQ(event, static_cast<uint32_t>(FI_NOTIFY));
  EXPECT_EQ(e.data, 42u);
  EXPECT_LT(elapsed, kHang);
  expect_empty();
}

// fi_eq(3): a blocking read may be interrupted by a signal; fabq's fi_eq_sread then returns
// -FI_EAGAIN, with every wait object, FI_WAIT_YIELD too, and the queue goes on working.
TEST_P(EqWait, SreadInterruptedByAPosixSignalReturnsAgain) {
  open(eq_attr(FI_WRITE, 0, GetParam()));
  SignalHandled handled;
  ASSERT_TRUE(handled.ok());
  const int before = g_handled_signals.load();
  const Interrupted r = interrupt_with_signals(
      [&] {
        uint32_t event = 0;
        fi_eq_entry e{};
        return fi_eq_sread(eq_, &event, &e, sizeof(e), 60'000, 0);
      },
      [&] { write_entry(1); });
  EXPECT_TRUE(r.returned) << "no signal ended fi_eq_sread (" << r.signals_sent << " sent)";
  EXPECT_EQ(r.rc, -FI_EAGAIN);
  EXPECT_GT(g_handled_signals.load(), before);
  EXPECT_LT(r.after_first, kHang);
  ASSERT_EQ(write_entry(5), kEntrySize);
  uint32_t event = 0;
  fi_eq_entry e{};
  EXPECT_EQ(fi_eq_sread(eq_, &event, &e, sizeof(e), 1000, 0), kEntrySize);
  EXPECT_EQ(e.data, 5u);
}

TEST_P(EqWait, SreadWithPeekLeavesTheEvent) {
  open(eq_attr(FI_WRITE, 0, GetParam()));
  ASSERT_EQ(write_entry(8), kEntrySize);
  uint32_t event = 0;
  fi_eq_entry e{};
  EXPECT_EQ(fi_eq_sread(eq_, &event, &e, sizeof(e), 1000, FI_PEEK), kEntrySize);
  EXPECT_EQ(e.data, 8u);
  expect_entry(8);
  expect_empty();
}

TEST_P(EqWait, SreadWithPeekWokenByAWriterLeavesTheEvent) {
  open(eq_attr(FI_WRITE, 0, GetParam()));
  std::thread writer([this] {
    std::this_thread::sleep_for(milliseconds(50));
    const fi_eq_entry e = entry(43);
    EXPECT_EQ(fi_eq_write(eq_, FI_NOTIFY, &e, sizeof(e), 0), kEntrySize);
  });
  uint32_t event = 0;
  fi_eq_entry e{};
  const auto t0 = Clock::now();
  const ssize_t rc = fi_eq_sread(eq_, &event, &e, sizeof(e), 10000, FI_PEEK);
  const auto elapsed = since(t0);
  writer.join();
  EXPECT_EQ(rc, kEntrySize);
  EXPECT_EQ(e.data, 43u);
  EXPECT_LT(elapsed, kHang);
  expect_entry(43);
  expect_empty();
}

TEST_P(EqWait, SreadWithBufferTooSmallIsTooSmallAndConsumesNothing) {
  open(eq_attr(FI_WRITE, 0, GetParam()));
  ASSERT_EQ(write_entry(6), kEntrySize);
  uint32_t event = 0;
  std::array<unsigned char, 4> small{};
  const auto t0 = Clock::now();
  EXPECT_EQ(fi_eq_sread(eq_, &event, small.data(), small.size(), 10000, 0), -FI_ETOOSMALL);
  EXPECT_LT(since(t0), kHang);
  expect_entry(6);
}

TEST_P(EqWait, SreadWithBadFlagsIsBadFlags) {
  open(eq_attr(FI_WRITE, 0, GetParam()));
  uint32_t event = 0;
  fi_eq_entry e{};
  const auto t0 = Clock::now();
  EXPECT_EQ(fi_eq_sread(eq_, &event, &e, sizeof(e), 10000, FI_SEND), -FI_EBADFLAGS);
  EXPECT_LT(since(t0), kHang);
}

// --- FI_GETWAIT / FI_GETWAITOBJ -----------------------------------------------------------

TEST_P(EqWait, GetWaitObjReturnsTheWaitKind) {
  open(eq_attr(FI_WRITE, 0, GetParam()));
  enum fi_wait_obj kind = FI_WAIT_SET;
  ASSERT_EQ(fi_control(&eq_->fid, FI_GETWAITOBJ, &kind), 0);
  EXPECT_EQ(kind, GetParam());
}

TEST_P(EqWait, GetWaitHandsOutTheObjectOrNoSys) {
  open(eq_attr(FI_WRITE, 0, GetParam()));
  switch (GetParam()) {
    case FI_WAIT_FD: {
      int fd = -1;
      ASSERT_EQ(fi_control(&eq_->fid, FI_GETWAIT, &fd), 0);
      EXPECT_GE(fd, 0);
      EXPECT_NE(fcntl(fd, F_GETFD), -1) << "not an open descriptor";
      break;
    }
    case FI_WAIT_MUTEX_COND: {
      fi_mutex_cond mc{};
      ASSERT_EQ(fi_control(&eq_->fid, FI_GETWAIT, &mc), 0);
      EXPECT_NE(mc.mutex, nullptr);
      EXPECT_NE(mc.cond, nullptr);
      break;
    }
    case FI_WAIT_POLLFD: {
      std::array<pollfd, 4> fds{};
      fi_wait_pollfd pfd{};
      pfd.nfds = fds.size();
      pfd.fd = fds.data();
      ASSERT_EQ(fi_control(&eq_->fid, FI_GETWAIT, &pfd), 0);
      EXPECT_GE(pfd.nfds, 1u);
      EXPECT_LE(pfd.nfds, fds.size());
      EXPECT_GE(fds[0].fd, 0);
      break;
    }
    default: {
      int fd = -1;
      EXPECT_EQ(fi_control(&eq_->fid, FI_GETWAIT, &fd), -FI_ENOSYS);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllWaitObjects, EqWait,
                         ::testing::Values(FI_WAIT_UNSPEC, FI_WAIT_FD, FI_WAIT_POLLFD,
                                           FI_WAIT_MUTEX_COND, FI_WAIT_YIELD),
                         wait_name);

TEST_F(Eq, GetWaitOnWaitNoneIsNoSys) {
  open(eq_attr(FI_WRITE, 0, FI_WAIT_NONE));
  int fd = -1;
  EXPECT_EQ(fi_control(&eq_->fid, FI_GETWAIT, &fd), -FI_ENOSYS);
  enum fi_wait_obj kind = FI_WAIT_SET;
  ASSERT_EQ(fi_control(&eq_->fid, FI_GETWAITOBJ, &kind), 0);
  EXPECT_EQ(kind, FI_WAIT_NONE);
}

}  // namespace
}  // namespace fabq::testing
