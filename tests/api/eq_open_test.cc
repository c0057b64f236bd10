// fi_eq_open through libfabric: flags, sizes and limits as fabq's contract states them.
#include <climits>
#include <cstdint>
#include <cstring>

#include "fabq_fixture.h"

namespace fabq::testing {
namespace {

class EqOpen : public FabqTest {};

TEST_F(EqOpen, FlagsOtherThanWriteAndAffinityAreBadFlags) {
  fi_eq_attr attr{};
  attr.flags = FI_REMOTE_WRITE;
  fid_eq* eq = reinterpret_cast<fid_eq*>(0x1);
  EXPECT_EQ(fi_eq_open(fabric_, &attr, &eq, nullptr), -FI_EBADFLAGS);
  EXPECT_EQ(eq, nullptr) << "a failed open leaves the output pointer NULL";
}

TEST_F(EqOpen, WriteAndAffinityFlagsAreAccepted) {
  fi_eq_attr attr{};
  attr.flags = FI_WRITE | FI_AFFINITY;
  attr.signaling_vector = 0;
  fid_eq* eq = open_eq(attr);
  ASSERT_NE(eq, nullptr);
  EXPECT_EQ(fi_close(&eq->fid), 0);
}

TEST_F(EqOpen, WriteWithoutFiWriteFlagIsInvalid) {
  fid_eq* eq = open_eq({});
  ASSERT_NE(eq, nullptr);
  fi_eq_entry e{};
  EXPECT_EQ(fi_eq_write(eq, FI_NOTIFY, &e, sizeof(e), 0), -FI_EINVAL);
  EXPECT_EQ(fi_close(&eq->fid), 0);
}

TEST_F(EqOpen, EachOtherFlagIsBadFlags) {
  for (uint64_t flags : std::initializer_list<uint64_t>{
           FI_READ, FI_RECV, FI_SEND, FI_PEEK, FI_REMOTE_READ, uint64_t{1} << 63,
           FI_WRITE | FI_READ, FI_AFFINITY | FI_REMOTE_WRITE}) {
    fi_eq_attr attr{};
    attr.flags = flags;
    fid_eq* eq = reinterpret_cast<fid_eq*>(0x1);
    EXPECT_EQ(fi_eq_open(fabric_, &attr, &eq, nullptr), -FI_EBADFLAGS) << std::hex << flags;
    EXPECT_EQ(eq, nullptr);
    if (eq != nullptr && eq != reinterpret_cast<fid_eq*>(0x1)) fi_close(&eq->fid);
  }
}

TEST_F(EqOpen, NoFlagsWriteOnlyAndAffinityOnlyAreAccepted) {
  for (uint64_t flags : std::initializer_list<uint64_t>{uint64_t{0}, FI_WRITE, FI_AFFINITY}) {
    fi_eq_attr attr{};
    attr.flags = flags;
    attr.signaling_vector = 3;
    fid_eq* eq = open_eq(attr);
    ASSERT_NE(eq, nullptr) << flags;
    EXPECT_EQ(fi_close(&eq->fid), 0);
  }
}

TEST_F(EqOpen, SizeAboveMaxIsInvalid) {
  for (size_t size : {size_t{65537}, size_t{1} << 20, size_t{1} << 40, SIZE_MAX}) {
    fi_eq_attr attr{};
    attr.size = size;
    fid_eq* eq = reinterpret_cast<fid_eq*>(0x1);
    EXPECT_EQ(fi_eq_open(fabric_, &attr, &eq, nullptr), -FI_EINVAL) << size;
    EXPECT_EQ(eq, nullptr);
    if (eq != nullptr && eq != reinterpret_cast<fid_eq*>(0x1)) fi_close(&eq->fid);
  }
}

TEST_F(EqOpen, MaxSizeIsAccepted) {
  fi_eq_attr attr{};
  attr.size = 65536;  // FI_FABQ_EQ_MAX_SIZE default
  fid_eq* eq = open_eq(attr);
  ASSERT_NE(eq, nullptr);
  EXPECT_EQ(fi_close(&eq->fid), 0);
}

// Writes events until the EQ overruns; returns how many it stored (or `limit`).
size_t capacity_of(fid_eq* eq, size_t limit) {
  for (size_t i = 0; i < limit; ++i) {
    fi_eq_entry e{};
    e.data = i;
    const ssize_t rc = fi_eq_write(eq, FI_NOTIFY, &e, sizeof(e), 0);
    if (rc == -FI_EOVERRUN) return i;
    EXPECT_EQ(rc, static_cast<ssize_t>(sizeof(e)));
    if (rc != static_cast<ssize_t>(sizeof(e))) return limit;
  }
  return limit;
}

TEST_F(EqOpen, SizeZeroMeansTheDefaultSize) {
  fi_eq_attr attr{};
  attr.flags = FI_WRITE;
  attr.size = 0;
  fid_eq* eq = open_eq(attr);
  ASSERT_NE(eq, nullptr);
  const size_t n = capacity_of(eq, size_t{1} << 17);
  // FI_FABQ_EQ_DEFAULT_SIZE is 1024; fabq rounds sizes up to a power of two (fi_fabq(7)).
  EXPECT_GE(n, 1024u);
  EXPECT_LT(n, 2048u);
  EXPECT_EQ(fi_close(&eq->fid), 0);
}

class EqOpenSize : public EqOpen, public ::testing::WithParamInterface<size_t> {};

TEST_P(EqOpenSize, SizeIsAMinimum) {
  fi_eq_attr attr{};
  attr.flags = FI_WRITE;
  attr.size = GetParam();
  fid_eq* eq = open_eq(attr);
  ASSERT_NE(eq, nullptr);
  const size_t n = capacity_of(eq, size_t{1} << 17);
  EXPECT_GE(n, GetParam()) << "an EQ of size " << GetParam() << " holds only " << n;
  EXPECT_LT(n, size_t{1} << 17) << "never overran";
  // Every stored event is still there.
  for (size_t i = 0; i < n; ++i) {
    uint32_t event = 0;
    fi_eq_entry e{};
    ASSERT_EQ(fi_eq_read(eq, &event, &e, sizeof(e), 0), static_cast<ssize_t>(sizeof(e)));
    ASSERT_EQ(e.data, i);
  }
  EXPECT_EQ(fi_close(&eq->fid), 0);
}

INSTANTIATE_TEST_SUITE_P(Sizes, EqOpenSize,
                         ::testing::Values(1, 2, 3, 5, 7, 100, 1000, 1025, 65535, 65536));

TEST_F(EqOpen, InvalidWaitObjectIsInvalid) {
  fi_eq_attr attr{};
  attr.wait_obj = static_cast<enum fi_wait_obj>(7);  // past FI_WAIT_POLLFD, within the range
  fid_eq* eq = reinterpret_cast<fid_eq*>(0x1);
  EXPECT_EQ(fi_eq_open(fabric_, &attr, &eq, nullptr), -FI_EINVAL);
  EXPECT_EQ(eq, nullptr);
}

// A C application can store any int in an enum field; fabq must reject it without loading it
// as a C++ enum (undefined for a value outside the enum's range; the UBSan build checks). The
// test stores it with memcpy so that it never forms such a value itself.
TEST_F(EqOpen, OutOfRangeWaitObjectIsInvalid) {
  for (int wait : {99, -1, INT_MAX}) {
    fi_eq_attr attr{};
    std::memcpy(&attr.wait_obj, &wait, sizeof(wait));
    fid_eq* eq = reinterpret_cast<fid_eq*>(0x1);
    EXPECT_EQ(fi_eq_open(fabric_, &attr, &eq, nullptr), -FI_EINVAL) << wait;
    EXPECT_EQ(eq, nullptr);
  }
}

TEST_F(EqOpen, ContextIsRecorded) {
  int ctx = 0;
  fid_eq* eq = open_eq({}, &ctx);
  ASSERT_NE(eq, nullptr);
  EXPECT_EQ(eq->fid.context, &ctx);
  EXPECT_EQ(eq->fid.fclass, static_cast<size_t>(FI_CLASS_EQ));
  EXPECT_EQ(fi_close(&eq->fid), 0);
}

}  // namespace
}  // namespace fabq::testing
