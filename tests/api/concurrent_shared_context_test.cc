// Shared transmit contexts under threads (fi_endpoint(3) fi_stx_context): endpoints driven by
// different threads draw on one STX's slots at once; every send arrives once, each sender's in
// order, and every slot comes back. Also run under ThreadSanitizer.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "rdm_fixture.h"

namespace fabq::testing {
namespace {

constexpr int kPerSender = 300;
constexpr size_t kStxSize = 3;

bool past(std::chrono::steady_clock::time_point t0) {
  return std::chrono::steady_clock::now() - t0 > std::chrono::seconds(20);
}

class ConcurrentSharedTx : public Rdm {};

TEST_F(ConcurrentSharedTx, TwoThreadsSendingThroughOneStxEachDeliverEveryMessageInOrder) {
  fid_stx* stx = open_stx(kStxSize);
  Ep* senders[2] = {open_ep({.stx = stx}), open_ep({.stx = stx})};
  Ep* b = open_ep();
  struct Msg {
    uint32_t sender;
    uint32_t seq;
  };
  std::vector<Msg> in(2 * kPerSender);
  for (auto& m : in) {
    ASSERT_EQ(fi_recv(b->ep, &m, sizeof(m), nullptr, FI_ADDR_UNSPEC, &m), 0);
  }
  std::atomic<bool> failed{false};
  std::vector<std::thread> threads;
  for (uint32_t s = 0; s < 2; ++s) {
    threads.emplace_back([&, s] {
      Ep* e = senders[s];
      std::vector<Msg> out(kPerSender);
      int completed = 0;
      const auto t0 = std::chrono::steady_clock::now();
      for (uint32_t i = 0; i < kPerSender && !past(t0);) {
        out[i] = {s, i};
        const ssize_t rc = fi_send(e->ep, &out[i], sizeof(Msg), nullptr, b->addr, &out[i]);
        if (rc == 0) {
          ++i;
        } else if (rc != -FI_EAGAIN) {
          failed = true;
          return;
        }
        fi_cq_tagged_entry c{};
        if (fi_cq_read(e->cq, &c, 1) == 1) ++completed;
      }
      while (completed < kPerSender && !past(t0)) {
        fi_cq_tagged_entry c{};
        const ssize_t n = fi_cq_read(e->cq, &c, 1);
        if (n == 1) ++completed;
        if (n != 1 && n != -FI_EAGAIN) break;
      }
      if (completed != kPerSender) failed = true;
    });
  }
  int received = 0;
  uint32_t next[2] = {0, 0};
  const auto t0 = std::chrono::steady_clock::now();
  while (received < 2 * kPerSender && !past(t0)) {
    fi_cq_tagged_entry c{};
    const ssize_t n = fi_cq_read(b->cq, &c, 1);
    if (n == -FI_EAGAIN) continue;
    ASSERT_EQ(n, 1) << fi_strerror(static_cast<int>(-n));
    const Msg& m = *static_cast<const Msg*>(c.op_context);
    ASSERT_LT(m.sender, 2U);
    EXPECT_EQ(m.seq, next[m.sender]++) << "sender " << m.sender << "'s messages in order";
    ++received;
  }
  for (auto& t : threads) t.join();
  EXPECT_FALSE(failed.load()) << "a sender failed or timed out";
  EXPECT_EQ(received, 2 * kPerSender);
  for (Ep* e : senders) {
    EXPECT_EQ(e->ep->ops->tx_size_left(e->ep), static_cast<ssize_t>(kStxSize))
        << "every slot of the STX is back";
  }
}

}  // namespace
}  // namespace fabq::testing
