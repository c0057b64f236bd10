// The link monitor (src/prov/link_monitor.h) against real interfaces: each test moves its process
// into a network namespace of its own (root needed; without it the test says so and skips),
// makes a veth pair fq0/fq1 there and changes it with ip(8), and checks what the monitor reports:
// each real change once, nothing else. flush() makes "nothing else" exact.
#include "prov/link_monitor.h"

#include <gtest/gtest.h>
#include <net/if.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace fabq::prov {

std::ostream& operator<<(std::ostream& os, LinkChange c) {
  switch (c) {
    case LinkChange::kPortActive:
      return os << "kPortActive";
    case LinkChange::kPortErr:
      return os << "kPortErr";
    case LinkChange::kAddrChange:
      return os << "kAddrChange";
    case LinkChange::kGidChange:
      return os << "kGidChange";
    case LinkChange::kDeviceGone:
      return os << "kDeviceGone";
  }
  return os << "LinkChange(" << static_cast<int>(c) << ")";
}

namespace {

using namespace std::chrono_literals;

// Runs a shell command (ip(8) among others); 0 when it succeeded.
int sh(const std::string& cmd) {
  return std::system((cmd + " >/dev/null 2>&1").c_str());
}

// A sysctl of the test's namespace (/proc/sys/net follows the caller's namespace). Without IPv6
// in the kernel the file does not exist: fine.
void set_sysctl(const std::string& path, const std::string& value) {
  std::ofstream(path) << value;
}

bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds timeout = 5s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

struct Event {
  std::string ifname;
  LinkChange change;
};

std::string describe(const std::vector<Event>& events, size_t from) {
  std::ostringstream os;
  for (size_t i = from; i < events.size(); ++i) {
    os << " " << events[i].ifname << ":" << events[i].change;
  }
  return os.str();
}

class LinkMonitorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (unshare(CLONE_NEWNET) != 0) {
      GTEST_SKIP() << "cannot make a network namespace (unshare: " << std::strerror(errno)
                   << "); run as root to test the link monitor";
    }
    // IPv6 link-local addresses come and go with every up and down (kGidChange each time):
    // off in this namespace, so each test sees only the changes it makes.
    set_sysctl("/proc/sys/net/ipv6/conf/all/disable_ipv6", "1");
    set_sysctl("/proc/sys/net/ipv6/conf/default/disable_ipv6", "1");
    if (sh("ip link add fq0 type veth peer name fq1") != 0) {
      GTEST_SKIP() << "cannot make a veth pair in the namespace (no ip(8) or no veth support)";
    }
    ASSERT_EQ(sh("ip addr add 10.99.0.1/24 dev fq0"), 0);
    ASSERT_EQ(sh("ip link set dev fq1 up"), 0);
    ASSERT_EQ(sh("ip link set dev fq0 up"), 0);
    // veth reports carrier (IFF_RUNNING) once both ends are up.
    ASSERT_TRUE(wait_until([] { return query_link("fq0").active; }));
    monitor_ = std::make_unique<LinkMonitor>(
        [this](const std::string& ifname, LinkChange change) { record(ifname, change); });
    ASSERT_TRUE(monitor_->ok());
  }

  void TearDown() override {
    open_gate();
    monitor_.reset();
  }

  // The monitor's callback.
  void record(const std::string& ifname, LinkChange change) {
    std::unique_lock lock(mu_);
    events_.push_back({ifname, change});
    in_callback_ = true;
    cv_.notify_all();
    cv_.wait_for(lock, 10s, [&] { return !gate_closed_; });
    in_callback_ = false;
  }

  // While closed, the callback blocks (at most 10 s): the monitor's thread stops reading.
  void close_gate() {
    std::lock_guard lock(mu_);
    gate_closed_ = true;
  }
  void open_gate() {
    std::lock_guard lock(mu_);
    gate_closed_ = false;
    cv_.notify_all();
  }
  bool wait_in_callback() {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, 5s, [&] { return in_callback_; });
  }

  // The next report not yet taken, waiting up to 5 s for it.
  std::optional<Event> next() {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, 5s, [&] { return taken_ < events_.size(); })) return std::nullopt;
    return events_[taken_++];
  }

  void expect_next(const std::string& ifname, LinkChange change) {
    const std::optional<Event> e = next();
    ASSERT_TRUE(e.has_value()) << "no report within 5 s; expected " << ifname << ":" << change;
    EXPECT_EQ(e->ifname, ifname);
    EXPECT_EQ(e->change, change) << "on " << e->ifname;
  }

  // Once the monitor has handled everything the kernel sent so far, nothing was reported
  // beyond what the test took.
  void expect_quiet() {
    ASSERT_TRUE(monitor_->flush(5000)) << "flush() timed out";
    std::lock_guard lock(mu_);
    EXPECT_EQ(events_.size(), taken_) << "unexpected reports:" << describe(events_, taken_);
    taken_ = events_.size();
  }

  std::vector<Event> all_events() {
    std::lock_guard lock(mu_);
    return events_;
  }
  void take_all() {
    std::lock_guard lock(mu_);
    taken_ = events_.size();
  }

  std::unique_ptr<LinkMonitor> monitor_;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Event> events_;
  size_t taken_ = 0;
  bool gate_closed_ = false;
  bool in_callback_ = false;
};

