// FI_EP_RDM endpoints through libfabric (fi_endpoint(3), fi_msg(3), fi_tagged(3), fi_av(3),
// fi_cq(3) FI_SOURCE): reliable unconnected messaging between endpoints of one process over
// 127.0.0.1. Every wait has a timeout.
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_tagged.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "rdm_fixture.h"

namespace fabq::testing {
namespace {

TEST_F(Rdm, EnabledEndpointIsNamedByItsListeningAddress) {
  Ep* a = open_ep();
  EXPECT_EQ(a->name.sin_family, AF_INET);
  EXPECT_EQ(a->name.sin_addr.s_addr, htonl(INADDR_LOOPBACK));
  EXPECT_NE(a->name.sin_port, 0) << "port 0 in the info: the kernel picks one at fi_enable";
}

TEST_F(Rdm, SendReachesThePeerAndBothSidesComplete) {
  Ep* a = open_ep();
  Ep* b = open_ep();
  char out[] = "over rdm";
  char in[32] = {};
  ASSERT_EQ(fi_recv(b->ep, in, sizeof(in), nullptr, FI_ADDR_UNSPEC, in), 0);
  ASSERT_EQ(fi_send(a->ep, out, sizeof(out), nullptr, b->addr, out), 0);
  fi_cq_tagged_entry e{};
  ASSERT_EQ(wait_cq(a->cq, &e), 1);
  EXPECT_EQ(e.op_context, out);
  EXPECT_EQ(e.flags, FI_SEND | FI_MSG);
  ASSERT_EQ(wait_cq(b->cq, &e), 1);
  EXPECT_EQ(e.op_context, in);
  EXPECT_EQ(e.flags, FI_RECV | FI_MSG);
  EXPECT_EQ(e.len, sizeof(out));
  EXPECT_STREQ(in, out);
}

// Two endpoints each post a window of large receives, then a window of large sends to each
// other, twice the size of their CQs (one CQ each, for both directions), as IMB's Biband does
// through Open MPI: a send that finds no slot gets -FI_EAGAIN, the application reads its CQ
// and posts again, and everything completes. A send through shared memory completes once its
// receiver has copied it, and a receive takes its slot when its message comes: transmits
// holding every slot of both CQs would have each side's arrivals wait for room that only the
// other side's copies could make.
TEST_F(Rdm, TwoEndpointsSendingLargeWindowsToEachOtherThroughSmallCqsBothFinish) {
  constexpr size_t kLen = size_t{1} << 20;
  constexpr size_t kCqSize = 16;
  constexpr int kWindow = 2 * kCqSize;
  Ep* side[2] = {open_ep({.cq_size = kCqSize}), open_ep({.cq_size = kCqSize})};
  ASSERT_NE(side[0], nullptr);
  ASSERT_NE(side[1], nullptr);
  std::vector<char> sbuf[2] = {std::vector<char>(kLen, 'a'), std::vector<char>(kLen, 'b')};
  std::vector<char> rbuf[2] = {std::vector<char>(kLen), std::vector<char>(kLen)};
  for (int s = 0; s < 2; ++s) {
    for (int i = 0; i < kWindow; ++i) {
      ASSERT_EQ(
          fi_trecv(side[s]->ep, rbuf[s].data(), kLen, nullptr, side[1 - s]->addr, 7, 0, nullptr),
          0);
    }
  }
  int posted[2] = {0, 0};
  int completed[2] = {0, 0};
  const auto t0 = std::chrono::steady_clock::now();
  while (completed[0] < 2 * kWindow || completed[1] < 2 * kWindow) {
    ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20))
        << "sends posted " << posted[0] << " and " << posted[1] << ", completions read "
        << completed[0] << " and " << completed[1] << " of " << 2 * kWindow << " each";
    for (int s = 0; s < 2; ++s) {
      while (posted[s] < kWindow) {
        const ssize_t rc =
            fi_tsend(side[s]->ep, sbuf[s].data(), kLen, nullptr, side[1 - s]->addr, 7, nullptr);
        if (rc == -FI_EAGAIN) break;
        ASSERT_EQ(rc, 0) << fi_strerror(static_cast<int>(-rc));
        ++posted[s];
      }
      fi_cq_tagged_entry e[kCqSize];
      const ssize_t n = fi_cq_read(side[s]->cq, e, kCqSize);
      if (n == -FI_EAGAIN) continue;
      ASSERT_GT(n, 0) << fi_strerror(static_cast<int>(-n));
      completed[s] += static_cast<int>(n);
    }
  }
  EXPECT_EQ(rbuf[0][0], 'b');
  EXPECT_EQ(rbuf[0][kLen - 1], 'b');
  EXPECT_EQ(rbuf[1][0], 'a');
  EXPECT_EQ(rbuf[1][kLen - 1], 'a');
}

