// Memory regions (fi_mr(3), fi_domain(3) FI_REG_MR) as fabq has them before RMA: it needs no
// registration (no mr_mode bits), and the regions applications register anyway are real ones,
// with the application's key unique in the domain.
#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>

#include <cstdint>
#include <vector>

#include "fabq_fixture.h"

namespace fabq::testing {
namespace {

class Mr : public FabqTest {
 protected:
  void TearDown() override {
    for (fid_mr* m : mrs_) EXPECT_EQ(fi_close(&m->fid), 0);
    FabqTest::TearDown();
  }
  int reg(void* buf, size_t len, uint64_t access, uint64_t key, fid_mr** out,
          void* context = nullptr, uint64_t flags = 0) {
    const int rc = fi_mr_reg(domain_, buf, len, access, 0, key, flags, out, context);
    if (rc == 0) mrs_.push_back(*out);
    return rc;
  }
  std::vector<fid_mr*> mrs_;
  char buf_[256];
};

TEST_F(Mr, NoRegistrationIsRequired) {
  EXPECT_EQ(info_->domain_attr->mr_mode, 0) << "no FI_MR_LOCAL: descriptors may be NULL";
  EXPECT_GE(info_->domain_attr->mr_iov_limit, 1u);
  EXPECT_GT(info_->domain_attr->mr_cnt, 0u);
}

TEST_F(Mr, ARegionHasTheApplicationsKeyAndADescriptor) {
  fid_mr* mr = nullptr;
  int ctx = 0;
  ASSERT_EQ(reg(buf_, sizeof(buf_), FI_SEND | FI_RECV, 0xC0DE, &mr, &ctx), 0);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(mr->fid.fclass, static_cast<size_t>(FI_CLASS_MR));
  EXPECT_EQ(mr->fid.context, &ctx);
  EXPECT_EQ(fi_mr_key(mr), 0xC0DEu);
  EXPECT_NE(fi_mr_desc(mr), nullptr);
}

TEST_F(Mr, AKeyInUseInTheDomainIsEnokeyUntilItsRegionCloses) {
  fid_mr* one = nullptr;
  fid_mr* two = nullptr;
  ASSERT_EQ(fi_mr_reg(domain_, buf_, 16, FI_RECV, 0, 7, 0, &one, nullptr), 0);
  EXPECT_EQ(fi_mr_reg(domain_, buf_ + 16, 16, FI_RECV, 0, 7, 0, &two, nullptr), -FI_ENOKEY);
  EXPECT_EQ(two, nullptr);
  ASSERT_EQ(fi_close(&one->fid), 0);
  EXPECT_EQ(reg(buf_ + 16, 16, FI_RECV, 7, &two), 0) << "the key is free again";
}

TEST_F(Mr, BadArgumentsAreRefusedAndRegisterNothing) {
  fid_mr* mr = nullptr;
  EXPECT_EQ(fi_mr_reg(domain_, nullptr, 16, FI_SEND, 0, 1, 0, &mr, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_mr_reg(domain_, buf_, 16, FI_SEND, 0, 1, 0, nullptr, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_mr_reg(domain_, buf_, 16, 1ULL << 60, 0, 1, 0, &mr, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_mr_reg(domain_, buf_, 16, FI_SEND, 0, 1, FI_MULTI_RECV, &mr, nullptr),
            -FI_EBADFLAGS);
  iovec two[2] = {{buf_, 8}, {buf_ + 8, 8}};
  EXPECT_EQ(fi_mr_regv(domain_, two, 2, FI_SEND, 0, 1, 0, &mr, nullptr), -FI_EINVAL)
      << "more buffers than mr_iov_limit";
  EXPECT_EQ(mr, nullptr);
  EXPECT_EQ(reg(buf_, 16, FI_SEND, 1, &mr), 0) << "key 1 was never taken";
}

TEST_F(Mr, RegattrTakesTheSameDescription) {
  iovec iov{buf_, sizeof(buf_)};
  fi_mr_attr attr{};
  attr.mr_iov = &iov;
  attr.iov_count = 1;
  attr.access = FI_READ | FI_WRITE;
  attr.requested_key = 99;
  attr.context = &attr;
  attr.iface = FI_HMEM_SYSTEM;
  fid_mr* mr = nullptr;
  ASSERT_EQ(fi_mr_regattr(domain_, &attr, 0, &mr), 0);
  mrs_.push_back(mr);
  EXPECT_EQ(fi_mr_key(mr), 99u);
  EXPECT_EQ(mr->fid.context, &attr);
  attr.iface = FI_HMEM_CUDA;
  attr.requested_key = 100;
  fid_mr* gpu = nullptr;
  EXPECT_EQ(fi_mr_regattr(domain_, &attr, 0, &gpu), -FI_ENOSYS) << "host memory only";
}

TEST_F(Mr, ADomainWithALiveRegionCannotClose) {
  fid_mr* mr = nullptr;
  ASSERT_EQ(fi_mr_reg(domain_, buf_, 16, FI_SEND, 0, 5, 0, &mr, nullptr), 0);
  EXPECT_EQ(fi_close(&domain_->fid), -FI_EBUSY);
  EXPECT_EQ(fi_close(&mr->fid), 0);
  EXPECT_EQ(fi_close(&domain_->fid), 0) << "free again";
  domain_ = nullptr;
}

TEST_F(Mr, WithFiRegMrEachRegistrationCompletesOnTheDomainsEq) {
  fid_eq* eq = open_eq({.size = 8, .wait_obj = FI_WAIT_UNSPEC});
  ASSERT_EQ(fi_domain_bind(domain_, &eq->fid, FI_REG_MR), 0);
  fid_mr* mr = nullptr;
  int ctx = 0;
  ASSERT_EQ(reg(buf_, 64, FI_RECV, 11, &mr, &ctx), 0);
  uint32_t event = 0;
  fi_eq_entry entry{};
  ASSERT_EQ(fi_eq_sread(eq, &event, &entry, sizeof(entry), 1000, 0),
            static_cast<ssize_t>(sizeof(entry)));
  EXPECT_EQ(event, static_cast<uint32_t>(FI_MR_COMPLETE));
  EXPECT_EQ(entry.fid, &mr->fid);
  EXPECT_EQ(entry.context, &ctx);
  ASSERT_EQ(fi_close(&mr->fid), 0);
  mrs_.clear();
  EXPECT_EQ(fi_close(&domain_->fid), 0);
  domain_ = nullptr;
  EXPECT_EQ(fi_close(&eq->fid), 0);
}

// A region is what peers may reach: one whose end wraps past the top of the address space would
// put every address below its start within their reach. fi_mr(3) has offset "reserved for
// future use and must be 0", and FI_KEY_NOTAVAIL is what fi_mr_key says of a region without a
// key.
TEST_F(Mr, ARangeThatWrapsTheAddressSpaceIsInvalidInEveryFormAndRegistersNothing) {
  auto* top = reinterpret_cast<char*>(UINTPTR_MAX - 15);
  fid_mr* mr = nullptr;
  EXPECT_EQ(fi_mr_reg(domain_, buf_, SIZE_MAX, FI_REMOTE_WRITE, 0, 1, 0, &mr, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_mr_reg(domain_, buf_, UINTPTR_MAX - reinterpret_cast<uintptr_t>(buf_) + 1,
                      FI_REMOTE_WRITE, 0, 1, 0, &mr, nullptr),
            -FI_EINVAL)
      << "one byte past the top";
  EXPECT_EQ(fi_mr_reg(domain_, top, 32, FI_REMOTE_READ, 0, 1, 0, &mr, nullptr), -FI_EINVAL);
  iovec wraps{buf_, SIZE_MAX};
  EXPECT_EQ(fi_mr_regv(domain_, &wraps, 1, FI_REMOTE_WRITE, 0, 1, 0, &mr, nullptr), -FI_EINVAL);
  fi_mr_attr attr{};
  attr.mr_iov = &wraps;
  attr.iov_count = 1;
  attr.access = FI_REMOTE_WRITE;
  attr.requested_key = 1;
  attr.iface = FI_HMEM_SYSTEM;
  EXPECT_EQ(fi_mr_regattr(domain_, &attr, 0, &mr), -FI_EINVAL);
  EXPECT_EQ(mr, nullptr);
  EXPECT_EQ(reg(buf_, sizeof(buf_), FI_REMOTE_WRITE, 1, &mr), 0) << "key 1 was never taken";
}

TEST_F(Mr, ANonzeroOffsetOrTheNoKeyValueAsRequestedKeyIsRefused) {
  fid_mr* mr = nullptr;
  EXPECT_EQ(fi_mr_reg(domain_, buf_, 16, FI_REMOTE_READ, 8, 2, 0, &mr, nullptr), -FI_EINVAL);
  iovec iov{buf_, 16};
  fi_mr_attr attr{};
  attr.mr_iov = &iov;
  attr.iov_count = 1;
  attr.access = FI_REMOTE_READ;
  attr.offset = 4;
  attr.requested_key = 2;
  attr.iface = FI_HMEM_SYSTEM;
  EXPECT_EQ(fi_mr_regattr(domain_, &attr, 0, &mr), -FI_EINVAL);
  EXPECT_EQ(fi_mr_reg(domain_, buf_, 16, FI_REMOTE_READ, 0, FI_KEY_NOTAVAIL, 0, &mr, nullptr),
            -FI_EKEYREJECTED);
  EXPECT_EQ(mr, nullptr);
  EXPECT_EQ(reg(buf_, 16, FI_REMOTE_READ, 2, &mr), 0);
}

// fabq's contract: overrun happens only when an event truly cannot be stored. A registration
// can still be refused, so a full FI_REG_MR EQ refuses it (-FI_EAGAIN) and stays as it was: once
// the application has read it, registrations complete there again.
TEST_F(Mr, ARegistrationThatFindsTheRegMrEqFullIsEagainAndTheEqStaysUsable) {
  fid_eq* eq = open_eq({.size = 2, .wait_obj = FI_WAIT_UNSPEC});
  ASSERT_EQ(fi_domain_bind(domain_, &eq->fid, FI_REG_MR), 0);
  fid_mr* mr = nullptr;
  uint64_t key = 1;
  int rc = 0;
  for (; key < 64; ++key) {
    rc = fi_mr_reg(domain_, buf_, 16, FI_REMOTE_READ, 0, key, 0, &mr, nullptr);
    if (rc != 0) break;
    mrs_.push_back(mr);
  }
  ASSERT_EQ(rc, -FI_EAGAIN) << "the EQ is full";
  const size_t stored = mrs_.size();
  ASSERT_GT(stored, 0u);
  // Every form finds the EQ full, and none leaves a trace.
  fid_mr* refused = nullptr;
  iovec iov{buf_ + 32, 16};
  EXPECT_EQ(fi_mr_regv(domain_, &iov, 1, FI_REMOTE_READ, 0, key, 0, &refused, nullptr), -FI_EAGAIN);
  fi_mr_attr attr{};
  attr.mr_iov = &iov;
  attr.iov_count = 1;
  attr.access = FI_REMOTE_READ;
  attr.requested_key = key;
  attr.iface = FI_HMEM_SYSTEM;
  EXPECT_EQ(fi_mr_regattr(domain_, &attr, 0, &refused), -FI_EAGAIN);
  EXPECT_EQ(refused, nullptr);
  uint32_t event = 0;
  fi_eq_entry entry{};
  for (size_t i = 0; i < stored; ++i) {
    ASSERT_EQ(fi_eq_read(eq, &event, &entry, sizeof(entry), 0),
              static_cast<ssize_t>(sizeof(entry)));
    EXPECT_EQ(event, static_cast<uint32_t>(FI_MR_COMPLETE));
  }
  EXPECT_EQ(fi_eq_read(eq, &event, &entry, sizeof(entry), 0), -FI_EAGAIN)
      << "drained, and not overrun";
  ASSERT_EQ(reg(buf_ + 32, 16, FI_REMOTE_READ, key, &mr), 0)
      << "registrations complete again, and the refused ones took no key";
  ASSERT_EQ(fi_eq_read(eq, &event, &entry, sizeof(entry), 0), static_cast<ssize_t>(sizeof(entry)));
  EXPECT_EQ(event, static_cast<uint32_t>(FI_MR_COMPLETE));
  EXPECT_EQ(entry.fid, &mr->fid);
  for (fid_mr* m : mrs_) EXPECT_EQ(fi_close(&m->fid), 0);
  mrs_.clear();
  EXPECT_EQ(fi_close(&domain_->fid), 0);
  domain_ = nullptr;
  EXPECT_EQ(fi_close(&eq->fid), 0);
}

// An EQ that has overrun is unusable for good (fi_eq(3)): no registration can complete there.
TEST_F(Mr, ARegistrationOnAnOverrunRegMrEqIsEoverrun) {
  fid_eq* eq = open_eq({.size = 1, .flags = FI_WRITE, .wait_obj = FI_WAIT_UNSPEC});
  ASSERT_EQ(fi_domain_bind(domain_, &eq->fid, FI_REG_MR), 0);
  fi_eq_entry entry{};
  ssize_t rc = 0;
  for (int i = 0; i < 64 && rc >= 0; ++i) rc = fi_eq_write(eq, FI_NOTIFY, &entry, sizeof(entry), 0);
  ASSERT_EQ(rc, -FI_EOVERRUN);
  fid_mr* mr = nullptr;
  EXPECT_EQ(fi_mr_reg(domain_, buf_, 16, FI_REMOTE_READ, 0, 1, 0, &mr, nullptr), -FI_EOVERRUN);
  EXPECT_EQ(mr, nullptr);
  EXPECT_EQ(fi_close(&domain_->fid), 0);
  domain_ = nullptr;
  EXPECT_EQ(fi_close(&eq->fid), 0);
}

// The FI_MR_COMPLETE of a region closed before it was read would name a fid that no longer
// exists, and that the next region may reuse.
TEST_F(Mr, ClosingARegionPurgesItsUnreadRegMrEvent) {
  fid_eq* eq = open_eq({.size = 8, .wait_obj = FI_WAIT_UNSPEC});
  ASSERT_EQ(fi_domain_bind(domain_, &eq->fid, FI_REG_MR), 0);
  fid_mr* gone = nullptr;
  ASSERT_EQ(fi_mr_reg(domain_, buf_, 16, FI_REMOTE_READ, 0, 1, 0, &gone, nullptr), 0);
  ASSERT_EQ(fi_close(&gone->fid), 0);
  uint32_t event = 0;
  fi_eq_entry entry{};
  EXPECT_EQ(fi_eq_read(eq, &event, &entry, sizeof(entry), 0), -FI_EAGAIN);
  EXPECT_EQ(fi_close(&domain_->fid), 0);
  domain_ = nullptr;
  EXPECT_EQ(fi_close(&eq->fid), 0);
}

}  // namespace
}  // namespace fabq::testing
