// Test support for the FI_EP_MSG system tests: two processes on 127.0.0.1, each with its own
// fabric, talking through the libfabric API only; a pair of pipes between them carries the
// listening port and orders the steps of a test.
//
// The provider under test is $FABQ_TEST_PROVIDER, "fabq" when unset: the same tests run
// against libfabric's own providers (FABQ_TEST_PROVIDER=tcp) to check the tests themselves.
// FI_PROVIDER is set to it at start-up, overriding the "fabq" default of api_env.cc.
//
// Shape of a test (the parent process is one side, a forked Peer the other):
//
//   Peer client([](Link& link) {        // runs in the child; its gtest failures make it
//     Side c;                           // exit 1, and Peer::join() reports that
//     if (!c.dial(link)) return;        // receives the port, connects, FI_CONNECTED
//     ...
//   });
//   Side s;
//   ASSERT_TRUE(s.serve(client.link())); // listens on 127.0.0.1:0, sends the port, accepts
//   ...
//   EXPECT_EQ(client.join(&s), 0);      // progresses s while it waits for the child's exit
//
// Every wait has a timeout: pipe reads and EQ/CQ/counter waits kTimeoutMs, a peer process
// kPeerSeconds (alarm() in the child; join() kills it after that). Progress: fabq progresses only
// inside the calls that read its queues (FI_PROGRESS_MANUAL), so a process that waits for its
// peer over the pipe keeps reading its own queues meanwhile (Side::await); completions read
// that way are kept and returned by Side::next in order.
//
// Thread safety: none; a Side belongs to one thread, except where a test hands it over.
#pragma once

#include <arpa/inet.h>
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
#include <rdma/fi_tagged.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <string>
#include <utility>

namespace fabq::systest {

inline constexpr uint32_t kVersion = FI_VERSION(1, 17);
// Any single wait for the peer, an event or a completion.
inline constexpr int kTimeoutMs = 5000;
// A peer process still running after this is killed (alarm in the child, join in the parent).
inline constexpr int kPeerSeconds = 9;

using Clock = std::chrono::steady_clock;

inline int ms_since(Clock::time_point t0) {
  return static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count());
}

// ---------------------------------------------------------------------------------------------
// The provider under test.

inline const char* provider() {
  const char* p = std::getenv("FABQ_TEST_PROVIDER");
  return p != nullptr && *p != '\0' ? p : "fabq";
}
inline bool provider_is_fabq() {
  return std::strcmp(provider(), "fabq") == 0;
}

// libfabric reads FI_PROVIDER once, at the first fi_getinfo; api_env.cc sets it to "fabq"
// without overwriting, this overwrites: either order of the two initializers works.
// SIGPIPE is ignored: a write to the pipe of a peer that already exited is a test failure
// (Link::put says so), not the end of the test process.
struct SelectProvider {
  SelectProvider() {
    setenv("FI_PROVIDER", provider(), /*overwrite=*/1);
    signal(SIGPIPE, SIG_IGN);
  }
};
inline SelectProvider select_provider;

// ---------------------------------------------------------------------------------------------
// Link: the pipes between the parent and its peer.

class Link {
 public:
  Link() = default;
  Link(int rd, int wr) : rd_(rd), wr_(wr) {}
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;
  Link(Link&& o) noexcept : rd_(std::exchange(o.rd_, -1)), wr_(std::exchange(o.wr_, -1)) {}
  Link& operator=(Link&& o) noexcept {
    std::swap(rd_, o.rd_);
    std::swap(wr_, o.wr_);
    return *this;
  }
  ~Link() {
    if (rd_ >= 0) close(rd_);
    if (wr_ >= 0) close(wr_);
  }

  int fd() const { return rd_; }

