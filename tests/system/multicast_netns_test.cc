// Multicast between hosts (fi_cm(3) fi_join, fi_cq(3) FI_MULTICAST) over real IP multicast:
// three network namespaces, each a "host" with one interface (eth0, 10.78.0.n/24) on a bridge
// in a fourth, and one fabq process in each: a sender and two receivers of one group. Made with
// ip(8) by the test itself (root needed: without it the test says so and skips) and removed
// after it. Each process speaks only through libfabric; the test tells them when to act through
// pipes, and each says how it ended through its exit status (and stderr).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "support/provider.h"

namespace fabq::testing {
namespace {

constexpr int kWaitMs = 5000;

int sh(const std::string& cmd) {
  return std::system((cmd + " >/dev/null 2>&1").c_str());
}

// Hosts <prefix>-1..3 on a bridge in <prefix>-br, as tests/mpi/netns.sh makes them; removed by
// the destructor.
class Hosts {
 public:
  Hosts() : prefix_("fqmc" + std::to_string(getpid() % 100000)) {}
  ~Hosts() {
    for (int n = 1; n <= 3; ++n) sh("ip netns del " + ns(n));
    sh("ip netns del " + prefix_ + "-br");
  }
  // False with *why when they cannot be made.
  bool up(std::string* why) {
    if (geteuid() != 0) {
      *why = "not root";
      return false;
    }
    const std::string br = prefix_ + "-br";
    if (sh("ip netns add " + br) != 0) {
      *why = "ip netns add failed (no ip(8), or no permission)";
      return false;
    }
    // No IGMP querier on this bridge: without snooping it floods the group to every port.
    std::vector<std::string> steps = {"ip -n " + br + " link add br0 type bridge mcast_snooping 0",
                                      "ip -n " + br + " link set br0 up"};
    for (int n = 1; n <= 3; ++n) {
      const std::string v = prefix_ + "v" + std::to_string(n);
      steps.push_back("ip netns add " + ns(n));
      steps.push_back("ip link add " + v + " netns " + br + " type veth peer name eth0 netns " +
                      ns(n));
      steps.push_back("ip -n " + br + " link set " + v + " master br0 up");
      steps.push_back("ip -n " + ns(n) + " addr add " + ip(n) + "/24 dev eth0");
      steps.push_back("ip -n " + ns(n) + " link set eth0 up");
      steps.push_back("ip -n " + ns(n) + " link set lo up");
      steps.push_back("ip -n " + ns(n) + " route add 224.0.0.0/4 dev eth0");
    }
    for (const std::string& s : steps) {
      if (sh(s) != 0) {
        *why = "failed: " + s;
        return false;
      }
    }
    return true;
  }
  std::string ns(int n) const { return prefix_ + "-" + std::to_string(n); }
  static std::string ip(int n) { return "10.78.0." + std::to_string(n); }

 private:
  const std::string prefix_;
};

// What one process does. Commands arrive as bytes on `cmd`; it answers on `ack`.
//   sender:   joins with FI_SEND, acks 'r'; on '1' or '2' sends "round <c>" to the group, acks
//             when its send completed.
//   receiver: joins, posts two receives, acks 'r'; on 'c' closes its membership and acks; on
//             'm' expects one message (the round it names next: '1' or '2') with FI_MULTICAST
//             from the sender, acks; on 'n' expects nothing for 300 ms, acks.
// Exit status 0 when every step went as the man pages say; else a message on stderr.
struct Role {
  bool sender = false;
  std::string ns;
  std::string ip;
};

constexpr uint16_t kPort = 23456;  // every host's endpoint: the sender's address is known
constexpr const char* kGroup = "239.255.78.1";
constexpr uint16_t kGroupPort = 23457;

[[noreturn]] void fail(const char* what, long v) {
  std::fprintf(stderr, "member: %s (%ld)\n", what, v);
  std::fflush(stderr);
  _exit(1);
}

char read_cmd(int fd) {
  char c = 0;
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, 20000) != 1 || read(fd, &c, 1) != 1) fail("no command from the test", 0);
  return c;
}

void ack(int fd, char c) {
  if (write(fd, &c, 1) != 1) fail("ack", errno);
}

