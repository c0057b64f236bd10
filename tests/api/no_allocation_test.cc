// "Keep the hot paths free of heap allocation", through the libfabric API: a connected MSG
// pair (over shared memory, as two endpoints of one host are) moves messages, and messages
// that arrive before their receive, without touching the heap once it has done the same
// before. This binary replaces malloc & co. with counting wrappers (tests/support/
// alloc_counter.h), which count the provider's allocations too, since it is loaded into the
// same process.
#include <gtest/gtest.h>
#include <rdma/fi_errno.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

#include "dgram_fixture.h"
#include "support/alloc_counter.h"
#include "support/pair.h"

namespace fabq::testing {
namespace {

Options over_shared_memory() {
  Options o = api_pair_options();
  o.shm = Shm::kOn;
  return o;
}

class NoAllocation : public PairTest {
 protected:
  NoAllocation() : PairTest(over_shared_memory()) {}
  void SetUp() override {
    PairTest::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_TRUE(pair_.connect());
  }

  // Sends `count` messages of `size` bytes from the client, each completing only once the
  // server's transport has taken it (FI_TRANSMIT_COMPLETE). No receive is posted, so every one
  // waits in the server's buffers for messages that arrive first.
  void send_ahead(size_t count, size_t size) {
    sent_done_ = 0;
    for (size_t i = 0; i < count; ++i) {
      iovec iov{tx_.data() + i * size, size};
      fi_msg msg{};
      msg.msg_iov = &iov;
      msg.iov_count = 1;
      ssize_t rc;
      while ((rc = fi_sendmsg(client_ep(), &msg, FI_TRANSMIT_COMPLETE | FI_COMPLETION)) ==
             -FI_EAGAIN) {
        ASSERT_NO_FATAL_FAILURE(take_client_completions(0));
      }
      ASSERT_EQ(rc, 0);
    }
    take_client_completions(count);
  }

  // Takes client send completions until `want` of this round's have come (0: whatever is there
  // now), driving the server's progress meanwhile, for at most kTimeoutMs.
  void take_client_completions(size_t want) {
    fi_cq_tagged_entry e[16];
    const auto deadline = Clock::now() + std::chrono::milliseconds(kTimeoutMs);
    for (;;) {
      const ssize_t n = fi_cq_read(client_cq(), e, 16);
      if (n > 0) {
        sent_done_ += static_cast<size_t>(n);
        for (ssize_t i = 0; i < n; ++i) ASSERT_TRUE(e[i].flags & FI_SEND);
        continue;
      }
      ASSERT_EQ(n, -FI_EAGAIN);
      if (sent_done_ >= want) return;
      ASSERT_LT(Clock::now(), deadline) << sent_done_ << " of " << want << " sends completed";
      drive_server();
    }
  }

  // Progress on the server side: nothing is posted there, so nothing completes.
  void drive_server() {
    fi_cq_tagged_entry e;
    ASSERT_EQ(fi_cq_read(server_cq(), &e, 1), -FI_EAGAIN);
  }

  // Posts a receive for each waiting message, 256 at a time (fewer than rx_attr.size), and
  // takes their completions.
  void receive_all(size_t count, size_t size) {
    fi_cq_tagged_entry e[16];
    for (size_t first = 0; first < count; first += kBatch) {
      const size_t n = std::min(kBatch, count - first);
      for (size_t i = first; i < first + n; ++i) {
        ASSERT_EQ(fi_recv(server_ep(), rx_.data() + i * size, size, nullptr, 0, nullptr), 0);
      }
      for (size_t got = 0; got < n;) {
        const ssize_t k = fi_cq_sread(server_cq(), e, 16, nullptr, kTimeoutMs);
        ASSERT_GT(k, 0) << fi_strerror(static_cast<int>(-k));
        for (ssize_t i = 0; i < k; ++i) ASSERT_EQ(e[i].len, size);
        got += static_cast<size_t>(k);
      }
    }
  }

  // One round: `count` messages sent ahead of their receives, then received. Returns the
  // heap allocations it took.
  uint64_t round(size_t count, size_t size) {
    const uint64_t before = heap_allocations();
    send_ahead(count, size);
    receive_all(count, size);
    return heap_allocations() - before;
  }

