// "No allocation after construction": the write and read paths of EQs and CQs never touch the
// heap, and neither does the handshake's authentication (hashes, MACs, nonces). This binary
// replaces malloc & co. with counting wrappers (tests/support/alloc_counter.h) and counts
// allocations across many calls after the objects are built.
#include <gtest/gtest.h>
#include <rdma/fi_eq.h>

#include <cstdlib>
#include <cstring>

#include "core/cq.h"
#include "core/eq.h"
#include "core/hmac.h"
#include "support/alloc_counter.h"

namespace fabq::core {
namespace {

using fabq::testing::heap_allocations;

TEST(NoAllocation, EqWriteAndReadOfEveryEventKindAllocateNothing) {
  auto eq = EventQueue::create({.size = 64, .wait = WaitKind::kFd}).value();
  fi_eq_entry e{nullptr, nullptr, 0};
  unsigned char cm[sizeof(fi_eq_cm_entry) + 64] = {};
  unsigned char out[kEqMaxEventSize];
  const char detail[] = "detail";
  char err_buf[16];
  const uint64_t before = heap_allocations();
  for (int i = 0; i < 10000; ++i) {
    ASSERT_TRUE(eq->write(FI_NOTIFY, &e, sizeof(e)).ok());
    ASSERT_TRUE(eq->write(FI_CONNREQ, cm, sizeof(cm)).ok());
    ASSERT_TRUE(eq->write_error({.err = FI_EIO, .err_data = detail, .err_data_size = 6}).ok());
    ASSERT_TRUE(eq->read(nullptr, out, sizeof(out), FI_PEEK).ok());
    ASSERT_TRUE(eq->read(nullptr, out, sizeof(out), 0).ok());
    ASSERT_TRUE(eq->read(nullptr, out, sizeof(out), 0).ok());
    fi_eq_err_entry err{};
    err.err_data = err_buf;
    err.err_data_size = sizeof(err_buf);
    ASSERT_TRUE(eq->read_error(&err, 0).ok());
    ASSERT_TRUE(eq->try_wait().ok());
  }
  EXPECT_EQ(heap_allocations() - before, 0u);
}

TEST(NoAllocation, CqReserveCompleteReadAndErrorsAllocateNothing) {
  auto cq =
      CompletionQueue::create({.size = 256, .format = CqFormat::kTagged, .wait = WaitKind::kUnspec})
          .value();
  fi_cq_tagged_entry out[64];
  fi_addr_t src[64];
  const uint64_t before = heap_allocations();
  for (int i = 0; i < 10000; ++i) {
    ASSERT_TRUE(cq->reserve(2).ok());
    cq->complete({.flags = FI_SEND | FI_MSG});
    cq->complete_error({.err = FI_ECANCELED});
    ASSERT_TRUE(cq->write({.flags = FI_RECV | FI_TAGGED, .tag = 7}).ok());
    ASSERT_EQ(cq->read(out, 64, src).value(), 1u);
    fi_cq_err_entry err{};
    ASSERT_TRUE(cq->read_error(&err, 0).ok());
    ASSERT_EQ(cq->sread(out, 64, src, 1, 0).value(), 1u);
    ASSERT_TRUE(cq->signal().ok());
    ASSERT_EQ(cq->sread(out, 64, src, 1, 0).status().code(), Code::kAgain);
  }
  EXPECT_EQ(heap_allocations() - before, 0u);
}

TEST(NoAllocation, HashMacCompareAndRandomBytesAllocateNothing) {
  uint8_t long_key[131];  // longer than a block: keying hashes it
  std::memset(long_key, 0xaa, sizeof(long_key));
  uint8_t nonce[32];
  const uint64_t before = heap_allocations();
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(fill_random(nonce, sizeof(nonce)).ok());
    Sha256 sha;
    sha.update(nonce, sizeof(nonce));
    const Digest digest = sha.final();
    HmacSha256 hmac(long_key, sizeof(long_key));
    hmac.update(nonce, sizeof(nonce));
    const Digest mac = hmac.final();
    ASSERT_FALSE(mac_equal(mac, digest));
    ASSERT_TRUE(mac_equal(mac, HmacSha256::mac(long_key, sizeof(long_key), nonce, sizeof(nonce))));
  }
  EXPECT_EQ(heap_allocations() - before, 0u);
}

// The counter itself must see allocations, or the tests above prove nothing.
TEST(NoAllocation, CounterSeesHeapAllocations) {
  const uint64_t before = heap_allocations();
  // Through a volatile pointer so the compiler cannot elide the allocation.
  void* (*volatile allocate)(size_t) = std::malloc;
  void* p = allocate(64);
  std::free(p);
  EXPECT_GE(heap_allocations() - before, 1u);
}

}  // namespace
}  // namespace fabq::core
