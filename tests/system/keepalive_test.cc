// fi_fabq(7) ASYNCHRONOUS EVENTS, real causes: "EP_FATAL: the peer stops answering keep-alive
// probes (FI_FABQ_KEEPALIVE_MS)". The test runs in a network namespace of its own (root
// needed; without it the test says so and skips), connects two fabq endpoints over its
// loopback, then takes the loopback down: neither side can answer the other's probes, so both
// connections fail with EP_FATAL, on the EQ and on the asynchronous channel.
#include <gtest/gtest.h>
#include <sched.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "fabq/fi_fabq.h"
#include "support/pair.h"

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
  fabq::testing::Pair pair({.provider = "fabq"});
  ASSERT_TRUE(pair.listen());
  fid_domain* domain = pair.server.domain();
  fi_fabq_async_ops* ops = nullptr;
  ASSERT_EQ(
      fi_open_ops(&domain->fid, FI_FABQ_ASYNC_OPS, 0, reinterpret_cast<void**>(&ops), nullptr), 0);
  ASSERT_TRUE(pair.connect());
  fid_ep* client = pair.client.ep();

  // The peer vanishes: no packet goes anywhere any more. No FIN, no RST: only keep-alive can
  // tell.
  ASSERT_EQ(sh("ip link set dev lo down"), 0);
  uint32_t event = 0;
  fi_eq_cm_entry entry{};
  fi_eq_err_entry err{};
  ASSERT_EQ(fi_eq_sread(pair.client.eq(), &event, &entry, sizeof(entry), 15000, 0), -FI_EAVAIL)
      << "no error entry within 15 s of the peer vanishing";
  ASSERT_EQ(fi_eq_readerr(pair.client.eq(), &err, 0), static_cast<ssize_t>(sizeof(err)));
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

  // The endpoints go first; then no event about them is left to keep the domain open.
  EXPECT_EQ(pair.client.close_ep(), 0);
  EXPECT_EQ(pair.server.close_ep(), 0);
  while (ops->get_event(domain, &ev, 0) == 0) ops->ack_event(domain, &ev);
  pair.close();
}

}  // namespace
