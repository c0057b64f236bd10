// EventQueue: error entries (fi_eq_readerr semantics, err_data ownership, write_error checks).
#include <gtest/gtest.h>
#include <rdma/fi_eq.h>

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

std::unique_ptr<EventQueue> make_eq(size_t size, bool provider_owned = false) {
  EqConfig config;
  config.size = size;
  config.provider_owned_err_data = provider_owned;
  auto eq = EventQueue::create(config);
  EXPECT_TRUE(eq.ok());
  if (!eq.ok()) return nullptr;
  return std::move(eq.value());
}

std::vector<unsigned char> pattern(size_t n, unsigned char seed) {
  std::vector<unsigned char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>(seed + i * 13);
  return v;
}

// An error entry with recognisable header fields and `err_data`.
struct TestError {
  fid fake_fid{};
  int ctx = 0;
  std::vector<unsigned char> data;

  EqError make(int err, int prov_errno, uint64_t user_data) {
    EqError e;
    e.fid = &fake_fid;
    e.context = &ctx;
    e.data = user_data;
    e.err = err;
    e.prov_errno = prov_errno;
    e.err_data = data.empty() ? nullptr : data.data();
    e.err_data_size = data.size();
    return e;
  }
};

// An entry whose fields are all set to garbage so that the call must fill them.
fi_eq_err_entry garbage_entry() {
  fi_eq_err_entry e;
  std::memset(&e, 0xA5, sizeof(e));
  e.err_data = nullptr;
  e.err_data_size = 0;
  return e;
}

TEST(EqRead, ErrorAtHeadReturnsAvail) {
  auto eq = make_eq(8);
  TestError te;
  ASSERT_TRUE(eq->write_error(te.make(FI_ECONNREFUSED, 0, 0)).ok());
  uint64_t v = 0;
  uint32_t event = ~0u;
  auto r = eq->read(&event, &v, sizeof(v), 0);
  EXPECT_EQ(r.status().code(), Code::kAvail);
  EXPECT_EQ(r.to_fi(), -FI_EAVAIL);
  // The error is still there: reading again gives the same answer, read_error gets it.
  EXPECT_EQ(eq->read(&event, &v, sizeof(v), 0).status().code(), Code::kAvail);
  fi_eq_err_entry entry = garbage_entry();
  ASSERT_TRUE(eq->read_error(&entry, 0).ok());
  EXPECT_EQ(entry.err, FI_ECONNREFUSED);
}

TEST(EqRead, PeekWithErrorAtHeadReturnsAvail) {
  auto eq = make_eq(8);
  TestError te;
  ASSERT_TRUE(eq->write_error(te.make(FI_EIO, 0, 0)).ok());
  uint64_t v = 0;
  EXPECT_EQ(eq->read(nullptr, &v, sizeof(v), FI_PEEK).status().code(), Code::kAvail);
  EXPECT_EQ(eq->read(nullptr, &v, sizeof(v), FI_PEEK).status().code(), Code::kAvail);
  EXPECT_EQ(eq->pending(), 1u);
}

TEST(EqReadError, ReturnsTheFieldsGivenToWriteError) {
  auto eq = make_eq(8);
  TestError te;
  te.data = pattern(5, 1);
  ASSERT_TRUE(eq->write_error(te.make(FI_ETIMEDOUT, 4321, 0x0123456789abcdefull)).ok());
  fi_eq_err_entry entry = garbage_entry();
  auto r = eq->read_error(&entry, 0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, sizeof(fi_eq_err_entry));
  EXPECT_EQ(entry.fid, &te.fake_fid);
  EXPECT_EQ(entry.context, &te.ctx);
  EXPECT_EQ(entry.data, 0x0123456789abcdefull);
  EXPECT_EQ(entry.err, FI_ETIMEDOUT);
  EXPECT_EQ(entry.prov_errno, 4321);
  EXPECT_EQ(entry.err_data_size, 5u);
  ASSERT_NE(entry.err_data, nullptr);
  EXPECT_EQ(std::memcmp(entry.err_data, te.data.data(), 5), 0);
}