  bool put(const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
      const ssize_t w = write(wr_, c, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        ADD_FAILURE() << "pipe to the peer: " << std::strerror(errno);
        return false;
      }
      c += w;
      n -= static_cast<size_t>(w);
    }
    return true;
  }
  // Reads exactly n bytes; false (and a failure) on timeout or when the peer is gone.
  bool get(void* p, size_t n, int timeout_ms = kTimeoutMs) {
    char* c = static_cast<char*>(p);
    const auto t0 = Clock::now();
    while (n > 0) {
      if (!readable(std::max(0, timeout_ms - ms_since(t0)))) {
        ADD_FAILURE() << "the peer sent nothing over the pipe within " << timeout_ms << " ms";
        return false;
      }
      const ssize_t r = read(rd_, c, n);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        ADD_FAILURE() << "the peer closed the pipe (it exited early?)";
        return false;
      }
      c += r;
      n -= static_cast<size_t>(r);
    }
    return true;
  }
  bool readable(int timeout_ms) {
    pollfd p{.fd = rd_, .events = POLLIN};
    int rc;
    do rc = poll(&p, 1, timeout_ms);
    while (rc < 0 && errno == EINTR);
    return rc > 0;
  }

  // One-byte steps: "the receive is posted", "go on", ...
  bool signal(char step) { return put(&step, 1); }
  bool wait(char step, int timeout_ms = kTimeoutMs) {
    char got = 0;
    if (!get(&got, 1, timeout_ms)) return false;
    EXPECT_EQ(got, step) << "the peer is at another step";
    return got == step;
  }
  bool put_u64(uint64_t v) { return put(&v, sizeof(v)); }
  bool get_u64(uint64_t* v, int timeout_ms = kTimeoutMs) { return get(v, sizeof(*v), timeout_ms); }
  bool put_str(const std::string& s) { return put_u64(s.size()) && put(s.data(), s.size()); }
  bool get_str(std::string* s) {
    uint64_t n = 0;
    if (!get_u64(&n) || n > (1u << 20)) return false;
    s->assign(n, '\0');
    return get(s->data(), n);
  }

 private:
  int rd_ = -1;
  int wr_ = -1;
};

// ---------------------------------------------------------------------------------------------
// Peer: a forked child running one side of the test.

class Side;

class Peer {
 public:
  // Forks; the child runs fn(link) and exits 0 when it recorded no gtest failure, 1 otherwise
  // (gtest prints the child's failures in the test's output). Fork before opening any
  // libfabric object: the child must not inherit the parent's.
  template <class Fn>
  explicit Peer(Fn&& fn) {
    int down[2], up[2];  // parent -> child, child -> parent
    if (pipe2(down, O_CLOEXEC) != 0 || pipe2(up, O_CLOEXEC) != 0) {
      ADD_FAILURE() << "pipe2: " << std::strerror(errno);
      return;
    }
    std::fflush(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      close(down[1]);
      close(up[0]);
      alarm(kPeerSeconds);
      {
        Link link(down[0], up[1]);
        SCOPED_TRACE("in the peer process");
        fn(link);
      }
      std::fflush(nullptr);
      _exit(::testing::Test::HasFailure() ? 1 : 0);
    }
    close(down[0]);
    close(up[1]);
    link_ = Link(up[0], down[1]);
    if (pid_ < 0) ADD_FAILURE() << "fork: " << std::strerror(errno);
  }
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;
  ~Peer() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  Link& link() { return link_; }
  pid_t pid() const { return pid_; }
  // Kills the child now (SIGKILL: it dies as a crashed process does, without closing anything
  // itself) and reaps it.
  void kill_now() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  // Waits for the child to exit, progressing `progress` (when given) meanwhile. Returns its
  // exit status, or -1 when it was killed by a signal or did not exit within kPeerSeconds
  // (then it is killed).
  inline int join(Side* progress = nullptr);

 private:
  pid_t pid_ = -1;
  Link link_;
};

// ---------------------------------------------------------------------------------------------
// Side: one process's fabric, domain, EQ, CQs, counters and endpoint (passive or active).

struct Options {
  uint64_t caps = FI_MSG;
  fi_cq_format cq_format = FI_CQ_FORMAT_DATA;
  fi_wait_obj cq_wait = FI_WAIT_UNSPEC;
  size_t cq_size = 256;
  uint64_t tx_cq_flags = FI_TRANSMIT;  // | FI_SELECTIVE_COMPLETION
  uint64_t rx_cq_flags = FI_RECV;      // | FI_SELECTIVE_COMPLETION
  bool counters = false;               // a send counter (FI_SEND) and a receive counter (FI_RECV)
  const char* auth_key = nullptr;      // hints' domain_attr->auth_key (its bytes), when set
};