TEST_F(Rdm, BufferListsWhoseLengthsWrapTheAddressSpaceAreInvalidAndPostNothing) {
  Ep* a = open_ep();
  Ep* b = open_ep();
  char one[8] = {}, two[8] = {};
  // Together one byte, as far as a sum that wraps can tell.
  iovec wraps[2] = {{one, SIZE_MAX}, {two, 2}};
  EXPECT_EQ(fi_sendv(a->ep, wraps, nullptr, 2, b->addr, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_recvv(b->ep, wraps, nullptr, 2, FI_ADDR_UNSPEC, nullptr), -FI_EINVAL);
  EXPECT_FALSE(any_completion_within(a->cq, 20));
  EXPECT_FALSE(any_completion_within(b->cq, 20));
}

TEST_F(Rdm, ReceiveCompletionNamesTheSenderWithFiSource) {
  Ep* a = open_ep();
  Ep* b = open_ep();
  Ep* c = open_ep();
  char in[2][8] = {};
  for (auto& buf : in) ASSERT_EQ(fi_recv(b->ep, buf, sizeof(buf), nullptr, FI_ADDR_UNSPEC, buf), 0);
  ASSERT_EQ(fi_inject(a->ep, "a", 2, b->addr), 0);
  fi_cq_tagged_entry e{};
  fi_addr_t src = 12345;
  ASSERT_EQ(wait_cq(b->cq, &e, nullptr, &src), 1);
  EXPECT_EQ(src, a->addr);
  ASSERT_EQ(fi_inject(c->ep, "c", 2, b->addr), 0);
  ASSERT_EQ(wait_cq(b->cq, &e, nullptr, &src), 1);
  EXPECT_EQ(src, c->addr);
}

TEST_F(Rdm, SourceTheAvDoesNotHoldIsFiAddrNotavail) {
  fid_av* other = open_av();
  Ep* b = open_ep();
  Ep* stranger = open_ep(other);  // named in `other` only: b's AV does not hold it
  fi_addr_t b_in_other = FI_ADDR_UNSPEC;
  ASSERT_EQ(fi_av_insert(other, &b->name, 1, &b_in_other, 0, nullptr), 1);
  char in[8] = {};
  ASSERT_EQ(fi_recv(b->ep, in, sizeof(in), nullptr, FI_ADDR_UNSPEC, in), 0);
  ASSERT_EQ(fi_inject(stranger->ep, "s", 2, b_in_other), 0);
  fi_cq_tagged_entry e{};
  fi_addr_t src = 12345;
  ASSERT_EQ(wait_cq(b->cq, &e, nullptr, &src), 1);
  EXPECT_EQ(src, FI_ADDR_NOTAVAIL);
}

TEST_F(Rdm, WithoutFiSourceTheSourceIsFiAddrNotavail) {
  Ep* a = open_ep();
  Ep* b = open_ep(nullptr, FI_MSG | FI_TAGGED);
  char in[8] = {};
  ASSERT_EQ(fi_recv(b->ep, in, sizeof(in), nullptr, FI_ADDR_UNSPEC, in), 0);
  ASSERT_EQ(fi_inject(a->ep, "a", 2, b->addr), 0);
  fi_cq_tagged_entry e{};
  fi_addr_t src = 12345;
  ASSERT_EQ(wait_cq(b->cq, &e, nullptr, &src), 1);
  EXPECT_EQ(src, FI_ADDR_NOTAVAIL);
}

TEST_F(Rdm, MessagesFromOneEndpointToAnotherKeepTheirOrder) {
  Ep* a = open_ep();
  Ep* b = open_ep();
  constexpr int kCount = 200;
  std::vector<uint32_t> got(kCount, ~0u);
  for (int i = 0; i < kCount; ++i) {
    uint32_t v = static_cast<uint32_t>(i);
    ssize_t rc;
    while ((rc = fi_tinject(a->ep, &v, sizeof(v), b->addr, 7)) == -FI_EAGAIN) {
      fi_cq_tagged_entry e{};
      fi_cq_read(a->cq, &e, 1);
    }
    ASSERT_EQ(rc, 0);
  }
  for (int i = 0; i < kCount; ++i) {
    ASSERT_EQ(fi_trecv(b->ep, &got[i], sizeof(uint32_t), nullptr, FI_ADDR_UNSPEC, 7, 0, nullptr),
              0);
    fi_cq_tagged_entry e{};
    ASSERT_EQ(wait_cq(b->cq, &e), 1);
    EXPECT_EQ(e.tag, 7u);
  }
  for (int i = 0; i < kCount; ++i) EXPECT_EQ(got[i], static_cast<uint32_t>(i));
}

// Between endpoints of one host an inject is written straight into the shared ring when nothing
// waits before it. Sends that filled the ring wait at their connection: injects posted after
// them must not pass them.
TEST_F(Rdm, InjectsPostedBehindSendsThatFilledTheRingArriveAfterThem) {
  Ep* a = open_ep();
  Ep* b = open_ep();
  constexpr int kPairs = 300;  // 300 x 2 KiB: more than a ring (fi_fabq(7) SHARED MEMORY)
  constexpr size_t kBig = 2048;
  std::vector<std::vector<uint32_t>> big(kPairs, std::vector<uint32_t>(kBig / 4));
  std::vector<uint32_t> small(kPairs);
  int completed = 0;
  const auto retry = [&](auto post) {
    ssize_t rc;
    while ((rc = post()) == -FI_EAGAIN) {
      fi_cq_tagged_entry e{};
      if (fi_cq_read(a->cq, &e, 1) == 1) ++completed;
    }
    return rc;
  };
  for (int i = 0; i < kPairs; ++i) {
    big[i][0] = static_cast<uint32_t>(2 * i);
    small[i] = static_cast<uint32_t>(2 * i + 1);
    ASSERT_EQ(retry([&] { return fi_tsend(a->ep, big[i].data(), kBig, nullptr, b->addr, 9, a); }),
              0);
    ASSERT_EQ(retry([&] { return fi_tinject(a->ep, &small[i], 4, b->addr, 9); }), 0);
  }
  std::vector<uint32_t> in(kBig / 4);
  for (int i = 0; i < 2 * kPairs; ++i) {
    ASSERT_EQ(fi_trecv(b->ep, in.data(), kBig, nullptr, FI_ADDR_UNSPEC, 9, 0, nullptr), 0);
    fi_cq_tagged_entry e{};
    ASSERT_EQ(wait_cq(b->cq, &e), 1) << "message " << i;
    ASSERT_EQ(e.len, i % 2 == 0 ? kBig : 4u) << "message " << i;
    ASSERT_EQ(in[0], static_cast<uint32_t>(i)) << "message " << i << " came out of its place";
  }
  while (completed < kPairs) {
    fi_cq_tagged_entry e{};
    ASSERT_EQ(wait_cq(a->cq, &e), 1);
    EXPECT_EQ(e.op_context, a) << "only the sends complete, never an inject";
    ++completed;
  }
  fi_cq_tagged_entry e{};
  EXPECT_EQ(fi_cq_read(a->cq, &e, 1), -FI_EAGAIN);
}

namespace {

// One message from a to b through the ordinary path, received: the connection is up, and the
// next sends can go straight into its ring.
void connect_through(const Ep* a, const Ep* b) {
  uint64_t v = 0;
  uint64_t got = 1;
  ASSERT_EQ(fi_recv(b->ep, &got, sizeof(got), nullptr, FI_ADDR_UNSPEC, nullptr), 0);
  ASSERT_EQ(fi_send(a->ep, &v, sizeof(v), nullptr, b->addr, &v), 0);
  fi_cq_tagged_entry e{};
  ASSERT_EQ(fi_cq_sread(a->cq, &e, 1, nullptr, kWaitMs), 1);
  ASSERT_EQ(fi_cq_sread(b->cq, &e, 1, nullptr, kWaitMs), 1);
  ASSERT_EQ(got, 0u);
}

}  // namespace

// fi_cq(3): at the default completion level a send completes once its buffer may be reused.
// Over shared memory that is once its frame is in the ring, before any receive is posted; what
// the application writes into the buffer afterwards is not what arrives.
TEST_F(Rdm, ASendAtTheDefaultLevelCompletesBeforeAReceiveAndItsBufferMayBeReused) {
  fid_cntr* cntr = open_cntr();
  ASSERT_NE(cntr, nullptr);
  Ep* a = open_ep({.tx_cntr = cntr});
  Ep* b = open_ep();
  ASSERT_NO_FATAL_FAILURE(connect_through(a, b));
  const size_t sizes[] = {8, 64, 4096, 8192};
  std::vector<std::vector<unsigned char>> bufs;
  for (size_t i = 0; i < std::size(sizes); ++i) {
    bufs.emplace_back(sizes[i], static_cast<unsigned char>(0x10 + i));
    ASSERT_EQ(fi_send(a->ep, bufs[i].data(), sizes[i], nullptr, b->addr, &bufs[i]), 0);
    fi_cq_tagged_entry e{};
    ASSERT_EQ(wait_cq(a->cq, &e), 1) << sizes[i] << " bytes";
    EXPECT_EQ(e.op_context, &bufs[i]);
    EXPECT_EQ(e.flags, FI_SEND | FI_MSG);
    std::fill(bufs[i].begin(), bufs[i].end(), 0xee);  // reused at once
  }
  EXPECT_EQ(fi_cntr_read(cntr), 1 + std::size(sizes));
  for (size_t i = 0; i < std::size(sizes); ++i) {
    std::vector<unsigned char> in(sizes[i]);
    ASSERT_EQ(fi_recv(b->ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, nullptr), 0);
    fi_cq_tagged_entry e{};
    ASSERT_EQ(wait_cq(b->cq, &e), 1);
    EXPECT_EQ(e.len, sizes[i]);
    EXPECT_EQ(in, std::vector<unsigned char>(sizes[i], static_cast<unsigned char>(0x10 + i)))
        << sizes[i] << " bytes: not what was sent";
  }
}

// A send takes a slot of its transmit CQ when it is posted (fi_fabq(7) LIMITS): with none free it
// is -FI_EAGAIN and nothing goes out, and once the application reads the CQ it goes.
TEST_F(Rdm, ASendWhoseCqHasNoFreeSlotIsEagainAndSendsNothing) {
  Ep* a = open_ep({.cq_size = 1});
  Ep* b = open_ep();
  ASSERT_NO_FATAL_FAILURE(connect_through(a, b));
  uint64_t first = 1;
  uint64_t second = 2;
  ASSERT_EQ(fi_send(a->ep, &first, sizeof(first), nullptr, b->addr, &first), 0);
  EXPECT_EQ(fi_send(a->ep, &second, sizeof(second), nullptr, b->addr, &second), -FI_EAGAIN);
  uint64_t in[2] = {0, 0};
  ASSERT_EQ(fi_recv(b->ep, &in[0], sizeof(in[0]), nullptr, FI_ADDR_UNSPEC, nullptr), 0);
  ASSERT_EQ(fi_recv(b->ep, &in[1], sizeof(in[1]), nullptr, FI_ADDR_UNSPEC, nullptr), 0);
  fi_cq_tagged_entry e{};
  ASSERT_EQ(wait_cq(b->cq, &e), 1);
  EXPECT_EQ(in[0], 1u);
  EXPECT_EQ(wait_cq(b->cq, &e, nullptr, nullptr, 100), -FI_EAGAIN) << "the refused send arrived";
  ASSERT_EQ(fi_cq_read(a->cq, &e, 1), 1);
  EXPECT_EQ(e.op_context, &first);
  ASSERT_EQ(fi_send(a->ep, &second, sizeof(second), nullptr, b->addr, &second), 0);
  ASSERT_EQ(wait_cq(b->cq, &e), 1);
  EXPECT_EQ(in[1], 2u);
  ASSERT_EQ(wait_cq(a->cq, &e), 1);
  EXPECT_EQ(e.op_context, &second);
}

// fi_cq(3) FI_SELECTIVE_COMPLETION: a send without FI_COMPLETION writes no entry, on the short
// path as on the ordinary one, and is counted all the same.
TEST_F(Rdm, ASelectiveSendWithoutFiCompletionWritesNoEntryButIsCounted) {
  fid_cntr* cntr = open_cntr();
  ASSERT_NE(cntr, nullptr);
  Ep* a = open_ep({.cq_flags = FI_SELECTIVE_COMPLETION, .tx_cntr = cntr});
  Ep* b = open_ep();
  uint64_t v = 7;
  uint64_t in = 0;
  ASSERT_EQ(fi_recv(b->ep, &in, sizeof(in), nullptr, FI_ADDR_UNSPEC, nullptr), 0);
  ASSERT_EQ(fi_send(a->ep, &v, sizeof(v), nullptr, b->addr, &v), 0);  // makes the connection
  fi_cq_tagged_entry e{};
  ASSERT_EQ(wait_cq(b->cq, &e), 1);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(fi_recv(b->ep, &in, sizeof(in), nullptr, FI_ADDR_UNSPEC, nullptr), 0);
    ASSERT_EQ(fi_send(a->ep, &v, sizeof(v), nullptr, b->addr, &v), 0);
    ASSERT_EQ(wait_cq(b->cq, &e), 1);
  }
  EXPECT_EQ(fi_cntr_wait(cntr, 4, kWaitMs), 0) << "counted " << fi_cntr_read(cntr);
  EXPECT_EQ(fi_cq_read(a->cq, &e, 1), -FI_EAGAIN) << "a send without FI_COMPLETION completed";
  iovec iov{&v, sizeof(v)};
  fi_msg msg{};
  msg.msg_iov = &iov;
  msg.iov_count = 1;
  msg.addr = b->addr;
  msg.context = &iov;
  ASSERT_EQ(fi_recv(b->ep, &in, sizeof(in), nullptr, FI_ADDR_UNSPEC, nullptr), 0);
  ASSERT_EQ(fi_sendmsg(a->ep, &msg, FI_COMPLETION), 0);
  ASSERT_EQ(wait_cq(a->cq, &e), 1);
  EXPECT_EQ(e.op_context, &iov);
  ASSERT_EQ(wait_cq(b->cq, &e), 1);
}

