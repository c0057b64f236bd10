// fi_atomic(3) on fabq's RDM endpoints: fi_query_atomic "tells the truth" (every pair it accepts
// is performed, every pair it refuses is refused by the calls), fetching and compare forms
// return the target's previous values. Atomicity among peers: concurrent_rma_test.cc.
#include <rdma/fi_atomic.h>
#include <rdma/fi_domain.h>

#include <complex>
#include <cstring>
#include <vector>

#include "fabq/fi_fabq.h"
#include "rdm_fixture.h"

namespace fabq::testing {
namespace {

class Atomic : public Rdm {
 protected:
  Atomic() : Rdm(FI_MSG | FI_ATOMIC | FI_SOURCE) {}
  void SetUp() override {
    Rdm::SetUp();
    if (HasFatalFailure()) return;
    a_ = open_ep();
    b_ = open_ep();
    ASSERT_EQ(fi_mr_reg(domain_, region_, sizeof(region_), FI_REMOTE_WRITE | FI_REMOTE_READ, 0,
                        kKey, 0, &mr_, nullptr),
              0);
  }
  void TearDown() override {
    if (mr_ != nullptr) {
      EXPECT_EQ(fi_close(&mr_->fid), 0);
    }
    Rdm::TearDown();
  }
  // The initiator's next completion: 1 (its flags in *flags) or the error's prov_errno negated.
  int complete(Ep* e, uint64_t* flags = nullptr) {
    fi_cq_tagged_entry entry{};
    fi_cq_err_entry err{};
    const ssize_t n = wait_cq(e->cq, &entry, &err);
    if (n == -FI_EAVAIL) return -err.prov_errno;
    if (flags != nullptr) *flags = entry.flags;
    return static_cast<int>(n);
  }
  static constexpr uint64_t kKey = 0xA70;
  alignas(64) unsigned char region_[4096] = {};
  fid_mr* mr_ = nullptr;
  Ep* a_ = nullptr;
  Ep* b_ = nullptr;
};

TEST_F(Atomic, FetchAddReturnsThePreviousValueAndAddsAtTheTarget) {
  uint64_t* target = reinterpret_cast<uint64_t*>(region_);
  *target = 40;
  uint64_t add = 2, old = 0;
  ASSERT_EQ(fi_fetch_atomic(a_->ep, &add, 1, nullptr, &old, nullptr, b_->addr, 0, kKey, FI_UINT64,
                            FI_SUM, nullptr),
            0);
  uint64_t flags = 0;
  ASSERT_EQ(complete(a_, &flags), 1);
  EXPECT_EQ(flags, FI_ATOMIC | FI_READ);
  EXPECT_EQ(old, 40u);
  EXPECT_EQ(*target, 42u);
  ASSERT_EQ(fi_atomic(a_->ep, &add, 1, nullptr, b_->addr, 0, kKey, FI_UINT64, FI_SUM, nullptr), 0);
  ASSERT_EQ(complete(a_, &flags), 1);
  EXPECT_EQ(flags, FI_ATOMIC | FI_WRITE);
  EXPECT_EQ(*target, 44u);
}

TEST_F(Atomic, CompareSwapSwapsOnlyWhenTheCompareValueMatches) {
  int32_t* target = reinterpret_cast<int32_t*>(region_ + 64);
  *target = 7;
  int32_t value = 9, compare = 6, old = 0;
  ASSERT_EQ(fi_compare_atomic(a_->ep, &value, 1, nullptr, &compare, nullptr, &old, nullptr,
                              b_->addr, 64, kKey, FI_INT32, FI_CSWAP, nullptr),
            0);
  ASSERT_EQ(complete(a_), 1);
  EXPECT_EQ(old, 7);
  EXPECT_EQ(*target, 7) << "6 is not 7: no swap";
  compare = 7;
  ASSERT_EQ(fi_compare_atomic(a_->ep, &value, 1, nullptr, &compare, nullptr, &old, nullptr,
                              b_->addr, 64, kKey, FI_INT32, FI_CSWAP, nullptr),
            0);
  ASSERT_EQ(complete(a_), 1);
  EXPECT_EQ(old, 7);
  EXPECT_EQ(*target, 9);
}

TEST_F(Atomic, ManyElementsAndAtomicReadAndInject) {
  double* target = reinterpret_cast<double*>(region_ + 128);
  const double one[4] = {1.5, 2.5, 3.5, 4.5};
  ASSERT_EQ(
      fi_atomic(a_->ep, one, 4, nullptr, b_->addr, 128, kKey, FI_DOUBLE, FI_ATOMIC_WRITE, nullptr),
      0);
  ASSERT_EQ(complete(a_), 1);
  ASSERT_EQ(fi_inject_atomic(a_->ep, one, 4, b_->addr, 128, kKey, FI_DOUBLE, FI_SUM), 0);
  double seen[4] = {};
  ASSERT_EQ(fi_fetch_atomic(a_->ep, nullptr, 4, nullptr, seen, nullptr, b_->addr, 128, kKey,
                            FI_DOUBLE, FI_ATOMIC_READ, nullptr),
            0);
  ASSERT_EQ(complete(a_), 1) << "the inject wrote no completion; this is the read's";
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(seen[i], 2 * one[i]) << "the read sees the injected sum before it (FI_ORDER_RAW)";
    EXPECT_EQ(target[i], 2 * one[i]);
  }
}

// Every (op, datatype, kind) fi_query_atomic accepts is carried out at the target, and every
// one it refuses the calls refuse too.
TEST_F(Atomic, QueryAtomicTellsTheTruthForEveryPair) {
  int accepted = 0;
  for (int kind = 0; kind < 3; ++kind) {
    const uint64_t qflags = kind == 1 ? FI_FETCH_ATOMIC : kind == 2 ? FI_COMPARE_ATOMIC : 0;
    for (int op = FI_MIN; op < FI_ATOMIC_OP_LAST; ++op) {
      for (int dt = FI_INT8; dt < FI_DATATYPE_LAST; ++dt) {
        fi_atomic_attr attr{};
        const int q = fi_query_atomic(domain_, static_cast<fi_datatype>(dt), static_cast<fi_op>(op),
                                      &attr, qflags);
        size_t count = 0;
        const int v = kind == 0   ? fi_atomicvalid(a_->ep, static_cast<fi_datatype>(dt),
                                                   static_cast<fi_op>(op), &count)
                      : kind == 1 ? fi_fetch_atomicvalid(a_->ep, static_cast<fi_datatype>(dt),
                                                         static_cast<fi_op>(op), &count)
                                  : fi_compare_atomicvalid(a_->ep, static_cast<fi_datatype>(dt),
                                                           static_cast<fi_op>(op), &count);
        ASSERT_TRUE(q == 0 || q == -FI_EOPNOTSUPP) << op << "/" << dt << " " << q;
        EXPECT_EQ(v, q) << "the endpoint's answer is the domain's";
        unsigned char operand[64] = {}, compare[64] = {}, result[64] = {};
        std::memset(region_, 0, 64);
        if (q == 0) {
          ++accepted;
          EXPECT_GT(attr.count, 0u);
          EXPECT_LE(attr.size, 32u);
          EXPECT_EQ(count, attr.count);
        }
        ssize_t rc;
        const auto t = static_cast<fi_datatype>(dt);
        const auto o = static_cast<fi_op>(op);
        if (kind == 0) {
          rc = fi_atomic(a_->ep, operand, 1, nullptr, b_->addr, 0, kKey, t, o, nullptr);
        } else if (kind == 1) {
          rc = fi_fetch_atomic(a_->ep, operand, 1, nullptr, result, nullptr, b_->addr, 0, kKey, t,
                               o, nullptr);
        } else {
          rc = fi_compare_atomic(a_->ep, operand, 1, nullptr, compare, nullptr, result, nullptr,
                                 b_->addr, 0, kKey, t, o, nullptr);
        }
        if (q != 0) {
          EXPECT_EQ(rc, -FI_EOPNOTSUPP) << "refused by query, refused by the call";
          continue;
        }
        ASSERT_EQ(rc, 0) << op << "/" << dt;
        ASSERT_EQ(complete(a_), 1) << "performed at the target: " << op << "/" << dt;
      }
    }
  }
  EXPECT_GT(accepted, 200) << "fi_atomic(3)'s ops on every CPU datatype";
}

TEST_F(Atomic, AtomicsAreCheckedLikeEveryRemoteAccess) {
  uint64_t one = 1, old = 0;
  ASSERT_EQ(fi_atomic(a_->ep, &one, 1, nullptr, b_->addr, 0, kKey + 1, FI_UINT64, FI_SUM, nullptr),
            0);
  EXPECT_EQ(complete(a_), -FI_FABQ_RMA_BAD_KEY);
  ASSERT_EQ(fi_atomic(a_->ep, &one, 1, nullptr, b_->addr, sizeof(region_) - 4, kKey, FI_UINT64,
                      FI_SUM, nullptr),
            0);
  EXPECT_EQ(complete(a_), -FI_FABQ_RMA_OUT_OF_BOUNDS);
  fid_mr* ro = nullptr;
  uint64_t read_only = 5;
  ASSERT_EQ(fi_mr_reg(domain_, &read_only, 8, FI_REMOTE_READ, 0, kKey + 2, 0, &ro, nullptr), 0);
  ASSERT_EQ(fi_fetch_atomic(a_->ep, &one, 1, nullptr, &old, nullptr, b_->addr, 0, kKey + 2,
                            FI_UINT64, FI_SUM, nullptr),
            0);
  EXPECT_EQ(complete(a_), -FI_FABQ_RMA_NOT_GRANTED) << "an atomic writes: FI_REMOTE_WRITE";
  EXPECT_EQ(read_only, 5u);
  EXPECT_EQ(fi_close(&ro->fid), 0);
  // Bad calls are refused at once.
  EXPECT_EQ(fi_atomic(a_->ep, &one, 1, nullptr, b_->addr, 0, kKey, FI_FLOAT, FI_BOR, nullptr),
            -FI_EOPNOTSUPP);
  EXPECT_EQ(fi_atomic(a_->ep, &one, 0, nullptr, b_->addr, 0, kKey, FI_UINT64, FI_SUM, nullptr),
            -FI_EINVAL);
  EXPECT_EQ(fi_atomic(a_->ep, &one, SIZE_MAX / 4 + 1, nullptr, b_->addr, 0, kKey, FI_UINT64, FI_SUM,
                      nullptr),
            -FI_EMSGSIZE)
      << "a count whose bytes wrap around is refused, not truncated";
  std::vector<uint64_t> many(4096);
  EXPECT_EQ(fi_atomic(a_->ep, many.data(), many.size(), nullptr, b_->addr, 0, kKey, FI_UINT64,
                      FI_SUM, nullptr),
            -FI_EMSGSIZE);
  fi_atomic_attr attr{};
  EXPECT_EQ(fi_query_atomic(domain_, FI_UINT64, FI_SUM, &attr, FI_FETCH_ATOMIC | FI_COMPARE_ATOMIC),
            -FI_EBADFLAGS);
}

}  // namespace
}  // namespace fabq::testing