// A CM event as fi_eq_read returns it: the entry, then the connection data.
struct CmEvent {
  alignas(fi_eq_cm_entry) uint8_t bytes[sizeof(fi_eq_cm_entry) + 1024] = {};
  fi_eq_cm_entry& entry() { return *reinterpret_cast<fi_eq_cm_entry*>(bytes); }
  const char* data() const { return reinterpret_cast<const char*>(bytes) + sizeof(fi_eq_cm_entry); }
};
inline constexpr size_t kCmEntrySize = sizeof(fi_eq_cm_entry);

// An EQ error entry with room for its err_data.
struct CmError {
  fi_eq_err_entry entry{};
  uint8_t data[1024] = {};
};

// One completion, or the error entry that was next.
struct Completion {
  ssize_t rc = 0;  // 1: entry; -FI_EAVAIL: err; -FI_ETIMEDOUT: nothing came; else the failure
  fi_cq_tagged_entry entry{};
  fi_cq_err_entry err{};
};

inline std::string cq_str(const Completion& c) {
  if (c.rc == 1) {
    return "completion{flags=0x" + std::to_string(c.entry.flags) +
           " len=" + std::to_string(c.entry.len) + "}";
  }
  if (c.rc == -FI_EAVAIL) {
    return "error completion{err=" + std::to_string(c.err.err) + " (" + fi_strerror(c.err.err) +
           ") olen=" + std::to_string(c.err.olen) + "}";
  }
  return std::string("no completion: ") + fi_strerror(static_cast<int>(-c.rc));
}

inline std::string addr_str(const sockaddr_in& a) {
  char ip[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &a.sin_addr, ip, sizeof(ip));
  return std::string(ip) + ":" + std::to_string(ntohs(a.sin_port));
}
inline bool same_addr(const sockaddr_in& a, const sockaddr_in& b) {
  return a.sin_family == b.sin_family && a.sin_port == b.sin_port &&
         a.sin_addr.s_addr == b.sin_addr.s_addr;
}

class Side {
 public:
  explicit Side(Options opts = {}) : opts_(opts) {}
  Side(const Side&) = delete;
  Side& operator=(const Side&) = delete;
  ~Side() { close_all(); }

  // ---- getinfo
  // fi_getinfo for the provider under test: FI_EP_MSG, opts.caps, FI_SOCKADDR_IN.
  // Records no failure: the caller decides what a missing match means.
  int getinfo(const char* node, const char* service, uint64_t flags, fi_info** out) const {
    fi_info* hints = fi_allocinfo();
    if (hints == nullptr) return -FI_ENOMEM;
    hints->fabric_attr->prov_name = strdup(provider());
    hints->ep_attr->type = FI_EP_MSG;
    hints->caps = opts_.caps;
    hints->addr_format = FI_SOCKADDR_IN;
    // Every context the tests pass is a struct fi_context2.
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    if (opts_.auth_key != nullptr) {
      hints->domain_attr->auth_key = reinterpret_cast<uint8_t*>(strdup(opts_.auth_key));
      hints->domain_attr->auth_key_size = std::strlen(opts_.auth_key);
    }
    const int rc = fi_getinfo(kVersion, node, service, flags, hints, out);
    fi_freeinfo(hints);
    return rc;
  }

  // ---- passive side
  // fi_getinfo(127.0.0.1, "0", FI_SOURCE) -> fabric, EQ, domain, a passive endpoint bound to
  // the EQ, listening. Returns the port the system chose (host order), 0 on failure.
  uint16_t listen() {
    const int rc = getinfo("127.0.0.1", "0", FI_SOURCE, &info_);
    if (rc != 0) {
      ADD_FAILURE() << "fi_getinfo(" << provider()
                    << ", 127.0.0.1, FI_SOURCE): " << fi_strerror(-rc);
      return 0;
    }
    if (!open_fabric(info_)) return 0;
    if (!check(fi_passive_ep(fabric_, info_, &pep_, nullptr), "fi_passive_ep") ||
        !check(fi_pep_bind(pep_, &eq_->fid, 0), "fi_pep_bind") ||
        !check(fi_listen(pep_), "fi_listen")) {
      return 0;
    }
    sockaddr_in a = name(&pep_->fid);
    return ntohs(a.sin_port);
  }