// fi_msg(3) fi_inject: the buffer may be reused as soon as the call returns, for any length up to
// inject_size (fi_fabq(7): 4096 bytes). The first inject makes the connection, so these wait in
// their transmit slots, larger ones in storage of the slot's own, until it is up.
TEST_F(Rdm, InjectsUpToInjectSizeMayReuseTheirBufferAtOnceEvenBeforeTheConnectionIsUp) {
  Ep* a = open_ep();
  Ep* b = open_ep();
  const size_t max = info_->tx_attr->inject_size;
  EXPECT_EQ(max, 4096u);
  const size_t sizes[] = {1, 64, 65, 1000, max};
  std::vector<unsigned char> buf(max);
  unsigned char fill = 1;
  for (size_t len : sizes) {
    for (int i = 0; i < 4; ++i, ++fill) {
      std::fill(buf.begin(), buf.end(), fill);
      ssize_t rc;
      while ((rc = fi_inject(a->ep, buf.data(), len, b->addr)) == -FI_EAGAIN) {
        fi_cq_tagged_entry e{};
        ASSERT_EQ(fi_cq_read(a->cq, &e, 1), -FI_EAGAIN);  // progress; an inject never completes
      }
      ASSERT_EQ(rc, 0) << len << " bytes";
      std::fill(buf.begin(), buf.end(), 0xee);
    }
  }
  EXPECT_EQ(fi_inject(a->ep, buf.data(), max + 1, b->addr), -FI_EMSGSIZE);
  fill = 1;
  for (size_t len : sizes) {
    for (int i = 0; i < 4; ++i, ++fill) {
      std::vector<unsigned char> in(max, 0);
      ASSERT_EQ(fi_recv(b->ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, nullptr), 0);
      fi_cq_tagged_entry e{};
      ASSERT_EQ(wait_cq(b->cq, &e), 1);
      ASSERT_EQ(e.len, len);
      EXPECT_EQ(std::vector<unsigned char>(in.begin(), in.begin() + static_cast<ptrdiff_t>(len)),
                std::vector<unsigned char>(len, fill))
          << len << " bytes, inject " << i;
    }
  }
  fi_cq_tagged_entry e{};
  EXPECT_EQ(fi_cq_read(a->cq, &e, 1), -FI_EAGAIN) << "an inject completed";
}

