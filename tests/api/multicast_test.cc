// Multicast on datagram endpoints (fi_cm(3) fi_join: "Multicast join operations complete
// asynchronously ... reported to the EQ as an FI_JOIN_COMPLETE event"; fi_mc_addr: "This
// address must be used when transmitting data to a multicast group"; fi_cq(3) FI_MULTICAST:
// "Indicates that a multicast operation completed"), with real IP multicast on loopback.
#include <cstring>

#include "dgram_fixture.h"

namespace fabq::testing {
namespace {

// The datagram fixture, under the name of this file's sentences.
class Multicast : public Dgram {};

TEST_F(Multicast, AJoinCompletesOnTheEqWithTheMembershipAndItsContext) {
  DgramEp* a = open_ep();
  fid_mc* mc = nullptr;
  int ctx = 0;
  ASSERT_EQ(join(a->ep, group(1), 0, &mc, &ctx), 0);
  ASSERT_NE(mc, nullptr);
  EXPECT_EQ(mc->fid.fclass, static_cast<size_t>(FI_CLASS_MC));
  EXPECT_EQ(mc->fid.context, &ctx);
  EXPECT_NE(fi_mc_addr(mc), FI_ADDR_UNSPEC);
  EXPECT_NE(fi_mc_addr(mc), a->addr);
}

TEST_F(Multicast, EveryMemberGetsTheGroupsMessageWithFiMulticastAndTheSendersAddress) {
  DgramEp* sender = open_ep();
  DgramEp* r1 = open_ep();
  DgramEp* r2 = open_ep();
  const sockaddr_in g = group(2);
  fid_mc *m_send = nullptr, *m1 = nullptr, *m2 = nullptr;
  ASSERT_EQ(join(sender->ep, g, FI_SEND, &m_send, nullptr), 0);
  ASSERT_EQ(join(r1->ep, g, 0, &m1, nullptr), 0);
  ASSERT_EQ(join(r2->ep, g, FI_RECV, &m2, nullptr), 0);
  char rx1[16] = {}, rx2[16] = {};
  ASSERT_EQ(fi_recv(r1->ep, rx1, sizeof(rx1), nullptr, FI_ADDR_UNSPEC, rx1), 0);
  ASSERT_EQ(fi_recv(r2->ep, rx2, sizeof(rx2), nullptr, FI_ADDR_UNSPEC, rx2), 0);
  iovec iov{const_cast<char*>("to the group"), 13};
  fi_msg msg{};
  msg.msg_iov = &iov;
  msg.iov_count = 1;
  msg.addr = fi_mc_addr(m_send);
  ASSERT_EQ(fi_sendmsg(sender->ep, &msg, FI_MULTICAST | FI_COMPLETION), 0);
  fi_cq_data_entry e{};
  ASSERT_EQ(wait_cq(sender->cq, &e), 1);
  for (DgramEp* r : {r1, r2}) {
    fi_addr_t src = FI_ADDR_NOTAVAIL;
    ASSERT_EQ(wait_cq(r->cq, &e, nullptr, &src), 1);
    EXPECT_EQ(e.flags, FI_RECV | FI_MSG | FI_MULTICAST);
    EXPECT_EQ(e.len, 13u);
    EXPECT_STREQ(static_cast<char*>(e.buf), "to the group");
    EXPECT_EQ(src, sender->addr) << "FI_SOURCE: the sender's own fi_addr_t";
  }
  // A plain fi_send to the group's address works as well; a send-only member receives nothing.
  char rx_s[16] = {};
  ASSERT_EQ(fi_recv(sender->ep, rx_s, sizeof(rx_s), nullptr, FI_ADDR_UNSPEC, rx_s), 0);
  ASSERT_EQ(fi_recv(r1->ep, rx1, sizeof(rx1), nullptr, FI_ADDR_UNSPEC, rx1), 0);
  ASSERT_EQ(fi_send(sender->ep, "again", 6, nullptr, fi_mc_addr(m_send), nullptr), 0);
  ASSERT_EQ(wait_cq(r1->cq, &e), 1);
  EXPECT_STREQ(rx1, "again");
  ASSERT_EQ(wait_cq(sender->cq, &e), 1);  // the send's own completion
  EXPECT_EQ(e.flags, FI_SEND | FI_MSG);
  EXPECT_TRUE(stays_empty(sender->cq)) << "an FI_SEND member does not receive the group";
  // A receive-only member cannot send to the group.
  EXPECT_EQ(fi_send(r2->ep, "no", 3, nullptr, fi_mc_addr(m2), nullptr), -FI_EINVAL);
}

TEST_F(Multicast, AClosedMembershipLeavesTheGroupAndItsMemberGetsNothingMore) {
  DgramEp* sender = open_ep();
  DgramEp* stays = open_ep();
  DgramEp* leaves = open_ep();
  const sockaddr_in g = group(3);
  fid_mc *ms = nullptr, *m1 = nullptr, *m2 = nullptr;
  ASSERT_EQ(join(sender->ep, g, FI_SEND, &ms, nullptr), 0);
  ASSERT_EQ(join(stays->ep, g, FI_RECV, &m1, nullptr), 0);
  ASSERT_EQ(join(leaves->ep, g, FI_RECV, &m2, nullptr), 0);
  const fi_addr_t left_addr = fi_mc_addr(m2);
  forget(m2);
  ASSERT_EQ(fi_close(&m2->fid), 0);
  char rx1[8] = {}, rx2[8] = {};
  ASSERT_EQ(fi_recv(stays->ep, rx1, sizeof(rx1), nullptr, FI_ADDR_UNSPEC, rx1), 0);
  ASSERT_EQ(fi_recv(leaves->ep, rx2, sizeof(rx2), nullptr, FI_ADDR_UNSPEC, rx2), 0);
  ASSERT_EQ(fi_send(sender->ep, "after", 6, nullptr, fi_mc_addr(ms), nullptr), 0);
  fi_cq_data_entry e{};
  ASSERT_EQ(wait_cq(stays->cq, &e), 1) << "the group still works for the others";
  EXPECT_STREQ(rx1, "after");
  EXPECT_TRUE(stays_empty(leaves->cq, 300)) << "the closed member got the group's message";
  EXPECT_EQ(fi_send(leaves->ep, "x", 2, nullptr, left_addr, nullptr), -FI_EINVAL)
      << "a closed membership's address names nothing";
}

TEST_F(Multicast, JoinArgumentsAreCheckedBeforeAnythingHappens) {
  DgramEp* a = open_ep();
  DgramEp* no_eq = open_ep({.eq = false});
  fid_mc* mc = reinterpret_cast<fid_mc*>(0x1);
  sockaddr_in unicast = a->name;
  EXPECT_EQ(fi_join(a->ep, &unicast, 0, &mc, nullptr), -FI_EINVAL) << "not a group address";
  EXPECT_EQ(mc, nullptr);
  sockaddr_in no_port = group(4);
  no_port.sin_port = 0;
  EXPECT_EQ(fi_join(a->ep, &no_port, 0, &mc, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_join(a->ep, nullptr, 0, &mc, nullptr), -FI_EINVAL);
  const sockaddr_in g = group(4);
  EXPECT_EQ(fi_join(a->ep, &g, FI_SEND | FI_RECV, &mc, nullptr), -FI_EBADFLAGS);
  EXPECT_EQ(fi_join(a->ep, &g, FI_MULTICAST, &mc, nullptr), -FI_EBADFLAGS);
  EXPECT_EQ(fi_join(no_eq->ep, &g, 0, &mc, nullptr), -FI_ENOEQ)
      << "an endpoint must be bound to an event queue prior to calling fi_join";
  fi_info* info = fi_dupinfo(info_);
  fid_ep* idle = nullptr;
  ASSERT_EQ(fi_endpoint(domain_, info, &idle, nullptr), 0);
  ASSERT_EQ(fi_ep_bind(idle, &eq_->fid, 0), 0);
  EXPECT_EQ(fi_join(idle, &g, 0, &mc, nullptr), -FI_EOPBADSTATE) << "not enabled";
  EXPECT_EQ(fi_close(&idle->fid), 0);
  info->caps = FI_MSG;  // no FI_MULTICAST
  DgramEp* plain = open_ep({.caps = FI_MSG | FI_SEND | FI_RECV});
  EXPECT_EQ(fi_join(plain->ep, &g, 0, &mc, nullptr), -FI_EOPNOTSUPP);
  fi_freeinfo(info);
  fi_eq_entry entry{};
  uint32_t event = 0;
  EXPECT_EQ(fi_eq_read(eq_, &event, &entry, sizeof(entry), 0), -FI_EAGAIN)
      << "a refused join reports nothing";
}

// fabq's contract: overrun happens only when an event truly cannot be stored. A join can still
// be refused: one whose outcome finds no room in the EQ is -FI_EAGAIN and joins nothing.
TEST_F(Multicast, AJoinThatFindsTheEqFullIsEagainJoinsNothingAndTheEqStaysUsable) {
  ASSERT_EQ(fi_close(&eq_->fid), 0);
  eq_ = nullptr;
  fi_eq_attr attr{};
  attr.size = 2;  // two slots
  attr.flags = FI_WRITE;
  attr.wait_obj = FI_WAIT_UNSPEC;
  ASSERT_EQ(fi_eq_open(fabric_, &attr, &eq_, nullptr), 0);
  DgramEp* a = open_ep();
  fi_eq_entry entry{};
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(fi_eq_write(eq_, FI_NOTIFY, &entry, sizeof(entry), 0),
              static_cast<ssize_t>(sizeof(entry)));
  }
  const sockaddr_in g = group(9);
  fid_mc* mc = nullptr;
  EXPECT_EQ(fi_join(a->ep, &g, 0, &mc, nullptr), -FI_EAGAIN);
  EXPECT_EQ(mc, nullptr);
  uint32_t event = 0;
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(fi_eq_read(eq_, &event, &entry, sizeof(entry), 0),
              static_cast<ssize_t>(sizeof(entry)));
    EXPECT_EQ(event, static_cast<uint32_t>(FI_NOTIFY));
  }
  EXPECT_EQ(fi_eq_read(eq_, &event, &entry, sizeof(entry), 0), -FI_EAGAIN) << "not overrun";
  EXPECT_EQ(join(a->ep, g, 0, &mc, nullptr), 0) << "it joins once there is room";
}

// An unread FI_JOIN_COMPLETE of a closed membership would name a fid that no longer exists.
TEST_F(Multicast, ClosingAMembershipPurgesItsUnreadJoinEvent) {
  DgramEp* a = open_ep();
  const sockaddr_in g = group(10);
  fid_mc* mc = nullptr;
  ASSERT_EQ(fi_join(a->ep, &g, 0, &mc, nullptr), 0);
  ASSERT_EQ(fi_close(&mc->fid), 0);
  fi_eq_entry entry{};
  uint32_t event = 0;
  EXPECT_EQ(fi_eq_read(eq_, &event, &entry, sizeof(entry), 0), -FI_EAGAIN);
}

TEST_F(Multicast, ClosingAnEndpointWithAnOpenMembershipIsEbusy) {
  DgramEp* a = open_ep();
  fid_mc* mc = nullptr;
  ASSERT_EQ(join(a->ep, group(5), 0, &mc, nullptr), 0);
  EXPECT_EQ(fi_close(&a->ep->fid), -FI_EBUSY);
}

TEST_F(Multicast, NetRejectAndTimeoutFailTheNextJoinAsAnEqErrorEntryAndSendsAreUntouched) {
  DgramEp* a = open_ep();  // endpoint 0
  DgramEp* b = open_ep();
  inject("net=reject,on=ep:0");
  fid_mc* mc = nullptr;
  int ctx = 0;
  EXPECT_EQ(join(a->ep, group(6), 0, &mc, &ctx), FI_ECONNREFUSED);
  EXPECT_EQ(fi_send(a->ep, "x", 2, nullptr, fi_mc_addr(mc), nullptr), -FI_EINVAL)
      << "a failed join gives no group to send to";
  inject("net=timeout,on=ep:0");
  char rx[4] = {};
  ASSERT_EQ(fi_recv(b->ep, rx, sizeof(rx), nullptr, FI_ADDR_UNSPEC, rx), 0);
  ASSERT_EQ(fi_send(a->ep, "ok", 3, nullptr, b->addr, nullptr), 0) << "a send ignores it";
  fi_cq_data_entry e{};
  ASSERT_EQ(wait_cq(b->cq, &e), 1);
  EXPECT_EQ(join(a->ep, group(6), 0, &mc, &ctx), FI_ETIMEDOUT);
  EXPECT_EQ(join(a->ep, group(6), 0, &mc, &ctx), 0) << "one join only";
}

}  // namespace
}  // namespace fabq::testing
