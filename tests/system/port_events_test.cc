// fi_fabq(7) ASYNCHRONOUS EVENTS, real causes: "the port follows the link state of the
// interface the domain is opened on". Each test runs in a network namespace of its own with a
// veth pair it makes itself (root needed; without it the test says so and skips), and watches
// the events through the libfabric API.
#include <gtest/gtest.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <sched.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "fabq/fi_fabq.h"

namespace {

int sh(const std::string& cmd) {
  return std::system((cmd + " >/dev/null 2>&1").c_str());
}

class PortEvents : public ::testing::Test {
 protected:
  void SetUp() override {
    if (unshare(CLONE_NEWNET) != 0) {
      GTEST_SKIP() << "cannot make a network namespace (unshare: " << std::strerror(errno)
                   << "); run as root to test link events";
    }
    if (sh("ip link add fq0 type veth peer name fq1") != 0) {
      GTEST_SKIP() << "cannot make a veth pair in the namespace (no veth support?)";
    }
    ASSERT_EQ(sh("ip addr add 10.99.0.1/24 dev fq0"), 0);
    ASSERT_EQ(sh("ip link set dev fq1 up"), 0);
    ASSERT_EQ(sh("ip link set dev fq0 up"), 0);
    // veth reports carrier shortly after both ends are up.
    for (int i = 0; i < 200 && sh("ip link show dev fq0 | grep -q LOWER_UP") != 0; ++i) {
      usleep(10000);
    }
    fi_info* hints = fi_allocinfo();
    hints->fabric_attr->prov_name = strdup("fabq");
    hints->domain_attr->name = strdup("fq0");
    const int rc = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info_);
    fi_freeinfo(hints);
    ASSERT_EQ(rc, 0) << fi_strerror(-rc);
    ASSERT_EQ(fi_fabric(info_->fabric_attr, &fabric_, nullptr), 0);
    ASSERT_EQ(fi_domain(fabric_, info_, &domain_, nullptr), 0);
    fi_eq_attr attr{.size = 16, .wait_obj = FI_WAIT_NONE};
    ASSERT_EQ(fi_eq_open(fabric_, &attr, &eq_, nullptr), 0);
    ASSERT_EQ(fi_domain_bind(domain_, &eq_->fid, 0), 0);
    ASSERT_EQ(
        fi_open_ops(&domain_->fid, FI_FABQ_ASYNC_OPS, 0, reinterpret_cast<void**>(&ops_), nullptr),
        0);
  }

  void TearDown() override {
    fi_fabq_async_event ev;
    while (ops_ != nullptr && ops_->get_event(domain_, &ev, 0) == 0) ops_->ack_event(domain_, &ev);
    if (domain_ != nullptr) {
      EXPECT_EQ(fi_close(&domain_->fid), 0);
    }
    if (eq_ != nullptr) {
      EXPECT_EQ(fi_close(&eq_->fid), 0);
    }
    if (fabric_ != nullptr) {
      EXPECT_EQ(fi_close(&fabric_->fid), 0);
    }
    fi_freeinfo(info_);
  }

  // The next event, or type 0 when none came within the timeout.
  uint32_t next(int timeout_ms = 5000) {
    fi_fabq_async_event ev{};
    if (ops_->get_event(domain_, &ev, timeout_ms) != 0) return 0;
    EXPECT_EQ(ops_->ack_event(domain_, &ev), 0);
    return ev.type;
  }
  // Skips events of other kinds (an address change may come with a link change).
  uint32_t next_of(uint32_t want, int timeout_ms = 5000) {
    for (uint32_t t; (t = next(timeout_ms)) != 0;) {
      if (t == want) return t;
    }
    return 0;
  }

  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_eq* eq_ = nullptr;
  fi_fabq_async_ops* ops_ = nullptr;
};

TEST_F(PortEvents, LinkDownGivesPortErrAndLinkUpGivesPortActive) {
  EXPECT_EQ(ops_->port_state(domain_), FI_FABQ_PORT_ACTIVE);
  ASSERT_EQ(sh("ip link set dev fq0 down"), 0);
  EXPECT_EQ(next_of(FI_FABQ_EVENT_PORT_ERR), static_cast<uint32_t>(FI_FABQ_EVENT_PORT_ERR));
  EXPECT_EQ(ops_->port_state(domain_), FI_FABQ_PORT_DOWN);
  // PORT_ERR is an error kind: the domain's EQ has it too.
  uint32_t event;
  fi_eq_entry entry;
  EXPECT_EQ(fi_eq_read(eq_, &event, &entry, sizeof(entry), 0), -FI_EAVAIL);
  fi_eq_err_entry err{};
  EXPECT_GT(fi_eq_readerr(eq_, &err, 0), 0);
  EXPECT_EQ(err.err, FI_ENETDOWN);
  EXPECT_EQ(err.prov_errno, static_cast<int>(FI_FABQ_EVENT_PORT_ERR));
  EXPECT_EQ(err.fid, &domain_->fid);

  ASSERT_EQ(sh("ip link set dev fq0 up"), 0);
  EXPECT_EQ(next_of(FI_FABQ_EVENT_PORT_ACTIVE), static_cast<uint32_t>(FI_FABQ_EVENT_PORT_ACTIVE));
  EXPECT_EQ(ops_->port_state(domain_), FI_FABQ_PORT_ACTIVE);
}

TEST_F(PortEvents, ThePeerGoingDownTakesTheCarrierAndThePort) {
  ASSERT_EQ(sh("ip link set dev fq1 down"), 0);
  EXPECT_EQ(next_of(FI_FABQ_EVENT_PORT_ERR), static_cast<uint32_t>(FI_FABQ_EVENT_PORT_ERR));
  ASSERT_EQ(sh("ip link set dev fq1 up"), 0);
  EXPECT_EQ(next_of(FI_FABQ_EVENT_PORT_ACTIVE), static_cast<uint32_t>(FI_FABQ_EVENT_PORT_ACTIVE));
}

TEST_F(PortEvents, AddressChangesAreReported) {
  ASSERT_EQ(sh("ip link set dev fq0 address 02:00:00:00:00:42"), 0);
  EXPECT_EQ(next_of(FI_FABQ_EVENT_ADDR_CHANGE), static_cast<uint32_t>(FI_FABQ_EVENT_ADDR_CHANGE));
  ASSERT_EQ(sh("ip addr add 10.99.1.1/24 dev fq0"), 0);
  EXPECT_EQ(next_of(FI_FABQ_EVENT_GID_CHANGE), static_cast<uint32_t>(FI_FABQ_EVENT_GID_CHANGE));
}

TEST_F(PortEvents, DeletingTheInterfaceIsADeviceFatalError) {
  ASSERT_EQ(sh("ip link del fq0"), 0);
  EXPECT_EQ(next_of(FI_FABQ_EVENT_DEVICE_FATAL), static_cast<uint32_t>(FI_FABQ_EVENT_DEVICE_FATAL));
  fid_cq* cq = nullptr;
  fi_cq_attr attr{.size = 8};
  EXPECT_EQ(fi_cq_open(domain_, &attr, &cq, nullptr), -FI_EOPBADSTATE);
}

}  // namespace
