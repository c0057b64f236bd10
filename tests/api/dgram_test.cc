// Datagram endpoints (fi_endpoint(3) FI_EP_DGRAM: "Supports a connectionless, unreliable
// datagram communication"), through fi_msg(3) and fi_cq(3): messages of at most
// ep_attr->max_msg_size bytes, each in one datagram, that may be lost but never arrive damaged,
// twice or in the wrong buffer; completions, counters and sources as for RDM.
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <sys/resource.h>

#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "dgram_fixture.h"

namespace fabq::testing {
namespace {

using namespace std::chrono_literals;

ssize_t post_recv(const DgramEp* e, void* buf, size_t len, void* ctx) {
  return fi_recv(e->ep, buf, len, nullptr, FI_ADDR_UNSPEC, ctx);
}

TEST_F(Dgram, ASendReachesThePostedReceiveAndReadfromNamesTheSender) {
  DgramEp* a = open_ep();
  DgramEp* b = open_ep();
  char rx[32] = {};
  int rx_ctx = 0, tx_ctx = 0;
  ASSERT_EQ(post_recv(b, rx, sizeof(rx), &rx_ctx), 0);
  const char msg[] = "one datagram";
  ASSERT_EQ(fi_send(a->ep, msg, sizeof(msg), nullptr, b->addr, &tx_ctx), 0);
  fi_cq_data_entry e{};
  ASSERT_EQ(wait_cq(a->cq, &e), 1);
  EXPECT_EQ(e.op_context, &tx_ctx);
  EXPECT_EQ(e.flags, FI_SEND | FI_MSG);
  fi_addr_t src = FI_ADDR_NOTAVAIL;
  ASSERT_EQ(wait_cq(b->cq, &e, nullptr, &src), 1);
  EXPECT_EQ(e.op_context, &rx_ctx);
  EXPECT_EQ(e.flags, FI_RECV | FI_MSG);
  EXPECT_EQ(e.len, sizeof(msg));
  EXPECT_STREQ(rx, msg);
  EXPECT_EQ(src, a->addr) << "FI_SOURCE: the sender's fi_addr_t";
}

TEST_F(Dgram, AnEndpointIsNamedByItsUdpSocketAndSendsToItselfToo) {
  DgramEp* a = open_ep();
  EXPECT_EQ(a->name.sin_family, AF_INET);
  EXPECT_EQ(a->name.sin_addr.s_addr, htonl(INADDR_LOOPBACK));
  EXPECT_NE(a->name.sin_port, 0);
  // The name is a UDP port: binding it again fails.
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(fd, 0);
  EXPECT_NE(bind(fd, reinterpret_cast<const sockaddr*>(&a->name), sizeof(a->name)), 0);
  close(fd);
  char rx[8] = {};
  ASSERT_EQ(post_recv(a, rx, sizeof(rx), nullptr), 0);
  ASSERT_EQ(fi_send(a->ep, "self", 5, nullptr, a->addr, nullptr), 0);
  fi_cq_data_entry e{};
  ASSERT_EQ(wait_cq(a->cq, &e), 1);
  ASSERT_EQ(wait_cq(a->cq, &e), 1);
  EXPECT_STREQ(rx, "self");
}

TEST_F(Dgram, EverySendFormCarriesItsMessageAndDataAndInjectWritesNoCompletion) {
  DgramEp* a = open_ep({.counters = true});
  DgramEp* b = open_ep();
  char rx[5][16] = {};
  for (auto& r : rx) ASSERT_EQ(post_recv(b, r, sizeof(r), r), 0);
  char one[] = "sendv-", two[] = "two";
  iovec iov[2] = {{one, 6}, {two, 4}};
  ASSERT_EQ(fi_sendv(a->ep, iov, nullptr, 2, b->addr, nullptr), 0);
  fi_msg msg{};
  msg.msg_iov = iov;
  msg.iov_count = 2;
  msg.addr = b->addr;
  msg.data = 0xfeed;
  ASSERT_EQ(fi_sendmsg(a->ep, &msg, FI_REMOTE_CQ_DATA | FI_COMPLETION), 0);
  ASSERT_EQ(fi_inject(a->ep, "inject", 7, b->addr), 0);
  ASSERT_EQ(fi_senddata(a->ep, "senddata", 9, nullptr, 0x77, b->addr, nullptr), 0);
  ASSERT_EQ(fi_injectdata(a->ep, "injdata", 8, 0x99, b->addr), 0);
  // Three completions (sendv, sendmsg, senddata), five sends counted.
  fi_cq_data_entry e{};
  for (int i = 0; i < 3; ++i) ASSERT_EQ(wait_cq(a->cq, &e), 1) << i;
  EXPECT_EQ(fi_cq_read(a->cq, &e, 1), -FI_EAGAIN) << "fi_inject writes no completion";
  EXPECT_EQ(fi_cntr_wait(a->tx_cntr, 5, kDgramWaitMs), 0);
  // Datagrams may come in any order (FI_ORDER_NONE): matched by content.
  struct Want {
    const char* text;
    bool data;
    uint64_t value;
  };
  std::vector<Want> want = {{"sendv-two", false, 0},
                            {"sendv-two", true, 0xfeed},
                            {"inject", false, 0},
                            {"senddata", true, 0x77},
                            {"injdata", true, 0x99}};
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(wait_cq(b->cq, &e), 1) << i;
    const auto* got = static_cast<const char*>(e.buf);
    const bool data = (e.flags & FI_REMOTE_CQ_DATA) != 0;
    auto it = std::find_if(want.begin(), want.end(), [&](const Want& w) {
      return std::string(got) == w.text && data == w.data && (!data || e.data == w.value);
    });
    ASSERT_NE(it, want.end()) << got << " data " << data << " " << e.data;
    EXPECT_EQ(e.len, std::strlen(it->text) + 1);
    want.erase(it);
  }
}

TEST_F(Dgram, AMessageLongerThanItsReceiveCompletesWithEtruncAndTheRestIsDiscarded) {
  DgramEp* a = open_ep();
  DgramEp* b = open_ep();
  char rx[4] = {};
  char next[16] = {};
  ASSERT_EQ(post_recv(b, rx, sizeof(rx), rx), 0);
  ASSERT_EQ(post_recv(b, next, sizeof(next), next), 0);
  ASSERT_EQ(fi_send(a->ep, "0123456789", 10, nullptr, b->addr, nullptr), 0);
  fi_cq_data_entry e{};
  fi_cq_err_entry err{};
  ASSERT_EQ(wait_cq(b->cq, &e, &err), -FI_EAVAIL);
  EXPECT_EQ(err.err, FI_ETRUNC);
  EXPECT_EQ(err.olen, 6u);
  EXPECT_EQ(err.op_context, rx);
  EXPECT_EQ(std::memcmp(rx, "0123", 4), 0);
  ASSERT_EQ(fi_send(a->ep, "next", 5, nullptr, b->addr, nullptr), 0);
  ASSERT_EQ(wait_cq(b->cq, &e), 1);
  EXPECT_EQ(e.op_context, next) << "nothing of the long one reached the next receive";
  EXPECT_STREQ(next, "next");
}

TEST_F(Dgram, MaxMsgSizeBytesGoInOneDatagramAndOneMoreIsEmsgsize) {
  DgramEp* a = open_ep();
  DgramEp* b = open_ep();
  const size_t max = info_->ep_attr->max_msg_size;
  ASSERT_EQ(max, 65483u);
  std::vector<unsigned char> tx(max + 1), rx(max + 1);
  for (size_t i = 0; i < tx.size(); ++i) tx[i] = static_cast<unsigned char>(i * 7);
  EXPECT_EQ(fi_send(a->ep, tx.data(), max + 1, nullptr, b->addr, nullptr), -FI_EMSGSIZE);
  ASSERT_EQ(post_recv(b, rx.data(), rx.size(), nullptr), 0);
  ASSERT_EQ(fi_send(a->ep, tx.data(), max, nullptr, b->addr, nullptr), 0);
  fi_cq_data_entry e{};
  ASSERT_EQ(wait_cq(b->cq, &e), 1);
  EXPECT_EQ(e.len, max);
  EXPECT_EQ(std::memcmp(tx.data(), rx.data(), max), 0);
  EXPECT_EQ(fi_inject(a->ep, tx.data(), info_->tx_attr->inject_size + 1, b->addr), -FI_EMSGSIZE);
}

TEST_F(Dgram, ADatagramThatCameBeforeItsReceiveWaitsForIt) {
  DgramEp* a = open_ep();
  DgramEp* b = open_ep();
  ASSERT_EQ(fi_send(a->ep, "early", 6, nullptr, b->addr, nullptr), 0);
  fi_cq_data_entry e{};
  ASSERT_EQ(wait_cq(a->cq, &e), 1);
  // Reading b's CQ drives progress: the datagram arrives and is kept for a receive.
  EXPECT_TRUE(stays_empty(b->cq, 100));
  char rx[8] = {};
  ASSERT_EQ(post_recv(b, rx, sizeof(rx), rx), 0);
  ASSERT_EQ(wait_cq(b->cq, &e), 1);
  EXPECT_STREQ(rx, "early");
}

// A full receive CQ is the application's to empty: the datagrams whose receives are posted wait
// for it, as an RDM connection's messages do, instead of being lost for it.
TEST_F(Dgram, DatagramsWhoseReceiveFindsTheCqFullWaitUntilTheApplicationReadsIt) {
  DgramEp* a = open_ep();
  DgramEp* b = open_ep({.counters = true, .cq_size = 2});
  constexpr int kMsgs = 6;
  char rx[kMsgs][8] = {};
  for (auto& r : rx) ASSERT_EQ(post_recv(b, r, sizeof(r), r), 0);
  for (int i = 0; i < kMsgs; ++i) {
    const std::string m = "m" + std::to_string(i);
    ASSERT_EQ(fi_send(a->ep, m.c_str(), m.size() + 1, nullptr, b->addr, nullptr), 0);
  }
  // Reading the counter drives progress without emptying the CQ: it fills, then nothing more
  // completes.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  while (std::chrono::steady_clock::now() < deadline) (void)fi_cntr_read(b->rx_cntr);
  const uint64_t before = fi_cntr_read(b->rx_cntr);
  EXPECT_GE(before, 2u);
  EXPECT_LT(before, static_cast<uint64_t>(kMsgs)) << "the CQ holds fewer than were sent";
  std::set<std::string> got;
  fi_cq_data_entry e{};
  for (int i = 0; i < kMsgs; ++i) {
    ASSERT_EQ(wait_cq(b->cq, &e), 1) << i << " of " << kMsgs << ": lost to a full CQ";
    got.insert(static_cast<const char*>(e.buf));
  }
  EXPECT_EQ(got.size(), static_cast<size_t>(kMsgs));
  // The counter is a separate object: it may count the last one a moment after its CQ entry
  // was read (the progress thread may be the one completing it).
  EXPECT_EQ(fi_cntr_wait(b->rx_cntr, kMsgs, kDgramWaitMs), 0);
  EXPECT_EQ(fi_cntr_read(b->rx_cntr), static_cast<uint64_t>(kMsgs));
}

// CPU time of this process (all its threads), in milliseconds.
int64_t cpu_ms() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1000 +
         (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1000;
}

// ... and waits for the CQ's room, not in a loop: while the application sleeps in fi_cq_sread
// on another CQ, the progress thread costs next to nothing; the datagram is delivered as soon
// as the application reads the full CQ.
TEST_F(Dgram, ADatagramWaitingForRoomInTheCqCostsNoCpuAndGoesOnOnceTheCqIsRead) {
  DgramEp* a = open_ep();
  DgramEp* b = open_ep({.counters = true, .cq_size = 2});
  constexpr int kMsgs = 4;
  char rx[kMsgs][8] = {};
  for (auto& r : rx) ASSERT_EQ(post_recv(b, r, sizeof(r), r), 0);
  for (int i = 0; i < kMsgs; ++i) {
    const std::string m = "m" + std::to_string(i);
    ASSERT_EQ(fi_inject(a->ep, m.c_str(), m.size() + 1, b->addr), 0);  // no completion at a
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  while (std::chrono::steady_clock::now() < deadline) (void)fi_cntr_read(b->rx_cntr);
  const uint64_t before = fi_cntr_read(b->rx_cntr);
  ASSERT_GE(before, 2u);
  ASSERT_LT(before, static_cast<uint64_t>(kMsgs));
  const int64_t cpu0 = cpu_ms();
  fi_cq_data_entry e{};
  EXPECT_EQ(fi_cq_sread(a->cq, &e, 1, nullptr, 1000), -FI_EAGAIN);
  const int64_t spent = cpu_ms() - cpu0;
  RecordProperty("cpu_ms_while_blocked_1000_ms", static_cast<int>(spent));
  EXPECT_LT(spent, 100) << "ms of CPU in 1000 ms while a datagram waited for the CQ";
  std::set<std::string> got;
  for (int i = 0; i < kMsgs; ++i) {
    ASSERT_EQ(wait_cq(b->cq, &e, nullptr, nullptr, 500), 1)
        << i << " of " << kMsgs << ": not delivered once the CQ was read";
    got.insert(static_cast<const char*>(e.buf));
  }
  EXPECT_EQ(got.size(), static_cast<size_t>(kMsgs));
}

TEST_F(Dgram, ABlockingReadWakesWhenADatagramArrives) {
  DgramEp* a = open_ep();
  DgramEp* b = open_ep();
  char rx[8] = {};
  ASSERT_EQ(post_recv(b, rx, sizeof(rx), rx), 0);
  std::thread sender([&] {
    std::this_thread::sleep_for(50ms);
    EXPECT_EQ(fi_send(a->ep, "wake", 5, nullptr, b->addr, nullptr), 0);
  });
  fi_cq_data_entry e{};
  const ssize_t n = fi_cq_sread(b->cq, &e, 1, nullptr, kDgramWaitMs);
  sender.join();
  ASSERT_EQ(n, 1) << fi_strerror(static_cast<int>(-n));
  EXPECT_STREQ(rx, "wake");
}

TEST_F(Dgram, CountersCountSendsAndReceivesAndSelectiveCompletionHidesUnflaggedSends) {
  DgramEp* a = open_ep({.counters = true, .selective = true});
  DgramEp* b = open_ep({.counters = true});
  char rx[2][8] = {};
  for (auto& r : rx) ASSERT_EQ(post_recv(b, r, sizeof(r), r), 0);
  ASSERT_EQ(fi_send(a->ep, "quiet", 6, nullptr, b->addr, nullptr), 0);
  iovec iov{const_cast<char*>("loud"), 5};
  fi_msg msg{};
  msg.msg_iov = &iov;
  msg.iov_count = 1;
  msg.addr = b->addr;
  msg.context = &msg;
  ASSERT_EQ(fi_sendmsg(a->ep, &msg, FI_COMPLETION), 0);
  EXPECT_EQ(fi_cntr_wait(a->tx_cntr, 2, kDgramWaitMs), 0);
  EXPECT_EQ(fi_cntr_wait(b->rx_cntr, 2, kDgramWaitMs), 0);
  fi_cq_data_entry e{};
  ASSERT_EQ(wait_cq(a->cq, &e), 1);
  EXPECT_EQ(e.op_context, &msg) << "only the FI_COMPLETION send";
  EXPECT_TRUE(stays_empty(a->cq, 50));
}

TEST_F(Dgram, ASendToAnAddressTheAvDoesNotHoldIsEinvalAndTaggedAndOneSidedCallsAreNotOffered) {
  DgramEp* a = open_ep();
  EXPECT_EQ(fi_send(a->ep, "x", 1, nullptr, 12345, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_send(a->ep, "x", 1, nullptr, FI_ADDR_UNSPEC, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_tsend(a->ep, "x", 1, nullptr, a->addr, 1, nullptr), -FI_ENOSYS);
  char rx[4];
  EXPECT_EQ(fi_trecv(a->ep, rx, sizeof(rx), nullptr, FI_ADDR_UNSPEC, 1, 0, nullptr), -FI_ENOSYS);
  EXPECT_LT(fi_write(a->ep, "x", 1, nullptr, a->addr, 0, 0, nullptr), 0);
  EXPECT_EQ(fi_connect(a->ep, &a->name, nullptr, 0), -FI_ENOSYS);
  // Nothing acknowledges a datagram: no completion can say it was delivered.
  iovec iov{const_cast<char*>("x"), 1};
  fi_msg msg{};
  msg.msg_iov = &iov;
  msg.iov_count = 1;
  msg.addr = a->addr;
  EXPECT_EQ(fi_sendmsg(a->ep, &msg, FI_DELIVERY_COMPLETE), -FI_EINVAL);
  EXPECT_EQ(fi_sendmsg(a->ep, &msg, FI_TRANSMIT_COMPLETE), 0);
}

TEST_F(Dgram, AnEndpointNeedsAnAvAndACqAndSendsOnlyOnceEnabled) {
  fi_info* info = fi_dupinfo(info_);
  fid_ep* ep = nullptr;
  ASSERT_EQ(fi_endpoint(domain_, info, &ep, nullptr), 0);
  EXPECT_EQ(fi_enable(ep), -FI_ENOAV);
  ASSERT_EQ(fi_ep_bind(ep, &av_->fid, 0), 0);
  EXPECT_EQ(fi_enable(ep), -FI_ENOCQ);
  EXPECT_EQ(fi_send(ep, "x", 1, nullptr, 0, nullptr), -FI_EOPBADSTATE);
  EXPECT_EQ(fi_close(&ep->fid), 0);
  fi_freeinfo(info);
}

// A hostile or stray sender: whatever reaches an endpoint's port that is not a whole, intact
// fabq datagram is dropped, and what comes next is delivered as usual.
TEST_F(Dgram, DatagramsThatAreNotFabqsOrAreDamagedAreDroppedAndTheNextIsDelivered) {
  DgramEp* a = open_ep();
  DgramEp* b = open_ep();
  char rx[16] = {};
  ASSERT_EQ(post_recv(b, rx, sizeof(rx), rx), 0);
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(fd, 0);
  // A real header, for the variants: magic "Fd", version 1, no flags, length 4, then the check.
  unsigned char good[28] = {0x46, 0x64, 1, 0};
  good[4] = 4;
  std::vector<std::vector<unsigned char>> bad = {
      {},                                                     // empty
      {0x46, 0x64, 1},                                        // short
      std::vector<unsigned char>(64, 0xab),                   // not fabq's
      std::vector<unsigned char>(good, good + sizeof(good)),  // its check is 0: wrong
  };
  for (const auto& d : bad) {
    ASSERT_GE(sendto(fd, d.data(), d.size(), 0, reinterpret_cast<const sockaddr*>(&b->name),
                     sizeof(b->name)),
              0);
  }
  close(fd);
  fi_cq_data_entry e{};
  EXPECT_TRUE(stays_empty(b->cq, 100));
  ASSERT_EQ(fi_send(a->ep, "genuine", 8, nullptr, b->addr, nullptr), 0);
  fi_addr_t src = FI_ADDR_NOTAVAIL;
  ASSERT_EQ(wait_cq(b->cq, &e, nullptr, &src), 1);
  EXPECT_STREQ(rx, "genuine");
  EXPECT_EQ(src, a->addr);
}

TEST_F(Dgram, NetDropLosesTheNextDatagramOnlyAndItsSendStillCompletes) {
  DgramEp* a = open_ep();  // endpoint 0 of the domain
  DgramEp* b = open_ep();
  char rx[2][8] = {};
  for (auto& r : rx) ASSERT_EQ(post_recv(b, r, sizeof(r), r), 0);
  inject("net=drop,on=ep:0");
  ASSERT_EQ(fi_send(a->ep, "lost", 5, nullptr, b->addr, nullptr), 0);
  ASSERT_EQ(fi_send(a->ep, "kept", 5, nullptr, b->addr, nullptr), 0);
  fi_cq_data_entry e{};
  ASSERT_EQ(wait_cq(a->cq, &e), 1);
  ASSERT_EQ(wait_cq(a->cq, &e), 1) << "a datagram's send completes when it leaves";
  ASSERT_EQ(wait_cq(b->cq, &e), 1);
  EXPECT_STREQ(static_cast<char*>(e.op_context), "kept");
  EXPECT_TRUE(stays_empty(b->cq));
}

TEST_F(Dgram, NetCorruptDamagesTheNextDatagramWhichItsReceiverDropsNeverDelivering) {
  DgramEp* a = open_ep();
  DgramEp* b = open_ep();
  char rx[2][8] = {};
  for (auto& r : rx) ASSERT_EQ(post_recv(b, r, sizeof(r), r), 0);
  inject("net=corrupt,on=ep:0");
  // With CQ data, whose every value is valid: only the header's check can tell.
  ASSERT_EQ(fi_senddata(a->ep, "damaged", 8, nullptr, 0x10, b->addr, nullptr), 0);
  ASSERT_EQ(fi_senddata(a->ep, "intact", 7, nullptr, 0x20, b->addr, nullptr), 0);
  fi_cq_data_entry e{};
  ASSERT_EQ(wait_cq(b->cq, &e), 1);
  EXPECT_STREQ(static_cast<char*>(e.op_context), "intact");
  EXPECT_EQ(e.data, 0x20u);
  EXPECT_EQ(e.op_context, rx[0]) << "the first receive took the intact one";
  EXPECT_TRUE(stays_empty(b->cq));
}

class DgramPrefix : public Dgram {
 protected:
  DgramPrefix() : Dgram(FI_MSG | FI_SOURCE, FI_MSG_PREFIX) {}
};

// fi_getinfo(3) FI_MSG_PREFIX: "the provider requires that the application provide buffer
// space ... in front of ... the message" and fi_cq(3) len includes the prefix.
TEST_F(DgramPrefix, ThePrefixIsSkippedOnBothSidesAndCountedInTheReceivedLen) {
  ASSERT_NE(info_->mode & FI_MSG_PREFIX, 0u);
  const size_t prefix = info_->ep_attr->msg_prefix_size;
  ASSERT_EQ(prefix, 8u);
  DgramEp* a = open_ep();
  DgramEp* b = open_ep();
  char rx[32] = {};
  ASSERT_EQ(post_recv(b, rx, sizeof(rx), rx), 0);
  char tx[32] = "PREFIX..payload";
  ASSERT_EQ(fi_send(a->ep, tx, prefix + 8, nullptr, b->addr, nullptr), 0);
  fi_cq_data_entry e{};
  ASSERT_EQ(wait_cq(b->cq, &e), 1);
  EXPECT_EQ(e.len, prefix + 8);
  EXPECT_EQ(std::memcmp(rx + prefix, "payload", 8), 0);
  EXPECT_EQ(fi_send(a->ep, tx, prefix - 1, nullptr, b->addr, nullptr), -FI_EINVAL);
}

}  // namespace
}  // namespace fabq::testing
