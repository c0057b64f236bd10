// Datagram endpoints from several threads at once (FI_THREAD_SAFE): two threads send to one
// endpoint while a third receives and a fourth joins and leaves a multicast group over and over.
// Every datagram arrives once and intact; nothing is lost on loopback while the senders keep
// fewer in flight than the receiver has posted. Runs under ThreadSanitizer in scripts/test.
#include <atomic>
#include <cstdio>
#include <cstring>
#include <set>
#include <thread>
#include <utility>

#include "dgram_fixture.h"

namespace fabq::testing {
namespace {

class ConcurrentDgram : public Dgram {};

constexpr int kSenders = 2;
constexpr int kPerSender = 300;
constexpr int kPosted = 64;
constexpr int kWindow = 32;  // in flight per sender, less than what is posted for both

struct Msg {
  int sender;
  int seq;
  char check[24];  // "s<sender>-<seq>", to see that the bytes are the message's own
};

void fill(Msg* m, int sender, int seq) {
  m->sender = sender;
  m->seq = seq;
  std::snprintf(m->check, sizeof(m->check), "s%d-%d", sender, seq);
}

TEST_F(ConcurrentDgram, TwoSendersOneReceiverAndAJoiningThreadLoseAndDuplicateNothing) {
  DgramEp* rx = open_ep();
  DgramEp* tx[kSenders] = {open_ep(), open_ep()};
  DgramEp* joiner = open_ep();
  std::vector<Msg> bufs(kPosted);
  for (Msg& m : bufs) ASSERT_EQ(fi_recv(rx->ep, &m, sizeof(m), nullptr, FI_ADDR_UNSPEC, &m), 0);
  std::atomic<int> received[kSenders] = {};
  std::atomic<bool> stop{false};
  std::set<std::pair<int, int>> seen;
  int bad = 0;
  std::thread receiver([&] {
    int total = 0;
    while (total < kSenders * kPerSender) {
      fi_cq_data_entry e{};
      const ssize_t n = fi_cq_sread(rx->cq, &e, 1, nullptr, kDgramWaitMs);
      if (n != 1) break;
      auto* m = static_cast<Msg*>(e.op_context);
      char want[24];
      std::snprintf(want, sizeof(want), "s%d-%d", m->sender, m->seq);
      if (e.len != sizeof(Msg) || m->sender < 0 || m->sender >= kSenders ||
          std::strcmp(want, m->check) != 0 || !seen.insert({m->sender, m->seq}).second) {
        ++bad;
      } else {
        received[m->sender].fetch_add(1, std::memory_order_release);
      }
      ++total;
      if (fi_recv(rx->ep, m, sizeof(*m), nullptr, FI_ADDR_UNSPEC, m) != 0) ++bad;
    }
    stop = true;  // all in, or a timeout: the senders stop waiting for room
  });
  std::thread senders[kSenders];
  for (int s = 0; s < kSenders; ++s) {
    senders[s] = std::thread([&, s] {
      for (int seq = 0; seq < kPerSender; ++seq) {
        while (seq - received[s].load(std::memory_order_acquire) >= kWindow) {
          if (stop.load()) return;
          fi_cq_data_entry e{};
          (void)fi_cq_read(tx[s]->cq, &e, 1);  // drives progress too
        }
        Msg m;
        fill(&m, s, seq);
        ssize_t rc;
        while ((rc = fi_send(tx[s]->ep, &m, sizeof(m), nullptr, rx->addr, nullptr)) == -FI_EAGAIN) {
          fi_cq_data_entry e{};
          (void)fi_cq_read(tx[s]->cq, &e, 1);
        }
        EXPECT_EQ(rc, 0);
      }
    });
  }
  std::thread churn([&] {
    for (int i = 0; i < 20 && !stop.load(); ++i) {
      fid_mc* mc = nullptr;
      EXPECT_EQ(join(joiner->ep, group(9), 0, &mc, nullptr), 0);
      forget(mc);
      EXPECT_EQ(fi_close(&mc->fid), 0);
    }
  });
  churn.join();
  for (std::thread& t : senders) t.join();
  receiver.join();
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(seen.size(), static_cast<size_t>(kSenders * kPerSender));
}

}  // namespace
}  // namespace fabq::testing