  // Waits for the next FI_CONNREQ; returns its info (the caller's: fi_freeinfo, or give it to
  // open_endpoint) and its connection data.
  fi_info* wait_connreq(std::string* data = nullptr, int timeout_ms = kTimeoutMs) {
    uint32_t event = 0;
    CmEvent ev{};
    const ssize_t n = read_event(&event, &ev, timeout_ms);
    if (n < 0) return nullptr;
    if (event != FI_CONNREQ) {
      ADD_FAILURE() << "expected FI_CONNREQ, got event " << event;
      return nullptr;
    }
    if (data != nullptr) data->assign(ev.data(), n - kCmEntrySize);
    return ev.entry().info;
  }

  // Opens, binds and enables the endpoint for `info` (a CONNREQ's, or the active side's):
  // EQ, a transmit CQ, a receive CQ (and counters when opts.counters). Frees info.
  bool open_endpoint(fi_info* info) {
    const int rc = fi_endpoint(domain_, info, &ep_, &ep_ctx_);
    if (info != info_) fi_freeinfo(info);
    if (!check(rc, "fi_endpoint")) return false;
    return bind_and_enable();
  }
  bool accept(const void* data = nullptr, size_t len = 0) {
    if (!check(fi_accept(ep_, data, len), "fi_accept")) return false;
    return wait_connected();
  }

  // Listens, sends the port over the link, accepts the first connection request (with
  // accept_data) and waits for FI_CONNECTED. The connect data arrives in *connect_data.
  bool serve(Link& link, std::string* connect_data = nullptr,
             const std::string& accept_data = std::string()) {
    const uint16_t port = listen();
    if (port == 0 || !link.put_u64(port)) return false;
    fi_info* req = wait_connreq(connect_data);
    if (req == nullptr || !open_endpoint(req)) return false;
    return accept(accept_data.data(), accept_data.size());
  }

  // ---- active side
  // fi_getinfo(127.0.0.1, port) -> fabric, domain, EQ, the endpoint bound and enabled.
  bool open_active(uint16_t port) {
    const std::string service = std::to_string(port);
    const int rc = getinfo("127.0.0.1", service.c_str(), 0, &info_);
    if (rc != 0) {
      ADD_FAILURE() << "fi_getinfo(" << provider() << ", 127.0.0.1:" << port
                    << "): " << fi_strerror(-rc);
      return false;
    }
    return open_fabric(info_) && open_endpoint(info_);
  }
  int connect(const void* data = nullptr, size_t len = 0) {
    return fi_connect(ep_, info_->dest_addr, data, len);
  }
  // Receives the port over the link, connects with connect_data, waits for FI_CONNECTED and
  // returns the accept data in *accept_data.
  bool dial(Link& link, const std::string& connect_data = std::string(),
            std::string* accept_data = nullptr) {
    uint64_t port = 0;
    if (!link.get_u64(&port) || !open_active(static_cast<uint16_t>(port))) return false;
    if (!check(connect(connect_data.data(), connect_data.size()), "fi_connect")) return false;
    return wait_connected(accept_data);
  }

