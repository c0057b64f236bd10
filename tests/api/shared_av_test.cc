// Named address vectors shared between processes (fi_av(3) `name`, `map_addr`, FI_READ;
// fi_getinfo(3) FI_SHARED_AV): "Address vectors may be shared across multiple processes which
// access the same named domain on the same node"; "an fi_addr_t returned as part of an
// fi_av_insert call on one process is usable on another process which opens an AV of the same
// name".
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <new>
#include <string>

#include "rdm_fixture.h"

namespace fabq::testing {
namespace {

// A name no other test (or run) uses at the same time.
std::string unique_name(const char* what) {
  return std::string("fabq-test-") + what + "-" + std::to_string(getpid());
}

// The file of the table `name` of user `uid` (prov/shared_av.h).
std::string table_path(const std::string& name, uid_t uid = geteuid()) {
  return "/dev/shm/fabq-av." + std::to_string(uid) + "." + name;
}

// Runs body() in a child process that ends within `seconds`: its result (0 to 127), or 128 + the
// signal that ended the child.
template <class Body>
int in_child(Body body, unsigned seconds = 10) {
  const pid_t child = fork();
  if (child < 0) return -1;
  if (child == 0) {
    alarm(seconds);
    _exit(body());
  }
  int status = 0;
  if (waitpid(child, &status, 0) != child) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
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

// --- Whose table: a named AV is shared by the processes of one user. What another user, or a
// process of this one by mistake, leaves at the name is refused with -FI_EACCES.

// fi_av_open(name) of a child as the test, as the parent's result: 0 refused with `want`, 2
// opened, 4 refused otherwise; anything else: the child crashed or hung.
int open_in_child(fid_domain* domain, const std::string& name, uint64_t flags, int want) {
  return in_child([&] {
    fi_av_attr attr{};
    attr.type = FI_AV_TABLE;
    attr.name = name.c_str();
    attr.flags = flags;
    attr.count = 4;
    fid_av* av = nullptr;
    const int rc = fi_av_open(domain, &attr, &av, nullptr);
    return rc == 0 ? 2 : rc == want ? 0 : 4;
  });
}

// Another user made a table at this user's name (a hard link to its own, writable by everybody)
// whose entry 0 is its own address, and holds it: this process must neither send to the other
// user by fi_addr_t 0 nor let it rewrite what it inserts.
TEST_F(SharedAv, ATableAnotherUserMadeAtTheNameIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: plays another user (uid 65534) in a child";
  const std::string name = unique_name("other-user");
  constexpr uid_t kOther = 65534;
  int ready[2];
  int done[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(done), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(20);
    close(ready[0]);
    close(done[1]);
    if (setgroups(0, nullptr) != 0 || setgid(kOther) != 0 || setuid(kOther) != 0) _exit(2);
    fi_av_attr attr{};
    attr.type = FI_AV_TABLE;
    attr.name = name.c_str();
    attr.count = 4;
    fid_av* av = nullptr;
    if (fi_av_open(domain_, &attr, &av, nullptr) != 0) _exit(3);
    const sockaddr_in mine = addr(0x7f000001, 6666);
    fi_addr_t a = FI_ADDR_NOTAVAIL;
    if (fi_av_insert(av, &mine, 1, &a, 0, nullptr) != 1 || a != 0) _exit(4);
    const std::string victims = table_path(name, 0);
    if (link(table_path(name, kOther).c_str(), victims.c_str()) != 0 ||
        chmod(victims.c_str(), 0666) != 0) {
      _exit(5);
    }
    char c = 'r';
    if (write(ready[1], &c, 1) != 1 || read(done[0], &c, 1) != 1) _exit(6);
    fi_close(&av->fid);
    _exit(0);
  }
  close(ready[1]);
  close(done[0]);
  char c = 0;
  const bool planted = read(ready[0], &c, 1) == 1;
  if (planted) {
    fid_av* r = nullptr;
    EXPECT_EQ(open_named(name, FI_READ, 0, &r), -FI_EACCES);
    if (r != nullptr) {
      int rc = 0;
      EXPECT_FALSE(same(looked_up(r, 0, &rc), addr(0x7f000001, 6666)))
          << "fi_addr_t 0 names the other user's process";
    }
    fid_av* w = nullptr;
    EXPECT_EQ(open_named(name, 0, 4, &w), -FI_EACCES);
  }
  c = 'd';
  EXPECT_EQ(write(done[1], &c, 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(planted && WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the other user's process: exit " << WEXITSTATUS(status) << " signal "
      << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  // Whatever the child left, whichever way this test went.
  unlink(table_path(name, 0).c_str());
  unlink(table_path(name, kOther).c_str());
  close(ready[0]);
  close(done[1]);
}

// A table is a regular file, never reached through a link: one at the name that leads to a real
// table (of another name, or of another user) is refused.
TEST_F(SharedAv, ASymlinkAtTheNameIsRefused) {
  const std::string real = unique_name("link-target");
  const std::string name = unique_name("link");
  fid_av* target = nullptr;
  ASSERT_EQ(open_named(real, 0, 4, &target), 0);
  ASSERT_EQ(symlink(table_path(real).c_str(), table_path(name).c_str()), 0);
  fid_av* av = nullptr;
  EXPECT_EQ(open_named(name, FI_READ, 0, &av), -FI_EACCES);
  EXPECT_EQ(open_named(name, 0, 4, &av), -FI_EACCES);
  unlink(table_path(name).c_str());
}

// A FIFO or a directory at the name is refused at once: opening a FIFO to read must not wait
// for a writer that never comes.
TEST_F(SharedAv, ANonRegularFileAtTheNameIsRefusedAtOnce) {
  const std::string fifo = unique_name("fifo");
  ASSERT_EQ(mkfifo(table_path(fifo).c_str(), 0600), 0);
  EXPECT_EQ(open_in_child(domain_, fifo, FI_READ, -FI_EACCES), 0)
      << "the reader's open: 2 opened, 4 another error, 142 hung (SIGALRM)";
  EXPECT_EQ(open_in_child(domain_, fifo, 0, -FI_EACCES), 0) << "the writer's";
  unlink(table_path(fifo).c_str());
  const std::string dir = unique_name("dir");
  ASSERT_EQ(mkdir(table_path(dir).c_str(), 0700), 0);
  EXPECT_EQ(open_in_child(domain_, dir, FI_READ, -FI_EACCES), 0) << "the reader's";
  EXPECT_EQ(open_in_child(domain_, dir, 0, -FI_EACCES), 0) << "the writer's";
  rmdir(table_path(dir).c_str());
}

// A table of this user that others may read or write (a process made it so by mistake) is no
// longer private to this user's processes: refused.
TEST_F(SharedAv, ATableOthersMayReadOrWriteIsRefused) {
  const std::string name = unique_name("mode");
  fid_av* w = nullptr;
  ASSERT_EQ(open_named(name, 0, 4, &w), 0);
  for (const mode_t mode : {0666, 0640, 0604}) {
    ASSERT_EQ(chmod(table_path(name).c_str(), mode), 0);
    fid_av* av = nullptr;
    EXPECT_EQ(open_named(name, FI_READ, 0, &av), -FI_EACCES) << std::oct << mode;
    EXPECT_EQ(open_named(name, 0, 4, &av), -FI_EACCES) << std::oct << mode;
  }
  ASSERT_EQ(chmod(table_path(name).c_str(), 0600), 0);
  fid_av* r = nullptr;
  EXPECT_EQ(open_named(name, FI_READ, 0, &r), 0) << "private again";
}

// A new table is this user's alone (0600), whatever the umask: a umask that takes the owner's
// write bit would keep this user's other processes from opening it to write.
TEST_F(SharedAv, ANewTableIsPrivateWhateverTheUmask) {
  for (const mode_t mask : {0000, 0022, 0277}) {
    const std::string name = unique_name("umask") + "-" + std::to_string(mask);
    const mode_t was = umask(mask);
    fid_av* w = nullptr;
    const int rc = open_named(name, 0, 4, &w);
    umask(was);
    ASSERT_EQ(rc, 0) << std::oct << mask;
    struct stat st {};
    ASSERT_EQ(lstat(table_path(name).c_str(), &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode));
    EXPECT_EQ(st.st_mode & 07777, 0600u) << "umask " << std::oct << mask;
    EXPECT_EQ(st.st_uid, geteuid());
  }
}

// --- What the table's header says. A process of this user that wrote into the header (a bug, or
// a forgery) must not make the next opener read or write outside the table: the next open
// refuses a header no table could have with -FI_EINVAL (the layout: prov/shared_av.h).
TEST_F(SharedAv, AHeaderNoTableCouldHaveIsRefusedByTheNextOpener) {
  struct Forgery {
    const char* what;
    size_t offset;
    uint64_t value;
  };
  const Forgery forgeries[] = {
      {"capacity 2^59 + 1024, whose size wraps to this table's", 8, (uint64_t{1} << 59) + 1024},
      {"capacity 0", 8, 0},
      {"capacity above the maximum", 8, 65537},
      {"capacity beyond the table's size", 8, 2048},
      {"count beyond the capacity", 16, 1025},
      {"magic", 0, 0x0123456789abcdefULL},
  };
  const std::string name = unique_name("forged");
  fid_av* holder = nullptr;
  ASSERT_EQ(open_named(name, 0, 1024, &holder), 0);
  const int fd = open(table_path(name).c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  void* m = mmap(nullptr, 64, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  ASSERT_NE(m, MAP_FAILED);
  auto* header = static_cast<unsigned char*>(m);
  for (const Forgery& f : forgeries) {
    uint64_t was = 0;
    std::memcpy(&was, header + f.offset, sizeof(was));
    std::memcpy(header + f.offset, &f.value, sizeof(f.value));
    // The opener inserts if its open succeeds: 0 refused with -FI_EINVAL, 2 opened and
    // inserted, 3 opened and the insert failed, 4 refused otherwise; anything else: it crashed.
    const int writer = in_child([&] {
      fi_av_attr attr{};
      attr.type = FI_AV_TABLE;
      attr.name = name.c_str();
      attr.count = 4;
      fid_av* av = nullptr;
      const int rc = fi_av_open(domain_, &attr, &av, nullptr);
      if (rc != 0) return rc == -FI_EINVAL ? 0 : 4;
      const sockaddr_in a = addr(0x7f000001, 4242);
      return fi_av_insert(av, &a, 1, nullptr, 0, nullptr) == 1 ? 2 : 3;
    });
    EXPECT_EQ(writer, 0) << f.what;
    EXPECT_EQ(open_in_child(domain_, name, FI_READ, -FI_EINVAL), 0) << f.what << ", reader";
    std::memcpy(header + f.offset, &was, sizeof(was));
  }
  munmap(m, 64);
  fid_av* again = nullptr;
  EXPECT_EQ(open_named(name, FI_READ, 0, &again), 0) << "the table as it was opens again";
}

// --- One table per name. Four processes in two pairs, in rounds: one pair opens the name while
// the other, holding the table alone, closes it (an open racing the last close; or, when the
// close wins, two processes creating the name at once); then the second pair opens it again, and
// all four, holding the name at the same time, compare: each looks up the entries the others
// inserted at the fi_addr_t their inserts gave. An open must join the table or make the next one,
// never keep one that lost its name while another process makes a new one (an fi_addr_t would
// then name different peers in different processes); and no open fails meanwhile.
TEST_F(SharedAv, OpensRacingTheLastCloseNeverSplitTheTable) {
  constexpr int kProcs = 4;
  constexpr int kSeconds = 3;
  // Each process inserts one entry per round; the table can hold them all, even if it lives for
  // the whole test.
  constexpr size_t kCapacity = 65536;
  constexpr uint64_t kMaxRounds = kCapacity / kProcs - 1;
  struct Board {
    std::atomic<uint64_t> arrived;  // the barrier: arrivals so far
    std::atomic<int> stop;          // set by process 0 before it arrives at a round's start
    // What each process holds: its entry's fi_addr_t and address key; FI_ADDR_NOTAVAIL for none.
    struct Slot {
      std::atomic<uint64_t> at;
      std::atomic<uint64_t> key;
    } slot[kProcs];
    struct Result {
      std::atomic<uint64_t> rounds, compared, splits, failures;
      std::atomic<int> first_failure;
      std::atomic<bool> stuck;  // a barrier timed out
    } result[kProcs];
  };
  void* mem =
      mmap(nullptr, sizeof(Board), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  auto* board = new (mem) Board{};
  for (auto& s : board->slot) s.at = FI_ADDR_NOTAVAIL;
  const std::string name = unique_name("race");
  auto key = [](const sockaddr_in& a) { return uint64_t{a.sin_addr.s_addr} << 16 | a.sin_port; };
  pid_t children[kProcs];
  for (int p = 0; p < kProcs; ++p) {
    children[p] = fork();
    ASSERT_GE(children[p], 0);
    if (children[p] != 0) continue;
    alarm(kSeconds + 30);
    const bool first_pair = p % 2 == 0;
    auto& mine = board->slot[p];
    auto& result = board->result[p];
    const auto start = std::chrono::steady_clock::now();
    const auto give_up = start + std::chrono::seconds(kSeconds + 20);
    uint64_t barriers = 0;
    auto barrier = [&] {
      ++barriers;
      board->arrived.fetch_add(1);
      while (board->arrived.load() < barriers * kProcs) {
        if (std::chrono::steady_clock::now() > give_up) {
          result.stuck = true;
          _exit(1);
        }
        sched_yield();
      }
    };
    auto fail = [&](int what) {
      if (result.failures.fetch_add(1) == 0) result.first_failure = what;
    };
    fid_av* av = nullptr;
    fi_addr_t* map = nullptr;
    uint64_t inserted = 0;
    auto open_and_insert = [&] {
      fi_av_attr attr{};
      attr.type = FI_AV_TABLE;
      attr.name = name.c_str();
      attr.count = kCapacity;
      if (const int rc = fi_av_open(domain_, &attr, &av, nullptr); rc != 0) {
        av = nullptr;
        fail(rc);
        return;
      }
      map = static_cast<fi_addr_t*>(attr.map_addr);
      const sockaddr_in in = addr(0x7f000000 | (p + 1) << 16 | (inserted & 0xffff),
                                  static_cast<uint16_t>(1 + (inserted >> 16)));
      ++inserted;
      fi_addr_t at = FI_ADDR_NOTAVAIL;
      if (fi_av_insert(av, &in, 1, &at, 0, nullptr) != 1) {
        fail(-FI_ENOSPC);
      } else if (map[at] != at) {
        fail(-FI_EOTHER);
      } else {
        mine.key = key(in);
        mine.at = at;
      }
    };
    auto close_av = [&] {
      mine.at = FI_ADDR_NOTAVAIL;
      if (av != nullptr && fi_close(&av->fid) != 0) fail(-FI_EBUSY);
      av = nullptr;
    };
    // A few microseconds, different each round, so that the race meets the close at every point.
    auto jitter = [&](uint64_t round) {
      const auto until = std::chrono::steady_clock::now() +
                         std::chrono::nanoseconds((round * 2654435761u + p * 977u) % 20000);
      while (std::chrono::steady_clock::now() < until) {
      }
    };
    // The second pair holds the table when a round starts; the first pair holds nothing.
    if (!first_pair) open_and_insert();
    for (uint64_t round = 0;; ++round) {
      if (p == 0 && (round >= kMaxRounds ||
                     std::chrono::steady_clock::now() > start + std::chrono::seconds(kSeconds))) {
        board->stop = 1;
      }
      barrier();
      if (board->stop.load() != 0) break;
      jitter(round);
      if (first_pair) {
        open_and_insert();  // racing the second pair's close: it may be the last
      } else {
        close_av();
      }
      barrier();
      if (!first_pair) open_and_insert();  // the first pair holds the table now
      barrier();
      // All four hold the name now: each entry is the same in every process's table.
      if (av != nullptr) {
        for (int q = 0; q < kProcs; ++q) {
          const fi_addr_t a = board->slot[q].at.load();
          if (q == p || a == FI_ADDR_NOTAVAIL) continue;
          sockaddr_in seen{};
          size_t len = sizeof(seen);
          const int rc = fi_av_lookup(av, a, &seen, &len);
          result.compared.fetch_add(1);
          if (rc != 0 || key(seen) != board->slot[q].key.load()) result.splits.fetch_add(1);
        }
      }
      barrier();
      if (first_pair) close_av();
      result.rounds.fetch_add(1);
    }
    close_av();
    _exit(0);
  }
  for (int p = 0; p < kProcs; ++p) {
    int status = 0;
    ASSERT_EQ(waitpid(children[p], &status, 0), children[p]);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "process " << p << (board->result[p].stuck ? ": a barrier timed out" : "");
  }
  uint64_t compared = 0;
  uint64_t splits = 0;
  uint64_t failures = 0;
  for (int p = 0; p < kProcs; ++p) {
    const auto& r = board->result[p];
    compared += r.compared;
    splits += r.splits;
    failures += r.failures;
    EXPECT_EQ(r.splits.load(), 0u) << "process " << p << ": an fi_addr_t that another process "
                                   << "holding the name inserted names something else here";
    EXPECT_EQ(r.failures.load(), 0u)
        << "process " << p << ": first failure " << r.first_failure.load() << " ("
        << fi_strerror(-r.first_failure.load()) << ")";
  }
  EXPECT_GT(compared, 0u);
  std::cout << board->result[0].rounds << " rounds, " << compared << " comparisons, " << splits
            << " splits, " << failures << " failed opens or inserts\n";
  munmap(mem, sizeof(Board));
  fid_av* none = nullptr;
  EXPECT_EQ(open_named(name, FI_READ, 0, &none), -FI_EINVAL) << "the last close removed the name";
}

}  // namespace
}  // namespace fabq::testing
