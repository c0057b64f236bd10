// Connection requests (fi_cm(3), fi_endpoint(3)): an FI_CONNREQ's info belongs to the
// application, and its handle names the request until the application uses it (fi_endpoint,
// fi_reject); after that, after its passive endpoint closed, or for the second time, the call
// fails cleanly (-FI_EINVAL, -FI_ECONNABORTED) and never reads memory fabq gave back. A closed
// passive endpoint's unread requests leave the EQ with their info (LeakSanitizer checks that in
// the sanitizer build) and their peers are refused. Two endpoints of one process over 127.0.0.1.
#include "support/pair.h"

namespace fabq::testing {
namespace {

class ConnReq : public PairTest {
 protected:
  // The client connects; the server reads the FI_CONNREQ and returns its info (the test's).
  fi_info* request() {
    if (client_ep() == nullptr && !pair_.open_client()) return nullptr;
    EXPECT_EQ(fi_connect(client_ep(), &address(), nullptr, 0), 0);
    fi_eq_cm_entry entry{};
    if (read_cm(pair_.server, &entry) != FI_CONNREQ) return nullptr;
    EXPECT_NE(entry.info, nullptr);
    EXPECT_NE(entry.info->handle, nullptr);
    return entry.info;
  }
  // The client's next EQ entry is an error with `err` (a refused or aborted connection).
  void client_is_refused(int err) {
    uint32_t event = 0;
    fi_eq_cm_entry entry{};
    ASSERT_EQ(fi_eq_sread(client_eq(), &event, &entry, sizeof(entry), kTimeoutMs, 0), -FI_EAVAIL);
    fi_eq_err_entry e{};
    ASSERT_EQ(fi_eq_readerr(client_eq(), &e, 0), static_cast<ssize_t>(sizeof(e)));
    EXPECT_EQ(e.fid, &client_ep()->fid);
    EXPECT_EQ(e.err, err) << fi_strerror(e.err);
  }
  void close_pep() { ASSERT_EQ(pair_.server.close_pep(), 0); }
};

TEST_F(ConnReq, FiEndpointWithARequestWhosePassiveEndpointClosedIsConnAborted) {
  fi_info* info = request();
  ASSERT_NE(info, nullptr);
  close_pep();
  fid_ep* ep = nullptr;
  EXPECT_EQ(fi_endpoint(domain(), info, &ep, nullptr), -FI_ECONNABORTED);
  EXPECT_EQ(ep, nullptr);
  fi_freeinfo(info);
  // The passive endpoint's close refused the request it had reported.
  client_is_refused(FI_ECONNREFUSED);
}

TEST_F(ConnReq, FiEndpointTwiceWithOneRequestFailsTheSecondTime) {
  fi_info* info = request();
  ASSERT_NE(info, nullptr);
  ASSERT_TRUE(pair_.server.open_endpoint(info, /*free_info=*/false));
  fid_ep* again = nullptr;
  EXPECT_EQ(fi_endpoint(domain(), info, &again, nullptr), -FI_EINVAL);
  EXPECT_EQ(again, nullptr);
  // The first one still owns the connection.
  ASSERT_EQ(fi_accept(server_ep(), nullptr, 0), 0);
  fi_eq_cm_entry entry{};
  EXPECT_EQ(read_cm(pair_.client, &entry), FI_CONNECTED);
  EXPECT_EQ(read_cm(pair_.server, &entry), FI_CONNECTED);
  // And once the endpoint that took it is gone too, the request still names nothing.
  ASSERT_EQ(pair_.server.close_ep(), 0);
  EXPECT_EQ(fi_endpoint(domain(), info, &again, nullptr), -FI_EINVAL);
  fi_freeinfo(info);
}

TEST_F(ConnReq, RejectAfterFiEndpointTookTheRequestIsEinval) {
  fi_info* info = request();
  ASSERT_NE(info, nullptr);
  ASSERT_TRUE(pair_.server.open_endpoint(info, /*free_info=*/false));
  EXPECT_EQ(fi_reject(pep(), info->handle, nullptr, 0), -FI_EINVAL);
  fid_ep* ep = nullptr;
  fi_info* again = fi_dupinfo(info);
  fi_freeinfo(info);
  // A rejected request names nothing either.
  EXPECT_EQ(fi_endpoint(domain(), again, &ep, nullptr), -FI_EINVAL);
  fi_freeinfo(again);
}

TEST_F(ConnReq, FiEndpointAfterFiRejectIsEinvalAndThePeerIsRefused) {
  fi_info* info = request();
  ASSERT_NE(info, nullptr);
  ASSERT_EQ(fi_reject(pep(), info->handle, "no", 2), 0);
  EXPECT_EQ(fi_reject(pep(), info->handle, nullptr, 0), -FI_EINVAL) << "rejected twice";
  fid_ep* ep = nullptr;
  EXPECT_EQ(fi_endpoint(domain(), info, &ep, nullptr), -FI_EINVAL);
  fi_freeinfo(info);
  client_is_refused(FI_ECONNREFUSED);
}

TEST_F(ConnReq, ClosingThePassiveEndpointWithAnUnreadRequestPurgesItAndRefusesThePeer) {
  ASSERT_TRUE(pair_.open_client());
  ASSERT_EQ(fi_connect(client_ep(), &address(), "data", 4), 0);
  // The request arrives (the server's EQ is only peeked at, so it stays unread).
  uint32_t event = 0;
  unsigned char buf[sizeof(fi_eq_cm_entry) + 64];
  const auto t0 = std::chrono::steady_clock::now();
  ssize_t n = -FI_EAGAIN;
  while (n == -FI_EAGAIN && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5)) {
    n = fi_eq_read(server_eq(), &event, buf, sizeof(buf), FI_PEEK);
    (void)fi_eq_read(client_eq(), &event, buf, sizeof(buf), FI_PEEK);  // the client's progress
  }
  ASSERT_GT(n, 0);
  ASSERT_EQ(event, static_cast<uint32_t>(FI_CONNREQ));
  close_pep();
  // Purged, info and all: nothing about the closed passive endpoint is left to read.
  EXPECT_EQ(fi_eq_read(server_eq(), &event, buf, sizeof(buf), 0), -FI_EAGAIN);
  client_is_refused(FI_ECONNREFUSED);
}

// fi_endpoint(3) lets an active endpoint take over a passive endpoint's address through
// info->handle; once that passive endpoint is closed, the handle names nothing, and fabq looks
// it up instead of reading it.
TEST_F(ConnReq, AClosedPassiveEndpointAsTheHandleIsEinval) {
  fi_info* info = fi_dupinfo(pair_.server.info());
  ASSERT_NE(info, nullptr);
  info->handle = &pep()->fid;
  fid_ep* ep = nullptr;
  ASSERT_EQ(fi_endpoint(domain(), info, &ep, nullptr), 0) << "an open one is taken over";
  ASSERT_EQ(fi_close(&ep->fid), 0);
  close_pep();
  EXPECT_EQ(fi_endpoint(domain(), info, &ep, nullptr), -FI_EINVAL);
  info->handle = nullptr;
  fi_freeinfo(info);
}

TEST_F(ConnReq, AHandleThatIsNotARequestIsEinval) {
  fi_info* info = fi_dupinfo(pair_.server.info());
  ASSERT_NE(info, nullptr);
  fid bogus{.fclass = FI_CLASS_CONNREQ, .context = nullptr, .ops = nullptr};
  info->handle = &bogus;
  fid_ep* ep = nullptr;
  EXPECT_EQ(fi_endpoint(domain(), info, &ep, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_reject(pep(), &bogus, nullptr, 0), -FI_EINVAL);
  info->handle = nullptr;
  fi_freeinfo(info);
}

}  // namespace
}  // namespace fabq::testing
