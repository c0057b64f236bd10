// fi_fabq(7) ENDPOINTS: FI_EP_MSG endpoints and shared receive contexts before the transport:
// bind, enable, post and cancel receives, through the libfabric API.
#include <netinet/in.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_tagged.h>

#include <vector>

#include "fabq_fixture.h"

namespace fabq::testing {
namespace {

class Endpoint : public FabqTest {
 protected:
  void SetUp() override {
    FabqTest::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_EQ(fi_endpoint(domain_, info_, &ep_, &ep_context_), 0);
    eq_ = open_eq({.size = 8});
    cq_ = open_cq({.size = 4, .format = FI_CQ_FORMAT_CONTEXT});
  }
  void TearDown() override {
    if (ep_ != nullptr) {
      EXPECT_EQ(fi_close(&ep_->fid), 0);
    }
    EXPECT_EQ(fi_close(&cq_->fid), 0);
    EXPECT_EQ(fi_close(&eq_->fid), 0);
    FabqTest::TearDown();
  }
  void bind_and_enable() {
    ASSERT_EQ(fi_ep_bind(ep_, &eq_->fid, 0), 0);
    ASSERT_EQ(fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV), 0);
    ASSERT_EQ(fi_enable(ep_), 0);
  }
  ssize_t post(void* context) { return fi_recv(ep_, buf_, sizeof(buf_), nullptr, 0, context); }

  int ep_context_ = 0;
  fid_ep* ep_ = nullptr;
  fid_eq* eq_ = nullptr;
  fid_cq* cq_ = nullptr;
  char buf_[32];
};

TEST_F(Endpoint, IsOpenedWithTheApplicationsContext) {
  EXPECT_EQ(ep_->fid.fclass, static_cast<size_t>(FI_CLASS_EP));
  EXPECT_EQ(ep_->fid.context, &ep_context_);
}

TEST_F(Endpoint, EnableNeedsAnEqAndACompletionQueue) {
  EXPECT_EQ(fi_enable(ep_), -FI_ENOEQ);
  ASSERT_EQ(fi_ep_bind(ep_, &eq_->fid, 0), 0);
  EXPECT_EQ(fi_enable(ep_), -FI_ENOCQ);
  ASSERT_EQ(fi_ep_bind(ep_, &cq_->fid, FI_RECV), 0);
  EXPECT_EQ(fi_enable(ep_), 0);
}

TEST_F(Endpoint, BindRefusesBadFlagsSecondBindsAndBindsAfterEnable) {
  EXPECT_EQ(fi_ep_bind(ep_, &eq_->fid, FI_RECV), -FI_EBADFLAGS);
  EXPECT_EQ(fi_ep_bind(ep_, &cq_->fid, 0), -FI_EBADFLAGS);
  EXPECT_EQ(fi_ep_bind(ep_, &cq_->fid, FI_RECV | FI_REMOTE_WRITE), -FI_EBADFLAGS);
  EXPECT_EQ(fi_ep_bind(ep_, &domain_->fid, 0), -FI_EINVAL);
  bind_and_enable();
  EXPECT_EQ(fi_ep_bind(ep_, &eq_->fid, 0), -FI_EOPBADSTATE);
}

TEST_F(Endpoint, ReceivesCannotBePostedBeforeEnable) {
  EXPECT_EQ(post(nullptr), -FI_EOPBADSTATE);
}

// A receive takes its CQ slot when it completes, so an application may post more receives
// than its CQ holds (Open MPI's ofi MTL opens a CQ of 100 entries and posts as many receives
// as its program does). What ends them must then find room: fi_cancel with none gives
// -FI_EAGAIN and leaves the receive posted.
TEST_F(Endpoint, ReceivesWaitingForAMessageHoldNoCqSlot) {
  bind_and_enable();
  int ctx[8];
  // The CQ has room for 4 (a power of two, at least the size asked for).
  for (int i = 0; i < 8; ++i) EXPECT_EQ(post(&ctx[i]), 0) << i;
  for (int i = 0; i < 4; ++i) EXPECT_EQ(fi_cancel(&ep_->fid, &ctx[i]), 0) << i;
  EXPECT_EQ(fi_cancel(&ep_->fid, &ctx[4]), -FI_EAGAIN) << "no room for its completion";
  fi_cq_err_entry err{};
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(fi_cq_readerr(cq_, &err, 0), 1);
    EXPECT_EQ(err.op_context, &ctx[i]);
  }
  EXPECT_EQ(fi_cancel(&ep_->fid, &ctx[4]), 0) << "it stayed posted";
  ASSERT_EQ(fi_cq_readerr(cq_, &err, 0), 1);
  EXPECT_EQ(err.op_context, &ctx[4]);
  EXPECT_EQ(err.err, FI_ECANCELED);
}

TEST_F(Endpoint, CancelCompletesThePostedReceiveWithECanceled) {
  bind_and_enable();
  int a, b;
  ASSERT_EQ(post(&a), 0);
  ASSERT_EQ(post(&b), 0);
  EXPECT_EQ(fi_cancel(&ep_->fid, &b), 0);
  EXPECT_EQ(fi_cancel(&ep_->fid, &b), -FI_ENOENT);
  fi_cq_entry entry;
  ASSERT_EQ(fi_cq_read(cq_, &entry, 1), -FI_EAVAIL);
  fi_cq_err_entry err{};
  ASSERT_EQ(fi_cq_readerr(cq_, &err, 0), 1);
  EXPECT_EQ(err.op_context, &b);
  EXPECT_EQ(err.err, FI_ECANCELED);
  EXPECT_TRUE(err.flags & FI_RECV);
  EXPECT_EQ(fi_cq_read(cq_, &entry, 1), -FI_EAGAIN) << "the other receive stays posted";
}