  void size_buffers(size_t count, size_t size) {
    tx_.assign(count * size, 0x5a);
    rx_.assign(count * size, 0);
  }

  static constexpr size_t kBatch = 256;
  std::vector<unsigned char> tx_, rx_;
  size_t sent_done_ = 0;  // send completions of this round
};

TEST_F(NoAllocation, MessagesThatArriveBeforeTheirReceiveReuseTheMemoryOfAnEarlierBacklog) {
  // More messages than one growth step of the pool (256), and at 4 KiB more bytes than a
  // quarter of FI_FABQ_UNEXPECTED_BYTES (16 MiB by default); beyond 4 KiB, payloads the pool does
  // not hold, through the ring and (from 256 KiB) copied from the sender's memory, up to 12 MiB
  // of them waiting at once.
  for (const auto& [size, count] : {std::pair<size_t, size_t>{8, 300},
                                    {64, 300},
                                    {4096, 1100},
                                    {4097, 300},
                                    {65536, 100},
                                    {(1u << 20) + 4097, 11}}) {
    SCOPED_TRACE(size);
    size_buffers(count, size);
    (void)round(count, size);  // the first backlog of its size may allocate
    for (int again = 0; again < 3; ++again) {
      EXPECT_EQ(round(count, size), 0u) << "round " << again + 2;
    }
  }
}

TEST_F(NoAllocation, AMessageWhoseReceiveIsPostedAllocatesNothing) {
  constexpr size_t kSize = 4096;
  size_buffers(1, kSize);
  fi_cq_tagged_entry e;
  auto one = [&] {
    ASSERT_EQ(fi_recv(server_ep(), rx_.data(), kSize, nullptr, 0, nullptr), 0);
    ASSERT_EQ(fi_send(client_ep(), tx_.data(), kSize, nullptr, 0, nullptr), 0);
    ASSERT_EQ(wait_cq(client_cq(), &e), 1);
    ASSERT_EQ(wait_cq(server_cq(), &e), 1);
    ASSERT_EQ(e.len, kSize);
  };
  for (int i = 0; i < 100; ++i) one();  // warm-up
  const uint64_t before = heap_allocations();
  for (int i = 0; i < 1000; ++i) one();
  EXPECT_EQ(heap_allocations() - before, 0u);
}

// Datagrams, with a shared secret (the MAC computed over the payload where it is, the replay
// guard made at fi_enable) and without: a datagram sent and received allocates nothing.
class NoAllocationDgram : public Dgram {
 protected:
  NoAllocationDgram() : Dgram(FI_MSG | FI_SOURCE, 0, "a shared secret") {}
};

TEST_F(NoAllocationDgram, ADatagramWithOrWithoutASecretAllocatesNothing) {
  for (const bool keyless : {false, true}) {
    SCOPED_TRACE(keyless ? "without a secret" : "with a secret");
    DgramEp* a = open_ep({.keyless = keyless});
    DgramEp* b = open_ep({.keyless = keyless});
    std::vector<char> tx(4096, 'd'), rx(4096);
    fi_cq_data_entry e{};
    auto one = [&] {
      ASSERT_EQ(fi_recv(b->ep, rx.data(), rx.size(), nullptr, FI_ADDR_UNSPEC, nullptr), 0);
      ASSERT_EQ(fi_senddata(a->ep, tx.data(), tx.size(), nullptr, 7, b->addr, nullptr), 0);
      ASSERT_EQ(wait_cq(a->cq, &e), 1);
      fi_addr_t src = FI_ADDR_NOTAVAIL;
      ASSERT_EQ(wait_cq(b->cq, &e, nullptr, &src), 1);
      ASSERT_EQ(e.len, tx.size());
      ASSERT_EQ(src, a->addr);
    };
    for (int i = 0; i < 100; ++i) ASSERT_NO_FATAL_FAILURE(one());  // warm-up
    const uint64_t before = heap_allocations();
    for (int i = 0; i < 1000; ++i) ASSERT_NO_FATAL_FAILURE(one());
    EXPECT_EQ(heap_allocations() - before, 0u);
  }
}

}  // namespace
}  // namespace fabq::testing