TEST_F(LinkMonitorTest, QueryLinkReadsTheInterface) {
  const LinkState s = query_link("fq0");
  EXPECT_TRUE(s.exists);
  EXPECT_TRUE(s.active);
  EXPECT_EQ(s.ifindex, if_nametoindex("fq0"));
  EXPECT_EQ(s.hwaddr_len, 6u);

  ASSERT_EQ(sh("ip link set dev fq0 address 02:00:00:00:00:42"), 0);
  const LinkState t = query_link("fq0");
  ASSERT_EQ(t.hwaddr_len, 6u);
  const unsigned char mac[6] = {0x02, 0, 0, 0, 0, 0x42};
  EXPECT_EQ(std::memcmp(t.hwaddr.data(), mac, 6), 0);

  ASSERT_EQ(sh("ip link set dev fq1 down"), 0);  // fq0 loses its carrier
  const LinkState u = query_link("fq0");
  EXPECT_TRUE(u.exists);
  EXPECT_FALSE(u.active);

  EXPECT_FALSE(query_link("fq7").exists);
  EXPECT_FALSE(query_link("").exists);
  EXPECT_FALSE(query_link("a-name-longer-than-ifnamsiz").exists);
}

TEST_F(LinkMonitorTest, WatchReportsNothingForTheStateItStartsFrom) {
  monitor_->watch("fq0");
  ASSERT_NO_FATAL_FAILURE(expect_quiet());
}

TEST_F(LinkMonitorTest, DownIsOnePortErr) {
  monitor_->watch("fq0");
  ASSERT_EQ(sh("ip link set dev fq0 down"), 0);
  ASSERT_NO_FATAL_FAILURE(expect_next("fq0", LinkChange::kPortErr));
  ASSERT_NO_FATAL_FAILURE(expect_quiet());
  // Down again changes nothing.
  ASSERT_EQ(sh("ip link set dev fq0 down"), 0);
  ASSERT_NO_FATAL_FAILURE(expect_quiet());
}

TEST_F(LinkMonitorTest, UpAgainIsPortActive) {
  monitor_->watch("fq0");
  ASSERT_EQ(sh("ip link set dev fq0 down"), 0);
  ASSERT_NO_FATAL_FAILURE(expect_next("fq0", LinkChange::kPortErr));
  ASSERT_EQ(sh("ip link set dev fq0 up"), 0);
  // Up comes first without carrier, then with it: one report, when it is running.
  ASSERT_NO_FATAL_FAILURE(expect_next("fq0", LinkChange::kPortActive));
  ASSERT_NO_FATAL_FAILURE(expect_quiet());
}

TEST_F(LinkMonitorTest, PeerDownIsCarrierLoss) {
  monitor_->watch("fq0");
  ASSERT_EQ(sh("ip link set dev fq1 down"), 0);
  ASSERT_NO_FATAL_FAILURE(expect_next("fq0", LinkChange::kPortErr));
  ASSERT_NO_FATAL_FAILURE(expect_quiet());
  ASSERT_EQ(sh("ip link set dev fq1 up"), 0);
  ASSERT_NO_FATAL_FAILURE(expect_next("fq0", LinkChange::kPortActive));
  ASSERT_NO_FATAL_FAILURE(expect_quiet());
}

