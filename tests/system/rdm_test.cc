// FI_EP_RDM endpoints between processes on 127.0.0.1 (fi_endpoint(3), fi_av(3), fi_tagged(3)):
// each process has its own fabric, AV and endpoint; names travel over the test's pipes and are
// inserted in the AVs. Messages of every size arrive whole and in order, receives name their
// source (FI_SOURCE), a vanished peer fails only the sends addressed to it, and bytes that are
// not fabq's protocol close only the connection that carried them.
#include <netinet/in.h>
#include <sys/socket.h>

#include <vector>

#include "msg_fixture.h"

namespace fabq::systest {
namespace {

// One process's RDM endpoint: fabric, domain, AV (FI_AV_TABLE), one CQ (FORMAT_TAGGED) for
// both directions, the endpoint listening on 127.0.0.1 at a port the system picks.
class Rdm {
 public:
  Rdm() {
    fi_info* hints = fi_allocinfo();
    hints->fabric_attr->prov_name = strdup(provider());
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_TAGGED | FI_MSG | FI_SOURCE;
    hints->addr_format = FI_SOCKADDR_IN;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    const int rc = fi_getinfo(kVersion, "127.0.0.1", "0", FI_SOURCE, hints, &info_);
    fi_freeinfo(hints);
    if (!check(rc, "fi_getinfo(FI_EP_RDM)")) return;
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_TABLE;
    fi_cq_attr cq_attr{};
    cq_attr.size = 1024;
    cq_attr.format = FI_CQ_FORMAT_TAGGED;
    cq_attr.wait_obj = FI_WAIT_UNSPEC;
    ok_ = check(fi_fabric(info_->fabric_attr, &fabric_, nullptr), "fi_fabric") &&
          check(fi_domain(fabric_, info_, &domain_, nullptr), "fi_domain") &&
          check(fi_av_open(domain_, &av_attr, &av_, nullptr), "fi_av_open") &&
          check(fi_cq_open(domain_, &cq_attr, &cq_, nullptr), "fi_cq_open") &&
          check(fi_endpoint(domain_, info_, &ep_, nullptr), "fi_endpoint") &&
          check(fi_ep_bind(ep_, &av_->fid, 0), "fi_ep_bind(av)") &&
          check(fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV), "fi_ep_bind(cq)") &&
          check(fi_enable(ep_), "fi_enable");
    if (ok_) {
      size_t len = sizeof(name_);
      ok_ = check(fi_getname(&ep_->fid, &name_, &len), "fi_getname");
    }
  }
  ~Rdm() {
    for (fid_t f : {ep_ ? &ep_->fid : nullptr, cq_ ? &cq_->fid : nullptr, av_ ? &av_->fid : nullptr,
                    domain_ ? &domain_->fid : nullptr, fabric_ ? &fabric_->fid : nullptr}) {
      if (f != nullptr) {
        EXPECT_EQ(fi_close(f), 0);
      }
    }
    fi_freeinfo(info_);
  }

  bool ok() const { return ok_; }
  fid_ep* ep() const { return ep_; }
  const sockaddr_in& name() const { return name_; }

  fi_addr_t insert(const sockaddr_in& a) {
    fi_addr_t addr = FI_ADDR_NOTAVAIL;
    EXPECT_EQ(fi_av_insert(av_, &a, 1, &addr, 0, nullptr), 1);
    return addr;
  }
  // Sends this endpoint's name over the pipe / inserts the one that comes.
  bool tell(Link& link) { return link.put(&name_, sizeof(name_)); }
  fi_addr_t learn(Link& link) {
    sockaddr_in a{};
    if (!link.get(&a, sizeof(a))) return FI_ADDR_NOTAVAIL;
    return insert(a);
  }

