// FI_EP_RDM endpoints under concurrent use (FI_THREAD_SAFE): sends from several threads racing
// a connection that fails or comes up, and an endpoint of a shared receive context closing
// while another thread posts to that context. Each operation must complete exactly once; the
// sanitizers (ASan, TSan) watch for the rest. Every wait is bounded.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_tagged.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <set>
#include <thread>
#include <vector>

#include "fabq_fixture.h"

namespace fabq::testing {
namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int kPerThread = 100;
#else
constexpr int kPerThread = 400;
#endif
constexpr int kThreads = 4;
constexpr auto kLimit = std::chrono::seconds(20);

class ConcurrentRdm : public FabqTest {
 protected:
  void SetUp() override {
    FabqTest::SetUp();
    if (HasFatalFailure()) return;
    fi_info* hints = fabq_hints();
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_MSG | FI_TAGGED;
    ASSERT_EQ(fi_getinfo(kVersion, nullptr, nullptr, 0, hints, &rdm_), 0);
    fi_freeinfo(hints);
    fi_av_attr attr{};
    attr.type = FI_AV_TABLE;
    ASSERT_EQ(fi_av_open(domain_, &attr, &av_, nullptr), 0);
  }
  void TearDown() override {
    for (auto it = fids_.rbegin(); it != fids_.rend(); ++it) EXPECT_EQ(fi_close(*it), 0);
    if (av_ != nullptr) {
      EXPECT_EQ(fi_close(&av_->fid), 0);
    }
    fi_freeinfo(rdm_);
    FabqTest::TearDown();
  }

  fid_cq* cq(size_t size = 4096) {
    fi_cq_attr attr{};
    attr.size = size;
    attr.format = FI_CQ_FORMAT_TAGGED;
    fid_cq* c = nullptr;
    EXPECT_EQ(fi_cq_open(domain_, &attr, &c, nullptr), 0);
    if (c != nullptr) fids_.push_back(&c->fid);
    return c;
  }
  // An enabled RDM endpoint whose sends and receives complete on `c` (receives through `srx`
  // when given); its fi_addr_t in the AV goes to *addr. Closed by TearDown unless `own`.
  fid_ep* ep(fid_cq* c, fi_addr_t* addr, fid_ep* srx = nullptr, bool own = false) {
    fid_ep* e = nullptr;
    EXPECT_EQ(fi_endpoint(domain_, rdm_, &e, nullptr), 0);
    if (e == nullptr) return nullptr;
    EXPECT_EQ(fi_ep_bind(e, &av_->fid, 0), 0);
    EXPECT_EQ(fi_ep_bind(e, &c->fid, FI_TRANSMIT | FI_RECV), 0);
    if (srx != nullptr) {
      EXPECT_EQ(fi_ep_bind(e, &srx->fid, 0), 0);
    }
    EXPECT_EQ(fi_enable(e), 0);
    sockaddr_in name{};
    size_t len = sizeof(name);
    EXPECT_EQ(fi_getname(&e->fid, &name, &len), 0);
    EXPECT_EQ(fi_av_insert(av_, &name, 1, addr, 0, nullptr), 1);
    if (!own) fids_.push_back(&e->fid);
    return e;
  }

  fi_info* rdm_ = nullptr;
  fid_av* av_ = nullptr;
  std::vector<fid_t> fids_;
};

bool past(std::chrono::steady_clock::time_point t0) {
  return std::chrono::steady_clock::now() - t0 > kLimit;
}

TEST_F(ConcurrentRdm, SendsRacingAConnectionThatFailsEachFailOnceOrAreRefused) {
  fid_cq* c = cq(kThreads * kPerThread + 64);
  fi_addr_t self = 0;
  fid_ep* a = ep(c, &self);
  ASSERT_NE(a, nullptr);
  // Nobody listens there: every connection made to it is refused, at once or soon. On
  // 127.0.0.2, where no test listens, so that no test running at the same time takes the port.
  sockaddr_in dead{};
  dead.sin_family = AF_INET;
  dead.sin_addr.s_addr = htonl(INADDR_LOOPBACK + 1);
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  socklen_t len = sizeof(dead);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&dead), sizeof(dead)), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&dead), &len), 0);
  close(fd);
  fi_addr_t nobody = 0;
  ASSERT_EQ(fi_av_insert(av_, &dead, 1, &nobody, 0, nullptr), 1);
  const ssize_t slots = a->ops->tx_size_left(a);
  ASSERT_GT(slots, 0);

  std::atomic<int> posted{0};
  std::vector<std::thread> threads;
  std::vector<std::vector<char>> contexts(kThreads, std::vector<char>(kPerThread));
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const ssize_t rc = fi_send(a, "x", 1, nullptr, nobody, &contexts[t][i]);
        if (rc == 0) {
          posted.fetch_add(1);
        } else if (rc != -FI_EAGAIN) {
          ADD_FAILURE() << "fi_send: " << fi_strerror(static_cast<int>(-rc));
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  // Each send that was posted fails exactly once, with the refusal.
  std::set<void*> seen;
  const auto t0 = std::chrono::steady_clock::now();
  while (static_cast<int>(seen.size()) < posted.load() && !past(t0)) {
    fi_cq_tagged_entry e{};
    const ssize_t n = fi_cq_read(c, &e, 1);
    if (n == 1) ADD_FAILURE() << "a send to nobody succeeded";
    if (n != -FI_EAVAIL) continue;
    fi_cq_err_entry err{};
    ASSERT_EQ(fi_cq_readerr(c, &err, 0), 1);
    EXPECT_EQ(err.err, FI_ECONNREFUSED);
    EXPECT_TRUE(seen.insert(err.op_context).second) << "a send completed twice";
  }
  EXPECT_EQ(static_cast<int>(seen.size()), posted.load());
  fi_cq_tagged_entry e{};
  EXPECT_EQ(fi_cq_read(c, &e, 1), -FI_EAGAIN) << "nothing more";
  EXPECT_EQ(a->ops->tx_size_left(a), slots) << "every transmit slot is free again, once";
}

