// Error strings: copy_message, describe_prov_errno, fi_errno_name, fi_errno_message.
#include "core/strerror.h"

#include <gtest/gtest.h>
#include <rdma/fi_errno.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <string>

#include "core/status.h"

namespace fabq::core {
namespace {

constexpr unsigned char kCanary = 0x5A;
constexpr size_t kArea = 128;

// A buffer larger than any `len` under test, filled with the canary.
struct Guarded {
  char bytes[kArea];
  Guarded() { std::memset(bytes, kCanary, sizeof(bytes)); }
  // True when no byte at index >= len was touched.
  bool untouched_from(size_t len) const {
    for (size_t i = len; i < kArea; ++i) {
      if (static_cast<unsigned char>(bytes[i]) != kCanary) return false;
    }
    return true;
  }
};

// Checks `out` (written with `len`) is the longest prefix of `full` that fits, terminated.
void expect_truncated_prefix(const std::string& full, const Guarded& g, const char* ret,
                             size_t len) {
  SCOPED_TRACE("len=" + std::to_string(len));
  ASSERT_EQ(ret, g.bytes);
  const size_t want = std::min(full.size(), len - 1);
  EXPECT_EQ(std::strlen(g.bytes), want);
  EXPECT_EQ(std::string(g.bytes), full.substr(0, want));
  EXPECT_TRUE(g.untouched_from(len)) << "wrote past len";
}

// --- copy_message -------------------------------------------------------------------------------

TEST(CopyMessage, CopiesTheWholeTextWhenItFitsAndReturnsBuf) {
  const char* text = "Queue has been overrun";
  Guarded g;
  const size_t len = std::strlen(text) + 1;
  const char* ret = copy_message(text, g.bytes, len);
  EXPECT_EQ(ret, g.bytes);
  EXPECT_STREQ(g.bytes, text);
  EXPECT_TRUE(g.untouched_from(len));
}

TEST(CopyMessage, LargerBufferWritesOnlyTextAndTerminator) {
  const char* text = "hello";
  Guarded g;
  copy_message(text, g.bytes, 64);
  EXPECT_STREQ(g.bytes, "hello");
  EXPECT_TRUE(g.untouched_from(6));
}

TEST(CopyMessage, TruncatesAlwaysTerminatesAndNeverWritesMoreThanLen) {
  const std::string text = "Resource temporarily unavailable";
  for (size_t len = 1; len <= text.size() + 3; ++len) {
    Guarded g;
    const char* ret = copy_message(text.c_str(), g.bytes, len);
    expect_truncated_prefix(text, g, ret, len);
  }
}

TEST(CopyMessage, LenOneGivesEmptyString) {
  Guarded g;
  const char* ret = copy_message("anything", g.bytes, 1);
  EXPECT_EQ(ret, g.bytes);
  EXPECT_EQ(g.bytes[0], '\0');
  EXPECT_TRUE(g.untouched_from(1));
}

TEST(CopyMessage, EmptyTextGivesEmptyString) {
  Guarded g;
  copy_message("", g.bytes, 16);
  EXPECT_EQ(g.bytes[0], '\0');
  EXPECT_TRUE(g.untouched_from(1));
}

TEST(CopyMessage, ZeroLenReturnsTheTextAndWritesNothing) {
  const char* text = "static text";
  Guarded g;
  const char* ret = copy_message(text, g.bytes, 0);
  EXPECT_EQ(ret, text);
  EXPECT_TRUE(g.untouched_from(0));
}

TEST(CopyMessage, NullBufReturnsTheText) {
  const char* text = "static text";
  EXPECT_EQ(copy_message(text, nullptr, 0), text);
  EXPECT_EQ(copy_message(text, nullptr, 32), text);
}

// --- describe_prov_errno ------------------------------------------------------------------------

TEST(DescribeProvErrno, ZeroIsNoProviderSpecificError) {
  Guarded g;
  const char* ret = describe_prov_errno(0, g.bytes, 64);
  EXPECT_EQ(ret, g.bytes);
  EXPECT_STREQ(g.bytes, "no provider-specific error");
  EXPECT_TRUE(g.untouched_from(64));
}

TEST(DescribeProvErrno, FabricErrnoGivesItsMessageAndName) {
  Guarded g;
  const char* ret = describe_prov_errno(FI_EOVERRUN, g.bytes, 64);
  EXPECT_EQ(ret, g.bytes);
  EXPECT_STREQ(g.bytes, "Queue has been overrun (FI_EOVERRUN)");
  Guarded g2;
  describe_prov_errno(FI_EAGAIN, g2.bytes, 64);
  EXPECT_STREQ(g2.bytes, "Resource temporarily unavailable (FI_EAGAIN)");
  Guarded g3;
  describe_prov_errno(FI_ETOOSMALL, g3.bytes, 64);
  EXPECT_STREQ(g3.bytes, "Provided buffer is too small (FI_ETOOSMALL)");
}

TEST(DescribeProvErrno, UnknownCodeIsFabqProviderErrorN) {
  Guarded g;
  describe_prov_errno(123456, g.bytes, 64);
  EXPECT_STREQ(g.bytes, "fabq provider error 123456");
  Guarded g2;
  describe_prov_errno(-7, g2.bytes, 64);
  EXPECT_STREQ(g2.bytes, "fabq provider error -7");
}

TEST(DescribeProvErrno, TinyBuffersAreTruncatedTerminatedAndNotOverrun) {
  const struct {
    int code;
    const char* full;
  } cases[] = {
      {0, "no provider-specific error"},
      {FI_EOVERRUN, "Queue has been overrun (FI_EOVERRUN)"},
      {987654, "fabq provider error 987654"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.full);
    const std::string full = c.full;
    for (size_t len = 1; len <= full.size() + 2; ++len) {
      Guarded g;
      const char* ret = describe_prov_errno(c.code, g.bytes, len);
      expect_truncated_prefix(full, g, ret, len);
    }
  }
}

TEST(DescribeProvErrno, LenOneGivesEmptyString) {
  for (int code : std::initializer_list<int>{0, FI_EOVERRUN, 424242}) {
    Guarded g;
    describe_prov_errno(code, g.bytes, 1);
    EXPECT_EQ(g.bytes[0], '\0') << code;
    EXPECT_TRUE(g.untouched_from(1)) << code;
  }
}

TEST(DescribeProvErrno, NullBufOrZeroLenReturnsAStaticStringAndWritesNothing) {
  for (int code : std::initializer_list<int>{0, FI_EOVERRUN, FI_EIO, 424242, -1}) {
    SCOPED_TRACE(code);
    const char* s = describe_prov_errno(code, nullptr, 0);
    ASSERT_NE(s, nullptr);
    EXPECT_GT(std::strlen(s), 0u);
    const char* s2 = describe_prov_errno(code, nullptr, 64);
    ASSERT_NE(s2, nullptr);
    EXPECT_GT(std::strlen(s2), 0u);
    Guarded g;
    const char* s3 = describe_prov_errno(code, g.bytes, 0);
    ASSERT_NE(s3, nullptr);
    EXPECT_NE(s3, g.bytes);
    EXPECT_GT(std::strlen(s3), 0u);
    EXPECT_TRUE(g.untouched_from(0));
  }
  EXPECT_STREQ(describe_prov_errno(0, nullptr, 0), "no provider-specific error");
}

// --- fi_errno_name / fi_errno_message -----------------------------------------------------------

TEST(FiErrnoName, KnownFabricErrnosHaveTheirSymbolicNames) {
  EXPECT_STREQ(fi_errno_name(FI_EAGAIN), "FI_EAGAIN");
  EXPECT_STREQ(fi_errno_name(FI_EAVAIL), "FI_EAVAIL");
  EXPECT_STREQ(fi_errno_name(FI_ETOOSMALL), "FI_ETOOSMALL");
  EXPECT_STREQ(fi_errno_name(FI_EOVERRUN), "FI_EOVERRUN");
  EXPECT_STREQ(fi_errno_name(FI_EINVAL), "FI_EINVAL");
  EXPECT_STREQ(fi_errno_name(FI_ENOSYS), "FI_ENOSYS");
  EXPECT_STREQ(fi_errno_name(FI_EIO), "FI_EIO");
  EXPECT_STREQ(fi_errno_name(FI_ENORX), "FI_ENORX");
}

TEST(FiErrnoName, EveryCoreStatusCodeHasItsName) {
  const struct {
    Code code;
    const char* name;
  } cases[] = {
      {Code::kAgain, "FI_EAGAIN"},       {Code::kAvail, "FI_EAVAIL"},
      {Code::kTooSmall, "FI_ETOOSMALL"}, {Code::kOverrun, "FI_EOVERRUN"},
      {Code::kInval, "FI_EINVAL"},       {Code::kNoSys, "FI_ENOSYS"},
      {Code::kNoSpace, "FI_ENOSPC"},     {Code::kNoMem, "FI_ENOMEM"},
      {Code::kBusy, "FI_EBUSY"},         {Code::kBadFlags, "FI_EBADFLAGS"},
      {Code::kIntr, "FI_EINTR"},         {Code::kIo, "FI_EIO"},
  };
  for (const auto& c : cases) {
    const char* name = fi_errno_name(static_cast<int>(c.code));
    ASSERT_NE(name, nullptr) << c.name;
    EXPECT_STREQ(name, c.name);
  }
}

TEST(FiErrnoName, UnknownCodesHaveNoName) {
  EXPECT_EQ(fi_errno_name(0), nullptr);
  EXPECT_EQ(fi_errno_name(-FI_EAGAIN), nullptr);
  EXPECT_EQ(fi_errno_name(123456), nullptr);
}

TEST(FiErrnoMessage, KnownFabricErrnosHaveTheirMessages) {
  EXPECT_STREQ(fi_errno_message(FI_EOVERRUN), "Queue has been overrun");
  EXPECT_STREQ(fi_errno_message(FI_ETOOSMALL), "Provided buffer is too small");
  EXPECT_STREQ(fi_errno_message(FI_EAVAIL), "Error available");
  EXPECT_STREQ(fi_errno_message(FI_EAGAIN), "Resource temporarily unavailable");
  EXPECT_STREQ(fi_errno_message(FI_EINVAL), "Invalid argument");
}

TEST(FiErrnoMessage, UnknownCodesStillGetANonEmptyMessage) {
  for (int code : std::initializer_list<int>{0, -1, 123456}) {
    const char* m = fi_errno_message(code);
    ASSERT_NE(m, nullptr) << code;
    EXPECT_GT(std::strlen(m), 0u) << code;
    EXPECT_STRNE(m, fi_errno_message(FI_EOVERRUN)) << code;
  }
}

TEST(FiErrnoMessage, DescribeProvErrnoUsesTheSameMessage) {
  for (int code : std::initializer_list<int>{FI_EIO, FI_ECONNREFUSED, FI_EOVERRUN, FI_ENORX}) {
    char buf[128];
    describe_prov_errno(code, buf, sizeof(buf));
    const std::string want = std::string(fi_errno_message(code)) + " (" + fi_errno_name(code) + ")";
    EXPECT_EQ(std::string(buf), want);
  }
}

}  // namespace
}  // namespace fabq::core
