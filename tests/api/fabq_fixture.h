// Test support for tests/api: opens fabq the way an application does, through libfabric only.
//
// FabqTest::SetUp: fi_getinfo(kVersion, hints: provider "fabq", domain "lo") -> fi_fabric ->
// fi_domain. TearDown closes what is still open, in reverse order. ctest sets FI_PROVIDER_PATH
// to the build's provider directory; FI_PROVIDER comes from tests/support/env.cc. Tests that
// need a connected pair use tests/support/pair.h.
#pragma once

#include <gtest/gtest.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <cstring>

#include "support/provider.h"

namespace fabq::testing {

// Hints naming fabq and the loopback interface: `hints` (fi_allocinfo() when null) filled in.
// The caller owns the result (fi_freeinfo).
inline fi_info* fabq_hints(fi_info* hints = nullptr) {
  if (hints == nullptr) hints = fi_allocinfo();
  if (hints == nullptr) return nullptr;
  hints->fabric_attr->prov_name = strdup("fabq");
  hints->domain_attr->name = strdup("lo");
  return hints;
}

// fi_getinfo(kVersion) with fabq_hints() that `edit` (called with the hints) changed first: the
// return code, and the list in *out (the caller's, fi_freeinfo).
template <class Edit>
int getinfo_edited(Edit edit, fi_info** out) {
  fi_info* hints = fabq_hints();
  if (hints == nullptr) return -FI_ENOMEM;
  edit(hints);
  const int rc = fi_getinfo(kVersion, nullptr, nullptr, 0, hints, out);
  fi_freeinfo(hints);
  return rc;
}

class FabqTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fi_info* hints = fabq_hints();
    ASSERT_NE(hints, nullptr);
    const int rc = fi_getinfo(kVersion, nullptr, nullptr, 0, hints, &info_);
    fi_freeinfo(hints);
    ASSERT_EQ(rc, 0) << "fi_getinfo: " << fi_strerror(-rc)
                     << " (is FI_PROVIDER_PATH set to the build's prov directory?)";
    ASSERT_NE(info_, nullptr);
    ASSERT_STREQ(info_->fabric_attr->prov_name, "fabq");
    ASSERT_EQ(fi_fabric(info_->fabric_attr, &fabric_, nullptr), 0);
    ASSERT_EQ(fi_domain(fabric_, info_, &domain_, nullptr), 0);
  }

  void TearDown() override {
    if (domain_ != nullptr) {
      EXPECT_EQ(fi_close(&domain_->fid), 0);
    }
    if (fabric_ != nullptr) {
      EXPECT_EQ(fi_close(&fabric_->fid), 0);
    }
    fi_freeinfo(info_);
  }

  // Opens an EQ / CQ / counter that the test closes itself (or leaks into a failure).
  fid_eq* open_eq(fi_eq_attr attr, void* context = nullptr) {
    fid_eq* eq = nullptr;
    const int rc = fi_eq_open(fabric_, &attr, &eq, context);
    EXPECT_EQ(rc, 0) << fi_strerror(-rc);
    return eq;
  }
  fid_cq* open_cq(fi_cq_attr attr, void* context = nullptr) {
    fid_cq* cq = nullptr;
    const int rc = fi_cq_open(domain_, &attr, &cq, context);
    EXPECT_EQ(rc, 0) << fi_strerror(-rc);
    return cq;
  }
  fid_cntr* open_cntr(fi_cntr_attr attr, void* context = nullptr) {
    fid_cntr* cntr = nullptr;
    const int rc = fi_cntr_open(domain_, &attr, &cntr, context);
    EXPECT_EQ(rc, 0) << fi_strerror(-rc);
    return cntr;
  }

  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
};

}  // namespace fabq::testing