  // Retries -FI_EAGAIN while reading the CQ (completions read meanwhile are kept).
  template <class Op>
  ssize_t retry(Op op) {
    const auto t0 = Clock::now();
    ssize_t rc;
    while ((rc = op()) == -FI_EAGAIN && ms_since(t0) < kTimeoutMs) poll_one();
    return rc;
  }
  ssize_t tsend(const void* buf, size_t len, fi_addr_t to, uint64_t tag, void* ctx) {
    return retry([&] { return fi_tsend(ep_, buf, len, nullptr, to, tag, ctx); });
  }
  ssize_t trecv(void* buf, size_t len, uint64_t tag, void* ctx) {
    return retry([&] { return fi_trecv(ep_, buf, len, nullptr, FI_ADDR_UNSPEC, tag, 0, ctx); });
  }

  struct Got {
    ssize_t rc = -FI_ETIMEDOUT;
    fi_cq_tagged_entry entry{};
    fi_cq_err_entry err{};
    fi_addr_t src = FI_ADDR_NOTAVAIL;
  };
  // The next completion (or error entry) within timeout_ms.
  Got next(int timeout_ms = kTimeoutMs) {
    const auto t0 = Clock::now();
    while (kept_.empty() && ms_since(t0) < timeout_ms) poll_one();
    if (kept_.empty()) return {};
    Got g = kept_.front();
    kept_.erase(kept_.begin());
    return g;
  }
  // The next completion with this context, keeping the others in order.
  Got next_for(void* ctx, int timeout_ms = kTimeoutMs) {
    const auto t0 = Clock::now();
    for (;;) {
      for (auto it = kept_.begin(); it != kept_.end(); ++it) {
        const void* c = it->rc == 1 ? it->entry.op_context : it->err.op_context;
        if (c == ctx) {
          Got g = *it;
          kept_.erase(it);
          return g;
        }
      }
      if (ms_since(t0) > timeout_ms) return {};
      poll_one();
    }
  }

 private:
  bool check(int rc, const char* what) {
    if (rc == 0) return true;
    ADD_FAILURE() << what << ": " << fi_strerror(-rc) << " (provider " << provider() << ")";
    return false;
  }
  void poll_one() {
    Got g;
    g.rc = fi_cq_readfrom(cq_, &g.entry, 1, &g.src);
    if (g.rc == -FI_EAVAIL) {
      g.rc = fi_cq_readerr(cq_, &g.err, 0) == 1 ? -FI_EAVAIL : -FI_EIO;
    }
    if (g.rc == 1 || g.rc == -FI_EAVAIL) {
      kept_.push_back(g);
    } else {
      usleep(50);
    }
  }

  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_av* av_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_ep* ep_ = nullptr;
  sockaddr_in name_{};
  bool ok_ = false;
  std::vector<Got> kept_;
};

TEST(RdmSystem, PingPongOfEverySizeBetweenTwoProcessesNamesTheSource) {
  const std::vector<size_t> sizes = {0, 1, 8, 64, 4096, 65536, 1 << 20};
  Peer peer([&](Link& link) {
    Rdm r;
    if (!r.ok() || !r.tell(link)) return;
    const fi_addr_t parent = r.learn(link);
    std::string buf(1 << 20, '\0');
    for (size_t i = 0; i < sizes.size(); ++i) {
      ASSERT_EQ(r.trecv(buf.data(), buf.size(), i, &buf), 0);
      Rdm::Got g = r.next_for(&buf);
      ASSERT_EQ(g.rc, 1);
      ASSERT_EQ(g.entry.len, sizes[i]);
      EXPECT_EQ(g.src, parent);
      ASSERT_EQ(r.tsend(buf.data(), sizes[i], parent, i, &link), 0);
      ASSERT_EQ(r.next_for(&link).rc, 1);
    }
  });
  Rdm r;
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r.tell(peer.link()));
  const fi_addr_t child = r.learn(peer.link());
  for (size_t i = 0; i < sizes.size(); ++i) {
    const std::string out = pattern(sizes[i], static_cast<unsigned>(i));
    std::string in(sizes[i] + 16, '\0');
    ASSERT_EQ(r.trecv(in.data(), in.size(), i, &in), 0);
    ASSERT_EQ(r.tsend(out.data(), out.size(), child, i, nullptr), 0);
    Rdm::Got g = r.next_for(&in);
    ASSERT_EQ(g.rc, 1) << "size " << sizes[i];
    EXPECT_EQ(g.entry.len, sizes[i]);
    EXPECT_EQ(g.entry.tag, i);
    EXPECT_EQ(g.src, child);
    EXPECT_EQ(in.substr(0, sizes[i]), out) << "size " << sizes[i];
    ASSERT_EQ(r.next_for(nullptr).rc, 1);
  }
  EXPECT_EQ(peer.join(), 0);
}