// fi_cntr(3): a send counter counts every successful send, injects included, however it went.
TEST_F(Rdm, InjectsCountOnTheSendCounterWithoutACompletion) {
  fid_cntr* cntr = open_cntr();
  ASSERT_NE(cntr, nullptr);
  Ep* a = open_ep({.tx_cntr = cntr});
  Ep* b = open_ep();
  // The first inject makes the connection; once a message has crossed it, the rest go straight
  // into its ring (fi_fabq(7) SHARED MEMORY).
  for (uint64_t round = 0; round < 2; ++round) {
    constexpr uint64_t kCount = 50;
    for (uint64_t i = 0; i < kCount; ++i) {
      const uint64_t v = round * kCount + i;
      ASSERT_EQ(fi_inject(a->ep, &v, sizeof(v), b->addr), 0);
    }
    for (uint64_t i = 0; i < kCount; ++i) {
      uint64_t v = ~0ull;
      ASSERT_EQ(fi_recv(b->ep, &v, sizeof(v), nullptr, FI_ADDR_UNSPEC, nullptr), 0);
      fi_cq_tagged_entry e{};
      ASSERT_EQ(wait_cq(b->cq, &e), 1);
      EXPECT_EQ(v, round * kCount + i);
    }
    // Each was counted once it was written, before it could arrive.
    EXPECT_EQ(fi_cntr_read(cntr), (round + 1) * kCount);
    EXPECT_EQ(fi_cntr_readerr(cntr), 0u);
    fi_cq_tagged_entry e{};
    EXPECT_EQ(fi_cq_read(a->cq, &e, 1), -FI_EAGAIN) << "an inject completed";
  }
}

// ... and with FI_DELIVERY_COMPLETE among the endpoint's op_flags an inject counts only once a
// receive has taken it (fi_cq(3)), over shared memory as anywhere.
TEST_F(Rdm, AnInjectAtDeliveryCompleteCountsOnlyOnceAReceiveTookIt) {
  fid_cntr* cntr = open_cntr();
  ASSERT_NE(cntr, nullptr);
  Ep* a = open_ep({.tx_cntr = cntr, .tx_op_flags = FI_DELIVERY_COMPLETE});
  Ep* b = open_ep();
  uint64_t v = 0;
  fi_cq_tagged_entry e{};
  for (uint64_t i = 1; i <= 3; ++i) {
    ASSERT_EQ(fi_inject(a->ep, &i, sizeof(i), b->addr), 0);
    // Nobody receives it yet: it waits at b, unacknowledged.
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
    while (std::chrono::steady_clock::now() < until) {
      EXPECT_EQ(fi_cq_read(a->cq, &e, 1), -FI_EAGAIN);
      EXPECT_EQ(fi_cq_read(b->cq, &e, 1), -FI_EAGAIN);
    }
    EXPECT_EQ(fi_cntr_read(cntr), i - 1) << "counted before a receive took it";
    ASSERT_EQ(fi_recv(b->ep, &v, sizeof(v), nullptr, FI_ADDR_UNSPEC, nullptr), 0);
    ASSERT_EQ(wait_cq(b->cq, &e), 1);
    EXPECT_EQ(v, i);
    EXPECT_EQ(fi_cntr_wait(cntr, i, kWaitMs), 0) << "counted " << fi_cntr_read(cntr);
  }
}

