// FI_DIRECTED_RECV on FI_EP_RDM endpoints (fi_getinfo(3), fi_msg(3), fi_tagged(3)): "the
// endpoint use[s] the source address of an incoming message when matching it with a receive
// buffer"; "If set to FI_ADDR_UNSPEC, any source address may match"; without the capability
// "the src_addr parameter for msg and tagged receive operations is ignored".
#include <rdma/fi_tagged.h>

#include <cstring>
#include <string>

#include "libfabric2.h"
#include "rdm_fixture.h"

namespace fabq::testing {
namespace {

class DirectedRecv : public Rdm {
 protected:
  explicit DirectedRecv(uint64_t directed = FI_DIRECTED_RECV, uint32_t version = kVersion)
      : Rdm(FI_MSG | FI_TAGGED | FI_SOURCE | directed, version) {}

  // Sends `text` from `from` to `to` and waits until `to`'s transport has it: the message is
  // buffered there (unexpected) unless a receive takes it.
  void send_arrived(Ep* from, const Ep* to, const char* text, uint64_t tag = 0,
                    bool tagged = false) {
    iovec iov{const_cast<char*>(text), std::strlen(text) + 1};
    ssize_t rc = 0;
    if (tagged) {
      fi_msg_tagged m{
          .msg_iov = &iov, .iov_count = 1, .addr = to->addr, .tag = tag, .context = from};
      rc = fi_tsendmsg(from->ep, &m, FI_COMPLETION | FI_TRANSMIT_COMPLETE);
    } else {
      fi_msg m{.msg_iov = &iov, .iov_count = 1, .addr = to->addr, .context = from};
      rc = fi_sendmsg(from->ep, &m, FI_COMPLETION | FI_TRANSMIT_COMPLETE);
    }
    ASSERT_EQ(rc, 0) << fi_strerror(static_cast<int>(-rc));
    fi_cq_tagged_entry e{};
    ASSERT_EQ(wait_cq(from->cq, &e), 1);
    ASSERT_EQ(e.op_context, from);
  }