TEST_F(LinkMonitorTest, MacChangeIsAddrChange) {
  monitor_->watch("fq0");
  ASSERT_EQ(sh("ip link set dev fq0 address 02:00:00:00:00:42"), 0);
  ASSERT_NO_FATAL_FAILURE(expect_next("fq0", LinkChange::kAddrChange));
  ASSERT_NO_FATAL_FAILURE(expect_quiet());
  // The same address again is no change.
  ASSERT_EQ(sh("ip link set dev fq0 address 02:00:00:00:00:42"), 0);
  ASSERT_NO_FATAL_FAILURE(expect_quiet());
}

TEST_F(LinkMonitorTest, Ipv4AddressIsGidChange) {
  monitor_->watch("fq0");
  ASSERT_EQ(sh("ip addr add 10.99.1.1/24 dev fq0"), 0);
  ASSERT_NO_FATAL_FAILURE(expect_next("fq0", LinkChange::kGidChange));
  ASSERT_NO_FATAL_FAILURE(expect_quiet());
  ASSERT_EQ(sh("ip addr del 10.99.1.1/24 dev fq0"), 0);
  ASSERT_NO_FATAL_FAILURE(expect_next("fq0", LinkChange::kGidChange));
  ASSERT_NO_FATAL_FAILURE(expect_quiet());
}

// An IPv6 address is announced twice: tentative, then again when duplicate address detection
// ends. One change.
TEST_F(LinkMonitorTest, Ipv6AddressIsOneGidChangeThroughDad) {
  const std::string conf = "/proc/sys/net/ipv6/conf/fq0/";
  if (access((conf + "disable_ipv6").c_str(), W_OK) != 0) GTEST_SKIP() << "no IPv6";
  set_sysctl(conf + "addr_gen_mode", "1");  // no link-local address of its own
  set_sysctl(conf + "router_solicitation_delay", "0");
  set_sysctl("/proc/sys/net/ipv6/neigh/fq0/retrans_time_ms", "100");  // DAD in ~0.1 s
  set_sysctl(conf + "disable_ipv6", "0");
  monitor_->watch("fq0");
  ASSERT_NO_FATAL_FAILURE(expect_quiet());

  ASSERT_EQ(sh("ip -6 addr add fd00::1/64 dev fq0"), 0);
  ASSERT_NO_FATAL_FAILURE(expect_next("fq0", LinkChange::kGidChange));
  ASSERT_TRUE(wait_until([] {
    return sh("ip -6 addr show dev fq0 tentative | grep -q fd00") != 0;
  })) << "duplicate address detection did not end";
  // The end of DAD is announced right after the flag clears, long before this next change.
  ASSERT_EQ(sh("ip addr add 10.99.1.1/24 dev fq0"), 0);
  ASSERT_NO_FATAL_FAILURE(expect_next("fq0", LinkChange::kGidChange));
  ASSERT_NO_FATAL_FAILURE(expect_quiet());

  ASSERT_EQ(sh("ip -6 addr del fd00::1/64 dev fq0"), 0);
  ASSERT_NO_FATAL_FAILURE(expect_next("fq0", LinkChange::kGidChange));
  ASSERT_NO_FATAL_FAILURE(expect_quiet());
}

// The kernel takes a running interface down and removes its addresses before deleting it.
TEST_F(LinkMonitorTest, DeleteIsDeviceGone) {
  monitor_->watch("fq0");
  ASSERT_EQ(sh("ip link del fq0"), 0);
  std::vector<LinkChange> before;
  for (;;) {
    const std::optional<Event> e = next();
    ASSERT_TRUE(e.has_value()) << "no kDeviceGone within 5 s";
    EXPECT_EQ(e->ifname, "fq0");
    if (e->change == LinkChange::kDeviceGone) break;
    before.push_back(e->change);
  }
  for (LinkChange c : before) {
    EXPECT_TRUE(c == LinkChange::kPortErr || c == LinkChange::kGidChange) << c;
  }
  EXPECT_EQ(std::count(before.begin(), before.end(), LinkChange::kPortErr), 1);
  ASSERT_NO_FATAL_FAILURE(expect_quiet());
}