  // ---- events
  // The next EQ event within timeout_ms: its type in *event and its bytes in *ev; returns the
  // number of bytes. An error entry is read into *err (when given) and gives -FI_EAVAIL;
  // without `err` it is a failure. Nothing within the timeout: -FI_EAGAIN and a failure
  // unless quiet. The CQs are read too between short waits on the EQ (completions kept for
  // next()): a provider may learn of a disconnect on its data path. msg_progress_test checks
  // what a wait on the EQ alone wakes for.
  ssize_t read_event(uint32_t* event, CmEvent* ev, int timeout_ms = kTimeoutMs,
                     CmError* err = nullptr, uint64_t flags = 0, bool quiet = false) {
    const auto t0 = Clock::now();
    for (;;) {
      const int left = std::clamp(timeout_ms - ms_since(t0), 0, 20);
      const ssize_t n = fi_eq_sread(eq_, event, ev->bytes, sizeof(ev->bytes), left, flags);
      if (n >= 0) return n;
      if (n == -FI_EAVAIL) {
        CmError local;
        CmError* e = err != nullptr ? err : &local;
        read_eq_error(e);
        if (err == nullptr) {
          ADD_FAILURE() << "EQ error entry: err " << e->entry.err << " ("
                        << fi_strerror(e->entry.err) << "), prov_errno " << e->entry.prov_errno;
        }
        return -FI_EAVAIL;
      }
      if ((n == -FI_EAGAIN || n == -FI_EINTR || n == -FI_ETIMEDOUT) && ms_since(t0) < timeout_ms) {
        progress_cqs();
        continue;
      }
      if (!quiet) {
        ADD_FAILURE() << "fi_eq_sread: " << fi_strerror(static_cast<int>(-n)) << " after "
                      << ms_since(t0) << " ms";
      }
      return n == -FI_ETIMEDOUT ? -FI_EAGAIN : n;
    }
  }
  ssize_t read_eq_error(CmError* e) {
    e->entry = {};
    e->entry.err_data = e->data;
    e->entry.err_data_size = sizeof(e->data);
    const ssize_t rc = fi_eq_readerr(eq_, &e->entry, 0);
    EXPECT_GT(rc, 0) << "fi_eq_readerr: " << fi_strerror(static_cast<int>(-rc));
    return rc;
  }
  // Waits for FI_CONNECTED on this side's endpoint; its data into *data.
  bool wait_connected(std::string* data = nullptr, int timeout_ms = kTimeoutMs) {
    uint32_t event = 0;
    CmEvent ev{};
    const ssize_t n = read_event(&event, &ev, timeout_ms);
    if (n < 0) return false;
    if (event != FI_CONNECTED) {
      ADD_FAILURE() << "expected FI_CONNECTED, got event " << event;
      return false;
    }
    EXPECT_EQ(ev.entry().fid, &ep_->fid) << "FI_CONNECTED names another fid";
    if (data != nullptr) data->assign(ev.data(), n - kCmEntrySize);
    return true;
  }

  // ---- completions
  // The next completion of cq within timeout_ms (kept ones first, see await).
  Completion next(fid_cq* cq, int timeout_ms = kTimeoutMs) {
    auto& kept = kept_[cq];
    if (!kept.empty()) {
      Completion c = kept.front();
      kept.pop_front();
      return c;
    }
    Completion c;
    const auto t0 = Clock::now();
    for (;;) {
      const int left = std::max(0, timeout_ms - ms_since(t0));
      const ssize_t n = fi_cq_sread(cq, &c.entry, 1, nullptr, left);
      if (n == 1) {
        c.rc = 1;
        return c;
      }
      if (n == -FI_EAVAIL) {
        c.rc = read_cq_error(cq, &c.err);
        return c;
      }
      if ((n == -FI_EAGAIN || n == -FI_EINTR || n == -FI_ETIMEDOUT) && ms_since(t0) < timeout_ms) {
        continue;
      }
      c.rc = (n == -FI_EAGAIN || n == -FI_ETIMEDOUT) ? -FI_ETIMEDOUT : n;
      return c;
    }
  }
  Completion next_tx(int timeout_ms = kTimeoutMs) { return next(tx_cq_, timeout_ms); }
  Completion next_rx(int timeout_ms = kTimeoutMs) { return next(rx_cq_, timeout_ms); }
  ssize_t read_cq_error(fid_cq* cq, fi_cq_err_entry* err) {
    *err = {};
    const ssize_t rc = fi_cq_readerr(cq, err, 0);
    EXPECT_EQ(rc, 1) << "fi_cq_readerr: " << fi_strerror(static_cast<int>(-rc));
    return rc == 1 ? -FI_EAVAIL : rc;
  }
  // True when cq gives nothing for ms milliseconds (it is read, so it progresses).
  bool quiet_for(fid_cq* cq, int ms) {
    if (!kept_[cq].empty()) return false;
    Completion c = next(cq, ms);
    if (c.rc == -FI_ETIMEDOUT) return true;
    kept_[cq].push_back(c);
    return false;
  }