// fi_fabq(7) COMPLETION QUEUES: "a receive [reserves its completion slot] when a message picks
// it (at once if its message is already there): a post that needs a slot and finds none returns
// -FI_EAGAIN, and a message for a waiting receive waits at its connection until the application
// reads the queue."
TEST_F(Rdm, AReceiveTakesItsCqSlotWhenAMessagePicksIt) {
  Ep* a = open_ep();
  Ep* b = open_ep({.cq_size = 1});
  // FI_TRANSMIT_COMPLETE: a's send completes once b holds the message, in a receive or buffered.
  const auto send_received = [&](char* buf) {
    iovec iov{buf, 8};
    fi_msg msg{.msg_iov = &iov, .iov_count = 1, .addr = b->addr, .context = buf};
    ASSERT_EQ(fi_sendmsg(a->ep, &msg, FI_TRANSMIT_COMPLETE | FI_COMPLETION), 0);
    fi_cq_tagged_entry e{};
    ASSERT_EQ(wait_cq(a->cq, &e), 1);
    EXPECT_EQ(e.op_context, buf);
  };
  char m0[8] = "m0", m1[8] = "m1", m2[8] = "m2";
  char r0[8] = {}, r1[8] = {}, r2[8] = {};
  ASSERT_EQ(fi_recv(b->ep, r0, sizeof(r0), nullptr, FI_ADDR_UNSPEC, r0), 0);
  send_received(m0);  // r0's completion fills b's CQ
  send_received(m1);  // buffered: no receive waits for it
  EXPECT_EQ(fi_recv(b->ep, r1, sizeof(r1), nullptr, FI_ADDR_UNSPEC, r1), -FI_EAGAIN)
      << "its message is here and the CQ has no room for its completion";
  fi_cq_tagged_entry e{};
  ASSERT_EQ(fi_cq_read(b->cq, &e, 1), 1);
  EXPECT_EQ(e.op_context, r0);
  ASSERT_EQ(fi_recv(b->ep, r1, sizeof(r1), nullptr, FI_ADDR_UNSPEC, r1), 0);  // completes now
  // The CQ is full again (r1's completion), yet a receive with no message yet is taken.
  ASSERT_EQ(fi_recv(b->ep, r2, sizeof(r2), nullptr, FI_ADDR_UNSPEC, r2), 0);
  ASSERT_EQ(fi_send(a->ep, m2, sizeof(m2), nullptr, b->addr, m2), 0);
  ASSERT_EQ(wait_cq(a->cq, &e), 1);
  EXPECT_FALSE(any_completion_within(a->cq, 50));  // m2 reaches b and waits for room
  ASSERT_EQ(fi_cq_read(b->cq, &e, 1), 1);
  EXPECT_EQ(e.op_context, r1);
  EXPECT_STREQ(r1, "m1");
  ASSERT_EQ(wait_cq(b->cq, &e), 1);
  EXPECT_EQ(e.op_context, r2);
  EXPECT_STREQ(r2, "m2");
  EXPECT_STREQ(r0, "m0");
}

TEST_F(Rdm, TaggedReceiveMatchesThroughItsIgnoreMask) {
  Ep* a = open_ep();
  Ep* b = open_ep();
  uint32_t first = 0, second = 0;
  ASSERT_EQ(fi_trecv(b->ep, &first, 4, nullptr, FI_ADDR_UNSPEC, 0x200, 0x0ff, &first), 0);
  ASSERT_EQ(fi_trecv(b->ep, &second, 4, nullptr, FI_ADDR_UNSPEC, 0x100, 0x000, &second), 0);
  const uint32_t one = 1, two = 2;
  ASSERT_EQ(fi_tinject(a->ep, &one, 4, b->addr, 0x100), 0);
  ASSERT_EQ(fi_tinject(a->ep, &two, 4, b->addr, 0x2ab), 0);
  fi_cq_tagged_entry e{};
  ASSERT_EQ(wait_cq(b->cq, &e), 1);
  EXPECT_EQ(e.op_context, &second);
  EXPECT_EQ(e.tag, 0x100u);
  ASSERT_EQ(wait_cq(b->cq, &e), 1);
  EXPECT_EQ(e.op_context, &first);
  EXPECT_EQ(e.tag, 0x2abu);
  EXPECT_EQ(first, 2u);
  EXPECT_EQ(second, 1u);
}

TEST_F(Rdm, InjectFlagCopiesTheBufferAtPostAndStillCompletes) {
  Ep* a = open_ep();
  Ep* b = open_ep();
  char buf[16] = "original";
  iovec iov{buf, sizeof(buf)};
  fi_msg_tagged msg{};
  msg.msg_iov = &iov;
  msg.iov_count = 1;
  msg.addr = b->addr;
  msg.tag = 3;
  msg.context = buf;
  ASSERT_EQ(fi_tsendmsg(a->ep, &msg, FI_INJECT | FI_COMPLETION), 0);
  std::memset(buf, 0xb, sizeof(buf));  // fi_msg_inject does this, and checks what arrives
  char in[16] = {};
  ASSERT_EQ(fi_trecv(b->ep, in, sizeof(in), nullptr, FI_ADDR_UNSPEC, 3, 0, in), 0);
  fi_cq_tagged_entry e{};
  ASSERT_EQ(wait_cq(a->cq, &e), 1);
  EXPECT_EQ(e.op_context, buf);
  ASSERT_EQ(wait_cq(b->cq, &e), 1);
  EXPECT_STREQ(in, "original");
}

TEST_F(Rdm, DeliveryCompleteWaitsForTheReceiveAtThePeer) {
  Ep* a = open_ep();
  Ep* b = open_ep();
  char out[] = "delivered";
  ASSERT_EQ(send_delivery_complete(a, b->addr, out, sizeof(out)), 0);
  EXPECT_FALSE(any_completion_within(a->cq, 300)) << "no receive is posted at the peer yet";
  char in[16] = {};
  ASSERT_EQ(fi_recv(b->ep, in, sizeof(in), nullptr, FI_ADDR_UNSPEC, in), 0);
  fi_cq_tagged_entry e{};
  ASSERT_EQ(wait_cq(a->cq, &e), 1);
  EXPECT_EQ(e.op_context, out);
  ASSERT_EQ(wait_cq(b->cq, &e), 1);
  EXPECT_STREQ(in, out);
}