TEST(RdmSystem, ThreeSendersToOneReceiverArriveInOrderPerSenderWithTheirSources) {
  constexpr int kSenders = 3;
  constexpr uint32_t kEach = 200;
  std::vector<std::unique_ptr<Peer>> peers;
  for (int s = 0; s < kSenders; ++s) {
    peers.push_back(std::make_unique<Peer>([s](Link& link) {
      Rdm r;
      if (!r.ok() || !r.tell(link)) return;
      const fi_addr_t receiver = r.learn(link);
      for (uint32_t i = 0; i < kEach; ++i) {
        const uint32_t v = (static_cast<uint32_t>(s) << 16) | i;
        ASSERT_EQ(r.retry([&] { return fi_tinject(r.ep(), &v, sizeof(v), receiver, 5); }), 0);
      }
      // Progress (manual: only reading the CQ moves bytes) until the receiver has everything.
      const auto t0 = Clock::now();
      while (!link.readable(0) && ms_since(t0) < kTimeoutMs * 4) r.next(1);
      link.wait('d');
    }));
  }
  Rdm r;
  ASSERT_TRUE(r.ok());
  std::vector<fi_addr_t> addr(kSenders);
  for (int s = 0; s < kSenders; ++s) {
    addr[s] = r.learn(peers[s]->link());
    ASSERT_TRUE(r.tell(peers[s]->link()));
  }
  std::vector<uint32_t> next(kSenders, 0);
  uint32_t v = 0;
  for (uint32_t n = 0; n < kSenders * kEach; ++n) {
    ASSERT_EQ(r.trecv(&v, sizeof(v), 5, &v), 0);
    Rdm::Got g = r.next_for(&v);
    ASSERT_EQ(g.rc, 1);
    const uint32_t s = v >> 16;
    ASSERT_LT(s, static_cast<uint32_t>(kSenders));
    EXPECT_EQ(v & 0xffff, next[s]++) << "sender " << s << " out of order";
    EXPECT_EQ(g.src, addr[s]);
  }
  for (auto& p : peers) {
    ASSERT_TRUE(p->link().signal('d'));
    EXPECT_EQ(p->join(), 0);
  }
}