[[noreturn]] void member(const Role& role, int cmd, int ack_fd) {
  const int nsfd = open(("/var/run/netns/" + role.ns).c_str(), O_RDONLY | O_CLOEXEC);
  if (nsfd < 0 || setns(nsfd, CLONE_NEWNET) != 0) fail("setns", errno);
  close(nsfd);
  fi_info* hints = fi_allocinfo();
  hints->fabric_attr->prov_name = strdup("fabq");
  hints->ep_attr->type = FI_EP_DGRAM;
  hints->caps = FI_MSG | FI_MULTICAST | FI_SOURCE;
  fi_info* info = nullptr;
  const std::string port = std::to_string(kPort);
  int rc = fi_getinfo(kVersion, role.ip.c_str(), port.c_str(), FI_SOURCE, hints, &info);
  if (rc != 0) fail("fi_getinfo", rc);
  if (std::strcmp(info->domain_attr->name, "eth0") != 0) fail("domain is not eth0", 0);
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_av* av = nullptr;
  fid_eq* eq = nullptr;
  fid_cq* cq = nullptr;
  fid_ep* ep = nullptr;
  fi_av_attr av_attr{};
  av_attr.type = FI_AV_TABLE;
  fi_eq_attr eq_attr{};
  eq_attr.wait_obj = FI_WAIT_UNSPEC;
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_DATA;
  cq_attr.wait_obj = FI_WAIT_UNSPEC;
  if ((rc = fi_fabric(info->fabric_attr, &fabric, nullptr)) != 0 ||
      (rc = fi_domain(fabric, info, &domain, nullptr)) != 0 ||
      (rc = fi_av_open(domain, &av_attr, &av, nullptr)) != 0 ||
      (rc = fi_eq_open(fabric, &eq_attr, &eq, nullptr)) != 0 ||
      (rc = fi_cq_open(domain, &cq_attr, &cq, nullptr)) != 0 ||
      (rc = fi_endpoint(domain, info, &ep, nullptr)) != 0 ||
      (rc = fi_ep_bind(ep, &av->fid, 0)) != 0 || (rc = fi_ep_bind(ep, &eq->fid, 0)) != 0 ||
      (rc = fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV)) != 0 || (rc = fi_enable(ep)) != 0) {
    fail("opening the endpoint", rc);
  }
  // The sender's address, as every host knows it.
  sockaddr_in sender{};
  sender.sin_family = AF_INET;
  sender.sin_port = htons(kPort);
  inet_pton(AF_INET, Hosts::ip(1).c_str(), &sender.sin_addr);
  fi_addr_t sender_addr = FI_ADDR_NOTAVAIL;
  if (fi_av_insert(av, &sender, 1, &sender_addr, 0, nullptr) != 1) fail("fi_av_insert", 0);
  sockaddr_in group{};
  group.sin_family = AF_INET;
  group.sin_port = htons(kGroupPort);
  inet_pton(AF_INET, kGroup, &group.sin_addr);
  fid_mc* mc = nullptr;
  if ((rc = fi_join(ep, &group, role.sender ? FI_SEND : FI_RECV, &mc, &group)) != 0) {
    fail("fi_join", rc);
  }
  fi_eq_entry entry{};
  uint32_t event = 0;
  const ssize_t n = fi_eq_sread(eq, &event, &entry, sizeof(entry), kWaitMs, 0);
  if (n != static_cast<ssize_t>(sizeof(entry)) || event != FI_JOIN_COMPLETE ||
      entry.fid != &mc->fid || entry.context != &group) {
    fail("no FI_JOIN_COMPLETE", n);
  }
  char rx[2][32] = {};
  if (!role.sender) {
    for (auto& r : rx) {
      if ((rc = static_cast<int>(fi_recv(ep, r, sizeof(r), nullptr, FI_ADDR_UNSPEC, r))) != 0) {
        fail("fi_recv", rc);
      }
    }
  }
  ack(ack_fd, 'r');
  fi_cq_data_entry e{};
  for (char c; (c = read_cmd(cmd)) != 'q';) {
    switch (c) {
      case '1':
      case '2': {
        const std::string text = std::string("round ") + c;
        if ((rc = static_cast<int>(fi_send(ep, text.c_str(), text.size() + 1, nullptr,
                                           fi_mc_addr(mc), nullptr))) != 0) {
          fail("fi_send to the group", rc);
        }
        if (fi_cq_sread(cq, &e, 1, nullptr, kWaitMs) != 1) fail("no send completion", 0);
        break;
      }
      case 'c':
        if ((rc = fi_close(&mc->fid)) != 0) fail("fi_close(mc)", rc);
        mc = nullptr;
        break;
      case 'm': {
        const std::string want = std::string("round ") + read_cmd(cmd);
        fi_addr_t src = FI_ADDR_NOTAVAIL;
        const ssize_t got = fi_cq_sreadfrom(cq, &e, 1, &src, nullptr, kWaitMs);
        if (got != 1) fail("the group's message did not arrive", got);
        if (e.flags != (FI_RECV | FI_MSG | FI_MULTICAST)) fail("flags", static_cast<long>(e.flags));
        if (want != static_cast<const char*>(e.buf)) fail("another message", 0);
        if (src != sender_addr) fail("FI_SOURCE is not the sender", static_cast<long>(src));
        break;
      }
      case 'n': {
        const ssize_t got = fi_cq_sread(cq, &e, 1, nullptr, 300);
        if (got != -FI_EAGAIN) fail("a closed member got the group's message", got);
        break;
      }
      default:
        fail("unknown command", c);
    }
    ack(ack_fd, c);
  }
  if (mc != nullptr) fi_close(&mc->fid);
  fi_close(&ep->fid);
  fi_close(&cq->fid);
  fi_close(&eq->fid);
  fi_close(&av->fid);
  fi_close(&domain->fid);
  fi_close(&fabric->fid);
  fi_freeinfo(info);
  fi_freeinfo(hints);
  _exit(0);
}