TEST_F(Rdm, TruncatedReceiveIsAnErrorWithOlen) {
  Ep* a = open_ep();
  Ep* b = open_ep();
  char in[4] = {};
  ASSERT_EQ(fi_recv(b->ep, in, sizeof(in), nullptr, FI_ADDR_UNSPEC, in), 0);
  ASSERT_EQ(fi_inject(a->ep, "0123456789", 10, b->addr), 0);
  fi_cq_tagged_entry e{};
  fi_cq_err_entry err{};
  ASSERT_EQ(wait_cq(b->cq, &e, &err), -FI_EAVAIL);
  EXPECT_EQ(err.err, FI_ETRUNC);
  EXPECT_EQ(err.olen, 6u);
  EXPECT_EQ(err.op_context, in);
}

TEST_F(Rdm, LargeMessageArrivesWhole) {
  Ep* a = open_ep();
  Ep* b = open_ep();
  std::vector<unsigned char> out(4 << 20), in(4 << 20);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<unsigned char>(i * 7 + 1);
  ASSERT_EQ(fi_recv(b->ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, nullptr), 0);
  ASSERT_EQ(fi_send(a->ep, out.data(), out.size(), nullptr, b->addr, nullptr), 0);
  fi_cq_tagged_entry e{};
  ASSERT_EQ(wait_cq(b->cq, &e), 1);
  EXPECT_EQ(e.len, out.size());
  EXPECT_EQ(in, out);
  ASSERT_EQ(wait_cq(a->cq, &e), 1);
}

TEST_F(Rdm, AnEndpointCanSendToItself) {
  Ep* a = open_ep();
  char in[8] = {};
  ASSERT_EQ(fi_recv(a->ep, in, sizeof(in), nullptr, FI_ADDR_UNSPEC, in), 0);
  ASSERT_EQ(fi_inject(a->ep, "self", 5, a->addr), 0);
  fi_cq_tagged_entry e{};
  fi_addr_t src = 0;
  ASSERT_EQ(wait_cq(a->cq, &e, nullptr, &src), 1);
  EXPECT_STREQ(in, "self");
  EXPECT_EQ(src, a->addr);
}

// The sockets of this process (their inodes, from /proc/self/fd).
std::set<std::string> own_sockets() {
  std::set<std::string> inodes;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d)) {
      char link[64] = {};
      const std::string path = std::string("/proc/self/fd/") + e->d_name;
      const ssize_t n = readlink(path.c_str(), link, sizeof(link) - 1);
      if (n > 9 && std::strncmp(link, "socket:[", 8) == 0) {
        inodes.insert(std::string(link + 8, static_cast<size_t>(n) - 9));
      }
    }
    closedir(d);
  }
  return inodes;
}

// Established TCP connections of this process to `to` (/proc/net/tcp: addresses in hex, the
// IPv4 address as the kernel's u32 prints, the port in host order; the socket's inode tenth).
// Only this process's: a test running alongside may reach the same port once its own peer has
// closed and the kernel has given the port to `to`. Counted by inode: /proc/net/tcp is not a
// snapshot, and a socket added elsewhere between two reads of it makes the kernel print the
// last line again.
int connections_to(const sockaddr_in& to) {
  char want[32];
  std::snprintf(want, sizeof(want), "%08X:%04X", to.sin_addr.s_addr, ntohs(to.sin_port));
  const std::set<std::string> mine = own_sockets();
  std::ifstream tcp("/proc/net/tcp");
  std::string line;
  std::set<std::string> seen;
  while (std::getline(tcp, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state, queues, timer, retrans, uid, timeout, inode;
    if (fields >> slot >> local >> remote >> state >> queues >> timer >> retrans >> uid >>
            timeout >> inode &&
        remote == want && state == "01" && mine.contains(inode)) {
      seen.insert(inode);
    }
  }
  return static_cast<int>(seen.size());
}

// An AV may hold one address under several fi_addr_t (Open MPI's MTL inserts a peer once per
// thread that first talks to it): messages to that endpoint keep their order whichever of its
// fi_addr_t each names. A large message and a small one right after it through another
// fi_addr_t: the small one must not overtake.
TEST_F(Rdm, MessagesKeepTheirOrderWhicheverFiAddrOfTheSamePeerTheyName) {
  Ep* a = open_ep();
  Ep* b = open_ep();
  fi_addr_t again = FI_ADDR_UNSPEC;
  ASSERT_EQ(fi_av_insert(av_, &b->name, 1, &again, 0, nullptr), 1);
  ASSERT_NE(again, b->addr);
  std::vector<char> big(size_t{4} << 20, 'b');
  std::vector<char> first(big.size()), second(big.size());
  ASSERT_EQ(fi_recv(b->ep, first.data(), first.size(), nullptr, FI_ADDR_UNSPEC, &first), 0);
  ASSERT_EQ(fi_recv(b->ep, second.data(), second.size(), nullptr, FI_ADDR_UNSPEC, &second), 0);
  ASSERT_EQ(fi_send(a->ep, big.data(), big.size(), nullptr, b->addr, nullptr), 0);
  ASSERT_EQ(fi_send(a->ep, "small", 6, nullptr, again, nullptr), 0);
  fi_cq_tagged_entry e{};
  for (int i = 0; i < 4; ++i) ASSERT_EQ(wait_cq(i % 2 ? a->cq : b->cq, &e), 1);
  EXPECT_EQ(first[0], 'b') << "the first receive took the message sent first";
  EXPECT_STREQ(second.data(), "small");
  // What keeps the order: one connection carries both, whichever name they went to.
  EXPECT_EQ(connections_to(b->name), 1);
}

// One TCP connection per pair of endpoints that talk: the endpoint that was sent to answers
// through the connection its peer made (so each reply carries TCP's acknowledgement of the
// request), with the sender named and completion levels kept as on any connection.
TEST_F(Rdm, AReplyGoesBackThroughTheConnectionItsRequestCameBy) {
  Ep* a = open_ep();
  Ep* b = open_ep();
  fi_cq_tagged_entry e{};
  fi_addr_t src = FI_ADDR_UNSPEC;
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(round);
    char at_b[8] = {}, at_a[8] = {};
    ASSERT_EQ(fi_recv(b->ep, at_b, sizeof(at_b), nullptr, FI_ADDR_UNSPEC, at_b), 0);
    ASSERT_EQ(fi_recv(a->ep, at_a, sizeof(at_a), nullptr, FI_ADDR_UNSPEC, at_a), 0);
    ASSERT_EQ(fi_inject(a->ep, "ping", 5, b->addr), 0);
    ASSERT_EQ(wait_cq(b->cq, &e, nullptr, &src), 1);
    EXPECT_STREQ(at_b, "ping");
    EXPECT_EQ(src, a->addr);
    char reply[] = "pong";
    ASSERT_EQ(send_delivery_complete(b, a->addr, reply, sizeof(reply)), 0);
    ASSERT_EQ(wait_cq(a->cq, &e, nullptr, &src), 1);
    EXPECT_STREQ(at_a, "pong");
    EXPECT_EQ(src, b->addr) << "FI_SOURCE names the endpoint that answered";
    ASSERT_EQ(wait_cq(b->cq, &e), 1);
    EXPECT_EQ(e.op_context, reply) << "delivered: acknowledged through the same connection";
  }
  EXPECT_EQ(connections_to(b->name), 1);
  EXPECT_EQ(connections_to(a->name), 0) << "b made no connection of its own";
}