TEST(EqReadError, ConsumesTheErrorSoTheNextCallGetsAgain) {
  auto eq = make_eq(8);
  TestError te;
  ASSERT_TRUE(eq->write_error(te.make(FI_EIO, 0, 0)).ok());
  fi_eq_err_entry entry = garbage_entry();
  ASSERT_TRUE(eq->read_error(&entry, 0).ok());
  entry = garbage_entry();
  EXPECT_EQ(eq->read_error(&entry, 0).status().code(), Code::kAgain);
  uint64_t v = 0;
  EXPECT_EQ(eq->read(nullptr, &v, sizeof(v), 0).status().code(), Code::kAgain);
}

TEST(EqReadError, AgainWhenQueueIsEmpty) {
  auto eq = make_eq(8);
  fi_eq_err_entry entry = garbage_entry();
  auto r = eq->read_error(&entry, 0);
  EXPECT_EQ(r.status().code(), Code::kAgain);
  EXPECT_EQ(r.to_fi(), -FI_EAGAIN);
}

TEST(EqReadError, AgainWhenHeadIsANormalEventWhichStaysQueued) {
  auto eq = make_eq(8);
  const uint64_t v = 99;
  ASSERT_TRUE(eq->write(FI_NOTIFY, &v, sizeof(v)).ok());
  TestError te;
  ASSERT_TRUE(eq->write_error(te.make(FI_EIO, 0, 0)).ok());  // behind the normal event
  fi_eq_err_entry entry = garbage_entry();
  EXPECT_EQ(eq->read_error(&entry, 0).status().code(), Code::kAgain);
  EXPECT_EQ(eq->read_error(&entry, FI_PEEK).status().code(), Code::kAgain);
  uint64_t out = 0;
  auto r = eq->read(nullptr, &out, sizeof(out), 0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(out, v);
}

TEST(EqReadError, ErrorBehindNormalEventsIsReachedOnlyAfterTheyAreRead) {
  auto eq = make_eq(8);
  TestError te;
  const uint64_t a = 1, b = 2, c = 3;
  ASSERT_TRUE(eq->write(FI_CONNECTED, &a, sizeof(a)).ok());
  ASSERT_TRUE(eq->write(FI_CONNECTED, &b, sizeof(b)).ok());
  ASSERT_TRUE(eq->write_error(te.make(FI_ECONNRESET, 7, 0)).ok());
  ASSERT_TRUE(eq->write(FI_SHUTDOWN, &c, sizeof(c)).ok());

  uint64_t out = 0;
  fi_eq_err_entry entry = garbage_entry();
  ASSERT_TRUE(eq->read(nullptr, &out, sizeof(out), 0).ok());
  EXPECT_EQ(out, a);
  EXPECT_EQ(eq->read_error(&entry, 0).status().code(), Code::kAgain);
  ASSERT_TRUE(eq->read(nullptr, &out, sizeof(out), 0).ok());
  EXPECT_EQ(out, b);
  // Now the error is at the head: read reports it, the event behind it is not skipped to.
  EXPECT_EQ(eq->read(nullptr, &out, sizeof(out), 0).status().code(), Code::kAvail);
  ASSERT_TRUE(eq->read_error(&entry, 0).ok());
  EXPECT_EQ(entry.err, FI_ECONNRESET);
  EXPECT_EQ(entry.prov_errno, 7);
  EXPECT_EQ(eq->read_error(&entry, 0).status().code(), Code::kAgain);
  uint32_t event = ~0u;
  ASSERT_TRUE(eq->read(&event, &out, sizeof(out), 0).ok());
  EXPECT_EQ(event, static_cast<uint32_t>(FI_SHUTDOWN));
  EXPECT_EQ(out, c);
  EXPECT_EQ(eq->read(nullptr, &out, sizeof(out), 0).status().code(), Code::kAgain);
}

TEST(EqReadError, ConsecutiveErrorsAreReturnedInWriteOrder) {
  auto eq = make_eq(8);
  TestError te;
  const int errs[] = {FI_EIO, FI_ECONNREFUSED, FI_ETIMEDOUT, FI_ENOMEM};
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(eq->write_error(te.make(errs[i], 100 + i, 0)).ok());
  for (int i = 0; i < 4; ++i) {
    fi_eq_err_entry entry = garbage_entry();
    ASSERT_TRUE(eq->read_error(&entry, 0).ok());
    EXPECT_EQ(entry.err, errs[i]);
    EXPECT_EQ(entry.prov_errno, 100 + i);
  }
  fi_eq_err_entry entry = garbage_entry();
  EXPECT_EQ(eq->read_error(&entry, 0).status().code(), Code::kAgain);
}

TEST(EqReadError, PeekLeavesTheErrorQueued) {
  auto eq = make_eq(8);
  TestError te;
  te.data = pattern(12, 40);
  ASSERT_TRUE(eq->write_error(te.make(FI_EHOSTUNREACH, 3, 0)).ok());
  for (int i = 0; i < 3; ++i) {
    unsigned char user[32] = {};
    fi_eq_err_entry entry = garbage_entry();
    entry.err_data = user;
    entry.err_data_size = sizeof(user);
    ASSERT_TRUE(eq->read_error(&entry, FI_PEEK).ok());
    EXPECT_EQ(entry.err, FI_EHOSTUNREACH);
    EXPECT_EQ(entry.err_data_size, 12u);
    EXPECT_EQ(std::memcmp(user, te.data.data(), 12), 0);
  }
  uint64_t v = 0;
  EXPECT_EQ(eq->read(nullptr, &v, sizeof(v), 0).status().code(), Code::kAvail);
  fi_eq_err_entry entry = garbage_entry();
  ASSERT_TRUE(eq->read_error(&entry, 0).ok());
  EXPECT_EQ(entry.err, FI_EHOSTUNREACH);
  EXPECT_EQ(eq->read_error(&entry, 0).status().code(), Code::kAgain);
}

// --- err_data, copy mode: the caller passes err_data != NULL with err_data_size > 0 -------------

TEST(EqReadErrorData, CopiesIntoAnExactSizeUserBuffer) {
  auto eq = make_eq(8);
  TestError te;
  te.data = pattern(24, 7);
  ASSERT_TRUE(eq->write_error(te.make(FI_EIO, 0, 0)).ok());
  unsigned char user[24 + 8];
  std::memset(user, 0x5A, sizeof(user));
  fi_eq_err_entry entry = garbage_entry();
  entry.err_data = user;
  entry.err_data_size = 24;
  ASSERT_TRUE(eq->read_error(&entry, 0).ok());
  EXPECT_EQ(entry.err_data, user);
  EXPECT_EQ(entry.err_data_size, 24u);
  EXPECT_EQ(std::memcmp(user, te.data.data(), 24), 0);
  for (size_t i = 24; i < sizeof(user); ++i) EXPECT_EQ(user[i], 0x5A) << "byte " << i;
}

TEST(EqReadErrorData, LargerUserBufferGetsAllDataAndSizeIsSetToTheCopiedSize) {
  auto eq = make_eq(8);
  TestError te;
  te.data = pattern(10, 50);
  ASSERT_TRUE(eq->write_error(te.make(FI_EIO, 0, 0)).ok());
  unsigned char user[256];
  std::memset(user, 0x5A, sizeof(user));
  fi_eq_err_entry entry = garbage_entry();
  entry.err_data = user;
  entry.err_data_size = sizeof(user);
  ASSERT_TRUE(eq->read_error(&entry, 0).ok());
  EXPECT_EQ(entry.err_data, user);
  EXPECT_EQ(entry.err_data_size, 10u);
  EXPECT_EQ(std::memcmp(user, te.data.data(), 10), 0);
  for (size_t i = 10; i < sizeof(user); ++i) ASSERT_EQ(user[i], 0x5A) << "byte " << i;
}

TEST(EqReadErrorData, SmallerUserBufferIsFilledTruncatedAndSizeIsTheCopiedSize) {
  auto eq = make_eq(8);
  TestError te;
  te.data = pattern(40, 90);
  ASSERT_TRUE(eq->write_error(te.make(FI_EIO, 0, 0)).ok());
  unsigned char user[64];
  std::memset(user, 0x5A, sizeof(user));
  fi_eq_err_entry entry = garbage_entry();
  entry.err_data = user;
  entry.err_data_size = 16;  // the caller says only 16 bytes are available
  ASSERT_TRUE(eq->read_error(&entry, 0).ok());
  EXPECT_EQ(entry.err_data, user);
  EXPECT_EQ(entry.err_data_size, 16u);
  EXPECT_EQ(std::memcmp(user, te.data.data(), 16), 0);
  for (size_t i = 16; i < sizeof(user); ++i) ASSERT_EQ(user[i], 0x5A) << "byte " << i;
}

TEST(EqReadErrorData, ErrorWithoutErrDataReportsZeroSizeAndLeavesUserBufferAlone) {
  auto eq = make_eq(8);
  TestError te;  // no err_data
  ASSERT_TRUE(eq->write_error(te.make(FI_EIO, 0, 0)).ok());
  unsigned char user[16];
  std::memset(user, 0x5A, sizeof(user));
  fi_eq_err_entry entry = garbage_entry();
  entry.err_data = user;
  entry.err_data_size = sizeof(user);
  ASSERT_TRUE(eq->read_error(&entry, 0).ok());
  EXPECT_EQ(entry.err_data_size, 0u);
  for (unsigned char c : user) EXPECT_EQ(c, 0x5A);
}

TEST(EqReadErrorData, MaximumErrDataRoundTrips) {
  auto eq = make_eq(8);
  TestError te;
  te.data = pattern(kEqMaxErrData, 17);
  ASSERT_TRUE(eq->write_error(te.make(FI_EIO, 0, 0)).ok());
  std::vector<unsigned char> user(kEqMaxErrData);
  fi_eq_err_entry entry = garbage_entry();
  entry.err_data = user.data();
  entry.err_data_size = user.size();
  ASSERT_TRUE(eq->read_error(&entry, 0).ok());
  EXPECT_EQ(entry.err_data_size, kEqMaxErrData);
  EXPECT_EQ(user, te.data);
}

// --- err_data, provider-owned mode ---------------------------------------------------------------

TEST(EqReadErrorData, ZeroSizeOnInputWithNullPointerGivesProviderBuffer) {
  auto eq = make_eq(8);
  TestError te;
  te.data = pattern(20, 33);
  ASSERT_TRUE(eq->write_error(te.make(FI_EIO, 0, 0)).ok());
  fi_eq_err_entry entry = garbage_entry();
  entry.err_data = nullptr;
  entry.err_data_size = 0;
  ASSERT_TRUE(eq->read_error(&entry, 0).ok());
  ASSERT_NE(entry.err_data, nullptr);
  EXPECT_EQ(entry.err_data_size, 20u);
  EXPECT_EQ(std::memcmp(entry.err_data, te.data.data(), 20), 0);
}

TEST(EqReadErrorData, ZeroSizeOnInputWithUserPointerGivesProviderBuffer) {
  auto eq = make_eq(8);
  TestError te;
  te.data = pattern(20, 34);
  ASSERT_TRUE(eq->write_error(te.make(FI_EIO, 0, 0)).ok());
  unsigned char user[64];
  std::memset(user, 0x5A, sizeof(user));
  fi_eq_err_entry entry = garbage_entry();
  entry.err_data = user;
  entry.err_data_size = 0;
  ASSERT_TRUE(eq->read_error(&entry, 0).ok());
  ASSERT_NE(entry.err_data, nullptr);
  EXPECT_NE(entry.err_data, static_cast<void*>(user));
  EXPECT_EQ(entry.err_data_size, 20u);
  EXPECT_EQ(std::memcmp(entry.err_data, te.data.data(), 20), 0);
  for (unsigned char c : user) EXPECT_EQ(c, 0x5A);
}

TEST(EqReadErrorData, ProviderOwnedConfigIgnoresTheUserBuffer) {
  auto eq = make_eq(8, /*provider_owned=*/true);
  TestError te;
  te.data = pattern(30, 60);
  ASSERT_TRUE(eq->write_error(te.make(FI_EIO, 0, 0)).ok());
  unsigned char user[64];
  std::memset(user, 0x5A, sizeof(user));
  fi_eq_err_entry entry = garbage_entry();
  entry.err_data = user;
  entry.err_data_size = sizeof(user);
  ASSERT_TRUE(eq->read_error(&entry, 0).ok());
  ASSERT_NE(entry.err_data, nullptr);
  EXPECT_NE(entry.err_data, static_cast<void*>(user));
  EXPECT_EQ(entry.err_data_size, 30u);
  EXPECT_EQ(std::memcmp(entry.err_data, te.data.data(), 30), 0);
  for (unsigned char c : user) EXPECT_EQ(c, 0x5A);
}

TEST(EqReadErrorData, ProviderOwnedConfigReportsFullSizeEvenWithASmallerUserBuffer) {
  auto eq = make_eq(8, /*provider_owned=*/true);
  TestError te;
  te.data = pattern(100, 61);
  ASSERT_TRUE(eq->write_error(te.make(FI_EIO, 0, 0)).ok());
  unsigned char user[8];
  fi_eq_err_entry entry = garbage_entry();
  entry.err_data = user;
  entry.err_data_size = sizeof(user);
  ASSERT_TRUE(eq->read_error(&entry, 0).ok());
  ASSERT_NE(entry.err_data, nullptr);
  EXPECT_NE(entry.err_data, static_cast<void*>(user));
  EXPECT_EQ(entry.err_data_size, 100u);
  EXPECT_EQ(std::memcmp(entry.err_data, te.data.data(), 100), 0);
}

TEST(EqReadErrorData, ProviderBufferStaysValidWhileWritersReuseTheSlot) {
  // A one-slot queue: after the error is read, the next write lands in the very slot it came
  // from. The provider buffer must not be that slot's storage.
  auto eq = make_eq(1);
  TestError first;
  first.data = pattern(48, 1);
  ASSERT_TRUE(eq->write_error(first.make(FI_EIO, 0, 0)).ok());
  fi_eq_err_entry entry = garbage_entry();
  ASSERT_TRUE(eq->read_error(&entry, 0).ok());
  ASSERT_NE(entry.err_data, nullptr);
  ASSERT_EQ(entry.err_data_size, 48u);

  TestError second;
  second.data = pattern(48, 200);
  ASSERT_TRUE(eq->write_error(second.make(FI_ECONNRESET, 0, 0)).ok());
  EXPECT_EQ(std::memcmp(entry.err_data, first.data.data(), 48), 0)
      << "provider-owned err_data changed before the next read call";

  // The next read_error hands out the second error's data.
  fi_eq_err_entry entry2 = garbage_entry();
  ASSERT_TRUE(eq->read_error(&entry2, 0).ok());
  ASSERT_NE(entry2.err_data, nullptr);
  EXPECT_EQ(entry2.err_data_size, 48u);
  EXPECT_EQ(std::memcmp(entry2.err_data, second.data.data(), 48), 0);
}

TEST(EqReadErrorData, ProviderOwnedPeekGivesDataAndLeavesErrorQueued) {
  auto eq = make_eq(8, /*provider_owned=*/true);
  TestError te;
  te.data = pattern(9, 5);
  ASSERT_TRUE(eq->write_error(te.make(FI_EIO, 0, 0)).ok());
  fi_eq_err_entry entry = garbage_entry();
  ASSERT_TRUE(eq->read_error(&entry, FI_PEEK).ok());
  ASSERT_NE(entry.err_data, nullptr);
  EXPECT_EQ(entry.err_data_size, 9u);
  EXPECT_EQ(std::memcmp(entry.err_data, te.data.data(), 9), 0);
  entry = garbage_entry();
  ASSERT_TRUE(eq->read_error(&entry, 0).ok());
  EXPECT_EQ(entry.err_data_size, 9u);
  EXPECT_EQ(eq->read_error(&entry, 0).status().code(), Code::kAgain);
}

// --- write_error validation ----------------------------------------------------------------------

TEST(EqWriteError, NonPositiveErrIsInval) {
  auto eq = make_eq(8);
  TestError te;
  EXPECT_EQ(eq->write_error(te.make(0, 0, 0)).code(), Code::kInval);
  EXPECT_EQ(eq->write_error(te.make(-FI_EIO, 0, 0)).code(), Code::kInval);
  EXPECT_EQ(eq->write_error(te.make(-1, 0, 0)).to_fi(), -FI_EINVAL);
  EXPECT_EQ(eq->pending(), 0u);
  fi_eq_err_entry entry = garbage_entry();
  EXPECT_EQ(eq->read_error(&entry, 0).status().code(), Code::kAgain);
  // A positive err is accepted.
  EXPECT_TRUE(eq->write_error(te.make(1, 0, 0)).ok());
}

TEST(EqWriteError, ErrDataLargerThanMaximumIsInval) {
  auto eq = make_eq(8);
  TestError te;
  te.data = pattern(kEqMaxErrData + 1, 0);
  EXPECT_EQ(eq->write_error(te.make(FI_EIO, 0, 0)).code(), Code::kInval);
  EXPECT_EQ(eq->pending(), 0u);
  EXPECT_FALSE(eq->overrun());
  te.data.resize(kEqMaxErrData);
  EXPECT_TRUE(eq->write_error(te.make(FI_EIO, 0, 0)).ok());
  EXPECT_EQ(eq->pending(), 1u);
}

}  // namespace
}  // namespace fabq::core
