// One side of `fabq demo` (demo.cc): its lines, its control channel to the other side, what it
// opened, and the steps both sides take on their endpoint. Step 4, fabq's fault injection, is
// in demo_faults.cc.
#pragma once

#include <poll.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <string>
#include <vector>

#include "tools/demo_print.h"

namespace fabq::tools::demo {

inline constexpr int kSliceMs = 100;  // how often a wait looks whether the other side still runs
inline constexpr char kNode[] = "127.0.0.1";

// The messages of step 3, in the order they go: the client sends one, the server answers it
// the same way.
enum class Via { kSend, kTsend, kSenddata };
struct Exchange {
  Via via;
  const char* from_client;
  const char* from_server;
};
inline constexpr Exchange kExchanges[] = {
    {Via::kSend, "ping by fi_send", "pong by fi_send"},
    {Via::kTsend, "ping by fi_tsend", "pong by fi_tsend"},
    {Via::kSenddata, "ping by fi_senddata", "pong by fi_senddata"},
};
inline constexpr size_t kExchangeCount = std::size(kExchanges);
// Tags of the tagged messages and the remote CQ data of fi_senddata, per sender.
inline constexpr uint64_t kClientTag = 0xfab1, kServerTag = 0xfab2;
inline constexpr uint64_t kClientData = 0xc0ffee, kServerData = 0xfeed;

// One side of the demo: its name on every line, the clock both sides share, and the control
// channel to the other side. The control channel is the demo's own, outside the fabric: a
// SOCK_SEQPACKET socketpair, where one send is one message and the other side's exit closes
// it, which this side sees at once (POLLHUP).
class Side {
 public:
  Side(const char* name, const char* peer, timespec start, int control_fd)
      : name_(name), peer_(peer), start_(start), control_(control_fd) {}
  ~Side() { close_control(); }
  Side(const Side&) = delete;
  Side& operator=(const Side&) = delete;

  const char* name() const { return name_; }

  __attribute__((format(printf, 2, 3))) void say(const char* fmt, ...) const {
    va_list ap;
    va_start(ap, fmt);
    vemit(start_, name_, fmt, ap);
    va_end(ap);
  }

  // A step's heading; printed by the server, as "demo", between steps (lead()).
  __attribute__((format(printf, 2, 3))) void heading(const char* fmt, ...) const {
    va_list ap;
    va_start(ap, fmt);
    vemit(start_, "demo", fmt, ap);
    va_end(ap);
  }

  // Says what failed and why; returns false, for `return side.fail(...)`.
  [[nodiscard]] bool fail(const std::string& what, ssize_t rc) const {
    say("FAILED: %s: %s", what.c_str(), describe(rc, peer_).c_str());
    return false;
  }
  [[nodiscard]] __attribute__((format(printf, 2, 3))) bool unexpected(const char* fmt, ...) const {
    char text[768];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    say("FAILED: %s", text);
    return false;
  }

  // Calls attempt(slice_ms) until it returns something other than -FI_EAGAIN, and returns
  // that; kTimedOut after kWaitMs, kPeerGone as soon as the other side has exited (so that a
  // side whose peer failed says so at once instead of waiting out its timeout).
  template <class Attempt>
  [[nodiscard]] ssize_t wait(Attempt&& attempt) const {
    timespec begin;
    clock_gettime(CLOCK_MONOTONIC, &begin);
    for (;;) {
      const ssize_t rc = attempt(kSliceMs);
      if (rc != -FI_EAGAIN) return rc;
      if (peer_gone()) return kPeerGone;
      if (seconds_since(begin) * 1000 >= kWaitMs) return kTimedOut;
    }
  }

  [[nodiscard]] bool tell(const std::string& message) const {
    if (send(control_, message.data(), message.size(), MSG_NOSIGNAL) !=
        static_cast<ssize_t>(message.size())) {
      return fail("telling the " + std::string(peer_) + " \"" + message + "\"", kPeerGone);
    }
    return true;
  }

  [[nodiscard]] bool hear(const std::string& what, std::string* message) const {
    pollfd p{control_, POLLIN, 0};
    int n;
    while ((n = poll(&p, 1, kWaitMs)) < 0 && errno == EINTR) {
    }
    if (n == 0) return fail(what, kTimedOut);
    char buf[64];
    const ssize_t got = recv(control_, buf, sizeof(buf), 0);
    if (got <= 0) return fail(what, kPeerGone);
    message->assign(buf, static_cast<size_t>(got));
    return true;
  }

  // The two sides meet between steps: the client says it is ready, the server prints the
  // next step's heading and lets the client go. A step's lines so come after its heading and
  // after every line of the step before; within a step the sides run freely.
  [[nodiscard]] bool lead(const char* step) const {
    std::string m;
    if (!hear("waiting for the client to finish its step", &m)) return false;
    heading("%s", step);
    return tell("go");
  }
  [[nodiscard]] bool follow() const {
    std::string m;
    return tell("ready") && hear("waiting for the server to finish its step", &m);
  }

  void close_control() {
    if (control_ >= 0) close(control_);
    control_ = -1;
  }

 private:
  bool peer_gone() const {
    pollfd p{control_, POLLIN, 0};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR)) != 0;
  }

  const char* name_;
  const char* peer_;
  timespec start_;
  int control_;
};

// What one side opened. Closed in the order libfabric requires (an object before those it is
// bound to or opened from), also when a step fails half-way.
struct Objects {
  fi_info* info = nullptr;       // fi_getinfo's answer
  fi_info* conn_info = nullptr;  // the server's FI_CONNREQ info: the application frees it
  fid_fabric* fabric = nullptr;
  fid_eq* eq = nullptr;
  fid_pep* pep = nullptr;
  fid_domain* domain = nullptr;
  fid_cq* cq = nullptr;
  fid_ep* ep = nullptr;

