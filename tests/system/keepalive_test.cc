// fi_fabq(7) ASYNCHRONOUS EVENTS, real causes: "EP_FATAL: the peer stops answering keep-alive
// probes (FI_FABQ_KEEPALIVE_MS)". The test runs in a network namespace of its own (root
// needed; without it the test says so and skips), connects two fabq endpoints over its
// loopback, then takes the loopback down: neither side can answer the other's probes, so both
// connections fail with EP_FATAL, on the EQ and on the asynchronous channel.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <sched.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "fabq/fi_fabq.h"

namespace {

// Read by the provider when libfabric loads it, before any test runs.
const bool kShortKeepalive = setenv("FI_FABQ_KEEPALIVE_MS", "1500", 1) == 0;

int sh(const std::string& cmd) {
  return std::system((cmd + " >/dev/null 2>&1").c_str());
}

TEST(Keepalive, APeerThatStopsAnsweringFailsTheEndpointWithEpFatal) {
  ASSERT_TRUE(kShortKeepalive);
  if (unshare(CLONE_NEWNET) != 0) {
    GTEST_SKIP() << "cannot make a network namespace (unshare: " << std::strerror(errno)
                 << "); run as root to test keep-alive";
  }
  ASSERT_EQ(sh("ip link set dev lo up"), 0);
  fi_info* hints = fi_allocinfo();
  hints->fabric_attr->prov_name = strdup("fabq");
  hints->domain_attr->name = strdup("lo");
  fi_info* info = nullptr;
  ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", "0", FI_SOURCE, hints, &info), 0);
  fi_freeinfo(hints);
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  ASSERT_EQ(fi_fabric(info->fabric_attr, &fabric, nullptr), 0);
  ASSERT_EQ(fi_domain(fabric, info, &domain, nullptr), 0);
  fi_fabq_async_ops* ops = nullptr;
  ASSERT_EQ(
      fi_open_ops(&domain->fid, FI_FABQ_ASYNC_OPS, 0, reinterpret_cast<void**>(&ops), nullptr), 0);
  fi_eq_attr eq_attr{};
  eq_attr.wait_obj = FI_WAIT_UNSPEC;
  fid_eq *seq = nullptr, *ceq = nullptr;
  ASSERT_EQ(fi_eq_open(fabric, &eq_attr, &seq, nullptr), 0);
  ASSERT_EQ(fi_eq_open(fabric, &eq_attr, &ceq, nullptr), 0);
  fi_cq_attr cq_attr{};
  cq_attr.wait_obj = FI_WAIT_UNSPEC;
  fid_cq* cq = nullptr;
  ASSERT_EQ(fi_cq_open(domain, &cq_attr, &cq, nullptr), 0);
  fid_pep* pep = nullptr;
  ASSERT_EQ(fi_passive_ep(fabric, info, &pep, nullptr), 0);
  ASSERT_EQ(fi_pep_bind(pep, &seq->fid, 0), 0);
  ASSERT_EQ(fi_listen(pep), 0);
  sockaddr_in addr{};
  size_t len = sizeof(addr);
  ASSERT_EQ(fi_getname(&pep->fid, &addr, &len), 0);

  auto open = [&](fi_info* i, fid_eq* eq) {
    fid_ep* ep = nullptr;
    EXPECT_EQ(fi_endpoint(domain, i, &ep, nullptr), 0);
    EXPECT_EQ(fi_ep_bind(ep, &eq->fid, 0), 0);
    EXPECT_EQ(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
    EXPECT_EQ(fi_enable(ep), 0);
    return ep;
  };
  fid_ep* client = open(info, ceq);
  ASSERT_EQ(fi_connect(client, &addr, nullptr, 0), 0);
  uint32_t event = 0;
  fi_eq_cm_entry entry{};
  ASSERT_EQ(fi_eq_sread(seq, &event, &entry, sizeof(entry), 5000, 0),
            static_cast<ssize_t>(sizeof(entry)));
  ASSERT_EQ(event, static_cast<uint32_t>(FI_CONNREQ));
  fid_ep* server = open(entry.info, seq);
  fi_freeinfo(entry.info);
  ASSERT_EQ(fi_accept(server, nullptr, 0), 0);
  ASSERT_EQ(fi_eq_sread(ceq, &event, &entry, sizeof(entry), 5000, 0),
            static_cast<ssize_t>(sizeof(entry)));
  ASSERT_EQ(event, static_cast<uint32_t>(FI_CONNECTED));
  ASSERT_EQ(fi_eq_sread(seq, &event, &entry, sizeof(entry), 5000, 0),
            static_cast<ssize_t>(sizeof(entry)));
  ASSERT_EQ(event, static_cast<uint32_t>(FI_CONNECTED));

  // The peer vanishes: no packet goes anywhere any more. No FIN, no RST: only keep-alive can
  // tell.
  ASSERT_EQ(sh("ip link set dev lo down"), 0);
  fi_eq_err_entry err{};
  ASSERT_EQ(fi_eq_sread(ceq, &event, &entry, sizeof(entry), 15000, 0), -FI_EAVAIL)
      << "no error entry within 15 s of the peer vanishing";
  ASSERT_EQ(fi_eq_readerr(ceq, &err, 0), static_cast<ssize_t>(sizeof(err)));
  EXPECT_EQ(err.fid, &client->fid);
  EXPECT_EQ(err.prov_errno, static_cast<int>(FI_FABQ_EVENT_EP_FATAL));
  bool fatal = false;
  fi_fabq_async_event ev{};
  // The EQ entry is written before the channel event (fi_fabq.h): wait for the latter.
  while (!fatal && ops->get_event(domain, &ev, 5000) == 0) {
    if (ev.type == FI_FABQ_EVENT_EP_FATAL && ev.fid == &client->fid) fatal = true;
    EXPECT_EQ(ops->ack_event(domain, &ev), 0);
  }
  EXPECT_TRUE(fatal) << "EP_FATAL on the client's endpoint in the channel";

  for (fid* f : {&client->fid, &server->fid, &pep->fid, &cq->fid, &ceq->fid, &seq->fid}) {
    EXPECT_EQ(fi_close(f), 0);
  }
  while (ops->get_event(domain, &ev, 0) == 0) ops->ack_event(domain, &ev);
  EXPECT_EQ(fi_close(&domain->fid), 0);
  EXPECT_EQ(fi_close(&fabric->fid), 0);
  fi_freeinfo(info);
}

}  // namespace
