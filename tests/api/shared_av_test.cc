// Named address vectors shared between processes (fi_av(3) `name`, `map_addr`, FI_READ;
// fi_getinfo(3) FI_SHARED_AV): "Address vectors may be shared across multiple processes which
// access the same named domain on the same node"; "an fi_addr_t returned as part of an
// fi_av_insert call on one process is usable on another process which opens an AV of the same
// name".
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "rdm_fixture.h"

namespace fabq::testing {
namespace {

// A name no other test (or run) uses at the same time.
std::string unique_name(const char* what) {
  return std::string("fabq-test-") + what + "-" + std::to_string(getpid());
}

sockaddr_in addr(uint32_t host, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(host);
  a.sin_port = htons(port);
  return a;
}

class SharedAv : public Rdm {
 protected:
  // A named AV on the fixture's domain (closed by the fixture, after the endpoints).
  int open_named(const std::string& name, uint64_t flags, size_t count, fid_av** av,
                 fi_addr_t** map = nullptr) {
    fi_av_attr attr{};
    attr.type = FI_AV_TABLE;
    attr.name = name.c_str();
    attr.flags = flags;
    attr.count = count;
    const int rc = fi_av_open(domain_, &attr, av, nullptr);
    if (rc == 0) avs_.push_back(*av);
    if (map != nullptr) *map = static_cast<fi_addr_t*>(attr.map_addr);
    return rc;
  }
  // Closes `av`, one the fixture opened, now.
  void close_now(fid_av* av) {
    ASSERT_EQ(fi_close(&av->fid), 0);
    std::erase(avs_, av);
  }
  static bool same(const sockaddr_in& a, const sockaddr_in& b) {
    return a.sin_addr.s_addr == b.sin_addr.s_addr && a.sin_port == b.sin_port;
  }
  static sockaddr_in looked_up(fid_av* av, fi_addr_t a, int* rc) {
    sockaddr_in out{};
    size_t len = sizeof(out);
    *rc = fi_av_lookup(av, a, &out, &len);
    return out;
  }
};

TEST(SharedAvGetinfo, FiSharedAvIsADomainCapability) {
  fi_info* hints = fabq_hints();
  ASSERT_NE(hints, nullptr);
  hints->caps = FI_MSG | FI_SHARED_AV;
  hints->ep_attr->type = FI_EP_RDM;
  fi_info* info = nullptr;
  ASSERT_EQ(fi_getinfo(kVersion, nullptr, nullptr, 0, hints, &info), 0);
  EXPECT_NE(info->caps & FI_SHARED_AV, 0U);
  EXPECT_NE(info->domain_attr->caps & FI_SHARED_AV, 0U);
  fi_freeinfo(info);
  hints->caps = 0;
  ASSERT_EQ(fi_getinfo(kVersion, nullptr, nullptr, 0, hints, &info), 0);
  EXPECT_EQ(info->caps & FI_SHARED_AV, 0U) << "reported when asked for";
  fi_freeinfo(info);
  fi_freeinfo(hints);
}

TEST_F(SharedAv, AReaderSeesTheWritersEntriesAtTheSameFiAddrs) {
  const std::string name = unique_name("same");
  fid_av* w = nullptr;
  fid_av* r = nullptr;
  fi_addr_t* wmap = nullptr;
  fi_addr_t* rmap = nullptr;
  ASSERT_EQ(open_named(name, 0, 8, &w, &wmap), 0);
  ASSERT_NE(wmap, nullptr) << "map_addr is returned when the application gave none";
  const sockaddr_in in[3] = {addr(0x7f000001, 1000), addr(0x7f000001, 1001),
                             addr(0x7f000001, 1002)};
  fi_addr_t got[3];
  ASSERT_EQ(fi_av_insert(w, in, 3, got, 0, nullptr), 3);
  ASSERT_EQ(open_named(name, FI_READ, 0, &r, &rmap), 0);
  ASSERT_NE(rmap, nullptr);
  ASSERT_EQ(fi_av_remove(w, &got[1], 1, 0), 0);
  int rc = 0;
  for (int i : {0, 2}) {
    EXPECT_TRUE(same(looked_up(r, got[i], &rc), in[i])) << i;
    EXPECT_EQ(rc, 0);
    EXPECT_EQ(rmap[got[i]], got[i]) << "map_addr[i] names entry i";
  }
  looked_up(r, got[1], &rc);
  EXPECT_EQ(rc, -FI_EINVAL) << "removed for every process";
  EXPECT_EQ(rmap[got[1]], FI_ADDR_NOTAVAIL);
  const sockaddr_in later = addr(0x7f000001, 1003);
  fi_addr_t l = FI_ADDR_NOTAVAIL;
  ASSERT_EQ(fi_av_insert(w, &later, 1, &l, 0, nullptr), 1);
  EXPECT_TRUE(same(looked_up(r, l, &rc), later)) << "entries inserted after the reader opened";
}

TEST_F(SharedAv, AReadOnlyAvFindsAddressesInsteadOfInsertingThem) {
  const std::string name = unique_name("find");
  fid_av* w = nullptr;
  fid_av* r = nullptr;
  ASSERT_EQ(open_named(name, 0, 8, &w), 0);
  const sockaddr_in in[2] = {addr(0x7f000001, 2000), addr(0x7f000001, 2001)};
  fi_addr_t got[2];
  ASSERT_EQ(fi_av_insert(w, in, 2, got, 0, nullptr), 2);
  ASSERT_EQ(open_named(name, FI_READ, 0, &r), 0);
  const sockaddr_in ask[2] = {in[1], addr(0x7f000001, 2999)};
  fi_addr_t found[2];
  int errs[2] = {-1, -1};
  EXPECT_EQ(fi_av_insert(r, ask, 2, found, FI_SYNC_ERR, errs), 1);
  EXPECT_EQ(found[0], got[1]);
  EXPECT_EQ(errs[0], 0);
  EXPECT_EQ(found[1], FI_ADDR_NOTAVAIL);
  EXPECT_EQ(errs[1], FI_EADDRNOTAVAIL) << "not in the table";
  EXPECT_EQ(fi_av_remove(r, &got[0], 1, 0), -FI_EOPNOTSUPP);
}

TEST_F(SharedAv, ItsCountIsAllItHolds) {
  fid_av* w = nullptr;
  ASSERT_EQ(open_named(unique_name("full"), 0, 2, &w), 0);
  const sockaddr_in in[3] = {addr(0x7f000001, 1), addr(0x7f000001, 2), addr(0x7f000001, 3)};
  fi_addr_t got[3];
  int errs[3] = {-1, -1, -1};
  EXPECT_EQ(fi_av_insert(w, in, 3, got, FI_SYNC_ERR, errs), 2);
  EXPECT_EQ(errs[2], FI_ENOSPC);
  EXPECT_EQ(got[2], FI_ADDR_NOTAVAIL);
}

TEST_F(SharedAv, TheLastToCloseRemovesTheName) {
  const std::string name = unique_name("last");
  fid_av* w = nullptr;
  fid_av* r = nullptr;
  ASSERT_EQ(open_named(name, 0, 4, &w), 0);
  ASSERT_EQ(open_named(name, FI_READ, 0, &r), 0);
  close_now(w);
  int rc = 0;
  const sockaddr_in a = addr(0x7f000001, 5);
  looked_up(r, 0, &rc);
  EXPECT_EQ(rc, -FI_EINVAL);
  close_now(r);
  fid_av* again = nullptr;
  EXPECT_EQ(open_named(name, FI_READ, 0, &again), -FI_EINVAL) << "no table by that name now";
  ASSERT_EQ(open_named(name, 0, 4, &again), 0);
  fi_addr_t first = FI_ADDR_NOTAVAIL;
  ASSERT_EQ(fi_av_insert(again, &a, 1, &first, 0, nullptr), 1);
  EXPECT_EQ(first, 0U) << "a new table starts at 0";
}

// A process killed with the table open leaves its name behind; the next writer starts afresh.
TEST_F(SharedAv, ATableADeadProcessLeftIsStartedAfresh) {
  const std::string name = unique_name("dead");
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(20);
    fid_av* av = nullptr;
    fi_av_attr attr{};
    attr.type = FI_AV_TABLE;
    attr.name = name.c_str();
    attr.count = 4;
    if (fi_av_open(domain_, &attr, &av, nullptr) != 0) _exit(2);
    const sockaddr_in a[2] = {addr(0x7f000001, 7), addr(0x7f000001, 8)};
    if (fi_av_insert(av, a, 2, nullptr, 0, nullptr) != 2) _exit(3);
    kill(getpid(), SIGKILL);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "exit " << WEXITSTATUS(status);
  fid_av* w = nullptr;
  ASSERT_EQ(open_named(name, 0, 4, &w), 0);
  int rc = 0;
  looked_up(w, 0, &rc);
  EXPECT_EQ(rc, -FI_EINVAL) << "the dead process's entries are gone";
}

// Across processes, through endpoints: a child's endpoint is bound to the AV opened read-only;
// the parent inserts both endpoints' names, and the child sends to the parent's endpoint by the
// fi_addr_t the parent's insert gave (checked against map_addr); the parent's completion names
// the child by the fi_addr_t its insert gave. The child is forked before the parent opens an
// endpoint, so that no thread of the parent's is copied.
TEST_F(SharedAv, AnotherProcessSendsByTheSharedFiAddrAndIsNamedByIt) {
  const std::string name = unique_name("procs");
  fid_av* w = nullptr;
  ASSERT_EQ(open_named(name, 0, 8, &w), 0);
  int to_child[2];
  int to_parent[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(to_parent), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(20);
    fi_info* hints = fabq_hints();
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_MSG | FI_SHARED_AV;
    fi_info* info = nullptr;
    fid_fabric* fabric = nullptr;
    fid_domain* domain = nullptr;
    if (fi_getinfo(kVersion, nullptr, nullptr, 0, hints, &info) != 0 ||
        fi_fabric(info->fabric_attr, &fabric, nullptr) != 0 ||
        fi_domain(fabric, info, &domain, nullptr) != 0) {
      _exit(2);
    }
    fi_av_attr attr{};
    attr.type = FI_AV_TABLE;
    attr.name = name.c_str();
    attr.flags = FI_READ;
    fid_av* r = nullptr;
    fid_cq* cq = nullptr;
    fid_ep* ep = nullptr;
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_CONTEXT;
    if (fi_av_open(domain, &attr, &r, nullptr) != 0 ||
        fi_cq_open(domain, &cq_attr, &cq, nullptr) != 0 ||
        fi_endpoint(domain, info, &ep, nullptr) != 0 || fi_ep_bind(ep, &r->fid, 0) != 0 ||
        fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV) != 0 || fi_enable(ep) != 0) {
      _exit(3);
    }
    sockaddr_in mine{};
    size_t len = sizeof(mine);
    if (fi_getname(&ep->fid, &mine, &len) != 0 ||
        write(to_parent[1], &mine, sizeof(mine)) != sizeof(mine)) {
      _exit(4);
    }
    fi_addr_t parent = 0;
    if (read(to_child[0], &parent, sizeof(parent)) != sizeof(parent)) _exit(5);
    if (static_cast<fi_addr_t*>(attr.map_addr)[parent] != parent) _exit(6);
    static char msg[] = "from the child";
    if (fi_send(ep, msg, sizeof(msg), nullptr, parent, msg) != 0) _exit(7);
    fi_cq_entry e{};
    ssize_t n = -FI_EAGAIN;
    while (n == -FI_EAGAIN) n = fi_cq_read(cq, &e, 1);
    _exit(n == 1 && e.op_context == msg ? 0 : 8);
  }
  Ep* a = open_ep({.av = w});
  sockaddr_in child_name{};
  ASSERT_EQ(read(to_parent[0], &child_name, sizeof(child_name)), ssize_t{sizeof(child_name)});
  fi_addr_t child_addr = FI_ADDR_NOTAVAIL;
  ASSERT_EQ(fi_av_insert(w, &child_name, 1, &child_addr, 0, nullptr), 1);
  ASSERT_EQ(write(to_child[1], &a->addr, sizeof(a->addr)), ssize_t{sizeof(a->addr)});
  char buf[32] = {};
  ASSERT_EQ(fi_recv(a->ep, buf, sizeof(buf), nullptr, FI_ADDR_UNSPEC, buf), 0);
  fi_cq_tagged_entry e{};
  fi_addr_t src = FI_ADDR_UNSPEC;
  ASSERT_EQ(wait_cq(a->cq, &e, nullptr, &src), 1);
  EXPECT_STREQ(buf, "from the child");
  EXPECT_EQ(src, child_addr) << "named by the shared table's fi_addr_t";
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "child exit " << WEXITSTATUS(status) << " signal " << WTERMSIG(status);
  for (int fd : {to_child[0], to_child[1], to_parent[0], to_parent[1]}) close(fd);
}

}  // namespace
}  // namespace fabq::testing