TEST_F(ConcurrentRdm, SendsFromSeveralThreadsToOnePeerEachArriveOnceInPerThreadOrder) {
  constexpr int kEach = kPerThread / 2;  // every receive posted at once: within rx_attr.size
  fid_cq* send_cq = cq(kThreads * kEach + 64);
  fid_cq* recv_cq = cq(kThreads * kEach + 64);
  fi_addr_t a_addr = 0, b_addr = 0;
  fid_ep* a = ep(send_cq, &a_addr);
  fid_ep* b = ep(recv_cq, &b_addr);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  std::vector<uint32_t> in(kThreads * kEach, ~0u);
  for (auto& v : in) ASSERT_EQ(fi_trecv(b, &v, sizeof(v), nullptr, FI_ADDR_UNSPEC, 1, 0, &v), 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < kEach && !past(t0); ++i) {
        const uint32_t v = (static_cast<uint32_t>(t) << 16) | static_cast<uint32_t>(i);
        ssize_t rc;
        while ((rc = fi_tinject(a, &v, sizeof(v), b_addr, 1)) == -FI_EAGAIN && !past(t0)) {
          fi_cq_tagged_entry e{};
          fi_cq_read(send_cq, &e, 1);
        }
        ASSERT_EQ(rc, 0);
      }
    });
  }
  int got = 0;
  std::vector<int> next(kThreads, 0);
  const auto t0 = std::chrono::steady_clock::now();
  while (got < kThreads * kEach && !past(t0)) {
    fi_cq_tagged_entry e{};
    const ssize_t n = fi_cq_read(recv_cq, &e, 1);
    fi_cq_tagged_entry ignored{};
    fi_cq_read(send_cq, &ignored, 1);  // inject writes no completion: this only moves bytes
    if (n != 1) continue;
    const uint32_t v = *static_cast<uint32_t*>(e.op_context);
    const int t = static_cast<int>(v >> 16);
    ASSERT_LT(t, kThreads);
    EXPECT_EQ(static_cast<int>(v & 0xffff), next[t]++) << "thread " << t;
    ++got;
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(got, kThreads * kEach);
}

TEST_F(ConcurrentRdm, ClosingAnEndpointOfAnSrxWhileAnotherThreadPostsToItLosesNothingElse) {
  fid_cq* send_cq = cq(kPerThread * 2 + 64);
  fid_cq* e1_cq = cq(kPerThread * 2 + 64);
  fid_cq* e2_cq = cq(kPerThread * 2 + 64);
  fi_rx_attr rx_attr{};
  rx_attr.size = 1024;
  fid_ep* srx = nullptr;
  ASSERT_EQ(fi_srx_context(domain_, &rx_attr, &srx, nullptr), 0);
  fi_addr_t s_addr = 0, e1_addr = 0, e2_addr = 0;
  fid_ep* sender = ep(send_cq, &s_addr);
  fid_ep* e1 = ep(e1_cq, &e1_addr, srx, /*own=*/true);
  ASSERT_NE(ep(e2_cq, &e2_addr, srx), nullptr);
  fids_.insert(fids_.begin(), &srx->fid);  // closed after the endpoints
  ASSERT_NE(e1, nullptr);
  // Messages wait in the SRX for receives, each sent so that it completes only when placed.
  uint32_t v = 0;
  iovec iov{&v, sizeof(v)};
  fi_msg_tagged msg{};
  msg.msg_iov = &iov;
  msg.iov_count = 1;
  msg.addr = e1_addr;
  msg.tag = 2;
  for (int i = 0; i < kPerThread; ++i) {
    ASSERT_EQ(fi_tsendmsg(sender, &msg, FI_DELIVERY_COMPLETE), 0);
  }
  // Let them arrive (progress through reads).
  for (int i = 0; i < 200; ++i) {
    fi_cq_tagged_entry e{};
    fi_cq_read(e1_cq, &e, 1);  // nothing to read yet: this only moves bytes
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::atomic<bool> stop{false};
  std::vector<uint32_t> bufs(kPerThread * 2);
  std::thread poster([&] {
    for (auto& b : bufs) {
      if (stop.load()) break;
      while (fi_trecv(srx, &b, sizeof(b), nullptr, FI_ADDR_UNSPEC, 2, 0, &b) == -FI_EAGAIN) {
        if (stop.load()) return;
      }
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_EQ(fi_close(&e1->fid), 0);
  stop.store(true);
  poster.join();
  // The SRX and the other endpoint go on: a message to e2 is received through the SRX.
  uint32_t last = 0;
  ASSERT_EQ(fi_trecv(srx, &last, sizeof(last), nullptr, FI_ADDR_UNSPEC, 3, 0, &last), 0);
  const uint32_t seven = 7;
  ASSERT_EQ(fi_tinject(sender, &seven, sizeof(seven), e2_addr, 3), 0);
  const auto t0 = std::chrono::steady_clock::now();
  fi_cq_tagged_entry e{};
  ssize_t n = -FI_EAGAIN;
  while (!past(t0)) {
    n = fi_cq_read(e2_cq, &e, 1);
    if (n == 1 && e.op_context == &last) break;
    fi_cq_tagged_entry ignored{};
    fi_cq_read(send_cq, &ignored, 1);
  }
  EXPECT_EQ(n, 1);
  EXPECT_EQ(last, 7u);
}

}  // namespace
}  // namespace fabq::testing