TEST_F(Rdm, AnEndpointAnsweringThroughItsPeersConnectionHearsOfThatPeersEnd) {
  Ep* a = open_ep();
  Ep* b = open_ep();
  char in[8] = {};
  ASSERT_EQ(fi_recv(b->ep, in, sizeof(in), nullptr, FI_ADDR_UNSPEC, in), 0);
  ASSERT_EQ(fi_inject(a->ep, "hello", 6, b->addr), 0);
  fi_cq_tagged_entry e{};
  ASSERT_EQ(wait_cq(b->cq, &e), 1);
  // b's answer waits for a delivery a never makes: a closes.
  char out[] = "answer";
  ASSERT_EQ(send_delivery_complete(b, a->addr, out, sizeof(out)), 0);
  EXPECT_FALSE(any_completion_within(b->cq, 100));
  ASSERT_EQ(fi_close(&a->ep->fid), 0);
  a->ep = nullptr;
  expect_sends_to_closed_peer_fail(b, a->addr, out, sizeof(out));
}

TEST_F(Rdm, TwoEndpointsSendingToEachOtherBothReceive) {
  Ep* a = open_ep();
  Ep* b = open_ep();
  char in_a[8] = {}, in_b[8] = {};
  ASSERT_EQ(fi_recv(a->ep, in_a, sizeof(in_a), nullptr, FI_ADDR_UNSPEC, in_a), 0);
  ASSERT_EQ(fi_recv(b->ep, in_b, sizeof(in_b), nullptr, FI_ADDR_UNSPEC, in_b), 0);
  ASSERT_EQ(fi_inject(a->ep, "to b", 5, b->addr), 0);
  ASSERT_EQ(fi_inject(b->ep, "to a", 5, a->addr), 0);
  fi_cq_tagged_entry e{};
  ASSERT_EQ(wait_cq(a->cq, &e), 1);
  ASSERT_EQ(wait_cq(b->cq, &e), 1);
  EXPECT_STREQ(in_a, "to a");
  EXPECT_STREQ(in_b, "to b");
}

TEST_F(Rdm, SendToAnAddressNobodyListensOnFailsThatSendAndTheEndpointGoesOn) {
  Ep* a = open_ep();
  Ep* b = open_ep();
  const sockaddr_in dead = dead_address();
  fi_addr_t nobody = FI_ADDR_UNSPEC;
  ASSERT_EQ(fi_av_insert(av_, &dead, 1, &nobody, 0, nullptr), 1);
  char out[] = "lost";
  ASSERT_EQ(fi_send(a->ep, out, sizeof(out), nullptr, nobody, out), 0);
  fi_cq_tagged_entry e{};
  fi_cq_err_entry err{};
  ASSERT_EQ(wait_cq(a->cq, &e, &err), -FI_EAVAIL);
  EXPECT_EQ(err.err, FI_ECONNREFUSED);
  EXPECT_EQ(err.op_context, out);
  EXPECT_EQ(err.flags, FI_SEND | FI_MSG);

  char in[8] = {};
  ASSERT_EQ(fi_recv(b->ep, in, sizeof(in), nullptr, FI_ADDR_UNSPEC, in), 0);
  ASSERT_EQ(fi_send(a->ep, "ok", 3, nullptr, b->addr, nullptr), 0);
  ASSERT_EQ(wait_cq(b->cq, &e), 1);
  EXPECT_STREQ(in, "ok");
}

TEST_F(Rdm, PeerClosingFailsTheSendsWaitingForItAndTheNextSendConnectsAnew) {
  Ep* a = open_ep();
  Ep* b = open_ep();
  // The first message establishes the connection.
  char in[8] = {};
  ASSERT_EQ(fi_recv(b->ep, in, sizeof(in), nullptr, FI_ADDR_UNSPEC, in), 0);
  ASSERT_EQ(fi_inject(a->ep, "1", 2, b->addr), 0);
  fi_cq_tagged_entry e{};
  ASSERT_EQ(wait_cq(b->cq, &e), 1);
  // A send waiting for delivery, then the peer closes without ever receiving it.
  char out[] = "2";
  ASSERT_EQ(send_delivery_complete(a, b->addr, out, sizeof(out)), 0);
  EXPECT_FALSE(any_completion_within(a->cq, 100));
  ASSERT_EQ(fi_close(&b->ep->fid), 0);
  b->ep = nullptr;
  expect_sends_to_closed_peer_fail(a, b->addr, out, sizeof(out));
}

TEST_F(Rdm, SendToAnFiAddrTheAvDoesNotHoldIsEinval) {
  Ep* a = open_ep();
  EXPECT_EQ(fi_inject(a->ep, "x", 1, 4242), -FI_EINVAL);
  EXPECT_EQ(fi_send(a->ep, "x", 1, nullptr, FI_ADDR_UNSPEC, nullptr), -FI_EINVAL);
  fi_addr_t removed = a->addr;
  ASSERT_EQ(fi_av_remove(av_, &removed, 1, 0), 0);
  EXPECT_EQ(fi_inject(a->ep, "x", 1, removed), -FI_EINVAL);
}