  // One round of progress: reads the CQs (keeping what comes for next()), counters and the EQ
  // (FI_PEEK: events stay queued).
  void progress() {
    progress_cqs();
    for (fid_cntr* cntr : {tx_cntr_, rx_cntr_}) {
      if (cntr != nullptr) (void)fi_cntr_read(cntr);
    }
    if (eq_ != nullptr) {
      uint32_t event;
      CmEvent ev;
      (void)fi_eq_read(eq_, &event, ev.bytes, sizeof(ev.bytes), FI_PEEK);
    }
  }
  void progress_cqs() {
    for (fid_cq* cq : {tx_cq_, rx_cq_}) {
      if (cq == nullptr) continue;
      Completion c;
      const ssize_t n = fi_cq_read(cq, &c.entry, 1);
      if (n == 1) {
        c.rc = 1;
        kept_[cq].push_back(c);
      } else if (n == -FI_EAVAIL) {
        c.rc = read_cq_error(cq, &c.err);
        kept_[cq].push_back(c);
      }
    }
  }
  // Calls op() (a post) until it gives something other than -FI_EAGAIN, progressing this side
  // in between: a full queue drains as the peer takes messages. Returns op()'s last result.
  template <class Op>
  ssize_t retry(Op&& op, int timeout_ms = kTimeoutMs) {
    const auto t0 = Clock::now();
    ssize_t rc;
    while ((rc = op()) == -FI_EAGAIN && ms_since(t0) < timeout_ms) progress();
    return rc;
  }
  ssize_t send(const void* buf, size_t len, void* ctx) {
    return retry([&] { return fi_send(ep_, buf, len, nullptr, FI_ADDR_UNSPEC, ctx); });
  }
  ssize_t recv(void* buf, size_t len, void* ctx) {
    return retry([&] { return fi_recv(ep_, buf, len, nullptr, FI_ADDR_UNSPEC, ctx); });
  }

  // Waits for `step` from the peer while progressing this side.
  bool await(Link& link, char step, int timeout_ms = kTimeoutMs) {
    const auto t0 = Clock::now();
    while (!link.readable(1)) {
      if (ms_since(t0) > timeout_ms) {
        ADD_FAILURE() << "the peer did not reach step '" << step << "' within " << timeout_ms
                      << " ms";
        return false;
      }
      progress();
    }
    return link.wait(step, 0);
  }

  // ---- names
  sockaddr_in name(fid_t fid) {
    sockaddr_in a{};
    size_t len = sizeof(a);
    const int rc = fi_getname(fid, &a, &len);
    EXPECT_EQ(rc, 0) << "fi_getname: " << fi_strerror(-rc);
    return a;
  }
  sockaddr_in peer_name() {
    sockaddr_in a{};
    size_t len = sizeof(a);
    const int rc = fi_getpeer(ep_, &a, &len);
    EXPECT_EQ(rc, 0) << "fi_getpeer: " << fi_strerror(-rc);
    return a;
  }

  // Closes the endpoint alone (its CQs, counters, EQ and domain stay).
  int close_ep() { return close_fid(reinterpret_cast<fid_t*>(&ep_)); }

  void close_all() {
    close_fid(reinterpret_cast<fid_t*>(&ep_));
    close_fid(reinterpret_cast<fid_t*>(&pep_));
    close_fid(reinterpret_cast<fid_t*>(&tx_cq_));
    close_fid(reinterpret_cast<fid_t*>(&rx_cq_));
    close_fid(reinterpret_cast<fid_t*>(&tx_cntr_));
    close_fid(reinterpret_cast<fid_t*>(&rx_cntr_));
    close_fid(reinterpret_cast<fid_t*>(&domain_));
    close_fid(reinterpret_cast<fid_t*>(&eq_));
    close_fid(reinterpret_cast<fid_t*>(&fabric_));
    fi_freeinfo(info_);
    info_ = nullptr;
  }

  const Options& opts() const { return opts_; }
  fi_info* info() const { return info_; }
  fid_fabric* fabric() const { return fabric_; }
  fid_domain* domain() const { return domain_; }
  fid_eq* eq() const { return eq_; }
  fid_pep* pep() const { return pep_; }
  fid_ep* ep() const { return ep_; }
  fid_cq* tx_cq() const { return tx_cq_; }
  fid_cq* rx_cq() const { return rx_cq_; }
  fid_cntr* tx_cntr() const { return tx_cntr_; }
  fid_cntr* rx_cntr() const { return rx_cntr_; }

