// fi_rma(3) on connected (FI_EP_MSG) endpoints, and the access error of fi_fabq.h's event table:
// "FI_FABQ_EVENT_EP_ACCESS_ERR: the peer's RMA or atomic named a bad key, a range outside the
// region or an access not granted", as a verbs QP goes to its error state on a remote access
// error, while the initiator's operation completes in error.
#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_rma.h>

#include <cstring>
#include <vector>

#include "fabq/fi_fabq.h"
#include "support/pair.h"

namespace fabq::testing {
namespace {

Options rma_pair_options() {
  Options o = api_pair_options();
  o.caps = FI_MSG | FI_RMA;
  return o;
}

class MsgRma : public PairTest {
 protected:
  MsgRma() : PairTest(rma_pair_options()) {}
  void SetUp() override {
    PairTest::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_TRUE(pair_.connect());
    ASSERT_EQ(fi_mr_reg(domain(), region_, sizeof(region_), FI_REMOTE_WRITE | FI_REMOTE_READ, 0,
                        kKey, 0, &mr_, nullptr),
              0);
  }
  void TearDown() override {
    if (mr_ != nullptr) {
      EXPECT_EQ(fi_close(&mr_->fid), 0);
    }
    PairTest::TearDown();
  }
  static constexpr uint64_t kKey = 0x5EC;
  char region_[128] = {};
  fid_mr* mr_ = nullptr;
};

TEST_F(MsgRma, WritesAndReadsGoThroughTheConnection) {
  char src[] = "msg-rma";
  ASSERT_EQ(fi_write(client_ep(), src, sizeof(src), nullptr, 0, 8, kKey, src), 0);
  char back[sizeof(src)] = {};
  ASSERT_EQ(fi_read(client_ep(), back, sizeof(back), nullptr, 0, 8, kKey, back), 0);
  fi_cq_tagged_entry e{};
  ASSERT_EQ(wait_cq(client_cq(), &e), 1);
  EXPECT_EQ(e.flags, FI_RMA | FI_WRITE);
  ASSERT_EQ(wait_cq(client_cq(), &e), 1);
  EXPECT_EQ(e.flags, FI_RMA | FI_READ);
  EXPECT_STREQ(region_ + 8, "msg-rma");
  EXPECT_STREQ(back, "msg-rma");
}

TEST_F(MsgRma, ABadKeyFailsTheWriteAndPutsTheTargetInItsAccessErrorState) {
  fi_fabq_async_ops* ops = nullptr;
  ASSERT_EQ(
      fi_open_ops(&domain()->fid, FI_FABQ_ASYNC_OPS, 0, reinterpret_cast<void**>(&ops), nullptr),
      0);
  char rx[8];
  ASSERT_EQ(fi_recv(server_ep(), rx, sizeof(rx), nullptr, 0, rx), 0);
  char src[] = "forged";
  ASSERT_EQ(fi_write(client_ep(), src, sizeof(src), nullptr, 0, 0, kKey + 1, src), 0);
  fi_cq_tagged_entry e{};
  fi_cq_err_entry err{};
  ASSERT_EQ(wait_cq(client_cq(), &e, &err), -FI_EAVAIL);
  EXPECT_EQ(err.err, FI_EKEYREJECTED);
  EXPECT_EQ(err.prov_errno, FI_FABQ_RMA_BAD_KEY);
  EXPECT_EQ(region_[0], 0) << "nothing written";
  // The target: its EQ's error entry, the event in the channel, its receive failed.
  fi_eq_err_entry eq_err{};
  uint32_t event = 0;
  fi_eq_cm_entry entry{};
  ASSERT_EQ(fi_eq_sread(server_eq(), &event, &entry, sizeof(entry), kTimeoutMs, 0), -FI_EAVAIL);
  ASSERT_EQ(fi_eq_readerr(server_eq(), &eq_err, 0), static_cast<ssize_t>(sizeof(eq_err)));
  EXPECT_EQ(eq_err.fid, &server_ep()->fid);
  EXPECT_EQ(eq_err.err, FI_EACCES);
  EXPECT_EQ(eq_err.prov_errno, FI_FABQ_EVENT_EP_ACCESS_ERR);
  fi_fabq_async_event ev{};
  ASSERT_EQ(ops->get_event(domain(), &ev, 0), 0);
  EXPECT_EQ(ev.type, static_cast<uint32_t>(FI_FABQ_EVENT_EP_ACCESS_ERR));
  EXPECT_EQ(ev.fid, &server_ep()->fid);
  EXPECT_EQ(ops->ack_event(domain(), &ev), 0);
  ASSERT_EQ(wait_cq(server_cq(), &e, &err), -FI_EAVAIL);
  EXPECT_EQ(err.op_context, rx);
  EXPECT_EQ(err.err, FI_EIO);
  EXPECT_EQ(fi_recv(server_ep(), rx, sizeof(rx), nullptr, 0, rx), -FI_EOPBADSTATE);
}

}  // namespace
}  // namespace fabq::testing
