// Test support: a peer process and the pipes between it and the test.
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
// Every wait has a bound: pipe reads kTimeoutMs, a peer process kPeerSeconds (alarm() in the
// child; join() kills it after that). A write to the pipe of a peer that already exited is a
// test failure (Link::put says so), not the end of the test process: SIGPIPE is ignored.
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>

#include "support/provider.h"

namespace fabq::testing {

// A peer process still running after this is killed (alarm in the child, join in the parent).
inline constexpr int kPeerSeconds = 9;

class Side;

// The pipes between the parent and its peer.
class Link {
 public:
  Link() = default;
  Link(int rd, int wr) : rd_(rd), wr_(wr) {}
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;
  Link(Link&& o) noexcept;
  Link& operator=(Link&& o) noexcept;
  ~Link();

  int fd() const { return rd_; }

  bool put(const void* p, size_t n);
  // Reads exactly n bytes; false (and a failure) on timeout or when the peer is gone.
  bool get(void* p, size_t n, int timeout_ms = kTimeoutMs);
  bool readable(int timeout_ms);

  // One-byte steps: "the receive is posted", "go on", ...
  bool signal(char step) { return put(&step, 1); }
  bool wait(char step, int timeout_ms = kTimeoutMs);
  bool put_u64(uint64_t v) { return put(&v, sizeof(v)); }
  bool get_u64(uint64_t* v, int timeout_ms = kTimeoutMs) { return get(v, sizeof(*v), timeout_ms); }
  bool put_str(const std::string& s) { return put_u64(s.size()) && put(s.data(), s.size()); }
  bool get_str(std::string* s);

 private:
  int rd_ = -1;
  int wr_ = -1;
};

// A forked child running one side of the test.
class Peer {
 public:
  // Forks; the child runs fn(link) and exits 0 when it recorded no gtest failure, 1 otherwise
  // (gtest prints the child's failures in the test's output). Fork before opening any
  // libfabric object: the child must not inherit the parent's.
  explicit Peer(const std::function<void(Link&)>& fn);
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;
  ~Peer();

  Link& link() { return link_; }
  pid_t pid() const { return pid_; }
  // Kills the child now (SIGKILL: it dies as a crashed process does, without closing anything
  // itself) and reaps it.
  void kill_now();

  // Waits for the child to exit, progressing `progress` (when given) meanwhile. Returns its
  // exit status, or -1 when it was killed by a signal or did not exit within kPeerSeconds
  // (then it is killed).
  int join(Side* progress = nullptr);

 private:
  pid_t pid_ = -1;
  Link link_;
};

}  // namespace fabq::testing
