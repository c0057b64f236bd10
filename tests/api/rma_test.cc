// fi_rma(3) on fabq's RDM endpoints, and fi_mr(3)'s remote access: "fi_write transfers data to
// the remote memory region", "fi_read transfers data from the remote memory region", "remote CQ
// data is reported in the target's completion", and the access a region grants is checked on
// every request (fi_fabq(7) MEMORY REGIONS, fi_fabq.h ONE-SIDED ERRORS).
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_rma.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "fabq/fi_fabq.h"
#include "rdm_fixture.h"

namespace fabq::testing {
namespace {

constexpr uint64_t kRmaCaps = FI_MSG | FI_TAGGED | FI_RMA | FI_ATOMIC | FI_SOURCE;

class Rma : public Rdm {
 protected:
  Rma() : Rdm(kRmaCaps) {}
  void SetUp() override {
    Rdm::SetUp();
    if (HasFatalFailure()) return;
    a_ = open_ep();
    b_ = open_ep();
  }
  void TearDown() override {
    // Endpoints first: they hold the counters bound to them.
    for (Ep* e : eps_) {
      if (e->ep != nullptr) {
        EXPECT_EQ(fi_close(&e->ep->fid), 0);
      }
      e->ep = nullptr;
    }
    // Then the regions, bound to counters, which Rdm::TearDown closes.
    for (fid_mr* m : mrs_) EXPECT_EQ(fi_close(&m->fid), 0);
    mrs_.clear();
    Rdm::TearDown();
  }
  // A region of b_'s domain over buf[0..len) (the domain's key space; offsets address it).
  fid_mr* reg(void* buf, size_t len, uint64_t access, uint64_t key) {
    fid_mr* mr = nullptr;
    EXPECT_EQ(fi_mr_reg(domain_, buf, len, access, 0, key, 0, &mr, nullptr), 0);
    if (mr != nullptr) mrs_.push_back(mr);
    return mr;
  }
  // The initiator's next completion, which must be an error: its entry.
  fi_cq_err_entry expect_error(Ep* e) {
    fi_cq_tagged_entry entry{};
    fi_cq_err_entry err{};
    EXPECT_EQ(wait_cq(e->cq, &entry, &err), -FI_EAVAIL);
    return err;
  }
  Ep* a_ = nullptr;
  Ep* b_ = nullptr;
  std::vector<fid_mr*> mrs_;
};

TEST_F(Rma, EndpointsAndTheirInfoOfferRmaAndAtomics) {
  EXPECT_EQ(info_->caps & (FI_RMA | FI_ATOMIC), FI_RMA | FI_ATOMIC);
  EXPECT_EQ(info_->tx_attr->rma_iov_limit, 1u);
  EXPECT_NE(info_->tx_attr->msg_order & FI_ORDER_RAW, 0u) << "a read sees an earlier write";
  EXPECT_GT(info_->ep_attr->max_order_raw_size, 0u);
}

TEST_F(Rma, AWriteLandsInThePeersRegionAndCompletesAsAnRmaWrite) {
  std::vector<char> target(256, '.');
  reg(target.data(), target.size(), FI_REMOTE_WRITE, 7);
  char src[] = "one-sided";
  ASSERT_EQ(fi_write(a_->ep, src, sizeof(src), nullptr, b_->addr, 16, 7, src), 0);
  fi_cq_tagged_entry e{};
  ASSERT_EQ(wait_cq(a_->cq, &e), 1);
  EXPECT_EQ(e.op_context, src);
  EXPECT_EQ(e.flags, FI_RMA | FI_WRITE);
  EXPECT_STREQ(target.data() + 16, "one-sided") << "delivered: the data is at the target";
  EXPECT_EQ(target[15], '.');
  EXPECT_EQ(target[16 + sizeof(src)], '.');
  EXPECT_FALSE(any_completion_within(b_->cq, 50)) << "a plain write completes nothing there";
}

TEST_F(Rma, AReadBringsThePeersBytesAndCompletesAsAnRmaRead) {
  std::vector<char> target(4096);
  std::iota(target.begin(), target.end(), 0);
  reg(target.data(), target.size(), FI_REMOTE_READ, 8);
  std::vector<char> dst(1000, 0);
  ASSERT_EQ(fi_read(a_->ep, dst.data(), dst.size(), nullptr, b_->addr, 100, 8, dst.data()), 0);
  fi_cq_tagged_entry e{};
  ASSERT_EQ(wait_cq(a_->cq, &e), 1);
  EXPECT_EQ(e.op_context, dst.data());
  EXPECT_EQ(e.flags, FI_RMA | FI_READ);
  EXPECT_EQ(std::memcmp(dst.data(), target.data() + 100, dst.size()), 0);
}

TEST_F(Rma, VectorWritesAndReadsGatherAndScatter) {
  std::vector<char> target(64, 0);
  reg(target.data(), target.size(), FI_REMOTE_WRITE | FI_REMOTE_READ, 9);
  char p1[] = "abc", p2[] = "defgh", p3[] = "ij";
  iovec out[3] = {{p1, 3}, {p2, 5}, {p3, 2}};
  ASSERT_EQ(fi_writev(a_->ep, out, nullptr, 3, b_->addr, 0, 9, nullptr), 0);
  char q1[4] = {}, q2[7] = {};
  iovec in[2] = {{q1, 3}, {q2, 7}};
  ASSERT_EQ(fi_readv(a_->ep, in, nullptr, 2, b_->addr, 0, 9, nullptr), 0);
  fi_cq_tagged_entry e{};
  ASSERT_EQ(wait_cq(a_->cq, &e), 1);
  ASSERT_EQ(wait_cq(a_->cq, &e), 1);
  EXPECT_EQ(std::string(target.data(), 10), "abcdefghij");
  EXPECT_EQ(std::string(q1, 3) + std::string(q2, 7), "abcdefghij")
      << "the read after the write sees it (FI_ORDER_RAW)";
}

TEST_F(Rma, WritedataCompletesOnTheTargetsReceiveCqWithItsDataAndTakesNoReceive) {
  std::vector<char> target(64, 0);
  reg(target.data(), target.size(), FI_REMOTE_WRITE, 10);
  char rx[16];
  ASSERT_EQ(fi_recv(b_->ep, rx, sizeof(rx), nullptr, FI_ADDR_UNSPEC, rx), 0);
  char src[] = "with data";
  ASSERT_EQ(fi_writedata(a_->ep, src, sizeof(src), nullptr, 0xC0FFEE, b_->addr, 4, 10, nullptr), 0);
  fi_cq_tagged_entry e{};
  ASSERT_EQ(wait_cq(a_->cq, &e), 1);
  EXPECT_EQ(e.flags, FI_RMA | FI_WRITE);
  ASSERT_EQ(wait_cq(b_->cq, &e), 1);
  EXPECT_EQ(e.flags, FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA);
  EXPECT_EQ(e.data, 0xC0FFEEu);
  EXPECT_EQ(e.op_context, nullptr);
  EXPECT_STREQ(target.data() + 4, "with data");
  // The posted receive is still there for a message.
  char msg[] = "m";
  ASSERT_EQ(fi_send(a_->ep, msg, sizeof(msg), nullptr, b_->addr, nullptr), 0);
  ASSERT_EQ(wait_cq(a_->cq, &e), 1);
  ASSERT_EQ(wait_cq(b_->cq, &e), 1);
  EXPECT_EQ(e.op_context, rx);
}

TEST_F(Rma, InjectWritesCompleteNothingAndCountOnTheWriteCounters) {
  std::vector<char> target(64, 0);
  fid_mr* mr = reg(target.data(), target.size(), FI_REMOTE_WRITE, 11);
  // b_'s side: its endpoint counts peers' writes (FI_REMOTE_WRITE), and so does the region.
  fid_cntr* mine = open_cntr();
  fid_cntr* theirs = open_cntr();
  fid_cntr* region = open_cntr();
  ASSERT_EQ(fi_mr_bind(mr, &region->fid, FI_REMOTE_WRITE), 0);
  // Counters bind before fi_enable: a fresh pair for this test.
  Ep* init = new Ep;
  eps_.push_back(init);
  Ep* target_ep = new Ep;
  eps_.push_back(target_ep);
  for (auto [ep, cntr, flags] : {std::tuple{init, mine, uint64_t{FI_WRITE}},
                                 std::tuple{target_ep, theirs, uint64_t{FI_REMOTE_WRITE}}}) {
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_TAGGED;
    cq_attr.wait_obj = FI_WAIT_UNSPEC;
    ASSERT_EQ(fi_cq_open(domain_, &cq_attr, &ep->cq, nullptr), 0);
    ASSERT_EQ(fi_endpoint(domain_, info_, &ep->ep, nullptr), 0);
    ASSERT_EQ(fi_ep_bind(ep->ep, &av_->fid, 0), 0);
    ASSERT_EQ(fi_ep_bind(ep->ep, &ep->cq->fid, FI_TRANSMIT | FI_RECV), 0);
    ASSERT_EQ(fi_ep_bind(ep->ep, &cntr->fid, flags), 0);
    ASSERT_EQ(fi_enable(ep->ep), 0);
    size_t len = sizeof(ep->name);
    ASSERT_EQ(fi_getname(&ep->ep->fid, &ep->name, &len), 0);
    ASSERT_EQ(fi_av_insert(av_, &ep->name, 1, &ep->addr, 0, nullptr), 1);
  }
  char src[] = "inj";
  ASSERT_EQ(fi_inject_write(init->ep, src, sizeof(src), target_ep->addr, 0, 11), 0);
  ASSERT_EQ(fi_inject_write(init->ep, src, sizeof(src), target_ep->addr, 8, 11), 0);
  ASSERT_EQ(fi_cntr_wait(mine, 2, kWaitMs), 0);
  ASSERT_EQ(fi_cntr_wait(theirs, 2, kWaitMs), 0);
  EXPECT_EQ(fi_cntr_read(region), 2u);
  EXPECT_STREQ(target.data() + 8, "inj");
  EXPECT_FALSE(any_completion_within(init->cq, 50)) << "fi_inject_write writes no completion";
  EXPECT_EQ(fi_inject_write(init->ep, target.data(), info_->tx_attr->inject_size + 1,
                            target_ep->addr, 0, 11),
            -FI_EMSGSIZE);
}

TEST_F(Rma, ReadsCountOnTheReadCountersOfBothSides) {
  std::vector<char> target(64, 'r');
  fid_mr* mr = reg(target.data(), target.size(), FI_REMOTE_READ, 12);
  fid_cntr* region = open_cntr();
  ASSERT_EQ(fi_mr_bind(mr, &region->fid, FI_REMOTE_READ), 0);
  EXPECT_EQ(fi_mr_bind(mr, &region->fid, FI_REMOTE_READ), -FI_EBUSY) << "one counter per event";
  char dst[8];
  ASSERT_EQ(fi_read(a_->ep, dst, sizeof(dst), nullptr, b_->addr, 0, 12, nullptr), 0);
  fi_cq_tagged_entry e{};
  ASSERT_EQ(wait_cq(a_->cq, &e), 1);
  EXPECT_EQ(fi_cntr_read(region), 1u);
  EXPECT_EQ(fi_close(&region->fid), -FI_EBUSY) << "the region holds its counter";
}

// --- remote access is checked

TEST_F(Rma, AKeyNoRegionHasFailsWithEkeyrejectedAndWritesNothing) {
  std::vector<char> target(64, '.');
  reg(target.data(), target.size(), FI_REMOTE_WRITE | FI_REMOTE_READ, 13);
  char src[] = "x";
  ASSERT_EQ(fi_write(a_->ep, src, 1, nullptr, b_->addr, 0, 14, src), 0);
  fi_cq_err_entry err = expect_error(a_);
  EXPECT_EQ(err.err, FI_EKEYREJECTED);
  EXPECT_EQ(err.prov_errno, FI_FABQ_RMA_BAD_KEY);
  EXPECT_EQ(err.op_context, src);
  EXPECT_EQ(err.flags, FI_RMA | FI_WRITE);
  char dst[4];
  ASSERT_EQ(fi_read(a_->ep, dst, 4, nullptr, b_->addr, 0, 14, dst), 0);
  EXPECT_EQ(expect_error(a_).prov_errno, FI_FABQ_RMA_BAD_KEY);
  EXPECT_EQ(target[0], '.');
}

TEST_F(Rma, ARangeOutsideTheRegionFailsWithEaccesAndTouchesNothingAroundIt) {
  std::vector<char> memory(128, '.');
  // The region is the middle of `memory`; what is around it must never change.
  reg(memory.data() + 32, 64, FI_REMOTE_WRITE | FI_REMOTE_READ, 15);
  std::vector<char> src(65, 'X');
  for (auto [addr, len] : {std::pair<uint64_t, size_t>{0, 65},
                           {60, 5},
                           {64, 1},
                           {UINT64_MAX, 2},
                           {UINT64_MAX - 3, 8}}) {
    ASSERT_EQ(fi_write(a_->ep, src.data(), len, nullptr, b_->addr, addr, 15, nullptr), 0);
    fi_cq_err_entry err = expect_error(a_);
    EXPECT_EQ(err.err, FI_EACCES) << addr << "+" << len;
    EXPECT_EQ(err.prov_errno, FI_FABQ_RMA_OUT_OF_BOUNDS);
  }
  char dst[8];
  ASSERT_EQ(fi_read(a_->ep, dst, 8, nullptr, b_->addr, 60, 15, nullptr), 0);
  EXPECT_EQ(expect_error(a_).prov_errno, FI_FABQ_RMA_OUT_OF_BOUNDS);
  EXPECT_EQ(std::string(memory.begin(), memory.end()), std::string(128, '.'));
  // The endpoints go on.
  ASSERT_EQ(fi_write(a_->ep, src.data(), 64, nullptr, b_->addr, 0, 15, nullptr), 0);
  fi_cq_tagged_entry e{};
  ASSERT_EQ(wait_cq(a_->cq, &e), 1);
  EXPECT_EQ(std::string(memory.begin() + 32, memory.begin() + 96), std::string(64, 'X'));
  EXPECT_EQ(memory[31], '.');
  EXPECT_EQ(memory[96], '.');
}

TEST_F(Rma, AnAccessTheRegionDidNotGrantFailsWithEaccesNotGranted) {
  std::vector<char> target(64, 'r');
  reg(target.data(), target.size(), FI_REMOTE_READ, 16);
  char src[] = "w";
  ASSERT_EQ(fi_write(a_->ep, src, 1, nullptr, b_->addr, 0, 16, nullptr), 0);
  fi_cq_err_entry err = expect_error(a_);
  EXPECT_EQ(err.err, FI_EACCES);
  EXPECT_EQ(err.prov_errno, FI_FABQ_RMA_NOT_GRANTED);
  EXPECT_EQ(target[0], 'r');
  char dst[4];
  ASSERT_EQ(fi_read(a_->ep, dst, 4, nullptr, b_->addr, 0, 16, nullptr), 0);
  fi_cq_tagged_entry e{};
  EXPECT_EQ(wait_cq(a_->cq, &e), 1) << "what it grants still works";
}

TEST_F(Rma, AClosedRegionIsNoLongerReachable) {
  std::vector<char> target(64, '.');
  fid_mr* mr = reg(target.data(), target.size(), FI_REMOTE_WRITE, 17);
  ASSERT_EQ(fi_close(&mr->fid), 0);
  mrs_.clear();
  char src[] = "late";
  ASSERT_EQ(fi_write(a_->ep, src, sizeof(src), nullptr, b_->addr, 0, 17, nullptr), 0);
  EXPECT_EQ(expect_error(a_).prov_errno, FI_FABQ_RMA_BAD_KEY);
  EXPECT_EQ(target[0], '.');
}

TEST_F(Rma, AnEndpointWithoutRemoteWriteRefusesPeersWrites) {
  std::vector<char> target(64, '.');
  reg(target.data(), target.size(), FI_REMOTE_WRITE, 18);
  Ep* reader_only = open_ep(nullptr, FI_MSG | FI_RMA | FI_READ | FI_REMOTE_READ);
  char src[] = "no";
  ASSERT_EQ(fi_write(a_->ep, src, 2, nullptr, reader_only->addr, 0, 18, nullptr), 0);
  EXPECT_EQ(expect_error(a_).prov_errno, FI_FABQ_RMA_NOT_GRANTED);
  EXPECT_EQ(target[0], '.');
}

TEST_F(Rma, LargeTransfersArriveWhole) {
  const size_t n = 4 << 20;
  std::vector<unsigned char> target(n, 0), src(n), back(n, 0);
  for (size_t i = 0; i < n; ++i) src[i] = static_cast<unsigned char>(i * 7 + 1);
  reg(target.data(), n, FI_REMOTE_WRITE | FI_REMOTE_READ, 19);
  ASSERT_EQ(fi_write(a_->ep, src.data(), n, nullptr, b_->addr, 0, 19, nullptr), 0);
  ASSERT_EQ(fi_read(a_->ep, back.data(), n, nullptr, b_->addr, 0, 19, nullptr), 0);
  fi_cq_tagged_entry e{};
  ASSERT_EQ(wait_cq(a_->cq, &e), 1);
  ASSERT_EQ(wait_cq(a_->cq, &e), 1);
  EXPECT_TRUE(target == src);
  EXPECT_TRUE(back == src);
}

// A read longer than FI_FABQ_RMA_READ_PIECE is answered in pieces (fi_fabq(7) RMA AND ATOMICS,
// WIRE PROTOCOL): through the socket, and through the shared ring with direct copies off.
class RmaPieces : public Rma, public ::testing::WithParamInterface<const char*> {
 protected:
  void SetUp() override {
    ASSERT_EQ(setenv(GetParam(), "0", 1), 0);
    Rma::SetUp();
  }
};
INSTANTIATE_TEST_SUITE_P(, RmaPieces, ::testing::Values("FI_FABQ_SHM", "FI_FABQ_SHM_DIRECT_MIN"),
                         [](const ::testing::TestParamInfo<const char*>& i) {
                           return std::string(i.param) == "FI_FABQ_SHM" ? "Socket" : "Ring";
                         });

TEST_P(RmaPieces, AReadLongerThanAPieceArrivesWholeAndCountsOnce) {
  EXPECT_EQ(info_->ep_attr->max_order_war_size, size_t{64} << 10) << "the piece";
  const size_t n = (1 << 20) + 333;
  std::vector<unsigned char> target(n), back(n + 2, 0xee);
  for (size_t i = 0; i < n; ++i) target[i] = static_cast<unsigned char>(i * 13 + i / 65536);
  fid_mr* mr = reg(target.data(), n, FI_REMOTE_READ, 21);
  fid_cntr* region = open_cntr();
  ASSERT_EQ(fi_mr_bind(mr, &region->fid, FI_REMOTE_READ), 0);
  ASSERT_EQ(fi_read(a_->ep, back.data() + 1, n, nullptr, b_->addr, 0, 21, nullptr), 0);
  fi_cq_tagged_entry e{};
  ASSERT_EQ(wait_cq(a_->cq, &e), 1);
  EXPECT_EQ(e.flags, FI_RMA | FI_READ);
  EXPECT_TRUE(std::equal(target.begin(), target.end(), back.begin() + 1));
  EXPECT_EQ(back[0], 0xee);
  EXPECT_EQ(back[n + 1], 0xee) << "nothing past the buffer";
  EXPECT_EQ(fi_cntr_read(region), 1u) << "one read, however many pieces";
}

TEST_P(RmaPieces, AReadUpToMaxOrderWarSizeReturnsWhatWasThereBeforeALaterWrite) {
  const size_t n = info_->ep_attr->max_order_war_size;
  std::vector<unsigned char> target(n, 'o'), later(n, 'n'), back(n, 0);
  reg(target.data(), n, FI_REMOTE_READ | FI_REMOTE_WRITE, 22);
  ASSERT_EQ(fi_read(a_->ep, back.data(), n, nullptr, b_->addr, 0, 22, nullptr), 0);
  ASSERT_EQ(fi_write(a_->ep, later.data(), n, nullptr, b_->addr, 0, 22, nullptr), 0);
  fi_cq_tagged_entry e{};
  ASSERT_EQ(wait_cq(a_->cq, &e), 1);
  ASSERT_EQ(wait_cq(a_->cq, &e), 1);
  EXPECT_EQ(back, std::vector<unsigned char>(n, 'o')) << "FI_ORDER_WAR up to max_order_war_size";
  EXPECT_EQ(target, later);
}

TEST_P(RmaPieces, AFencedWriteWaitsForALongerReadAndDoesNotChangeWhatItReturns) {
  const size_t n = 4 * info_->ep_attr->max_order_war_size;
  std::vector<unsigned char> target(n, 'o'), later(n, 'n'), back(n, 0);
  reg(target.data(), n, FI_REMOTE_READ | FI_REMOTE_WRITE, 23);
  ASSERT_EQ(fi_read(a_->ep, back.data(), n, nullptr, b_->addr, 0, 23, nullptr), 0);
  iovec iov{later.data(), n};
  fi_rma_iov rma{0, n, 23};
  fi_msg_rma msg{};
  msg.msg_iov = &iov;
  msg.iov_count = 1;
  msg.addr = b_->addr;
  msg.rma_iov = &rma;
  msg.rma_iov_count = 1;
  // fi_endpoint(3): the fenced operation is deferred until the previous ones have completed.
  EXPECT_EQ(fi_writemsg(a_->ep, &msg, FI_FENCE), -FI_EAGAIN) << "the read is not complete";
  fi_cq_tagged_entry e{};
  ASSERT_EQ(wait_cq(a_->cq, &e), 1);
  EXPECT_EQ(e.flags, FI_RMA | FI_READ);
  ASSERT_EQ(fi_writemsg(a_->ep, &msg, FI_FENCE), 0);
  ASSERT_EQ(wait_cq(a_->cq, &e), 1);
  EXPECT_EQ(back, std::vector<unsigned char>(n, 'o')) << "the read saw nothing of the fenced write";
  EXPECT_EQ(target, later);
}

TEST_F(Rma, MisusedCallsAreRefusedAndPostNothing) {
  char buf[8] = {};
  Ep* msg_only = open_ep(nullptr, FI_MSG);
  EXPECT_EQ(fi_write(msg_only->ep, buf, 8, nullptr, b_->addr, 0, 1, nullptr), -FI_EOPNOTSUPP);
  EXPECT_EQ(fi_read(msg_only->ep, buf, 8, nullptr, b_->addr, 0, 1, nullptr), -FI_EOPNOTSUPP);
  iovec iov{buf, 8};
  fi_rma_iov two[2] = {{0, 4, 1}, {4, 4, 1}};
  fi_msg_rma msg{};
  msg.msg_iov = &iov;
  msg.iov_count = 1;
  msg.addr = b_->addr;
  msg.rma_iov = two;
  msg.rma_iov_count = 2;
  EXPECT_EQ(fi_writemsg(a_->ep, &msg, 0), -FI_EINVAL) << "rma_iov_limit is 1";
  msg.rma_iov_count = 1;
  EXPECT_EQ(fi_writemsg(a_->ep, &msg, 0), -FI_EINVAL) << "8 bytes into a remote range of 4";
  two[0].len = 8;
  EXPECT_EQ(fi_readmsg(a_->ep, &msg, FI_INJECT), -FI_EBADFLAGS);
  EXPECT_EQ(fi_write(a_->ep, nullptr, 8, nullptr, b_->addr, 0, 1, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_write(a_->ep, buf, 8, nullptr, FI_ADDR_NOTAVAIL, 0, 1, nullptr), -FI_EINVAL);
  // Local buffers whose lengths wrap the address space add up to 1 byte, which fits any range.
  iovec wraps[2] = {{buf, SIZE_MAX}, {buf + 4, 2}};
  msg.msg_iov = wraps;
  msg.iov_count = 2;
  EXPECT_EQ(fi_writemsg(a_->ep, &msg, 0), -FI_EINVAL);
  EXPECT_EQ(fi_readmsg(a_->ep, &msg, 0), -FI_EINVAL);
  EXPECT_EQ(fi_readv(a_->ep, wraps, nullptr, 2, b_->addr, 0, 1, nullptr), -FI_EINVAL);
  EXPECT_FALSE(any_completion_within(a_->cq, 20));
}

// --- fault injection (fi_fabq(7) FAULT INJECTION) reaches one-sided operations

TEST_F(Rma, InjectedFaultsFailOneSidedOperationsAndRegistrations) {
  fi_fabq_async_ops* ops = nullptr;
  ASSERT_EQ(
      fi_open_ops(&domain_->fid, FI_FABQ_ASYNC_OPS, 0, reinterpret_cast<void**>(&ops), nullptr), 0);
  std::vector<char> target(64, '.');
  reg(target.data(), target.size(), FI_REMOTE_WRITE, 20);
  char src[] = "f";
  // error= on the initiator: its next operation completes in error.
  ASSERT_EQ(ops->inject(domain_, "error=FI_EIO:77,on=ep:0"), 0);
  ASSERT_EQ(fi_write(a_->ep, src, 1, nullptr, b_->addr, 0, 20, src), 0);
  fi_cq_err_entry err = expect_error(a_);
  EXPECT_EQ(err.err, FI_EIO);
  EXPECT_EQ(err.prov_errno, 77);
  EXPECT_EQ(err.flags, FI_RMA | FI_WRITE);
  // net=drop: the write never reaches the target, and says so.
  ASSERT_EQ(ops->inject(domain_, "net=drop,on=ep:0"), 0);
  ASSERT_EQ(fi_write(a_->ep, src, 1, nullptr, b_->addr, 0, 20, src), 0);
  EXPECT_EQ(expect_error(a_).err, FI_ETIMEDOUT);
  EXPECT_EQ(target[0], '.');
  // error= on the domain: the next registration fails.
  ASSERT_EQ(ops->inject(domain_, "error=FI_ENOMEM,on=domain"), 0);
  fid_mr* mr = nullptr;
  EXPECT_EQ(fi_mr_reg(domain_, target.data(), 8, FI_REMOTE_WRITE, 0, 21, 0, &mr, nullptr),
            -FI_ENOMEM);
  EXPECT_EQ(mr, nullptr);
  EXPECT_NE(reg(target.data(), 8, FI_REMOTE_WRITE, 21), nullptr) << "only the one";
  // ... and the target's access error can be raised on demand (on an RDM endpoint too).
  ASSERT_EQ(ops->inject(domain_, "event=ep_access_err,on=ep:1"), 0);
  fi_fabq_async_event ev{};
  ASSERT_EQ(ops->get_event(domain_, &ev, 0), 0);
  EXPECT_EQ(ev.type, static_cast<uint32_t>(FI_FABQ_EVENT_EP_ACCESS_ERR));
  EXPECT_EQ(ev.fid, &b_->ep->fid);
  EXPECT_EQ(ops->ack_event(domain_, &ev), 0);
}

TEST(RmaRegistrationFault, WithFiRegMrAFailedRegistrationIsAnErrorEntryAndItsRegionUnreachable) {
  fi_info* hints = fabq_hints();
  hints->caps = FI_MSG | FI_RMA;
  fi_info* info = nullptr;
  ASSERT_EQ(fi_getinfo(kVersion, nullptr, nullptr, 0, hints, &info), 0);
  fi_freeinfo(hints);
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_eq* eq = nullptr;
  ASSERT_EQ(fi_fabric(info->fabric_attr, &fabric, nullptr), 0);
  ASSERT_EQ(fi_domain(fabric, info, &domain, nullptr), 0);
  fi_eq_attr eq_attr{};
  eq_attr.size = 8;
  eq_attr.wait_obj = FI_WAIT_UNSPEC;
  ASSERT_EQ(fi_eq_open(fabric, &eq_attr, &eq, nullptr), 0);
  ASSERT_EQ(fi_domain_bind(domain, &eq->fid, FI_REG_MR), 0);
  fi_fabq_async_ops* ops = nullptr;
  ASSERT_EQ(
      fi_open_ops(&domain->fid, FI_FABQ_ASYNC_OPS, 0, reinterpret_cast<void**>(&ops), nullptr), 0);
  ASSERT_EQ(ops->inject(domain, "error=FI_EACCES:9,on=domain"), 0);
  char buf[64];
  int ctx = 0;
  fid_mr* mr = nullptr;
  ASSERT_EQ(fi_mr_reg(domain, buf, sizeof(buf), FI_REMOTE_WRITE, 0, 5, 0, &mr, &ctx), 0)
      << "it completes on the EQ";
  uint32_t event = 0;
  fi_eq_entry entry{};
  ASSERT_EQ(fi_eq_sread(eq, &event, &entry, sizeof(entry), kWaitMs, 0), -FI_EAVAIL);
  fi_eq_err_entry err{};
  ASSERT_EQ(fi_eq_readerr(eq, &err, 0), static_cast<ssize_t>(sizeof(err)));
  EXPECT_EQ(err.fid, &mr->fid);
  EXPECT_EQ(err.context, &ctx);
  EXPECT_EQ(err.err, FI_EACCES);
  EXPECT_EQ(err.prov_errno, 9);
  EXPECT_EQ(fi_mr_key(mr), FI_KEY_NOTAVAIL) << "a failed registration has no key";
  EXPECT_EQ(fi_close(&mr->fid), 0);
  EXPECT_EQ(fi_close(&domain->fid), 0);
  EXPECT_EQ(fi_close(&eq->fid), 0);
  EXPECT_EQ(fi_close(&fabric->fid), 0);
  fi_freeinfo(info);
}

// --- regions addressed by virtual address (FI_MR_VIRT_ADDR): the address is the peer's choice

class RmaVirtAddr : public Rdm {
 protected:
  RmaVirtAddr() : Rdm(kRmaCaps) { mr_mode_ = FI_MR_VIRT_ADDR | FI_MR_PROV_KEY; }
};

TEST_F(RmaVirtAddr, AnAddressAroundTheRegionOrOneWhoseEndWrapsIsRefusedAndTouchesNothing) {
  ASSERT_EQ(info_->domain_attr->mr_mode & FI_MR_VIRT_ADDR, FI_MR_VIRT_ADDR);
  Ep* a = open_ep();
  Ep* b = open_ep();
  std::vector<char> memory(128, '.');
  fid_mr* mr = nullptr;
  ASSERT_EQ(fi_mr_reg(domain_, memory.data() + 32, 64, FI_REMOTE_WRITE | FI_REMOTE_READ, 0, 0, 0,
                      &mr, nullptr),
            0);
  const uint64_t key = fi_mr_key(mr);
  const uint64_t base = reinterpret_cast<uintptr_t>(memory.data() + 32);
  std::vector<char> src(65, 'X');
  for (auto [addr, len] : {std::pair<uint64_t, size_t>{base - 1, 4},
                           {base - 32, 8},
                           {base + 60, 5},
                           {base + 64, 1},
                           {0, 8},
                           {UINT64_MAX, 2},
                           {UINT64_MAX - 3, 8},
                           {base, 65}}) {
    ASSERT_EQ(fi_write(a->ep, src.data(), len, nullptr, b->addr, addr, key, nullptr), 0);
    fi_cq_tagged_entry e{};
    fi_cq_err_entry err{};
    ASSERT_EQ(wait_cq(a->cq, &e, &err), -FI_EAVAIL) << std::hex << addr << "+" << len;
    EXPECT_EQ(err.prov_errno, FI_FABQ_RMA_OUT_OF_BOUNDS) << std::hex << addr << "+" << len;
    char dst[8];
    if (len > sizeof(dst)) continue;
    ASSERT_EQ(fi_read(a->ep, dst, len, nullptr, b->addr, addr, key, nullptr), 0);
    ASSERT_EQ(wait_cq(a->cq, &e, &err), -FI_EAVAIL) << std::hex << addr << "+" << len;
    EXPECT_EQ(err.prov_errno, FI_FABQ_RMA_OUT_OF_BOUNDS);
  }
  EXPECT_EQ(std::string(memory.begin(), memory.end()), std::string(128, '.'));
  ASSERT_EQ(fi_write(a->ep, src.data(), 64, nullptr, b->addr, base, key, nullptr), 0);
  fi_cq_tagged_entry e{};
  ASSERT_EQ(wait_cq(a->cq, &e), 1);
  EXPECT_EQ(std::string(memory.begin() + 32, memory.begin() + 96), std::string(64, 'X'));
  EXPECT_EQ(memory[31], '.');
  EXPECT_EQ(memory[96], '.');
  EXPECT_EQ(fi_close(&mr->fid), 0);
}

// --- FI_MR_ENDPOINT: a region belongs to the endpoint it is bound to

class RmaEndpointRegions : public Rdm {
 protected:
  RmaEndpointRegions() : Rdm(kRmaCaps) {
    mr_mode_ = FI_MR_ENDPOINT | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR | FI_MR_LOCAL | FI_MR_ALLOCATED;
  }
};

// fi_mr(3) FI_MR_ENDPOINT: "the provider associates memory regions with endpoints". The binding
// keeps the endpoint (fi_close is -FI_EBUSY, as a counter bound to a region cannot close, and as
// libfabric's cxi provider and fabtests' teardown order have it): were it to close, the region's
// key would name an endpoint that is gone, and the next endpoint opened, perhaps where the
// allocator put the first, would hand a peer the region.
TEST_F(RmaEndpointRegions, AnEndpointWithARegionBoundToItCannotCloseSoNoLaterEndpointReachesIt) {
  ASSERT_EQ(info_->domain_attr->mr_mode & FI_MR_ENDPOINT, FI_MR_ENDPOINT);
  Ep* peer = open_ep();
  Ep* a = open_ep();
  std::vector<char> target(64, '.');
  fid_mr* mr = nullptr;
  ASSERT_EQ(fi_mr_reg(domain_, target.data(), target.size(), FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0,
                      0, &mr, nullptr),
            0);
  ASSERT_EQ(fi_mr_bind(mr, &a->ep->fid, 0), 0);
  ASSERT_EQ(fi_mr_enable(mr), 0);
  const uint64_t key = fi_mr_key(mr);
  const uint64_t base = reinterpret_cast<uintptr_t>(target.data());
  char via_a[] = "via-a";
  ASSERT_EQ(fi_write(peer->ep, via_a, sizeof(via_a), nullptr, a->addr, base, key, nullptr), 0);
  fi_cq_tagged_entry e{};
  ASSERT_EQ(wait_cq(peer->cq, &e), 1);
  ASSERT_STREQ(target.data(), "via-a") << "through its endpoint the region is there";

  auto* b = new Ep;
  eps_.push_back(b);
  std::vector<fid_ep*> others;
  others.reserve(32);
  const void* a_was_at = a->ep;
  const int closed = fi_close(&a->ep->fid);
  EXPECT_EQ(closed, -FI_EBUSY) << "a region is bound to it";
  if (closed == 0) a->ep = nullptr;  // its CQ closes in TearDown
  // Another endpoint, B: the allocator may put it where A was. Endpoints are opened (and kept,
  // so that their memory is not handed out again) until one is there, or for a while.
  bool same_place = false;
  for (size_t i = 0; i < 32; ++i) {
    fid_ep* ep = nullptr;
    ASSERT_EQ(fi_endpoint(domain_, info_, &ep, nullptr), 0);
    same_place = static_cast<const void*>(ep) == a_was_at;
    if (same_place || i == 31) {
      b->ep = ep;
      break;
    }
    others.push_back(ep);
  }
  for (fid_ep* ep : others) EXPECT_EQ(fi_close(&ep->fid), 0);
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_TAGGED;
  ASSERT_EQ(fi_cq_open(domain_, &cq_attr, &b->cq, nullptr), 0);
  ASSERT_EQ(fi_ep_bind(b->ep, &av_->fid, 0), 0);
  ASSERT_EQ(fi_ep_bind(b->ep, &b->cq->fid, FI_TRANSMIT | FI_RECV), 0);
  ASSERT_EQ(fi_enable(b->ep), 0);
  size_t name_len = sizeof(b->name);
  ASSERT_EQ(fi_getname(&b->ep->fid, &b->name, &name_len), 0);
  ASSERT_EQ(fi_av_insert(av_, &b->name, 1, &b->addr, 0, nullptr), 1);
  std::strcpy(target.data(), "untouched");
  char via_b[] = "via-b";
  ASSERT_EQ(fi_write(peer->ep, via_b, sizeof(via_b), nullptr, b->addr, base, key, nullptr), 0);
  fi_cq_err_entry err{};
  EXPECT_EQ(wait_cq(peer->cq, &e, &err), -FI_EAVAIL)
      << "a write through another endpoint" << (same_place ? " (opened at A's address)" : "");
  EXPECT_EQ(err.prov_errno, FI_FABQ_RMA_BAD_KEY);
  char back[16] = {};
  ASSERT_EQ(fi_read(peer->ep, back, 10, nullptr, b->addr, base, key, nullptr), 0);
  err = {};
  EXPECT_EQ(wait_cq(peer->cq, &e, &err), -FI_EAVAIL)
      << "a read through another endpoint" << (same_place ? " (opened at A's address)" : "");
  EXPECT_EQ(err.prov_errno, FI_FABQ_RMA_BAD_KEY);
  EXPECT_STREQ(target.data(), "untouched");
  EXPECT_EQ(back[0], 0) << "no byte of the region came back";
  // Once its regions are closed, the endpoint closes.
  ASSERT_EQ(fi_close(&mr->fid), 0);
  if (a->ep != nullptr) {
    EXPECT_EQ(fi_close(&a->ep->fid), 0);
    a->ep = nullptr;
  }
}

// --- memory registration modes

// Endpoints of a domain opened with the mr_mode bits `mode` in the hints.
class RmaMode : public ::testing::TestWithParam<int> {};

TEST_P(RmaMode, ProviderKeysVirtualAddressesAndEndpointBindingWorkAsReported) {
  fi_info* hints = fabq_hints();
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = kRmaCaps;
  hints->domain_attr->mr_mode = GetParam();
  fi_info* info = nullptr;
  ASSERT_EQ(fi_getinfo(kVersion, nullptr, nullptr, 0, hints, &info), 0);
  fi_freeinfo(hints);
  const int mode = info->domain_attr->mr_mode;
  EXPECT_EQ(mode, GetParam() & (FI_MR_PROV_KEY | FI_MR_VIRT_ADDR | FI_MR_ENDPOINT));
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_av* av = nullptr;
  ASSERT_EQ(fi_fabric(info->fabric_attr, &fabric, nullptr), 0);
  ASSERT_EQ(fi_domain(fabric, info, &domain, nullptr), 0);
  fi_av_attr av_attr{};
  av_attr.type = FI_AV_TABLE;
  ASSERT_EQ(fi_av_open(domain, &av_attr, &av, nullptr), 0);
  fid_ep* ep[2] = {};
  fid_cq* cq[2] = {};
  fi_addr_t addr[2] = {};
  for (int i = 0; i < 2; ++i) {
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_TAGGED;
    cq_attr.wait_obj = FI_WAIT_UNSPEC;
    ASSERT_EQ(fi_cq_open(domain, &cq_attr, &cq[i], nullptr), 0);
    ASSERT_EQ(fi_endpoint(domain, info, &ep[i], nullptr), 0);
    ASSERT_EQ(fi_ep_bind(ep[i], &av->fid, 0), 0);
    ASSERT_EQ(fi_ep_bind(ep[i], &cq[i]->fid, FI_TRANSMIT | FI_RECV), 0);
    ASSERT_EQ(fi_enable(ep[i]), 0);
    sockaddr_in name{};
    size_t len = sizeof(name);
    ASSERT_EQ(fi_getname(&ep[i]->fid, &name, &len), 0);
    ASSERT_EQ(fi_av_insert(av, &name, 1, &addr[i], 0, nullptr), 1);
  }
  std::vector<char> target(64, '.');
  fid_mr* mr = nullptr;
  ASSERT_EQ(
      fi_mr_reg(domain, target.data(), target.size(), FI_REMOTE_WRITE, 0, 42, 0, &mr, nullptr), 0);
  if (mode & FI_MR_ENDPOINT) {
    EXPECT_EQ(fi_mr_key(mr), FI_KEY_NOTAVAIL) << "no key before it is enabled";
    EXPECT_EQ(fi_mr_enable(mr), -FI_EOPBADSTATE) << "not bound to an endpoint yet";
    ASSERT_EQ(fi_mr_bind(mr, &ep[1]->fid, 0), 0);
    ASSERT_EQ(fi_mr_enable(mr), 0);
  }
  const uint64_t key = fi_mr_key(mr);
  if (mode & FI_MR_PROV_KEY) {
    EXPECT_NE(key, 42u) << "the provider's key, not the requested one";
    fid_mr* other = nullptr;
    ASSERT_EQ(fi_mr_reg(domain, target.data(), 8, FI_REMOTE_WRITE, 0, 42, 0, &other, nullptr), 0)
        << "requested keys are ignored, so they cannot clash";
    if (mode & FI_MR_ENDPOINT) {
      ASSERT_EQ(fi_mr_bind(other, &ep[1]->fid, 0), 0);
      ASSERT_EQ(fi_mr_enable(other), 0);
    }
    EXPECT_NE(fi_mr_key(other), key);
    EXPECT_EQ(fi_close(&other->fid), 0);
  } else {
    EXPECT_EQ(key, 42u);
  }
  const uint64_t base = (mode & FI_MR_VIRT_ADDR) ? reinterpret_cast<uintptr_t>(target.data()) : 0;
  char src[] = "mode";
  ASSERT_EQ(fi_write(ep[0], src, sizeof(src), nullptr, addr[1], base + 8, key, nullptr), 0);
  fi_cq_tagged_entry e{};
  ASSERT_EQ(fi_cq_sread(cq[0], &e, 1, nullptr, kWaitMs), 1);
  EXPECT_STREQ(target.data() + 8, "mode");
  if (mode & FI_MR_ENDPOINT) {
    // Through the endpoint it is not bound to, the region is not there.
    ASSERT_EQ(fi_write(ep[1], src, sizeof(src), nullptr, addr[0], base, key, nullptr), 0);
    fi_cq_err_entry err{};
    ASSERT_EQ(fi_cq_sread(cq[1], &e, 1, nullptr, kWaitMs), -FI_EAVAIL);
    ASSERT_EQ(fi_cq_readerr(cq[1], &err, 0), 1);
    EXPECT_EQ(err.prov_errno, FI_FABQ_RMA_BAD_KEY);
  }
  EXPECT_EQ(fi_close(&mr->fid), 0);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(fi_close(&ep[i]->fid), 0);
    EXPECT_EQ(fi_close(&cq[i]->fid), 0);
  }
  EXPECT_EQ(fi_close(&av->fid), 0);
  EXPECT_EQ(fi_close(&domain->fid), 0);
  EXPECT_EQ(fi_close(&fabric->fid), 0);
  fi_freeinfo(info);
}

INSTANTIATE_TEST_SUITE_P(Modes, RmaMode,
                         ::testing::Values(0, FI_MR_PROV_KEY, FI_MR_VIRT_ADDR,
                                           FI_MR_PROV_KEY | FI_MR_VIRT_ADDR,
                                           FI_MR_ENDPOINT | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR |
                                               FI_MR_LOCAL | FI_MR_ALLOCATED));

}  // namespace
}  // namespace fabq::testing
