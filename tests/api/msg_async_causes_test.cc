// fi_fabq(7) ASYNCHRONOUS EVENTS, real causes on connections: "COMM_EST: the first message
// arrives on a connection", "SQ_DRAINED: fi_shutdown has sent every queued message", and
// fi_fabq(7) CONNECTIONS: "fi_shutdown ... both sides get FI_SHUTDOWN".
#include <rdma/fi_eq.h>

#include <vector>

#include "fabq/fi_fabq.h"
#include "support/pair.h"

namespace fabq::testing {
namespace {

class MsgAsyncCauses : public PairTest {
 protected:
  void SetUp() override {
    PairTest::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_EQ(
        fi_open_ops(&domain()->fid, FI_FABQ_ASYNC_OPS, 0, reinterpret_cast<void**>(&ops_), nullptr),
        0);
  }
  void TearDown() override {
    fi_fabq_async_event ev;
    while (ops_ != nullptr && ops_->get_event(domain(), &ev, 0) == 0) {
      ops_->ack_event(domain(), &ev);
    }
    PairTest::TearDown();
  }
  // Every event now in the channel, acknowledged.
  std::vector<fi_fabq_async_event> drain() {
    std::vector<fi_fabq_async_event> out;
    fi_fabq_async_event ev{};
    while (ops_->get_event(domain(), &ev, 0) == 0) {
      out.push_back(ev);
      EXPECT_EQ(ops_->ack_event(domain(), &ev), 0);
    }
    return out;
  }
  static int count(const std::vector<fi_fabq_async_event>& evs, uint32_t type, fid_t fid) {
    int n = 0;
    for (const auto& e : evs) n += e.type == type && e.fid == fid;
    return n;
  }
  fi_fabq_async_ops* ops_ = nullptr;
};

TEST_F(MsgAsyncCauses, TheFirstMessageOnAConnectionRaisesCommEstOnceOnTheReceivingEndpoint) {
  ASSERT_TRUE(pair_.connect());
  EXPECT_EQ(count(drain(), FI_FABQ_EVENT_COMM_EST, &server_ep()->fid), 0) << "nothing arrived yet";
  char buf[8] = "a", rx[8];
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(fi_recv(server_ep(), rx, sizeof(rx), nullptr, 0, nullptr), 0);
    ASSERT_EQ(fi_send(client_ep(), buf, sizeof(buf), nullptr, 0, nullptr), 0);
    fi_cq_tagged_entry entry{};
    ASSERT_EQ(wait_cq(client_cq(), &entry), 1);
    ASSERT_EQ(wait_cq(server_cq(), &entry), 1);
  }
  const auto evs = drain();
  EXPECT_EQ(count(evs, FI_FABQ_EVENT_COMM_EST, &server_ep()->fid), 1);
  EXPECT_EQ(count(evs, FI_FABQ_EVENT_COMM_EST, &client_ep()->fid), 0)
      << "the client received nothing";
}

TEST_F(MsgAsyncCauses, ShutdownDrainsTheSendQueueRaisesSqDrainedAndBothSidesGetFiShutdown) {
  ASSERT_TRUE(pair_.connect());
  char buf[8] = "x";
  ASSERT_EQ(fi_send(client_ep(), buf, sizeof(buf), nullptr, 0, buf), 0);
  ASSERT_EQ(fi_shutdown(client_ep(), 0), 0);
  fi_eq_cm_entry entry{};
  ASSERT_EQ(read_cm(pair_.client, &entry), FI_SHUTDOWN);
  EXPECT_EQ(entry.fid, &client_ep()->fid);
  ASSERT_EQ(read_cm(pair_.server, &entry), FI_SHUTDOWN);
  EXPECT_EQ(entry.fid, &server_ep()->fid);
  const auto evs = drain();
  EXPECT_EQ(count(evs, FI_FABQ_EVENT_SQ_DRAINED, &client_ep()->fid), 1);
  EXPECT_EQ(count(evs, FI_FABQ_EVENT_SQ_DRAINED, &server_ep()->fid), 0);
  // The message queued before the shutdown went out first.
  fi_cq_tagged_entry c{};
  ASSERT_EQ(wait_cq(client_cq(), &c), 1);
  EXPECT_EQ(c.op_context, buf);
  // Shut down: sends are refused, a second fi_shutdown is harmless.
  EXPECT_EQ(fi_send(client_ep(), buf, sizeof(buf), nullptr, 0, buf), -FI_ENOTCONN);
  EXPECT_EQ(fi_shutdown(client_ep(), 0), 0);
}

}  // namespace
}  // namespace fabq::testing