struct Child {
  pid_t pid = -1;
  int cmd = -1;  // the test writes commands here
  int ack = -1;  // and reads the answers here
};

class MulticastNetns : public ::testing::Test {
 protected:
  void SetUp() override {
    // A member that failed has closed its pipe: writing to it is an error, not a signal.
    signal(SIGPIPE, SIG_IGN);
    std::string why;
    if (!hosts_.up(&why)) GTEST_SKIP() << "cannot make the network namespaces: " << why;
    for (int n = 1; n <= 3; ++n) {
      int to_child[2], from_child[2];
      ASSERT_EQ(pipe2(to_child, O_CLOEXEC), 0);
      ASSERT_EQ(pipe2(from_child, O_CLOEXEC), 0);
      const pid_t pid = fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        // Only the test holds the other members' pipes: a member that ends closes its own, and
        // the test sees that at once.
        for (const Child& c : children_) {
          close(c.cmd);
          close(c.ack);
        }
        member({.sender = n == 1, .ns = hosts_.ns(n), .ip = Hosts::ip(n)}, to_child[0],
               from_child[1]);
      }
      close(to_child[0]);
      close(from_child[1]);
      children_.push_back({pid, to_child[1], from_child[0]});
    }
    for (Child& c : children_) ASSERT_EQ(await(c), 'r') << "a member did not join";
  }
  void TearDown() override {
    for (Child& c : children_) {
      if (c.cmd >= 0) {
        char q = 'q';
        (void)!write(c.cmd, &q, 1);
        close(c.cmd);
      }
      if (c.ack >= 0) close(c.ack);
      int status = 0;
      ASSERT_EQ(waitpid(c.pid, &status, 0), c.pid);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a member failed (stderr)";
    }
  }
  static void tell(Child& c, const char* cmds) {
    ASSERT_EQ(write(c.cmd, cmds, std::strlen(cmds)), static_cast<ssize_t>(std::strlen(cmds)));
  }
  // The member's answer, or 0 when it has none within 20 s (it failed: see its stderr).
  static char await(Child& c) {
    pollfd p{c.ack, POLLIN, 0};
    char a = 0;
    if (poll(&p, 1, 20000) != 1 || read(c.ack, &a, 1) != 1) return 0;
    return a;
  }

  Hosts hosts_;
  std::vector<Child> children_;  // the sender, then the two receivers
};

TEST_F(MulticastNetns, EveryReceiverOnTheBridgeGetsEachGroupMessageWithFiMulticast) {
  Child& sender = children_[0];
  for (const char* round : {"1", "2"}) {
    // Each receiver waits for the message, then the sender sends it.
    for (size_t r = 1; r <= 2; ++r) tell(children_[r], (std::string("m") + round).c_str());
    tell(sender, round);
    EXPECT_EQ(await(sender), round[0]);
    for (size_t r = 1; r <= 2; ++r) EXPECT_EQ(await(children_[r]), 'm') << "receiver " << r;
  }
}

TEST_F(MulticastNetns, AReceiverThatClosedItsMembershipGetsNothingWhileTheOtherDoes) {
  Child& sender = children_[0];
  Child& stays = children_[1];
  Child& leaves = children_[2];
  tell(leaves, "c");
  ASSERT_EQ(await(leaves), 'c');
  tell(stays, "m1");
  tell(sender, "1");
  EXPECT_EQ(await(sender), '1');
  EXPECT_EQ(await(stays), 'm') << "the one still in the group gets it";
  // The message reached the other host already: the closed member has had its chance.
  tell(leaves, "n");
  EXPECT_EQ(await(leaves), 'n') << "the closed member got it";
}

}  // namespace
}  // namespace fabq::testing
