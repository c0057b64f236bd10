// Atomicity of atomic_apply (fi_atomic(3): each element's update is one atomic operation): four
// threads update one element at once, lock-free (uint64, double) and under the stripe locks
// (double complex, a misaligned uint64), and no update is lost. Fetched values show every
// update saw a distinct predecessor. Also runs under ThreadSanitizer.
#include <gtest/gtest.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_domain.h>

#include <algorithm>
#include <complex>
#include <cstdint>
#include <latch>
#include <thread>
#include <vector>

#include "core/atomic_op.h"

namespace fabq::core {
namespace {

constexpr int kThreads = 4;
constexpr int kPerThread = 100'000;
constexpr uint64_t kTotal = uint64_t{kThreads} * kPerThread;

// Runs body(thread index) on kThreads threads released together, and joins them.
template <class Body>
void run_together(Body body) {
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      body(t);
    });
  }
  for (std::thread& th : threads) th.join();
}

TEST(ConcurrentAtomic, FetchSumOnOneUint64LosesNoUpdateAndFetchesEachValueOnce) {
  alignas(8) uint64_t target = 0;
  ASSERT_TRUE(atomic_lock_free(&target, FI_UINT64));
  std::vector<uint64_t> fetched(kTotal);
  run_together([&](int t) {
    const uint64_t one = 1;
    for (int i = 0; i < kPerThread; ++i) {
      atomic_apply(AtomicKind::kFetch, FI_SUM, FI_UINT64, &target, &one, nullptr,
                   &fetched[static_cast<size_t>(t) * kPerThread + i], 1);
    }
  });
  uint64_t final_value = 0;
  atomic_apply(AtomicKind::kFetch, FI_ATOMIC_READ, FI_UINT64, &target, nullptr, nullptr,
               &final_value, 1);
  EXPECT_EQ(final_value, kTotal);
  std::sort(fetched.begin(), fetched.end());
  for (uint64_t i = 0; i < kTotal; ++i) {
    ASSERT_EQ(fetched[i], i) << "a value fetched twice or never";
  }
}

TEST(ConcurrentAtomic, SumOnOneDoubleIsExact) {
  alignas(8) double target = 0;
  ASSERT_TRUE(atomic_lock_free(&target, FI_DOUBLE));
  run_together([&](int) {
    const double one = 1.0;
    for (int i = 0; i < kPerThread; ++i) {
      atomic_apply(AtomicKind::kPlain, FI_SUM, FI_DOUBLE, &target, &one, nullptr, nullptr, 1);
    }
  });
  double final_value = 0;
  atomic_apply(AtomicKind::kFetch, FI_ATOMIC_READ, FI_DOUBLE, &target, nullptr, nullptr,
               &final_value, 1);
  EXPECT_EQ(final_value, static_cast<double>(kTotal));
}

TEST(ConcurrentAtomic, SumOnOneDoubleComplexUnderTheStripeLockIsExact) {
  std::complex<double> target(0, 0);
  ASSERT_FALSE(atomic_lock_free(&target, FI_DOUBLE_COMPLEX));
  run_together([&](int) {
    const std::complex<double> step(1, 2);
    for (int i = 0; i < kPerThread; ++i) {
      atomic_apply(AtomicKind::kPlain, FI_SUM, FI_DOUBLE_COMPLEX, &target, &step, nullptr, nullptr,
                   1);
    }
  });
  std::complex<double> final_value;
  atomic_apply(AtomicKind::kFetch, FI_ATOMIC_READ, FI_DOUBLE_COMPLEX, &target, nullptr, nullptr,
               &final_value, 1);
  EXPECT_EQ(final_value, std::complex<double>(kTotal, 2.0 * kTotal));
}

TEST(ConcurrentAtomic, SumOnAMisalignedUint64UnderTheStripeLockIsExact) {
  alignas(8) unsigned char buf[16] = {};
  void* target = buf + 3;
  ASSERT_FALSE(atomic_lock_free(target, FI_UINT64));
  run_together([&](int) {
    const uint64_t one = 1;
    for (int i = 0; i < kPerThread; ++i) {
      atomic_apply(AtomicKind::kPlain, FI_SUM, FI_UINT64, target, &one, nullptr, nullptr, 1);
    }
  });
  uint64_t final_value = 0;
  atomic_apply(AtomicKind::kFetch, FI_ATOMIC_READ, FI_UINT64, target, nullptr, nullptr,
               &final_value, 1);
  EXPECT_EQ(final_value, kTotal);
}

TEST(ConcurrentAtomic, MaxOnOneDoubleKeepsTheLargestOperand) {
  alignas(8) double target = -1;
  run_together([&](int t) {
    for (int i = 0; i < kPerThread; ++i) {
      const double v = static_cast<double>(i * kThreads + t);
      atomic_apply(AtomicKind::kPlain, FI_MAX, FI_DOUBLE, &target, &v, nullptr, nullptr, 1);
    }
  });
  double final_value = 0;
  atomic_apply(AtomicKind::kFetch, FI_ATOMIC_READ, FI_DOUBLE, &target, nullptr, nullptr,
               &final_value, 1);
  EXPECT_EQ(final_value, static_cast<double>(kTotal - 1));
}

}  // namespace
}  // namespace fabq::core