 private:
  bool check(int rc, const char* what) {
    if (rc == 0) return true;
    ADD_FAILURE() << what << ": " << fi_strerror(-rc) << " (provider " << provider() << ")";
    return false;
  }
  int close_fid(fid_t* f) {
    if (*f == nullptr) return 0;
    const int rc = fi_close(*f);
    EXPECT_EQ(rc, 0) << "fi_close: " << fi_strerror(-rc);
    *f = nullptr;
    return rc;
  }
  bool open_fabric(fi_info* info) {
    fi_eq_attr eq_attr{.size = 64, .wait_obj = FI_WAIT_UNSPEC};
    return check(fi_fabric(info->fabric_attr, &fabric_, nullptr), "fi_fabric") &&
           check(fi_eq_open(fabric_, &eq_attr, &eq_, nullptr), "fi_eq_open") &&
           check(fi_domain(fabric_, info, &domain_, nullptr), "fi_domain");
  }
  // The CQs and counters are opened with the first endpoint; a later one (after close_ep)
  // shares them.
  bool bind_and_enable() {
    fi_cq_attr cq_attr{.size = opts_.cq_size, .format = opts_.cq_format, .wait_obj = opts_.cq_wait};
    if ((tx_cq_ == nullptr &&
         !check(fi_cq_open(domain_, &cq_attr, &tx_cq_, nullptr), "fi_cq_open")) ||
        (rx_cq_ == nullptr &&
         !check(fi_cq_open(domain_, &cq_attr, &rx_cq_, nullptr), "fi_cq_open")) ||
        !check(fi_ep_bind(ep_, &eq_->fid, 0), "fi_ep_bind(eq)") ||
        !check(fi_ep_bind(ep_, &tx_cq_->fid, opts_.tx_cq_flags), "fi_ep_bind(tx cq)") ||
        !check(fi_ep_bind(ep_, &rx_cq_->fid, opts_.rx_cq_flags), "fi_ep_bind(rx cq)")) {
      return false;
    }
    if (opts_.counters) {
      fi_cntr_attr cntr_attr{.events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_UNSPEC};
      if ((tx_cntr_ == nullptr &&
           !check(fi_cntr_open(domain_, &cntr_attr, &tx_cntr_, nullptr), "fi_cntr_open")) ||
          (rx_cntr_ == nullptr &&
           !check(fi_cntr_open(domain_, &cntr_attr, &rx_cntr_, nullptr), "fi_cntr_open")) ||
          !check(fi_ep_bind(ep_, &tx_cntr_->fid, FI_SEND), "fi_ep_bind(send cntr)") ||
          !check(fi_ep_bind(ep_, &rx_cntr_->fid, FI_RECV), "fi_ep_bind(recv cntr)")) {
        return false;
      }
    }
    return check(fi_enable(ep_), "fi_enable");
  }

  Options opts_;
  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_eq* eq_ = nullptr;
  fid_pep* pep_ = nullptr;
  fid_ep* ep_ = nullptr;
  fid_cq* tx_cq_ = nullptr;
  fid_cq* rx_cq_ = nullptr;
  fid_cntr* tx_cntr_ = nullptr;
  fid_cntr* rx_cntr_ = nullptr;
  fi_context2 ep_ctx_{};
  std::map<fid_cq*, std::deque<Completion>> kept_;
};

inline int Peer::join(Side* progress) {
  if (pid_ <= 0) return -1;
  const auto t0 = Clock::now();
  int status = 0;
  for (;;) {
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) break;
    if (ms_since(t0) > kPeerSeconds * 1000) {
      ADD_FAILURE() << "the peer process did not exit within " << kPeerSeconds << " s; killed";
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
      return -1;
    }
    if (progress != nullptr) progress->progress();
    usleep(1000);
  }
  pid_ = -1;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  ADD_FAILURE() << "the peer process died of signal " << WTERMSIG(status);
  return -1;
}

// Bytes of a recognisable pattern: message `seed`, byte i.
inline std::string pattern(size_t len, unsigned seed) {
  std::string s(len, '\0');
  for (size_t i = 0; i < len; ++i) s[i] = static_cast<char>((i * 131 + seed * 7 + 1) & 0xff);
  return s;
}

}  // namespace fabq::systest