TEST(RdmSystem, APeerThatDiesFailsOnlyTheSendsAddressedToIt) {
  Peer doomed([](Link& link) {
    Rdm r;
    if (!r.ok() || !r.tell(link)) return;
    for (;;) r.next(100);  // accepts the connection, takes the message, never receives it
  });
  Peer healthy([](Link& link) {
    Rdm r;
    if (!r.ok() || !r.tell(link)) return;
    char buf[16] = {};
    ASSERT_EQ(r.trecv(buf, sizeof(buf), 1, buf), 0);
    Rdm::Got g = r.next_for(buf);
    ASSERT_EQ(g.rc, 1);
    EXPECT_STREQ(buf, "still here");
  });
  Rdm r;
  ASSERT_TRUE(r.ok());
  const fi_addr_t to_doomed = r.learn(doomed.link());
  const fi_addr_t to_healthy = r.learn(healthy.link());
  // A send that waits for the doomed peer to place it: that never happens.
  char out[] = "never placed";
  iovec iov{out, sizeof(out)};
  fi_msg_tagged msg{};
  msg.msg_iov = &iov;
  msg.iov_count = 1;
  msg.addr = to_doomed;
  msg.tag = 9;
  msg.context = out;
  ASSERT_EQ(
      r.retry([&] { return fi_tsendmsg(r.ep(), &msg, FI_DELIVERY_COMPLETE | FI_COMPLETION); }), 0);
  // (libfabric's tcp provider completes it once the peer has the bytes, received or not.)
  if (provider_is_fabq()) {
    EXPECT_EQ(r.next(300).rc, -FI_ETIMEDOUT) << "nothing completes while the peer lives";
  }
  kill(doomed.pid(), SIGKILL);
  // libfabric's tcp provider leaves such a send pending for ever; fabq fails it.
  if (provider_is_fabq()) {
    Rdm::Got g = r.next_for(out);
    ASSERT_EQ(g.rc, -FI_EAVAIL);
    EXPECT_EQ(g.err.err, FI_ECONNABORTED);
  }
  // The doomed peer is reaped by its Peer (it died of SIGKILL, as meant).

  const char ok[] = "still here";
  ASSERT_EQ(r.tsend(ok, sizeof(ok), to_healthy, 1, nullptr), 0);
  EXPECT_EQ(r.next_for(nullptr).rc, 1);
  EXPECT_EQ(healthy.join(), 0);
}

// fabq's own wire protocol: a stranger's bytes must not disturb the endpoint.
TEST(RdmSystem, GarbageSentToTheListenerClosesOnlyThatConnection) {
  if (!provider_is_fabq()) GTEST_SKIP() << "fabq's wire protocol";
  Peer peer([](Link& link) {
    Rdm r;
    if (!r.ok()) return;
    const fi_addr_t receiver = r.learn(link);
    ASSERT_TRUE(link.wait('g'));
    const char msg[] = "after the garbage";
    ASSERT_EQ(r.tsend(msg, sizeof(msg), receiver, 2, nullptr), 0);
    EXPECT_EQ(r.next_for(nullptr).rc, 1);
  });
  Rdm r;
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r.tell(peer.link()));
  // Two strangers: one sends bytes that are no header, one a request without a name.
  for (int kind = 0; kind < 2; ++kind) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in to = r.name();
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)), 0);
    unsigned char bytes[32] = {};
    if (kind == 0) {
      std::memset(bytes, 0xee, sizeof(bytes));
    } else {
      bytes[0] = 0x46;  // magic 0x7146, version 1, op kConnReq, no data
      bytes[1] = 0x71;
      bytes[2] = 1;
      bytes[3] = 1;
    }
    ASSERT_EQ(write(fd, bytes, sizeof(bytes)), static_cast<ssize_t>(sizeof(bytes)));
    // The endpoint closes the stranger's connection: its read ends.
    pollfd p{.fd = fd, .events = POLLIN};
    const auto t0 = Clock::now();
    char c;
    ssize_t n = -1;
    while (ms_since(t0) < kTimeoutMs) {
      r.next(1);  // progress
      if (poll(&p, 1, 0) == 1) {
        n = read(fd, &c, 1);
        break;
      }
    }
    EXPECT_LE(n, 0) << "kind " << kind << ": the connection was closed";
    close(fd);
  }
  char buf[32] = {};
  ASSERT_EQ(r.trecv(buf, sizeof(buf), 2, buf), 0);
  ASSERT_TRUE(peer.link().signal('g'));
  Rdm::Got g = r.next_for(buf);
  ASSERT_EQ(g.rc, 1);
  EXPECT_STREQ(buf, "after the garbage");
  EXPECT_EQ(peer.join(), 0);
}

}  // namespace
}  // namespace fabq::systest