// fi_av(3) fi_av_remove: a removed address may no longer be used, also by an endpoint that
// has a connection to it and sends small messages straight into it.
TEST_F(Rdm, AnInjectToAnAddressRemovedAfterUseIsEinval) {
  Ep* a = open_ep();
  Ep* b = open_ep();
  char in[8] = {};
  for (int i = 0; i < 3; ++i) {  // the connection is up and on its fastest path
    ASSERT_EQ(fi_recv(b->ep, in, sizeof(in), nullptr, FI_ADDR_UNSPEC, in), 0);
    ASSERT_EQ(fi_inject(a->ep, "x", 1, b->addr), 0);
    fi_cq_tagged_entry e{};
    ASSERT_EQ(wait_cq(b->cq, &e), 1);
  }
  fi_addr_t removed = b->addr;
  ASSERT_EQ(fi_av_remove(av_, &removed, 1, 0), 0);
  EXPECT_EQ(fi_inject(a->ep, "x", 1, removed), -FI_EINVAL);
  EXPECT_EQ(fi_send(a->ep, "x", 1, nullptr, removed, nullptr), -FI_EINVAL);
}

TEST_F(Rdm, EnableWithoutAnAvIsEnoav) {
  fid_ep* ep = nullptr;
  ASSERT_EQ(fi_endpoint(domain_, info_, &ep, nullptr), 0);
  fi_cq_attr cq_attr{};
  fid_cq* cq = nullptr;
  ASSERT_EQ(fi_cq_open(domain_, &cq_attr, &cq, nullptr), 0);
  ASSERT_EQ(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
  EXPECT_EQ(fi_enable(ep), -FI_ENOAV);
  EXPECT_EQ(fi_close(&ep->fid), 0);
  EXPECT_EQ(fi_close(&cq->fid), 0);
}

TEST_F(Rdm, AnAvBoundToAnEndpointCannotClose) {
  Ep* a = open_ep();
  EXPECT_EQ(fi_close(&av_->fid), -FI_EBUSY);
  ASSERT_EQ(fi_close(&a->ep->fid), 0);
  a->ep = nullptr;
}

TEST_F(Rdm, ConnectionCallsAreEnosysAndSetnameWorksBeforeEnable) {
  Ep* a = open_ep();
  sockaddr_in peer = a->name;
  EXPECT_EQ(fi_connect(a->ep, &peer, nullptr, 0), -FI_ENOSYS);
  EXPECT_EQ(fi_accept(a->ep, nullptr, 0), -FI_ENOSYS);
  EXPECT_EQ(fi_shutdown(a->ep, 0), -FI_ENOSYS);
  EXPECT_EQ(fi_setname(&a->ep->fid, &peer, sizeof(peer)), -FI_EOPBADSTATE) << "enabled already";

  // Before fi_enable, fi_setname chooses the address the endpoint listens on.
  const sockaddr_in want = dead_address();
  fid_ep* ep = nullptr;
  ASSERT_EQ(fi_endpoint(domain_, info_, &ep, nullptr), 0);
  ASSERT_EQ(fi_setname(&ep->fid, const_cast<sockaddr_in*>(&want), sizeof(want)), 0);
  ASSERT_EQ(fi_ep_bind(ep, &av_->fid, 0), 0);
  ASSERT_EQ(fi_ep_bind(ep, &a->cq->fid, FI_RECV), 0);
  ASSERT_EQ(fi_enable(ep), 0);
  sockaddr_in got{};
  size_t len = sizeof(got);
  ASSERT_EQ(fi_getname(&ep->fid, &got, &len), 0);
  EXPECT_EQ(got.sin_port, want.sin_port);
  EXPECT_EQ(fi_close(&ep->fid), 0);
}

TEST_F(Rdm, AnAvCannotBeBoundToAnMsgEndpoint) {
  fi_info* hints = fabq_hints();
  hints->ep_attr->type = FI_EP_MSG;
  fi_info* msg_info = nullptr;
  ASSERT_EQ(fi_getinfo(kVersion, nullptr, nullptr, 0, hints, &msg_info), 0);
  fi_freeinfo(hints);
  fid_ep* ep = nullptr;
  ASSERT_EQ(fi_endpoint(domain_, msg_info, &ep, nullptr), 0);
  EXPECT_EQ(fi_ep_bind(ep, &av_->fid, 0), -FI_EINVAL);
  EXPECT_EQ(fi_close(&ep->fid), 0);
  fi_freeinfo(msg_info);
}

// A null receive buffer holds no bytes: a zero-byte message completes there as usual, and a
// longer one is truncated (FI_ETRUNC, olen the bytes that did not fit), never written.
TEST_F(Rdm, AReceiveIntoANullBufferHoldsNoBytes) {
  Ep* a = open_ep();
  Ep* b = open_ep();
  int empty = 0;
  int full = 0;
  ASSERT_EQ(fi_recv(b->ep, nullptr, 64, nullptr, FI_ADDR_UNSPEC, &empty), 0);
  ASSERT_EQ(fi_recv(b->ep, nullptr, 64, nullptr, FI_ADDR_UNSPEC, &full), 0);
  char text[] = "five";
  ASSERT_EQ(fi_send(a->ep, text, 0, nullptr, b->addr, nullptr), 0);
  ASSERT_EQ(fi_send(a->ep, text, 5, nullptr, b->addr, nullptr), 0);
  fi_cq_tagged_entry e{};
  ASSERT_EQ(wait_cq(b->cq, &e), 1);
  EXPECT_EQ(e.op_context, &empty);
  EXPECT_EQ(e.len, 0U);
  fi_cq_err_entry err{};
  ASSERT_EQ(wait_cq(b->cq, &e, &err), -FI_EAVAIL);
  EXPECT_EQ(err.op_context, &full);
  EXPECT_EQ(err.err, FI_ETRUNC);
  EXPECT_EQ(err.olen, 5U);
}

}  // namespace
}  // namespace fabq::testing