  Objects() = default;
  Objects(const Objects&) = delete;
  Objects& operator=(const Objects&) = delete;
  ~Objects() { (void)close_all(); }

  // Closes everything; returns "" or the first close that failed and why.
  std::string close_all() {
    std::string failed;
    auto close_one = [&failed](auto*& obj, const char* what) {
      if (obj == nullptr) return;
      const int rc = fi_close(&obj->fid);
      obj = nullptr;
      if (rc != 0 && failed.empty()) {
        failed = std::string("fi_close(") + what + "): " + describe(rc, "");
      }
    };
    close_one(ep, "endpoint");
    close_one(pep, "passive endpoint");
    close_one(cq, "CQ");
    close_one(eq, "EQ");
    close_one(domain, "domain");
    close_one(fabric, "fabric");
    if (conn_info != nullptr) fi_freeinfo(conn_info);
    if (info != nullptr) fi_freeinfo(info);
    conn_info = info = nullptr;
    return failed;
  }
};

// One posted operation: the context the CQ hands back, what the lines call it, its buffer.
struct Op {
  fi_context2 ctx{};
  std::string what;
  char buf[64] = {};
};

// One side's endpoint and what the demo keeps about it.
struct Conn {
  Conn(const Side& s, bool is_client) : side(s), client(is_client) {}

  const Side& side;
  const bool client;
  Objects obj;
  bool tagged = false;  // the provider gave FI_TAGGED: step 3 sends tagged messages too
  Op rx[kExchangeCount];
  Op tx[kExchangeCount];
  Op fault_rx[3];
  int receives_posted = 0;                // numbers the fi_recv of the lines
  std::vector<fi_cq_tagged_entry> early;  // completions read before they were waited for

  const char* my_text(const Exchange& x) const { return client ? x.from_client : x.from_server; }
  const char* peer_text(const Exchange& x) const { return client ? x.from_server : x.from_client; }
  uint64_t my_tag() const { return client ? kClientTag : kServerTag; }
  uint64_t peer_tag() const { return client ? kServerTag : kClientTag; }
  uint64_t my_data() const { return client ? kClientData : kServerData; }
  uint64_t peer_data() const { return client ? kServerData : kClientData; }

  // The operation a completion's op_context names, or nullptr.
  const Op* find(const void* context) const {
    for (const Op& op : rx) {
      if (&op.ctx == context) return &op;
    }
    for (const Op& op : tx) {
      if (&op.ctx == context) return &op;
    }
    for (const Op& op : fault_rx) {
      if (&op.ctx == context) return &op;
    }
    return nullptr;
  }
  std::string name_of(const void* context) const {
    const Op* op = find(context);
    return op != nullptr ? op->what : "an operation the demo never posted";
  }
  std::string name_of_fid(const fid* f) const {
    if (obj.ep != nullptr && f == &obj.ep->fid)
      return std::string("the ") + side.name() + " endpoint";
    if (obj.pep != nullptr && f == &obj.pep->fid) return "the passive endpoint";
    if (obj.domain != nullptr && f == &obj.domain->fid) return "the domain";
    char text[48];
    std::snprintf(text, sizeof(text), "fid %p", static_cast<const void*>(f));
    return text;
  }
};

// An EQ entry of the connection-management kinds, with room for the connection data that
// follows it (fi_eq_cm_entry ends in a flexible array: it cannot be a member).
struct CmEvent {
  uint32_t event = 0;
  alignas(fi_eq_cm_entry) unsigned char raw[sizeof(fi_eq_cm_entry) + 1024] = {};
  size_t data_len = 0;

  fi_eq_cm_entry* entry() { return reinterpret_cast<fi_eq_cm_entry*>(raw); }
  std::string data() { return printable(reinterpret_cast<const char*>(entry()->data), data_len); }
};

// The steps both sides take (demo_conn.cc).

// fi_getinfo for an FI_EP_MSG endpoint of the provider, on 127.0.0.1:service; `source`: the
// address is the server's own (FI_SOURCE). Asks for FI_MSG and FI_TAGGED first; a provider
// without tagged messages on FI_EP_MSG endpoints (libfabric 1.17's tcp) is asked again for
// FI_MSG alone, and step 3 leaves the tagged messages out.
[[nodiscard]] bool get_info(Conn& c, const char* provider, const std::string& service, bool source);
[[nodiscard]] bool open_eq(Conn& c);
[[nodiscard]] bool open_cq(Conn& c);
// fi_endpoint from `info`, bound to the EQ and to the CQ for both directions, enabled.
[[nodiscard]] bool open_endpoint(Conn& c, fi_info* info);
// Posts a receive for every message the other side will send, before the connection exists:
// a message never arrives at an endpoint with no buffer for it.
[[nodiscard]] bool post_receives(Conn& c);
void print_completion(const Conn& c, const fi_cq_tagged_entry& e);
// Step 3: the client sends each message, the server answers it the same way.
[[nodiscard]] bool exchange_messages(Conn& c);
// Waits for the EQ event `want`; an error entry or another event is a failure, and is said.
// Some providers notice the end of a connection only while its CQ is progressed (libfabric
// 1.17's tcp reads the peer's FIN in fi_cq_read), so the CQ is read too while waiting; a
// completion found there is printed and kept for whoever waits for it.
[[nodiscard]] bool wait_cm_event(Conn& c, uint32_t want, CmEvent* ev);

// Step 4, on the server, fabq only (demo_faults.cc): what an application sees of a failing
// receive and of a failing endpoint, the faults injected through fabq's extension (fi_fabq.h).
[[nodiscard]] bool inject_faults(Conn& c);

}  // namespace fabq::tools::demo