  // The next receive completion of `ep`: its buffer's text and the source it names.
  std::string received(Ep* ep, fi_addr_t* src = nullptr) {
    fi_cq_tagged_entry e{};
    fi_addr_t from = FI_ADDR_NOTAVAIL;
    const ssize_t n = wait_cq(ep->cq, &e, nullptr, &from);
    EXPECT_EQ(n, 1) << fi_strerror(static_cast<int>(-n));
    if (n != 1) return "";
    if (src != nullptr) *src = from;
    return static_cast<const char*>(e.op_context);
  }
};

TEST_F(DirectedRecv, AReceiveForOneSenderLeavesAnotherSendersEarlierMessage) {
  Ep* a = open_ep();
  Ep* b = open_ep();
  Ep* c = open_ep();
  send_arrived(a, c, "from a");
  send_arrived(b, c, "from b");
  char for_b[32] = {};
  char for_any[32] = {};
  ASSERT_EQ(fi_recv(c->ep, for_b, sizeof(for_b), nullptr, b->addr, for_b), 0);
  fi_addr_t src = FI_ADDR_UNSPEC;
  EXPECT_EQ(received(c, &src), std::string(for_b));
  EXPECT_STREQ(for_b, "from b") << "a's message came first but is not b's";
  EXPECT_EQ(src, b->addr);
  ASSERT_EQ(fi_recv(c->ep, for_any, sizeof(for_any), nullptr, FI_ADDR_UNSPEC, for_any), 0);
  EXPECT_EQ(received(c, &src), std::string(for_any));
  EXPECT_STREQ(for_any, "from a");
  EXPECT_EQ(src, a->addr);
}

TEST_F(DirectedRecv, APostedReceiveForOneSenderIsNotTakenByAnother) {
  Ep* a = open_ep();
  Ep* b = open_ep();
  Ep* c = open_ep();
  char for_b[32] = {};
  ASSERT_EQ(fi_recv(c->ep, for_b, sizeof(for_b), nullptr, b->addr, for_b), 0);
  send_arrived(a, c, "from a");
  EXPECT_FALSE(any_completion_within(c->cq, 50)) << "a's message took b's receive";
  send_arrived(b, c, "from b");
  EXPECT_EQ(received(c), std::string(for_b));
  EXPECT_STREQ(for_b, "from b");
  char for_any[32] = {};
  ASSERT_EQ(fi_recv(c->ep, for_any, sizeof(for_any), nullptr, FI_ADDR_UNSPEC, for_any), 0);
  EXPECT_EQ(received(c), std::string(for_any));
  EXPECT_STREQ(for_any, "from a") << "buffered while b's receive waited";
}

TEST_F(DirectedRecv, FiAddrUnspecTakesAnySenderOldestFirst) {
  Ep* a = open_ep();
  Ep* b = open_ep();
  Ep* c = open_ep();
  send_arrived(b, c, "first");
  send_arrived(a, c, "second");
  char one[32] = {};
  char two[32] = {};
  ASSERT_EQ(fi_recv(c->ep, one, sizeof(one), nullptr, FI_ADDR_UNSPEC, one), 0);
  ASSERT_EQ(fi_recv(c->ep, two, sizeof(two), nullptr, FI_ADDR_UNSPEC, two), 0);
  EXPECT_EQ(received(c), std::string(one));
  EXPECT_EQ(received(c), std::string(two));
  EXPECT_STREQ(one, "first");
  EXPECT_STREQ(two, "second");
}

TEST_F(DirectedRecv, OneSendersMessagesKeepTheirOrderAmongOthers) {
  Ep* a = open_ep();
  Ep* b = open_ep();
  Ep* c = open_ep();
  send_arrived(b, c, "b1");
  send_arrived(a, c, "a1");
  send_arrived(b, c, "b2");
  char r1[8] = {};
  char r2[8] = {};
  char r3[8] = {};
  ASSERT_EQ(fi_recv(c->ep, r1, sizeof(r1), nullptr, b->addr, r1), 0);
  ASSERT_EQ(fi_recv(c->ep, r2, sizeof(r2), nullptr, b->addr, r2), 0);
  ASSERT_EQ(fi_recv(c->ep, r3, sizeof(r3), nullptr, a->addr, r3), 0);
  for (int i = 0; i < 3; ++i) received(c);
  EXPECT_STREQ(r1, "b1");
  EXPECT_STREQ(r2, "b2");
  EXPECT_STREQ(r3, "a1");
}

TEST_F(DirectedRecv, TaggedReceiveMatchesTagAndSender) {
  Ep* a = open_ep();
  Ep* b = open_ep();
  Ep* c = open_ep();
  send_arrived(a, c, "a7", 7, /*tagged=*/true);
  send_arrived(b, c, "b8", 8, /*tagged=*/true);
  send_arrived(b, c, "b7", 7, /*tagged=*/true);
  char buf[8] = {};
  ASSERT_EQ(fi_trecv(c->ep, buf, sizeof(buf), nullptr, b->addr, 7, 0, buf), 0);
  EXPECT_EQ(received(c), std::string(buf));
  EXPECT_STREQ(buf, "b7") << "tag 7 from b: not a's tag 7, not b's tag 8";
  char any[8] = {};
  fi_msg_tagged m{};
  iovec iov{any, sizeof(any)};
  m.msg_iov = &iov;
  m.iov_count = 1;
  m.addr = b->addr;
  m.tag = 0;
  m.ignore = ~0ULL;
  m.context = any;
  ASSERT_EQ(fi_trecvmsg(c->ep, &m, 0), 0);
  EXPECT_EQ(received(c), std::string(any));
  EXPECT_STREQ(any, "b8") << "any tag from b";
}

TEST_F(DirectedRecv, PeekForOneSenderSeesOnlyThatSendersMessages) {
  Ep* a = open_ep();
  Ep* b = open_ep();
  Ep* c = open_ep();
  send_arrived(b, c, "b5", 5, /*tagged=*/true);
  fi_msg_tagged m{};
  m.addr = a->addr;
  m.tag = 5;
  m.context = &m;
  ASSERT_EQ(fi_trecvmsg(c->ep, &m, FI_PEEK), 0);
  fi_cq_tagged_entry e{};
  fi_cq_err_entry err{};
  ASSERT_EQ(wait_cq(c->cq, &e, &err), -FI_EAVAIL);
  EXPECT_EQ(err.err, FI_ENOMSG) << "b's message is not a's";
  m.addr = b->addr;
  ASSERT_EQ(fi_trecvmsg(c->ep, &m, FI_PEEK | FI_CLAIM), 0);
  fi_addr_t src = FI_ADDR_NOTAVAIL;
  ASSERT_EQ(wait_cq(c->cq, &e, nullptr, &src), 1);
  EXPECT_EQ(e.op_context, &m);
  EXPECT_EQ(e.len, 3u);
  EXPECT_EQ(src, b->addr);
  // The claim finds its message by context: Open MPI's MPI_Mrecv posts it with address 0.
  char buf[8] = {};
  iovec iov{buf, sizeof(buf)};
  m.msg_iov = &iov;
  m.iov_count = 1;
  m.addr = a->addr;
  ASSERT_EQ(fi_trecvmsg(c->ep, &m, FI_CLAIM), 0);
  ASSERT_EQ(wait_cq(c->cq, &e), 1);
  EXPECT_EQ(e.op_context, &m);
  EXPECT_STREQ(buf, "b5");
}

TEST_F(DirectedRecv, AReceiveNamingAnAddressTheAvDoesNotHoldIsEinval) {
  Ep* c = open_ep();
  char buf[8];
  EXPECT_EQ(fi_recv(c->ep, buf, sizeof(buf), nullptr, c->addr + 100, buf), -FI_EINVAL);
  EXPECT_EQ(fi_trecv(c->ep, buf, sizeof(buf), nullptr, c->addr + 100, 0, 0, buf), -FI_EINVAL);
  EXPECT_FALSE(any_completion_within(c->cq, 20)) << "nothing was posted";
}

TEST_F(DirectedRecv, ASenderOutsideTheAvMatchesOnlyReceivesForAnySender) {
  Ep* b = open_ep();
  Ep* c = open_ep();
  fid_av* other = open_av();
  Ep* stranger = open_ep(other);  // c's AV does not hold it
  fi_addr_t c_there = FI_ADDR_UNSPEC;
  ASSERT_EQ(fi_av_insert(other, &c->name, 1, &c_there, 0, nullptr), 1);
  Ep to_c = *c;
  to_c.addr = c_there;
  send_arrived(stranger, &to_c, "stranger");
  char for_b[16] = {};
  ASSERT_EQ(fi_recv(c->ep, for_b, sizeof(for_b), nullptr, b->addr, for_b), 0);
  EXPECT_FALSE(any_completion_within(c->cq, 50));
  char any[16] = {};
  ASSERT_EQ(fi_recv(c->ep, any, sizeof(any), nullptr, FI_ADDR_UNSPEC, any), 0);
  fi_addr_t src = FI_ADDR_UNSPEC;
  EXPECT_EQ(received(c, &src), std::string(any));
  EXPECT_STREQ(any, "stranger");
  EXPECT_EQ(src, FI_ADDR_NOTAVAIL);
}

// A shared receive context asked for FI_DIRECTED_RECV names senders through the AV of the
// endpoints bound to it.
TEST_F(DirectedRecv, ASharedReceiveContextWithTheCapabilitySelectsTheSenderToo) {
  Ep* a = open_ep();
  Ep* b = open_ep();
  fid_ep* srx = open_srx(FI_MSG | FI_RECV | FI_DIRECTED_RECV);
  Ep* c = open_ep({.srx = srx});
  send_arrived(b, c, "from b");
  char for_a[16] = {};
  ASSERT_EQ(fi_recv(srx, for_a, sizeof(for_a), nullptr, a->addr, for_a), 0);
  EXPECT_FALSE(any_completion_within(c->cq, 50)) << "b's message is not a's";
  send_arrived(a, c, "from a");
  EXPECT_EQ(received(c), std::string(for_a));
  EXPECT_STREQ(for_a, "from a");
  char any[16] = {};
  ASSERT_EQ(fi_recv(srx, any, sizeof(any), nullptr, FI_ADDR_UNSPEC, any), 0);
  EXPECT_EQ(received(c), std::string(any));
  EXPECT_STREQ(any, "from b");
  EXPECT_EQ(fi_recv(srx, any, sizeof(any), nullptr, a->addr + 100, any), -FI_EINVAL);
}

TEST_F(DirectedRecv, WithoutTheCapabilityTheSourceAddressIsIgnored) {
  Ep* a = open_ep();
  Ep* b = open_ep();
  Ep* c = open_ep(nullptr, FI_MSG | FI_TAGGED | FI_SOURCE);
  send_arrived(a, c, "from a");
  char buf[16] = {};
  ASSERT_EQ(fi_recv(c->ep, buf, sizeof(buf), nullptr, b->addr, buf), 0);
  EXPECT_EQ(received(c), std::string(buf));
  EXPECT_STREQ(buf, "from a");
  char any[16] = {};
  EXPECT_EQ(fi_recv(c->ep, any, sizeof(any), nullptr, c->addr + 100, any), 0)
      << "an fi_addr_t the AV does not hold is not looked at";
}

// libfabric 2.0's variants (fi_getinfo(3)): FI_TAGGED_DIRECTED_RECV "only applies to tagged
// receive operations"; FI_EXACT_DIRECTED_RECV "requires the source address to be exact, i.e.,
// FI_ADDR_UNSPEC is not allowed", alone or "as a modifier" of the other two. Skipped where the
// libfabric the tests run with is older than 2.0 (scripts/test runs them with 2.x too).

class TaggedDirectedRecv : public DirectedRecv {
 protected:
  TaggedDirectedRecv() : DirectedRecv(lf2::kTaggedDirectedRecv, FI_VERSION(2, 0)) {}
};

TEST_F(TaggedDirectedRecv, ATaggedReceiveForOneSenderIsNotTakenByAnother) {
  Ep* a = open_ep();
  Ep* b = open_ep();
  Ep* c = open_ep();
  EXPECT_NE(info_->rx_attr->caps & lf2::kTaggedDirectedRecv, 0U);
  char for_b[32] = {};
  ASSERT_EQ(fi_trecv(c->ep, for_b, sizeof(for_b), nullptr, b->addr, 7, 0, for_b), 0);
  send_arrived(a, c, "from a", 7, /*tagged=*/true);
  EXPECT_FALSE(any_completion_within(c->cq, 50)) << "a's message took b's tagged receive";
  send_arrived(b, c, "from b", 7, /*tagged=*/true);
  EXPECT_EQ(received(c), std::string(for_b));
  EXPECT_STREQ(for_b, "from b");
}

TEST_F(TaggedDirectedRecv, AnUntaggedReceiveIgnoresItsSourceAddress) {
  Ep* a = open_ep();
  Ep* b = open_ep();
  Ep* c = open_ep();
  char buf[32] = {};
  ASSERT_EQ(fi_recv(c->ep, buf, sizeof(buf), nullptr, b->addr, buf), 0);
  send_arrived(a, c, "from a");
  EXPECT_EQ(received(c), std::string(buf));
  EXPECT_STREQ(buf, "from a");
  EXPECT_EQ(fi_recv(c->ep, buf, sizeof(buf), nullptr, c->addr + 100, buf), 0)
      << "an untagged receive's fi_addr_t is not looked at";
}

class ExactDirectedRecv : public DirectedRecv {
 protected:
  ExactDirectedRecv() : DirectedRecv(lf2::kExactDirectedRecv, FI_VERSION(2, 0)) {}
};

TEST_F(ExactDirectedRecv, AloneEveryReceiveMustNameItsSender) {
  Ep* a = open_ep();
  Ep* b = open_ep();
  Ep* c = open_ep();
  char buf[32] = {};
  EXPECT_EQ(fi_recv(c->ep, buf, sizeof(buf), nullptr, FI_ADDR_UNSPEC, buf), -FI_EINVAL);
  EXPECT_EQ(fi_trecv(c->ep, buf, sizeof(buf), nullptr, FI_ADDR_UNSPEC, 7, 0, buf), -FI_EINVAL);
  ASSERT_EQ(fi_recv(c->ep, buf, sizeof(buf), nullptr, b->addr, buf), 0);
  send_arrived(a, c, "from a");
  EXPECT_FALSE(any_completion_within(c->cq, 50)) << "a's message took b's receive";
  send_arrived(b, c, "from b");
  EXPECT_EQ(received(c), std::string(buf));
  EXPECT_STREQ(buf, "from b");
}

TEST_F(ExactDirectedRecv, WithTaggedDirectedRecvOnlyTaggedReceivesMustNameOne) {
  Ep* a = open_ep();
  Ep* c = open_ep({.caps = info_->caps | lf2::kTaggedDirectedRecv});
  char buf[32] = {};
  EXPECT_EQ(fi_trecv(c->ep, buf, sizeof(buf), nullptr, FI_ADDR_UNSPEC, 7, 0, buf), -FI_EINVAL);
  ASSERT_EQ(fi_recv(c->ep, buf, sizeof(buf), nullptr, FI_ADDR_UNSPEC, buf), 0);
  send_arrived(a, c, "from a");
  EXPECT_EQ(received(c), std::string(buf));
  EXPECT_STREQ(buf, "from a");
}

TEST_F(ExactDirectedRecv, ASharedReceiveContextRefusesFiAddrUnspecToo) {
  Ep* a = open_ep();
  fid_ep* srx = open_srx(FI_MSG | FI_RECV | lf2::kExactDirectedRecv);
  Ep* c = open_ep({.srx = srx});
  char buf[16] = {};
  EXPECT_EQ(fi_recv(srx, buf, sizeof(buf), nullptr, FI_ADDR_UNSPEC, buf), -FI_EINVAL);
  ASSERT_EQ(fi_recv(srx, buf, sizeof(buf), nullptr, a->addr, buf), 0);
  send_arrived(a, c, "from a");
  EXPECT_EQ(received(c), std::string(buf));
  EXPECT_STREQ(buf, "from a");
}

}  // namespace
}  // namespace fabq::testing