TEST_F(LinkMonitorTest, RecreatedInterfaceIsNew) {
  monitor_->watch("fq0");
  ASSERT_EQ(sh("ip link set dev fq0 down"), 0);
  ASSERT_NO_FATAL_FAILURE(expect_next("fq0", LinkChange::kPortErr));
  ASSERT_EQ(sh("ip link del fq0"), 0);
  ASSERT_NO_FATAL_FAILURE(expect_next("fq0", LinkChange::kGidChange));  // 10.99.0.1 removed
  ASSERT_NO_FATAL_FAILURE(expect_next("fq0", LinkChange::kDeviceGone));
  ASSERT_NO_FATAL_FAILURE(expect_quiet());

  // Another interface, another MAC: not an address change, only a port that becomes active.
  ASSERT_EQ(sh("ip link add fq0 type veth peer name fq1"), 0);
  ASSERT_NO_FATAL_FAILURE(expect_quiet());
  ASSERT_EQ(sh("ip link set dev fq1 up"), 0);
  ASSERT_EQ(sh("ip link set dev fq0 up"), 0);
  ASSERT_NO_FATAL_FAILURE(expect_next("fq0", LinkChange::kPortActive));
  ASSERT_NO_FATAL_FAILURE(expect_quiet());
  ASSERT_EQ(sh("ip link del fq0"), 0);
  ASSERT_NO_FATAL_FAILURE(expect_next("fq0", LinkChange::kPortErr));
  ASSERT_NO_FATAL_FAILURE(expect_next("fq0", LinkChange::kDeviceGone));
  ASSERT_NO_FATAL_FAILURE(expect_quiet());
}

TEST_F(LinkMonitorTest, RenameAwayIsDeviceGone) {
  monitor_->watch("fq0");
  monitor_->watch("fq9");  // does not exist yet
  ASSERT_EQ(sh("ip link set dev fq0 down"), 0);
  ASSERT_NO_FATAL_FAILURE(expect_next("fq0", LinkChange::kPortErr));
  ASSERT_EQ(sh("ip link set dev fq0 name fq9"), 0);
  ASSERT_NO_FATAL_FAILURE(expect_next("fq0", LinkChange::kDeviceGone));
  // fq9 appears down, with fq0's address (the kernel announces it again, relabelled): nothing
  // to report.
  ASSERT_NO_FATAL_FAILURE(expect_quiet());
  ASSERT_EQ(sh("ip link set dev fq9 up"), 0);
  ASSERT_NO_FATAL_FAILURE(expect_next("fq9", LinkChange::kPortActive));
  ASSERT_NO_FATAL_FAILURE(expect_quiet());

  // Back under the watched name, running: a new interface for fq0, gone for fq9.
  ASSERT_EQ(sh("ip link set dev fq9 down"), 0);
  ASSERT_NO_FATAL_FAILURE(expect_next("fq9", LinkChange::kPortErr));
  ASSERT_EQ(sh("ip link set dev fq9 name fq0"), 0);
  ASSERT_NO_FATAL_FAILURE(expect_next("fq9", LinkChange::kDeviceGone));
  ASSERT_NO_FATAL_FAILURE(expect_quiet());
  ASSERT_EQ(sh("ip link set dev fq0 up"), 0);
  ASSERT_NO_FATAL_FAILURE(expect_next("fq0", LinkChange::kPortActive));
  ASSERT_NO_FATAL_FAILURE(expect_quiet());
}

TEST_F(LinkMonitorTest, WatchBeforeTheInterfaceExists) {
  monitor_->watch("fq5");
  ASSERT_NO_FATAL_FAILURE(expect_quiet());
  ASSERT_EQ(sh("ip link add fq5 type veth peer name fq6"), 0);
  ASSERT_EQ(sh("ip link set dev fq6 up"), 0);
  ASSERT_EQ(sh("ip link set dev fq5 up"), 0);
  ASSERT_NO_FATAL_FAILURE(expect_next("fq5", LinkChange::kPortActive));
  ASSERT_NO_FATAL_FAILURE(expect_quiet());
}

TEST_F(LinkMonitorTest, UnwatchedInterfacesAreNotReported) {
  ASSERT_EQ(sh("ip link add fq2 type veth peer name fq3"), 0);
  ASSERT_EQ(sh("ip link set dev fq3 up"), 0);
  ASSERT_EQ(sh("ip link set dev fq2 up"), 0);
  monitor_->watch("fq0");
  ASSERT_EQ(sh("ip link set dev fq2 down"), 0);
  ASSERT_EQ(sh("ip link set dev fq2 address 02:00:00:00:00:43"), 0);
  ASSERT_EQ(sh("ip addr add 10.98.0.1/24 dev fq2"), 0);
  ASSERT_EQ(sh("ip link set dev fq2 up"), 0);
  ASSERT_EQ(sh("ip link set dev fq1 address 02:00:00:00:00:44"), 0);  // fq0's peer
  ASSERT_EQ(sh("ip link del fq2"), 0);
  ASSERT_NO_FATAL_FAILURE(expect_quiet());
}