TEST_F(Endpoint, SendsBeforeAConnectionGiveEnotconn) {
  bind_and_enable();
  EXPECT_EQ(fi_send(ep_, buf_, 8, nullptr, 0, nullptr), -FI_ENOTCONN);
  EXPECT_EQ(fi_inject(ep_, buf_, 8, 0), -FI_ENOTCONN);
  EXPECT_EQ(fi_tsend(ep_, buf_, 8, nullptr, 0, 7, nullptr), -FI_ENOTCONN);
}

TEST_F(Endpoint, ConnectWithoutAnAddressOrWithTooMuchDataIsEinval) {
  bind_and_enable();
  EXPECT_EQ(fi_connect(ep_, nullptr, nullptr, 0), -FI_EINVAL) << "no dest_addr in the info";
  size_t cm_size = 0;
  size_t len = sizeof(cm_size);
  ASSERT_EQ(fi_getopt(&ep_->fid, FI_OPT_ENDPOINT, FI_OPT_CM_DATA_SIZE, &cm_size, &len), 0);
  EXPECT_EQ(cm_size, 256u);
  std::vector<char> data(cm_size + 1);
  sockaddr_in peer{};
  peer.sin_family = AF_INET;
  EXPECT_EQ(fi_connect(ep_, &peer, data.data(), data.size()), -FI_EINVAL);
}

// A null receive buffer holds no bytes, whatever length it names (fabtests post such receives
// for zero-byte messages): the post is taken, and nothing is ever written there
// (Rdm.AReceiveIntoANullBufferHoldsNoBytes).
TEST_F(Endpoint, AReceiveIntoANullBufferWithALengthIsTaken) {
  bind_and_enable();
  EXPECT_EQ(fi_recv(ep_, nullptr, 100, nullptr, 0, nullptr), 0);
  EXPECT_EQ(fi_trecv(ep_, nullptr, 100, nullptr, 0, 7, 0, nullptr), 0);
  iovec iov[2] = {{buf_, 8}, {nullptr, 8}};
  EXPECT_EQ(fi_recvv(ep_, iov, nullptr, 2, 0, nullptr), 0);
  EXPECT_EQ(fi_recvv(ep_, nullptr, nullptr, 2, 0, nullptr), -FI_EINVAL) << "no iovec array";
  fi_cq_entry entry;
  EXPECT_EQ(fi_cq_read(cq_, &entry, 1), -FI_EAGAIN) << "nothing completes before a message";
}

TEST_F(Endpoint, ASendFromANullBufferWithALengthIsEinval) {
  bind_and_enable();
  EXPECT_EQ(fi_send(ep_, nullptr, 100, nullptr, 0, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_inject(ep_, nullptr, 8, 0), -FI_EINVAL);
  EXPECT_EQ(fi_tsend(ep_, nullptr, 100, nullptr, 0, 7, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_senddata(ep_, nullptr, 100, nullptr, 1, 0, nullptr), -FI_EINVAL);
  iovec iov[2] = {{buf_, 8}, {nullptr, 8}};
  EXPECT_EQ(fi_sendv(ep_, iov, nullptr, 2, 0, nullptr), -FI_EINVAL);
}

TEST_F(Endpoint, ReceivesScatterOverUpToIovLimitBuffers) {
  bind_and_enable();
  iovec iov[5] = {{buf_, 8}, {buf_ + 8, 8}, {buf_ + 16, 8}, {buf_ + 24, 8}, {buf_ + 32, 8}};
  EXPECT_EQ(fi_recvv(ep_, iov, nullptr, 4, 0, nullptr), 0);
  EXPECT_EQ(fi_recvv(ep_, iov, nullptr, 5, 0, nullptr), -FI_EINVAL) << "iov_limit is 4";
  fi_msg msg{.msg_iov = iov, .iov_count = 2, .context = nullptr};
  EXPECT_EQ(fi_recvmsg(ep_, &msg, 0), 0);
}

TEST_F(Endpoint, AnEndpointUsingAnSrxPostsThroughTheSrx) {
  fi_rx_attr attr{.size = 2};
  fid_ep* srx = nullptr;
  ASSERT_EQ(fi_srx_context(domain_, &attr, &srx, nullptr), 0);
  ASSERT_EQ(fi_ep_bind(ep_, &srx->fid, 0), 0);
  bind_and_enable();
  EXPECT_EQ(post(nullptr), -FI_EOPBADSTATE);
  int a, b, c;
  EXPECT_EQ(fi_recv(srx, buf_, 8, nullptr, 0, &a), 0);
  EXPECT_EQ(fi_recv(srx, buf_, 8, nullptr, 0, &b), 0);
  EXPECT_EQ(fi_recv(srx, buf_, 8, nullptr, 0, &c), -FI_EAGAIN) << "rx_attr.size is 2";
  EXPECT_EQ(fi_cancel(&srx->fid, &a), 0);
  fi_cq_err_entry err{};
  fi_cq_entry entry;
  ASSERT_EQ(fi_cq_read(cq_, &entry, 1), -FI_EAVAIL);
  ASSERT_EQ(fi_cq_readerr(cq_, &err, 0), 1);
  EXPECT_EQ(err.op_context, &a);
  EXPECT_EQ(fi_close(&ep_->fid), 0);
  ep_ = nullptr;
  EXPECT_EQ(fi_cancel(&srx->fid, &b), -FI_ENOCQ) << "no endpoint left to report it";
  EXPECT_EQ(fi_close(&srx->fid), 0);
}

}  // namespace
}  // namespace fabq::testing
