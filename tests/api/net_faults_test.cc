// Fault injection on connections (fi_fabq.h, FAULT INJECTION: net=): CM rejects and timeouts,
// a lost message and a damaged one, each scoped to one endpoint and deterministic.
#include <rdma/fi_eq.h>

#include "fabq/fi_fabq.h"
#include "support/pair.h"

namespace fabq::testing {
namespace {

// The provider reads its parameters when libfabric loads it, before any test runs: a short
// connect timeout for this binary keeps the timeout test short.
const bool kShortConnectTimeout = setenv("FI_FABQ_CONNECT_TIMEOUT_MS", "300", 1) == 0;

class NetFaults : public PairTest {
 protected:
  void inject(const char* spec) {
    fi_fabq_async_ops* ops = nullptr;
    ASSERT_EQ(
        fi_open_ops(&domain()->fid, FI_FABQ_ASYNC_OPS, 0, reinterpret_cast<void**>(&ops), nullptr),
        0);
    ASSERT_EQ(ops->inject(domain(), spec), 0) << spec;
  }
};

TEST_F(NetFaults, NetRejectMakesTheNextConnectRefusedWithFiEconnrefused) {
  ASSERT_TRUE(pair_.open_client());
  inject("net=reject,on=ep:0");
  ASSERT_EQ(fi_connect(client_ep(), &address(), nullptr, 0), 0);
  fi_eq_cm_entry entry{};
  uint32_t event = 0;
  ASSERT_EQ(fi_eq_sread(client_eq(), &event, &entry, sizeof(entry), kTimeoutMs, 0), -FI_EAVAIL);
  fi_eq_err_entry err{};
  ASSERT_EQ(fi_eq_readerr(client_eq(), &err, 0), static_cast<ssize_t>(sizeof(err)));
  EXPECT_EQ(err.err, FI_ECONNREFUSED);
  EXPECT_EQ(err.fid, &client_ep()->fid);
}

TEST_F(NetFaults, NetTimeoutMakesTheNextConnectTimeOutWithFiEtimedout) {
  ASSERT_TRUE(kShortConnectTimeout);
  ASSERT_TRUE(pair_.open_client());
  inject("net=timeout,on=ep:0");
  ASSERT_EQ(fi_connect(client_ep(), &address(), nullptr, 0), 0);
  fi_eq_cm_entry entry{};
  uint32_t event = 0;
  ASSERT_EQ(fi_eq_sread(client_eq(), &event, &entry, sizeof(entry), kTimeoutMs, 0), -FI_EAVAIL);
  fi_eq_err_entry err{};
  ASSERT_EQ(fi_eq_readerr(client_eq(), &err, 0), static_cast<ssize_t>(sizeof(err)));
  EXPECT_EQ(err.err, FI_ETIMEDOUT);
}

TEST_F(NetFaults, NetDropLosesTheNextMessageOnlyAndATransmitCompleteSendFailsWithEtimedout) {
  ASSERT_TRUE(pair_.connect());
  char a[8] = "first", b[8] = "second", rx[8] = {};
  int rx_ctx = 0;
  inject("net=drop,on=ep:0");  // the client is endpoint 0
  fi_msg_tagged msg{};
  iovec iov{a, sizeof(a)};
  msg.msg_iov = &iov;
  msg.iov_count = 1;
  msg.context = a;
  ASSERT_EQ(fi_tsendmsg(client_ep(), &msg, FI_TRANSMIT_COMPLETE | FI_COMPLETION), 0);
  fi_cq_tagged_entry entry{};
  fi_cq_err_entry err{};
  ASSERT_EQ(wait_cq(client_cq(), &entry, &err), -FI_EAVAIL);
  EXPECT_EQ(err.op_context, a);
  EXPECT_EQ(err.err, FI_ETIMEDOUT);
  // The next message goes through: only one was lost.
  ASSERT_EQ(fi_trecv(server_ep(), rx, sizeof(rx), nullptr, 0, 0, 0, &rx_ctx), 0);
  ASSERT_EQ(fi_tsend(client_ep(), b, sizeof(b), nullptr, 0, 0, b), 0);
  ASSERT_EQ(wait_cq(client_cq(), &entry), 1);
  ASSERT_EQ(wait_cq(server_cq(), &entry), 1);
  EXPECT_EQ(entry.op_context, &rx_ctx);
  EXPECT_STREQ(rx, "second");
}

TEST_F(NetFaults, NetCorruptMakesThePeerFailTheConnectionWithEpReqErr) {
  ASSERT_TRUE(pair_.connect());
  fi_fabq_async_ops* ops = nullptr;
  ASSERT_EQ(
      fi_open_ops(&domain()->fid, FI_FABQ_ASYNC_OPS, 0, reinterpret_cast<void**>(&ops), nullptr),
      0);
  char a[8] = "bad", rx[8] = {};
  int rx_ctx = 0;
  ASSERT_EQ(fi_recv(server_ep(), rx, sizeof(rx), nullptr, 0, &rx_ctx), 0);
  ASSERT_EQ(ops->inject(domain(), "net=corrupt,on=ep:0"), 0);
  ASSERT_EQ(fi_send(client_ep(), a, sizeof(a), nullptr, 0, a), 0);
  // The server's endpoint fails: its EQ gets the REQ_ERR entry, its receive fails.
  fi_eq_cm_entry entry{};
  uint32_t event = 0;
  ASSERT_EQ(fi_eq_sread(server_eq(), &event, &entry, sizeof(entry), kTimeoutMs, 0), -FI_EAVAIL);
  fi_eq_err_entry err{};
  ASSERT_EQ(fi_eq_readerr(server_eq(), &err, 0), static_cast<ssize_t>(sizeof(err)));
  EXPECT_EQ(err.fid, &server_ep()->fid);
  EXPECT_EQ(err.err, FI_EREMOTEIO);
  EXPECT_EQ(err.prov_errno, FI_FABQ_EVENT_EP_REQ_ERR);
  fi_cq_tagged_entry c{};
  fi_cq_err_entry cerr{};
  ASSERT_EQ(wait_cq(server_cq(), &c, &cerr), -FI_EAVAIL);
  EXPECT_EQ(cerr.op_context, &rx_ctx);
  EXPECT_EQ(cerr.prov_errno, FI_FABQ_EVENT_EP_REQ_ERR);
  // The first frame was the bad one: the channel has REQ_ERR about the server's endpoint.
  fi_fabq_async_event ev{};
  bool req_err = false;
  while (ops->get_event(domain(), &ev, 0) == 0) {
    if (ev.type == FI_FABQ_EVENT_EP_REQ_ERR && ev.fid == &server_ep()->fid) req_err = true;
    EXPECT_EQ(ops->ack_event(domain(), &ev), 0);
  }
  EXPECT_TRUE(req_err);
  // The client sees the connection end.
  ASSERT_EQ(fi_eq_sread(client_eq(), &event, &entry, sizeof(entry), kTimeoutMs, 0),
            static_cast<ssize_t>(sizeof(entry)));
  EXPECT_EQ(event, static_cast<uint32_t>(FI_SHUTDOWN));
  EXPECT_EQ(entry.fid, &client_ep()->fid);
}

}  // namespace
}  // namespace fabq::testing
