// Atomic operations of fi_atomic(3) on local memory: each op's result and fetched value on each
// class of datatype, the compare direction of the FI_CSWAP_* ops, FI_MSWAP's mask, arrays and
// misaligned targets, and the validity table fi_query_atomic reports. Concurrency is in
// concurrent_atomic_op_test.cc.
#include "core/atomic_op.h"

#include <gtest/gtest.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_domain.h>

#include <cmath>
#include <complex>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>

namespace fabq::core {
namespace {

using FloatComplex = std::complex<float>;
using DoubleComplex = std::complex<double>;
using LongDoubleComplex = std::complex<long double>;

constexpr int kIntegerTypes[] = {FI_INT8,  FI_UINT8,  FI_INT16, FI_UINT16,
                                 FI_INT32, FI_UINT32, FI_INT64, FI_UINT64};
constexpr int kRealTypes[] = {FI_FLOAT, FI_DOUBLE, FI_LONG_DOUBLE};
constexpr int kComplexTypes[] = {FI_FLOAT_COMPLEX, FI_DOUBLE_COMPLEX, FI_LONG_DOUBLE_COMPLEX};
constexpr int kBaseOps[] = {FI_MIN,  FI_MAX, FI_SUM,  FI_PROD, FI_LOR,
                            FI_LAND, FI_BOR, FI_BAND, FI_LXOR, FI_BXOR};
constexpr int kCompareOps[] = {FI_CSWAP,    FI_CSWAP_NE, FI_CSWAP_LE, FI_CSWAP_LT,
                               FI_CSWAP_GE, FI_CSWAP_GT, FI_MSWAP};

// One element: applies `op` to `target` and returns the element's new value; `*prev` gets the
// fetched value (kFetch, kCompare).
template <class T>
T apply_one(AtomicKind kind, int op, int datatype, T target, T operand, T compare = T(),
            T* prev = nullptr) {
  T result{};
  atomic_apply(kind, op, datatype, &target, &operand, &compare, &result, 1);
  if (prev != nullptr) *prev = result;
  return target;
}

template <class T>
T plain(int op, int datatype, T target, T operand) {
  return apply_one(AtomicKind::kPlain, op, datatype, target, operand);
}

template <class T>
T cswap(int op, int datatype, T target, T operand, T compare, T* prev = nullptr) {
  return apply_one(AtomicKind::kCompare, op, datatype, target, operand, compare, prev);
}

// --- Sizes and validity -------------------------------------------------------------------------

TEST(AtomicDatatypeSize, IsTheSizeOfTheCTypeAndZeroForUnknownTypes) {
  EXPECT_EQ(atomic_datatype_size(FI_INT8), 1u);
  EXPECT_EQ(atomic_datatype_size(FI_UINT8), 1u);
  EXPECT_EQ(atomic_datatype_size(FI_INT16), 2u);
  EXPECT_EQ(atomic_datatype_size(FI_UINT16), 2u);
  EXPECT_EQ(atomic_datatype_size(FI_INT32), 4u);
  EXPECT_EQ(atomic_datatype_size(FI_UINT32), 4u);
  EXPECT_EQ(atomic_datatype_size(FI_INT64), 8u);
  EXPECT_EQ(atomic_datatype_size(FI_UINT64), 8u);
  EXPECT_EQ(atomic_datatype_size(FI_FLOAT), 4u);
  EXPECT_EQ(atomic_datatype_size(FI_DOUBLE), 8u);
  EXPECT_EQ(atomic_datatype_size(FI_FLOAT_COMPLEX), 8u);
  EXPECT_EQ(atomic_datatype_size(FI_DOUBLE_COMPLEX), 16u);
  EXPECT_EQ(atomic_datatype_size(FI_LONG_DOUBLE), sizeof(long double));
  EXPECT_EQ(atomic_datatype_size(FI_LONG_DOUBLE_COMPLEX), 2 * sizeof(long double));
#ifdef __SIZEOF_INT128__
  EXPECT_EQ(atomic_datatype_size(FI_INT128), 16u);
  EXPECT_EQ(atomic_datatype_size(FI_UINT128), 16u);
#endif
  EXPECT_EQ(atomic_datatype_size(-1), 0u);
  EXPECT_EQ(atomic_datatype_size(FI_UINT128 + 1), 0u);
  EXPECT_EQ(atomic_datatype_size(FI_VOID), 0u);
}

TEST(AtomicValid, PlainTakesTheBaseOpsAndWriteButNotReadNorCompareOps) {
  for (int op : kBaseOps) EXPECT_TRUE(atomic_valid(AtomicKind::kPlain, op, FI_UINT32)) << op;
  EXPECT_TRUE(atomic_valid(AtomicKind::kPlain, FI_ATOMIC_WRITE, FI_UINT32));
  EXPECT_FALSE(atomic_valid(AtomicKind::kPlain, FI_ATOMIC_READ, FI_UINT32));
  for (int op : kCompareOps) EXPECT_FALSE(atomic_valid(AtomicKind::kPlain, op, FI_UINT32)) << op;
}

TEST(AtomicValid, FetchTakesTheBaseOpsReadAndWriteButNotCompareOps) {
  for (int op : kBaseOps) EXPECT_TRUE(atomic_valid(AtomicKind::kFetch, op, FI_INT64)) << op;
  EXPECT_TRUE(atomic_valid(AtomicKind::kFetch, FI_ATOMIC_READ, FI_INT64));
  EXPECT_TRUE(atomic_valid(AtomicKind::kFetch, FI_ATOMIC_WRITE, FI_INT64));
  for (int op : kCompareOps) EXPECT_FALSE(atomic_valid(AtomicKind::kFetch, op, FI_INT64)) << op;
}

TEST(AtomicValid, CompareTakesOnlyTheCswapOpsAndMswap) {
  for (int op : kCompareOps) EXPECT_TRUE(atomic_valid(AtomicKind::kCompare, op, FI_INT8)) << op;
  for (int op : kBaseOps) EXPECT_FALSE(atomic_valid(AtomicKind::kCompare, op, FI_INT8)) << op;
  EXPECT_FALSE(atomic_valid(AtomicKind::kCompare, FI_ATOMIC_READ, FI_INT8));
  EXPECT_FALSE(atomic_valid(AtomicKind::kCompare, FI_ATOMIC_WRITE, FI_INT8));
}

TEST(AtomicValid, IntegersTakeEveryOpOfTheirKind) {
  for (int dt : kIntegerTypes) {
    for (int op : kBaseOps) {
      EXPECT_TRUE(atomic_valid(AtomicKind::kPlain, op, dt)) << op << " " << dt;
      EXPECT_TRUE(atomic_valid(AtomicKind::kFetch, op, dt)) << op << " " << dt;
    }
    for (int op : kCompareOps) EXPECT_TRUE(atomic_valid(AtomicKind::kCompare, op, dt)) << dt;
  }
}

TEST(AtomicValid, BitwiseOpsAndMswapOnlyOnIntegers) {
  for (int dt : {FI_FLOAT, FI_DOUBLE, FI_LONG_DOUBLE, FI_FLOAT_COMPLEX, FI_DOUBLE_COMPLEX,
                 FI_LONG_DOUBLE_COMPLEX}) {
    for (int op : {FI_BOR, FI_BAND, FI_BXOR}) {
      EXPECT_FALSE(atomic_valid(AtomicKind::kPlain, op, dt)) << op << " " << dt;
      EXPECT_FALSE(atomic_valid(AtomicKind::kFetch, op, dt)) << op << " " << dt;
    }
    EXPECT_FALSE(atomic_valid(AtomicKind::kCompare, FI_MSWAP, dt)) << dt;
  }
}

TEST(AtomicValid, RealsTakeOrderedAndLogicalOps) {
  for (int dt : kRealTypes) {
    for (int op : {FI_MIN, FI_MAX, FI_SUM, FI_PROD, FI_LOR, FI_LAND, FI_LXOR, FI_ATOMIC_WRITE}) {
      EXPECT_TRUE(atomic_valid(AtomicKind::kPlain, op, dt)) << op << " " << dt;
    }
    EXPECT_TRUE(atomic_valid(AtomicKind::kFetch, FI_ATOMIC_READ, dt)) << dt;
    for (int op : {FI_CSWAP, FI_CSWAP_NE, FI_CSWAP_LE, FI_CSWAP_LT, FI_CSWAP_GE, FI_CSWAP_GT}) {
      EXPECT_TRUE(atomic_valid(AtomicKind::kCompare, op, dt)) << op << " " << dt;
    }
  }
}

TEST(AtomicValid, ComplexTypesHaveNoOrderButSumProdLogicalReadWriteAndEquality) {
  for (int dt : kComplexTypes) {
    for (int op : {FI_MIN, FI_MAX}) {
      EXPECT_FALSE(atomic_valid(AtomicKind::kPlain, op, dt)) << op << " " << dt;
      EXPECT_FALSE(atomic_valid(AtomicKind::kFetch, op, dt)) << op << " " << dt;
    }
    for (int op : {FI_CSWAP_LE, FI_CSWAP_LT, FI_CSWAP_GE, FI_CSWAP_GT}) {
      EXPECT_FALSE(atomic_valid(AtomicKind::kCompare, op, dt)) << op << " " << dt;
    }
    for (int op : {FI_SUM, FI_PROD, FI_LOR, FI_LAND, FI_LXOR, FI_ATOMIC_WRITE}) {
      EXPECT_TRUE(atomic_valid(AtomicKind::kFetch, op, dt)) << op << " " << dt;
    }
    EXPECT_TRUE(atomic_valid(AtomicKind::kFetch, FI_ATOMIC_READ, dt)) << dt;
    EXPECT_TRUE(atomic_valid(AtomicKind::kCompare, FI_CSWAP, dt)) << dt;
    EXPECT_TRUE(atomic_valid(AtomicKind::kCompare, FI_CSWAP_NE, dt)) << dt;
  }
}

TEST(AtomicValid, UnknownOpDatatypeOrKindIsInvalid) {
  EXPECT_FALSE(atomic_valid(AtomicKind::kPlain, -1, FI_INT32));
  EXPECT_FALSE(atomic_valid(AtomicKind::kFetch, FI_ATOMIC_OP_LAST, FI_INT32));
  EXPECT_FALSE(atomic_valid(AtomicKind::kFetch, FI_NOOP, FI_INT32));
  EXPECT_FALSE(atomic_valid(AtomicKind::kPlain, FI_SUM, -1));
  EXPECT_FALSE(atomic_valid(AtomicKind::kPlain, FI_SUM, FI_UINT128 + 1));
  EXPECT_FALSE(atomic_valid(AtomicKind::kPlain, FI_SUM, FI_VOID));
  EXPECT_FALSE(atomic_valid(static_cast<AtomicKind>(7), FI_SUM, FI_INT32));
}

TEST(AtomicApply, InvalidCombinationLeavesTargetAndResultUntouched) {
  float target = 1.5f;
  float operand = 2.0f;
  float result = -7.0f;
  atomic_apply(AtomicKind::kFetch, FI_BOR, FI_FLOAT, &target, &operand, nullptr, &result, 1);
  EXPECT_EQ(target, 1.5f);
  EXPECT_EQ(result, -7.0f);
}

// --- Each op ------------------------------------------------------------------------------------

TEST(AtomicMin, StoresTheOperandOnlyWhenItIsSmaller) {
  EXPECT_EQ(plain<int32_t>(FI_MIN, FI_INT32, 5, -3), -3);
  EXPECT_EQ(plain<int32_t>(FI_MIN, FI_INT32, -5, 3), -5);
  EXPECT_EQ(plain<uint8_t>(FI_MIN, FI_UINT8, 200, 7), 7);
  EXPECT_EQ(plain<uint64_t>(FI_MIN, FI_UINT64, 1, ~uint64_t{0}), 1u);
  EXPECT_EQ(plain<double>(FI_MIN, FI_DOUBLE, 2.5, -1.25), -1.25);
  EXPECT_EQ(plain<double>(FI_MIN, FI_DOUBLE, -2.5, 1.25), -2.5);
  EXPECT_EQ(plain<long double>(FI_MIN, FI_LONG_DOUBLE, 3.0L, 2.0L), 2.0L);
}

TEST(AtomicMax, StoresTheOperandOnlyWhenItIsLarger) {
  EXPECT_EQ(plain<int16_t>(FI_MAX, FI_INT16, -5, 3), 3);
  EXPECT_EQ(plain<int16_t>(FI_MAX, FI_INT16, 5, -3), 5);
  EXPECT_EQ(plain<uint32_t>(FI_MAX, FI_UINT32, 1, 0x80000000u), 0x80000000u);
  EXPECT_EQ(plain<float>(FI_MAX, FI_FLOAT, 1.5f, 2.5f), 2.5f);
  EXPECT_EQ(plain<float>(FI_MAX, FI_FLOAT, 1.5f, -2.5f), 1.5f);
}

TEST(AtomicSum, AddsAndIntegersWrapAround) {
  EXPECT_EQ(plain<int64_t>(FI_SUM, FI_INT64, std::numeric_limits<int64_t>::max(), 1),
            std::numeric_limits<int64_t>::min());
  EXPECT_EQ(plain<int32_t>(FI_SUM, FI_INT32, -7, 3), -4);
  EXPECT_EQ(plain<uint16_t>(FI_SUM, FI_UINT16, 65535, 2), 1);
  EXPECT_EQ(plain<int8_t>(FI_SUM, FI_INT8, 127, 1), -128);
  EXPECT_EQ(plain<float>(FI_SUM, FI_FLOAT, 1.5f, 0.25f), 1.75f);
  EXPECT_EQ(plain<double>(FI_SUM, FI_DOUBLE, 1.5, -0.25), 1.25);
  EXPECT_EQ(plain<long double>(FI_SUM, FI_LONG_DOUBLE, 1.5L, 0.25L), 1.75L);
  EXPECT_EQ(plain<FloatComplex>(FI_SUM, FI_FLOAT_COMPLEX, {1, 2}, {3, -4}), FloatComplex(4, -2));
  EXPECT_EQ(plain<DoubleComplex>(FI_SUM, FI_DOUBLE_COMPLEX, {1, 2}, {0.5, 0.25}),
            DoubleComplex(1.5, 2.25));
  EXPECT_EQ(plain<LongDoubleComplex>(FI_SUM, FI_LONG_DOUBLE_COMPLEX, {1, 2}, {3, 4}),
            LongDoubleComplex(4, 6));
}

TEST(AtomicProd, MultipliesAndIntegersWrapAround) {
  EXPECT_EQ(plain<int32_t>(FI_PROD, FI_INT32, 0x10000, 0x10000), 0);
  EXPECT_EQ(plain<int32_t>(FI_PROD, FI_INT32, -6, 7), -42);
  EXPECT_EQ(plain<uint16_t>(FI_PROD, FI_UINT16, 65535, 65535), 1);  // not int overflow
  EXPECT_EQ(plain<int64_t>(FI_PROD, FI_INT64, std::numeric_limits<int64_t>::min(), -1),
            std::numeric_limits<int64_t>::min());
  EXPECT_EQ(plain<double>(FI_PROD, FI_DOUBLE, 1.5, -4.0), -6.0);
  EXPECT_EQ(plain<FloatComplex>(FI_PROD, FI_FLOAT_COMPLEX, {1, 2}, {3, 4}), FloatComplex(-5, 10));
  EXPECT_EQ(plain<DoubleComplex>(FI_PROD, FI_DOUBLE_COMPLEX, {0, 1}, {0, 1}), DoubleComplex(-1, 0));
  EXPECT_EQ(plain<LongDoubleComplex>(FI_PROD, FI_LONG_DOUBLE_COMPLEX, {2, 0}, {3, 1}),
            LongDoubleComplex(6, 2));
}

TEST(AtomicLogical, LorLandLxorStoreOneOrZero) {
  EXPECT_EQ(plain<int32_t>(FI_LOR, FI_INT32, 0, 0), 0);
  EXPECT_EQ(plain<int32_t>(FI_LOR, FI_INT32, 0, -3), 1);
  EXPECT_EQ(plain<int32_t>(FI_LOR, FI_INT32, 5, 0), 1);
  EXPECT_EQ(plain<uint8_t>(FI_LAND, FI_UINT8, 5, 9), 1);
  EXPECT_EQ(plain<uint8_t>(FI_LAND, FI_UINT8, 5, 0), 0);
  EXPECT_EQ(plain<uint8_t>(FI_LAND, FI_UINT8, 0, 9), 0);
  EXPECT_EQ(plain<int64_t>(FI_LXOR, FI_INT64, 5, 9), 0);
  EXPECT_EQ(plain<int64_t>(FI_LXOR, FI_INT64, 5, 0), 1);
  EXPECT_EQ(plain<int64_t>(FI_LXOR, FI_INT64, 0, -9), 1);
  EXPECT_EQ(plain<int64_t>(FI_LXOR, FI_INT64, 0, 0), 0);
  EXPECT_EQ(plain<double>(FI_LOR, FI_DOUBLE, 0.0, 2.5), 1.0);
  EXPECT_EQ(plain<double>(FI_LAND, FI_DOUBLE, 0.5, 2.5), 1.0);
  EXPECT_EQ(plain<double>(FI_LAND, FI_DOUBLE, -0.0, 2.5), 0.0);
  EXPECT_EQ(plain<float>(FI_LXOR, FI_FLOAT, 0.5f, 2.5f), 0.0f);
  EXPECT_EQ(plain<DoubleComplex>(FI_LOR, FI_DOUBLE_COMPLEX, {0, 0}, {0, 3}), DoubleComplex(1, 0));
  EXPECT_EQ(plain<DoubleComplex>(FI_LAND, FI_DOUBLE_COMPLEX, {0, 2}, {0, 0}), DoubleComplex(0, 0));
  EXPECT_EQ(plain<FloatComplex>(FI_LXOR, FI_FLOAT_COMPLEX, {0, 2}, {0, 0}), FloatComplex(1, 0));
}

TEST(AtomicBitwise, BorBandBxor) {
  EXPECT_EQ(plain<uint32_t>(FI_BOR, FI_UINT32, 0xF0F0'0000u, 0x0000'0F0Fu), 0xF0F0'0F0Fu);
  EXPECT_EQ(plain<uint32_t>(FI_BAND, FI_UINT32, 0xFF00'FF00u, 0x0FF0'0FF0u), 0x0F00'0F00u);
  EXPECT_EQ(plain<uint32_t>(FI_BXOR, FI_UINT32, 0xFF00'FF00u, 0x0FF0'0FF0u), 0xF0F0'F0F0u);
  EXPECT_EQ(plain<int8_t>(FI_BOR, FI_INT8, -128, 1), -127);
  EXPECT_EQ(plain<int8_t>(FI_BAND, FI_INT8, -1, 0x55), 0x55);
  EXPECT_EQ(plain<int16_t>(FI_BXOR, FI_INT16, -1, 0x00FF), static_cast<int16_t>(0xFF00));
  EXPECT_EQ(plain<uint64_t>(FI_BXOR, FI_UINT64, ~uint64_t{0}, 1), ~uint64_t{1});
}

TEST(AtomicRead, FetchReturnsTheValueLeavesItAndIgnoresANullOperand) {
  uint64_t target = 0x1122'3344'5566'7788u;
  uint64_t result = 0;
  atomic_apply(AtomicKind::kFetch, FI_ATOMIC_READ, FI_UINT64, &target, nullptr, nullptr, &result,
               1);
  EXPECT_EQ(result, 0x1122'3344'5566'7788u);
  EXPECT_EQ(target, 0x1122'3344'5566'7788u);

  DoubleComplex z(1.5, -2.5);
  DoubleComplex zr;
  atomic_apply(AtomicKind::kFetch, FI_ATOMIC_READ, FI_DOUBLE_COMPLEX, &z, nullptr, nullptr, &zr, 1);
  EXPECT_EQ(zr, DoubleComplex(1.5, -2.5));
  EXPECT_EQ(z, DoubleComplex(1.5, -2.5));
}

TEST(AtomicWrite, StoresTheOperandAndFetchReturnsTheOldValue) {
  EXPECT_EQ(plain<int32_t>(FI_ATOMIC_WRITE, FI_INT32, 5, -9), -9);
  double prev = 0;
  EXPECT_EQ(apply_one<double>(AtomicKind::kFetch, FI_ATOMIC_WRITE, FI_DOUBLE, 1.25, 2.5, 0, &prev),
            2.5);
  EXPECT_EQ(prev, 1.25);
  LongDoubleComplex lprev;
  EXPECT_EQ(apply_one<LongDoubleComplex>(AtomicKind::kFetch, FI_ATOMIC_WRITE,
                                         FI_LONG_DOUBLE_COMPLEX, {1, 2}, {3, 4}, {}, &lprev),
            LongDoubleComplex(3, 4));
  EXPECT_EQ(lprev, LongDoubleComplex(1, 2));
}

TEST(AtomicFetch, EveryFetchOpReturnsTheValueFromBefore) {
  for (int op : kBaseOps) {
    int32_t prev = 0;
    apply_one<int32_t>(AtomicKind::kFetch, op, FI_INT32, 12, 10, 0, &prev);
    EXPECT_EQ(prev, 12) << op;
  }
  float fprev = 0;
  EXPECT_EQ(apply_one<float>(AtomicKind::kFetch, FI_SUM, FI_FLOAT, 1.5f, 2.0f, 0, &fprev), 3.5f);
  EXPECT_EQ(fprev, 1.5f);
  FloatComplex cprev;
  EXPECT_EQ(apply_one<FloatComplex>(AtomicKind::kFetch, FI_PROD, FI_FLOAT_COMPLEX, {0, 2}, {0, 3},
                                    {}, &cprev),
            FloatComplex(-6, 0));
  EXPECT_EQ(cprev, FloatComplex(0, 2));
}

// A long double is 10 bytes of value in 16 here: what a fetch returns is the target's 16 bytes
// as they were, the 6 unused ones too, as a peer that compares buffers bytewise would expect.
TEST(AtomicFetch, TheFetchedBytesAreTheTargetsAsTheyWereEvenWhereTheTypeHasUnusedBytes) {
  struct Case {
    AtomicKind kind;
    int op;
    int datatype;
  };
  const Case cases[] = {{AtomicKind::kFetch, FI_SUM, FI_LONG_DOUBLE},
                        {AtomicKind::kFetch, FI_MIN, FI_LONG_DOUBLE},
                        {AtomicKind::kFetch, FI_ATOMIC_READ, FI_LONG_DOUBLE},
                        {AtomicKind::kFetch, FI_ATOMIC_WRITE, FI_LONG_DOUBLE},
                        {AtomicKind::kCompare, FI_CSWAP, FI_LONG_DOUBLE},
                        {AtomicKind::kFetch, FI_SUM, FI_LONG_DOUBLE_COMPLEX},
                        {AtomicKind::kCompare, FI_CSWAP, FI_LONG_DOUBLE_COMPLEX}};
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "op " << c.op << " datatype " << c.datatype);
    const size_t n = atomic_datatype_size(c.datatype);
    ASSERT_LE(n, 32u);
    alignas(16) unsigned char target[32];
    alignas(16) unsigned char before[32];
    alignas(16) unsigned char operand[32] = {};
    alignas(16) unsigned char compare[32] = {};
    alignas(16) unsigned char result[32] = {};
    // The values 2 (and 2 + 0i), with every unused byte 0xa5.
    std::memset(target, 0xa5, sizeof target);
    const long double two = 2;
    std::memcpy(target, &two, 10);
    if (c.datatype == FI_LONG_DOUBLE_COMPLEX) {
      const long double zero = 0;
      std::memcpy(target + n / 2, &zero, 10);
    }
    std::memcpy(before, target, n);
    const long double one = 1;
    std::memcpy(operand, &one, 10);
    std::memcpy(compare, target, n);  // equal: the swap happens
    atomic_apply(c.kind, c.op, c.datatype, target, operand, compare, result, 1);
    EXPECT_EQ(std::memcmp(result, before, n), 0);
  }
}

// compare <op> target, the compare value on the left (fi_atomic(3)): for each op, whether it
// swaps when compare is below, equal to and above the target.
struct CswapCase {
  int op;
  bool swaps_when_below, swaps_when_equal, swaps_when_above;
};
constexpr CswapCase kCswapCases[] = {
    {FI_CSWAP, false, true, false},   {FI_CSWAP_NE, true, false, true},
    {FI_CSWAP_LE, true, true, false}, {FI_CSWAP_LT, true, false, false},
    {FI_CSWAP_GE, false, true, true}, {FI_CSWAP_GT, false, false, true},
};

template <class T>
void check_cswap_direction(int datatype, T below, T target, T above, T operand) {
  for (const CswapCase& c : kCswapCases) {
    SCOPED_TRACE(::testing::Message() << "op " << c.op << " datatype " << datatype);
    const T compares[] = {below, target, above};
    const bool swaps[] = {c.swaps_when_below, c.swaps_when_equal, c.swaps_when_above};
    for (int i = 0; i < 3; ++i) {
      T prev{};
      EXPECT_EQ(cswap<T>(c.op, datatype, target, operand, compares[i], &prev),
                swaps[i] ? operand : target)
          << "compare #" << i;
      EXPECT_EQ(prev, target) << "compare #" << i;
    }
  }
}

TEST(AtomicCswap, ComparesCompareOnTheLeftOfTheTarget) {
  check_cswap_direction<int32_t>(FI_INT32, -10, 5, 20, 99);
  check_cswap_direction<uint64_t>(FI_UINT64, 1, 0x8000'0000'0000'0000u, ~uint64_t{0}, 7);
  check_cswap_direction<int8_t>(FI_INT8, -128, -1, 127, 42);
  check_cswap_direction<double>(FI_DOUBLE, -1.5, 0.5, 2.5, 9.0);
  check_cswap_direction<float>(FI_FLOAT, -1.5f, 0.5f, 2.5f, 9.0f);
  check_cswap_direction<long double>(FI_LONG_DOUBLE, -1.5L, 0.5L, 2.5L, 9.0L);
}

TEST(AtomicCswap, LeSwapsWhenCompareIsAtMostTheTarget) {
  // The man page's example direction spelled out: FI_CSWAP_LE is compare <= *addr.
  EXPECT_EQ(cswap<int32_t>(FI_CSWAP_LE, FI_INT32, 2, 100, 1), 100);
  EXPECT_EQ(cswap<int32_t>(FI_CSWAP_LE, FI_INT32, 2, 100, 3), 2);
}

TEST(AtomicCswap, FloatingPointComparesValuesNotBits) {
  EXPECT_EQ(cswap<double>(FI_CSWAP, FI_DOUBLE, 0.0, 7.0, -0.0), 7.0);
  EXPECT_EQ(cswap<double>(FI_CSWAP_NE, FI_DOUBLE, 0.0, 7.0, -0.0), 0.0);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(std::isnan(cswap<double>(FI_CSWAP, FI_DOUBLE, nan, 7.0, nan)));
  EXPECT_EQ(cswap<double>(FI_CSWAP_NE, FI_DOUBLE, nan, 7.0, nan), 7.0);
}

TEST(AtomicCswap, ComplexEqualityAndInequality) {
  DoubleComplex prev;
  EXPECT_EQ(cswap<DoubleComplex>(FI_CSWAP, FI_DOUBLE_COMPLEX, {1, 2}, {5, 6}, {1, 2}, &prev),
            DoubleComplex(5, 6));
  EXPECT_EQ(prev, DoubleComplex(1, 2));
  EXPECT_EQ(cswap<DoubleComplex>(FI_CSWAP, FI_DOUBLE_COMPLEX, {1, 2}, {5, 6}, {1, 3}),
            DoubleComplex(1, 2));
  EXPECT_EQ(cswap<FloatComplex>(FI_CSWAP_NE, FI_FLOAT_COMPLEX, {1, 2}, {5, 6}, {1, 3}),
            FloatComplex(5, 6));
  EXPECT_EQ(cswap<FloatComplex>(FI_CSWAP_NE, FI_FLOAT_COMPLEX, {1, 2}, {5, 6}, {1, 2}),
            FloatComplex(1, 2));
  EXPECT_EQ(cswap<LongDoubleComplex>(FI_CSWAP, FI_LONG_DOUBLE_COMPLEX, {1, 2}, {5, 6}, {1, 2}),
            LongDoubleComplex(5, 6));
}

TEST(AtomicMswap, TakesTheOperandsBitsWhereTheMaskIsSetAndKeepsTheRest) {
  uint16_t prev = 0;
  EXPECT_EQ(cswap<uint16_t>(FI_MSWAP, FI_UINT16, 0xAAAA, 0x1234, 0x00FF, &prev), 0xAA34);
  EXPECT_EQ(prev, 0xAAAA);
  EXPECT_EQ(cswap<uint64_t>(FI_MSWAP, FI_UINT64, 0, ~uint64_t{0}, 0xF0), 0xF0u);
  EXPECT_EQ(cswap<int8_t>(FI_MSWAP, FI_INT8, -1, 0, 0x0F), static_cast<int8_t>(0xF0));
  EXPECT_EQ(cswap<uint32_t>(FI_MSWAP, FI_UINT32, 0x1234'5678u, 0xFFFF'FFFFu, 0), 0x1234'5678u);
}

#ifdef __SIZEOF_INT128__
TEST(AtomicInt128, SumCarriesAcrossTheHalvesAndCswapCompares) {
  __extension__ typedef unsigned __int128 U128;
  const U128 low_max = ~uint64_t{0};
  EXPECT_TRUE(plain<U128>(FI_SUM, FI_UINT128, low_max, 1) == (U128{1} << 64));
  EXPECT_TRUE(plain<U128>(FI_SUM, FI_UINT128, ~U128{0}, 1) == 0);
  EXPECT_TRUE(cswap<U128>(FI_CSWAP_LT, FI_UINT128, U128{1} << 100, 3, 5) == 3);
  EXPECT_TRUE(cswap<U128>(FI_MSWAP, FI_UINT128, ~U128{0}, 0, U128{1} << 127) == ~U128{0} >> 1);
}
#endif

// --- Arrays, alignment --------------------------------------------------------------------------

TEST(AtomicApply, CountElementsEachWithItsOwnOperandAndResult) {
  uint32_t target[5] = {1, 2, 3, 4, 5};
  const uint32_t operand[5] = {10, 20, 30, 40, 50};
  uint32_t result[5] = {};
  atomic_apply(AtomicKind::kFetch, FI_SUM, FI_UINT32, target, operand, nullptr, result, 5);
  EXPECT_EQ(target[0], 11u);
  EXPECT_EQ(target[4], 55u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(result[i], static_cast<uint32_t>(i + 1));

  double d[3] = {1, 5, 9};
  const double dc[3] = {1, 4, 9};
  const double dop[3] = {-1, -2, -3};
  double dr[3] = {};
  atomic_apply(AtomicKind::kCompare, FI_CSWAP, FI_DOUBLE, d, dop, dc, dr, 3);
  EXPECT_EQ(d[0], -1.0);
  EXPECT_EQ(d[1], 5.0);
  EXPECT_EQ(d[2], -3.0);
  EXPECT_EQ(dr[1], 5.0);
}

TEST(AtomicApply, PlainAcceptsANullResult) {
  DoubleComplex z[2] = {{1, 1}, {2, 2}};
  const DoubleComplex add[2] = {{1, 0}, {0, 1}};
  atomic_apply(AtomicKind::kPlain, FI_SUM, FI_DOUBLE_COMPLEX, z, add, nullptr, nullptr, 2);
  EXPECT_EQ(z[0], DoubleComplex(2, 1));
  EXPECT_EQ(z[1], DoubleComplex(2, 3));
}

TEST(AtomicApply, MisalignedTargetOperandsAndResultsTakeTheLockedPath) {
  alignas(8) unsigned char target[1 + 3 * 8];
  alignas(8) unsigned char operand[3 + 3 * 8];
  alignas(8) unsigned char result[5 + 3 * 8];
  for (uint64_t i = 0; i < 3; ++i) {
    const uint64_t t = 100 * (i + 1);
    const uint64_t o = i + 1;
    std::memcpy(target + 1 + 8 * i, &t, 8);
    std::memcpy(operand + 3 + 8 * i, &o, 8);
  }
  EXPECT_FALSE(atomic_lock_free(target + 1, FI_UINT64));
  atomic_apply(AtomicKind::kFetch, FI_SUM, FI_UINT64, target + 1, operand + 3, nullptr, result + 5,
               3);
  for (uint64_t i = 0; i < 3; ++i) {
    uint64_t t;
    uint64_t r;
    std::memcpy(&t, target + 1 + 8 * i, 8);
    std::memcpy(&r, result + 5 + 8 * i, 8);
    EXPECT_EQ(t, 100 * (i + 1) + i + 1);
    EXPECT_EQ(r, 100 * (i + 1));
  }

  alignas(8) unsigned char f[4 + sizeof(FloatComplex)];
  const FloatComplex one(1, 2);
  const FloatComplex add(3, 4);
  std::memcpy(f + 4, &one, sizeof(one));
  EXPECT_FALSE(atomic_lock_free(f + 4, FI_FLOAT_COMPLEX));
  atomic_apply(AtomicKind::kPlain, FI_SUM, FI_FLOAT_COMPLEX, f + 4, &add, nullptr, nullptr, 1);
  FloatComplex got;
  std::memcpy(&got, f + 4, sizeof(got));
  EXPECT_EQ(got, FloatComplex(4, 6));
}

TEST(AtomicLockFree, NaturallyAlignedElementsOfUpToEightBytes) {
  alignas(16) unsigned char buf[32] = {};
  EXPECT_TRUE(atomic_lock_free(buf + 1, FI_UINT8));
  EXPECT_TRUE(atomic_lock_free(buf + 2, FI_INT16));
  EXPECT_FALSE(atomic_lock_free(buf + 1, FI_INT16));
  EXPECT_TRUE(atomic_lock_free(buf + 4, FI_FLOAT));
  EXPECT_TRUE(atomic_lock_free(buf + 8, FI_DOUBLE));
  EXPECT_FALSE(atomic_lock_free(buf + 4, FI_DOUBLE));
  EXPECT_TRUE(atomic_lock_free(buf + 8, FI_FLOAT_COMPLEX));
  EXPECT_FALSE(atomic_lock_free(buf, FI_DOUBLE_COMPLEX));
  EXPECT_FALSE(atomic_lock_free(buf, FI_LONG_DOUBLE_COMPLEX));
  EXPECT_FALSE(atomic_lock_free(buf, -1));
}

}  // namespace
}  // namespace fabq::core