TEST_F(LinkMonitorTest, WatchIsCounted) {
  monitor_->watch("fq0");
  monitor_->watch("fq0");
  monitor_->unwatch("fq0");
  monitor_->unwatch("fq7");  // never watched: nothing happens
  ASSERT_EQ(sh("ip link set dev fq0 down"), 0);
  ASSERT_NO_FATAL_FAILURE(expect_next("fq0", LinkChange::kPortErr));
  ASSERT_NO_FATAL_FAILURE(expect_quiet());
  monitor_->unwatch("fq0");
  ASSERT_EQ(sh("ip link set dev fq0 up"), 0);
  ASSERT_TRUE(wait_until([] { return query_link("fq0").active; }));
  ASSERT_NO_FATAL_FAILURE(expect_quiet());
  // Watched again: from the state now (active), not from the last one reported (down).
  monitor_->watch("fq0");
  ASSERT_NO_FATAL_FAILURE(expect_quiet());
  ASSERT_EQ(sh("ip link set dev fq0 down"), 0);
  ASSERT_NO_FATAL_FAILURE(expect_next("fq0", LinkChange::kPortErr));
  ASSERT_NO_FATAL_FAILURE(expect_quiet());
}

// The callback holds the monitor's thread while thousands of address notifications arrive: the
// socket overflows (ENOBUFS) and the monitor reads the interface again instead.
TEST_F(LinkMonitorTest, OverflowIsRecoveredByReadingAgain) {
  constexpr int kAddresses = 4000;
  monitor_->watch("fq0");
  close_gate();
  ASSERT_EQ(sh("ip addr add 10.99.1.1/24 dev fq0"), 0);
  ASSERT_TRUE(wait_in_callback());
  ASSERT_EQ(sh("ip link set dev fq0 down"), 0);
  ASSERT_EQ(sh("i=0; while [ $i -lt " + std::to_string(kAddresses) +
               " ]; do echo \"addr add 10.100.$((i / 250)).$((i % 250 + 1))/32 dev fq0\";"
               " i=$((i + 1)); done | ip -batch -"),
            0);
  open_gate();
  ASSERT_TRUE(monitor_->flush(10000));
  const std::vector<Event> events = all_events();
  int port_err = 0, gid = 0;
  for (const Event& e : events) {
    EXPECT_EQ(e.ifname, "fq0");
    if (e.change == LinkChange::kPortErr) ++port_err;
    if (e.change == LinkChange::kGidChange) ++gid;
  }
  EXPECT_EQ(port_err, 1) << describe(events, 0);
  EXPECT_GE(gid, 2);
  EXPECT_EQ(port_err + gid, static_cast<int>(events.size())) << describe(events, 0);
  take_all();

  // In step with the kernel again.
  ASSERT_EQ(sh("ip link set dev fq0 up"), 0);
  ASSERT_NO_FATAL_FAILURE(expect_next("fq0", LinkChange::kPortActive));
  ASSERT_NO_FATAL_FAILURE(expect_quiet());
  if (gid == 1 + kAddresses) {
    GTEST_SKIP() << "the socket did not overflow (net.core.rmem_max is large): every address "
                    "was reported one by one, the recovery was not exercised";
  }
}

// watch/unwatch/flush from several threads while links change (for ThreadSanitizer).
TEST_F(LinkMonitorTest, ConcurrentWatchUnwatchFlush) {
  std::atomic<bool> failed{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const std::string name = t % 2 == 0 ? "fq0" : "fq1";
      for (int i = 0; i < 30; ++i) {
        monitor_->watch(name);
        if (!monitor_->flush(5000)) failed = true;
        monitor_->unwatch(name);
      }
    });
  }
  for (int i = 0; i < 5; ++i) {
    sh("ip link set dev fq1 down");
    sh("ip link set dev fq1 up");
  }
  for (std::thread& t : threads) t.join();
  EXPECT_FALSE(failed.load()) << "a flush() timed out";
  for (const Event& e : all_events()) {
    EXPECT_TRUE(e.ifname == "fq0" || e.ifname == "fq1") << e.ifname;
  }
}

}  // namespace
}  // namespace fabq::prov
