// One-sided operations from many threads at once (run under ThreadSanitizer in CI): "atomic
// operations are performed atomically at the target" with respect to every peer's (fi_atomic(3)),
// and RMA reads and writes from several threads, while other threads block in fi_cq_sread and
// the progress thread moves the bytes, each land whole.
#include <rdma/fi_atomic.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_rma.h>

#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "rdm_fixture.h"

namespace fabq::testing {
namespace {

class ConcurrentRma : public Rdm {
 protected:
  ConcurrentRma() : Rdm(FI_MSG | FI_RMA | FI_ATOMIC | FI_SOURCE) {}
  void SetUp() override {
    Rdm::SetUp();
    if (HasFatalFailure()) return;
    target_ = open_ep();
    ASSERT_EQ(fi_mr_reg(domain_, region_.data(), region_.size(), FI_REMOTE_WRITE | FI_REMOTE_READ,
                        0, kKey, 0, &mr_, nullptr),
              0);
  }
  void TearDown() override {
    if (mr_ != nullptr) {
      EXPECT_EQ(fi_close(&mr_->fid), 0);
    }
    Rdm::TearDown();
  }
  // The next completion of `e`, waited for in fi_cq_sread: 1, or the error's prov_errno negated.
  static int complete(Ep* e) {
    fi_cq_tagged_entry entry{};
    fi_cq_err_entry err{};
    const ssize_t n = wait_cq(e->cq, &entry, &err);
    return n == -FI_EAVAIL ? -err.prov_errno : static_cast<int>(n);
  }
  static constexpr uint64_t kKey = 0xC0C0;
  std::vector<unsigned char> region_ = std::vector<unsigned char>(1 << 16, 0);
  fid_mr* mr_ = nullptr;
  Ep* target_ = nullptr;
};

TEST_F(ConcurrentRma, PeersFetchAddingTogetherEachGetADistinctValue) {
  constexpr int kPeers = 4;
  constexpr int kEach = 200;
  std::vector<Ep*> peers;
  for (int i = 0; i < kPeers; ++i) peers.push_back(open_ep());
  std::vector<std::vector<uint64_t>> got(kPeers);
  std::vector<std::thread> threads;
  for (int i = 0; i < kPeers; ++i) {
    threads.emplace_back([&, i] {
      for (int k = 0; k < kEach; ++k) {
        uint64_t one = 1, old = 0;
        ssize_t rc;
        while ((rc = fi_fetch_atomic(peers[i]->ep, &one, 1, nullptr, &old, nullptr, target_->addr,
                                     0, kKey, FI_UINT64, FI_SUM, nullptr)) == -FI_EAGAIN) {
        }
        if (rc != 0 || complete(peers[i]) != 1) return;
        got[i].push_back(old);
      }
    });
  }
  for (auto& t : threads) t.join();
  uint64_t total = 0;
  std::memcpy(&total, region_.data(), sizeof(total));
  EXPECT_EQ(total, uint64_t{kPeers * kEach});
  std::set<uint64_t> all;
  for (const auto& g : got) all.insert(g.begin(), g.end());
  EXPECT_EQ(all.size(), size_t{kPeers * kEach}) << "no two fetched the same value";
}

TEST_F(ConcurrentRma, WritesAndReadsFromSeveralThreadsLandWhole) {
  constexpr int kThreads = 3;
  constexpr size_t kSlice = 8192;
  constexpr int kRounds = 30;
  std::vector<Ep*> peers;
  for (int i = 0; i < kThreads; ++i) peers.push_back(open_ep());
  std::vector<int> bad(kThreads, 0);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      std::vector<unsigned char> out(kSlice), back(kSlice);
      for (int r = 0; r < kRounds; ++r) {
        std::memset(out.data(), i * 31 + r, kSlice);
        const uint64_t at = i * kSlice;
        if (fi_write(peers[i]->ep, out.data(), kSlice, nullptr, target_->addr, at, kKey, nullptr) !=
                0 ||
            fi_read(peers[i]->ep, back.data(), kSlice, nullptr, target_->addr, at, kKey, nullptr) !=
                0) {
          ++bad[i];
          return;
        }
        // Both complete; the read, after the write on the same connection, sees it.
        if (complete(peers[i]) != 1 || complete(peers[i]) != 1 || back != out) ++bad[i];
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kThreads; ++i) EXPECT_EQ(bad[i], 0) << "thread " << i;
}

}  // namespace
}  // namespace fabq::testing
