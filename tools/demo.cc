// `fabq demo`: a server and a client, in two processes, connected over 127.0.0.1 through
// libfabric's public API with FI_PROVIDER=fabq, as two applications would be. Each line says
// when it happened (seconds since the demo started) and which side speaks:
//
//   1. fi_getinfo on both sides; the server's passive endpoint listening on 127.0.0.1:<port>
//   2. fi_connect with connect data, FI_CONNREQ carrying it, fi_accept with accept data,
//      FI_CONNECTED on both sides
//   3. messages both ways (fi_send, fi_tsend with a tag, fi_senddata with remote CQ data) and
//      every completion with its flags decoded
//   4. fabq's fault injection (fi_fabq.h): the server's next receive completes in error, then
//      its endpoint fails: the EQ error entry, the asynchronous event, the failed receive
//   5. fi_shutdown on the client, FI_SHUTDOWN on the server, everything closed
//
// Every step checks what it shows: anything else ends the demo with a line saying what failed,
// and exit status 1. Every wait gives up after kWaitMs.
//
// `--provider NAME` runs the same against another provider (tcp, sockets); step 4 is fabq's
// own and is skipped there. `--core` runs the older demonstration of the core EQ/CQ engine
// alone (demo_core.cc).
#include <arpa/inet.h>
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
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "core/strerror.h"
#include "fabq/fi_fabq.h"
#include "tools/commands.h"

namespace fabq::tools {
namespace {

constexpr int kWaitMs = 10'000;  // the longest any wait lasts before the demo fails
constexpr int kSliceMs = 100;    // how often a wait looks whether the other side still runs
constexpr uint32_t kApiVersion = FI_VERSION(1, 17);
constexpr char kNode[] = "127.0.0.1";
constexpr char kConnectData[] = "hello from client";
constexpr char kAcceptData[] = "hello from server";
constexpr char kFaultTarget[] = "server";  // the server endpoint's set_name() name

// The outcomes of a wait besides the provider's own codes; outside the fabric errno range.
constexpr ssize_t kTimedOut = -1'000'001;
constexpr ssize_t kPeerGone = -1'000'002;
constexpr ssize_t kCqTrouble = -1'000'003;  // the CQ, read while waiting on the EQ, failed

// The messages of step 3, in the order they go: the client sends one, the server answers it
// the same way.
enum class Via { kSend, kTsend, kSenddata };
struct Exchange {
  Via via;
  const char* from_client;
  const char* from_server;
};
constexpr Exchange kExchanges[] = {
    {Via::kSend, "ping by fi_send", "pong by fi_send"},
    {Via::kTsend, "ping by fi_tsend", "pong by fi_tsend"},
    {Via::kSenddata, "ping by fi_senddata", "pong by fi_senddata"},
};
constexpr size_t kExchangeCount = std::size(kExchanges);
// Tags of the tagged messages and the remote CQ data of fi_senddata, per sender.
constexpr uint64_t kClientTag = 0xfab1, kServerTag = 0xfab2;
constexpr uint64_t kClientData = 0xc0ffee, kServerData = 0xfeed;

struct Options {
  const char* provider = "fabq";
  unsigned port = 0;  // 0: the system picks one, and the server learns it with fi_getname
  bool core = false;
};

void usage(FILE* out) {
  std::fprintf(
      out,
      "usage: fabq demo [--provider NAME] [--port N] [--core]\n"
      "\n"
      "A server and a client, in two processes, connected over 127.0.0.1 through libfabric:\n"
      "getinfo and listen, connect and accept with connection data, messages both ways with\n"
      "their completions, an injected fault and how the application sees it, and an orderly\n"
      "shutdown. Exits 0 when every step behaved as it says.\n"
      "  --provider NAME  the libfabric provider (default fabq). tcp or sockets show the same\n"
      "                   application against libfabric's own; the fault step is fabq's and\n"
      "                   is skipped with them\n"
      "  --port N         the port to listen on (default: one the system picks)\n"
      "  --core           show the core event and completion queue engine alone instead\n");
}

double seconds_since(const timespec& start) {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<double>(now.tv_sec - start.tv_sec) +
         static_cast<double>(now.tv_nsec - start.tv_nsec) / 1e9;
}

// Prints one line: the time since `start`, who speaks, the text. The line is formatted first
// and written with one write(2): both processes write to the same stdout, and a write of at
// most PIPE_BUF bytes to a pipe is never interleaved with another process's.
void vemit(const timespec& start, const char* who, const char* fmt, va_list ap) {
  char line[1024];
  const int head = std::snprintf(line, sizeof(line), "%7.3f  %-6s  ", seconds_since(start), who);
  const size_t room = sizeof(line) - static_cast<size_t>(head) - 1;  // 1: the newline
  const int body = std::vsnprintf(line + head, room, fmt, ap);
  size_t len = static_cast<size_t>(head) + std::min<size_t>(body < 0 ? 0 : body, room - 1);
  line[len++] = '\n';
  for (size_t done = 0; done < len;) {
    const ssize_t n = write(STDOUT_FILENO, line + done, len - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

__attribute__((format(printf, 3, 4))) void emit(const timespec& start, const char* who,
                                                const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vemit(start, who, fmt, ap);
  va_end(ap);
}

// "-FI_ENODATA (No data available)" for a libfabric return code; a wait's own outcomes in
// words.
std::string describe(ssize_t rc, const char* peer) {
  if (rc == kTimedOut) return "nothing came within " + std::to_string(kWaitMs / 1000) + " s";
  if (rc == kPeerGone) return std::string("the ") + peer + " stopped (its lines say why)";
  const int err = static_cast<int>(rc < 0 ? -rc : rc);
  const char* name = core::fi_errno_name(err);
  return std::string(rc < 0 ? "-" : "") + (name != nullptr ? name : std::to_string(err)) + " (" +
         fi_strerror(err) + ")";
}

std::string errno_name(int err) {
  const char* name = core::fi_errno_name(err);
  return name != nullptr ? name : std::to_string(err);
}

// "FI_RECV|FI_MSG|FI_REMOTE_CQ_DATA": the flags of a completion, by name.
std::string cq_flags(uint64_t flags) {
  static constexpr struct {
    uint64_t bit;
    const char* name;
  } kNames[] = {
      {FI_SEND, "FI_SEND"},
      {FI_RECV, "FI_RECV"},
      {FI_MSG, "FI_MSG"},
      {FI_TAGGED, "FI_TAGGED"},
      {FI_RMA, "FI_RMA"},
      {FI_ATOMIC, "FI_ATOMIC"},
      {FI_READ, "FI_READ"},
      {FI_WRITE, "FI_WRITE"},
      {FI_REMOTE_READ, "FI_REMOTE_READ"},
      {FI_REMOTE_WRITE, "FI_REMOTE_WRITE"},
      {FI_REMOTE_CQ_DATA, "FI_REMOTE_CQ_DATA"},
      {FI_MULTI_RECV, "FI_MULTI_RECV"},
      {FI_MORE, "FI_MORE"},
      {FI_CLAIM, "FI_CLAIM"},
  };
  std::string out;
  for (const auto& n : kNames) {
    if ((flags & n.bit) == 0) continue;
    out += (out.empty() ? "" : "|") + std::string(n.name);
    flags &= ~n.bit;
  }
  if (flags != 0) {
    char rest[32];
    std::snprintf(rest, sizeof(rest), "%s%#llx", out.empty() ? "" : "|", (unsigned long long)flags);
    out += rest;
  }
  return out.empty() ? "0" : out;
}

const char* event_name(uint32_t event) {
  switch (event) {
    case FI_NOTIFY:
      return "FI_NOTIFY";
    case FI_CONNREQ:
      return "FI_CONNREQ";
    case FI_CONNECTED:
      return "FI_CONNECTED";
    case FI_SHUTDOWN:
      return "FI_SHUTDOWN";
    case FI_MR_COMPLETE:
      return "FI_MR_COMPLETE";
    case FI_AV_COMPLETE:
      return "FI_AV_COMPLETE";
    case FI_JOIN_COMPLETE:
      return "FI_JOIN_COMPLETE";
    default:
      return "an unknown event";
  }
}

const char* progress_name(fi_progress p) {
  switch (p) {
    case FI_PROGRESS_AUTO:
      return "auto";
    case FI_PROGRESS_MANUAL:
      return "manual";
    default:
      return "unspecified";
  }
}

// "127.0.0.1:40123" for the IPv4 and IPv6 socket addresses fi_getinfo and fi_getname give.
std::string address(const void* addr, size_t len) {
  if (addr == nullptr || len == 0) return "(none)";
  char host[INET6_ADDRSTRLEN] = "?";
  const auto* sa = static_cast<const sockaddr*>(addr);
  if (sa->sa_family == AF_INET && len >= sizeof(sockaddr_in)) {
    const auto* in = static_cast<const sockaddr_in*>(addr);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    return std::string(host) + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (sa->sa_family == AF_INET6 && len >= sizeof(sockaddr_in6)) {
    const auto* in6 = static_cast<const sockaddr_in6*>(addr);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    return "[" + std::string(host) + "]:" + std::to_string(ntohs(in6->sin6_port));
  }
  return "(an address of family " + std::to_string(sa->sa_family) + ")";
}

unsigned port_of(const void* addr, size_t len) {
  const auto* sa = static_cast<const sockaddr*>(addr);
  if (sa->sa_family == AF_INET && len >= sizeof(sockaddr_in)) {
    return ntohs(static_cast<const sockaddr_in*>(addr)->sin_port);
  }
  if (sa->sa_family == AF_INET6 && len >= sizeof(sockaddr_in6)) {
    return ntohs(static_cast<const sockaddr_in6*>(addr)->sin6_port);
  }
  return 0;
}

// Received bytes as text for a line: at most `len`, anything unprintable as '.'.
std::string printable(const char* buf, size_t len) {
  std::string out(buf, len);
  for (char& ch : out) {
    if (ch < 0x20 || ch > 0x7e) ch = '.';
  }
  return out;
}

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

// fi_getinfo for an FI_EP_MSG endpoint of the provider, on 127.0.0.1:service; `source`: the
// address is the server's own (FI_SOURCE). Asks for FI_MSG and FI_TAGGED first; a provider
// without tagged messages on FI_EP_MSG endpoints (libfabric 1.17's tcp) is asked again for
// FI_MSG alone, and step 3 leaves the tagged messages out.
[[nodiscard]] bool get_info(Conn& c, const char* provider, const std::string& service,
                            bool source) {
  const Side& s = c.side;
  std::string untagged;  // why the FI_TAGGED question failed, said if the FI_MSG one works
  for (const uint64_t caps : {FI_MSG | FI_TAGGED, FI_MSG}) {
    fi_info* hints = fi_allocinfo();
    if (hints == nullptr) return s.fail("fi_allocinfo", -FI_ENOMEM);
    hints->ep_attr->type = FI_EP_MSG;
    hints->caps = caps;
    // The demo passes an fi_context2 with every operation and registers no memory.
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->addr_format = FI_SOCKADDR_IN;
    hints->fabric_attr->prov_name = strdup(provider);
    const int rc =
        fi_getinfo(kApiVersion, kNode, service.c_str(), source ? FI_SOURCE : 0, hints, &c.obj.info);
    fi_freeinfo(hints);
    const std::string call = "fi_getinfo(" + std::string(kNode) + ", \"" + service + "\"" +
                             (source ? ", FI_SOURCE" : "") + ", FI_EP_MSG, " + cq_flags(caps) + ")";
    if (rc == -FI_ENODATA && caps != FI_MSG) {
      untagged = call + " -> " + describe(rc, "");
      continue;
    }
    if (rc != 0) return s.fail(call, rc);
    if (!untagged.empty()) {
      s.say(
          "%s: %s has no tagged messages on FI_EP_MSG endpoints; asking for FI_MSG alone, "
          "step 3 leaves fi_tsend out",
          untagged.c_str(), provider);
    }
    c.tagged = (caps & FI_TAGGED) != 0;
    const fi_info* i = c.obj.info;
    s.say("%s -> provider %s, fabric %s, domain %s", call.c_str(), i->fabric_attr->prov_name,
          i->fabric_attr->name, i->domain_attr->name);
    s.say("  %s address %s; inject_size %zu, max_msg_size %zu, cq_data_size %zu, %s progress",
          source ? "source" : "destination",
          source ? address(i->src_addr, i->src_addrlen).c_str()
                 : address(i->dest_addr, i->dest_addrlen).c_str(),
          i->tx_attr->inject_size, i->ep_attr->max_msg_size, i->domain_attr->cq_data_size,
          progress_name(i->domain_attr->data_progress));
    if (i->domain_attr->cq_data_size < sizeof(uint32_t)) {
      return s.unexpected("%s carries %zu bytes of remote CQ data; fi_senddata needs 4", provider,
                          i->domain_attr->cq_data_size);
    }
    return true;
  }
  return false;  // not reached: the FI_MSG round returns
}

[[nodiscard]] bool open_eq(Conn& c) {
  fi_eq_attr attr{.wait_obj = FI_WAIT_UNSPEC};
  const int rc = fi_eq_open(c.obj.fabric, &attr, &c.obj.eq, nullptr);
  return rc == 0 || c.side.fail("fi_eq_open", rc);
}

[[nodiscard]] bool open_cq(Conn& c) {
  fi_cq_attr attr{.format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_UNSPEC};
  const int rc = fi_cq_open(c.obj.domain, &attr, &c.obj.cq, nullptr);
  return rc == 0 || c.side.fail("fi_cq_open", rc);
}

// fi_endpoint from `info`, bound to the EQ and to the CQ for both directions, enabled.
[[nodiscard]] bool open_endpoint(Conn& c, fi_info* info) {
  const Side& s = c.side;
  int rc = fi_endpoint(c.obj.domain, info, &c.obj.ep, nullptr);
  if (rc != 0) return s.fail("fi_endpoint", rc);
  if ((rc = fi_ep_bind(c.obj.ep, &c.obj.eq->fid, 0)) != 0) return s.fail("fi_ep_bind(EQ)", rc);
  if ((rc = fi_ep_bind(c.obj.ep, &c.obj.cq->fid, FI_TRANSMIT | FI_RECV)) != 0) {
    return s.fail("fi_ep_bind(CQ)", rc);
  }
  if ((rc = fi_enable(c.obj.ep)) != 0) return s.fail("fi_enable", rc);
  return true;
}

// Posts a receive for every message the other side will send, before the connection exists:
// a message never arrives at an endpoint with no buffer for it.
[[nodiscard]] bool post_receives(Conn& c) {
  std::string list;
  for (size_t i = 0; i < kExchangeCount; ++i) {
    const Exchange& x = kExchanges[i];
    if (x.via == Via::kTsend && !c.tagged) continue;
    Op& op = c.rx[i];
    ssize_t rc;
    if (x.via == Via::kTsend) {
      char what[48];
      std::snprintf(what, sizeof(what), "fi_trecv (tag %#llx)", (unsigned long long)c.peer_tag());
      op.what = what;
      rc = fi_trecv(c.obj.ep, op.buf, sizeof(op.buf), nullptr, 0, c.peer_tag(), 0, &op.ctx);
    } else {
      op.what = "fi_recv #" + std::to_string(++c.receives_posted);
      rc = fi_recv(c.obj.ep, op.buf, sizeof(op.buf), nullptr, 0, &op.ctx);
    }
    if (rc != 0) return c.side.fail(op.what, rc);
    list += (list.empty() ? "" : ", ") + op.what;
  }
  c.side.say("posted %s, one for each message the %s will send", list.c_str(),
             c.client ? "server" : "client");
  return true;
}

void print_completion(const Conn& c, const fi_cq_tagged_entry& e) {
  std::string line = "completion " + cq_flags(e.flags) + ": " + c.name_of(e.op_context);
  if (e.flags & FI_RECV) {
    char more[96];
    std::snprintf(more, sizeof(more), ", len %zu", e.len);
    line += more;
    if (e.flags & FI_TAGGED) {
      std::snprintf(more, sizeof(more), ", tag %#llx", (unsigned long long)e.tag);
      line += more;
    }
    if (e.flags & FI_REMOTE_CQ_DATA) {
      std::snprintf(more, sizeof(more), ", data %#llx", (unsigned long long)e.data);
      line += more;
    }
    if (const Op* op = c.find(e.op_context)) {
      line += ", \"" + printable(op->buf, std::min(e.len, sizeof(op->buf))) + "\"";
    }
  } else if (e.flags & FI_SEND) {
    line += " done, its buffer is the application's again";
  }
  c.side.say("%s", line.c_str());
}

// Reads the CQ's error entry and says what it holds; returns false: in steps 1-3 and 5 an
// error completion is a failure.
[[nodiscard]] bool report_cq_error(const Conn& c, const std::string& what) {
  fi_cq_err_entry err{};
  const ssize_t rc = fi_cq_readerr(c.obj.cq, &err, 0);
  if (rc != 1) return c.side.fail(what + ": fi_cq_readerr", rc);
  char text[128] = "";
  fi_cq_strerror(c.obj.cq, err.prov_errno, err.err_data, text, sizeof(text));
  return c.side.unexpected("%s: error completion of %s: err %s, prov_errno %d (%s)", what.c_str(),
                           c.name_of(err.op_context).c_str(), describe(err.err, "").c_str(),
                           err.prov_errno, text);
}

// Waits for the completion of `op`, printing every completion as it is read. The other side
// may answer before this side's own send has completed, so completions of other operations
// can come first: they are kept in `early` until waited for.
[[nodiscard]] bool wait_completion(Conn& c, const Op& op, fi_cq_tagged_entry* out) {
  for (auto it = c.early.begin(); it != c.early.end(); ++it) {
    if (it->op_context == &op.ctx) {
      *out = *it;
      c.early.erase(it);
      return true;
    }
  }
  const std::string what = "waiting for the completion of " + op.what;
  for (;;) {
    fi_cq_tagged_entry e{};
    const ssize_t rc =
        c.side.wait([&](int ms) { return fi_cq_sread(c.obj.cq, &e, 1, nullptr, ms); });
    if (rc == -FI_EAVAIL) return report_cq_error(c, what);
    if (rc != 1) return c.side.fail(what, rc);
    print_completion(c, e);
    if (e.op_context == &op.ctx) {
      *out = e;
      return true;
    }
    c.early.push_back(e);
  }
}

// Sends this side's message of exchange i and waits for its completion.
[[nodiscard]] bool send_message(Conn& c, size_t i) {
  const Exchange& x = kExchanges[i];
  const Side& s = c.side;
  Op& op = c.tx[i];
  const char* text = c.my_text(x);
  const size_t len = std::strlen(text);
  std::memcpy(op.buf, text, len);
  switch (x.via) {
    case Via::kSend:
      op.what = "fi_send";
      s.say("fi_send \"%s\" (%zu bytes)", text, len);
      break;
    case Via::kTsend:
      op.what = "fi_tsend";
      s.say("fi_tsend \"%s\" (%zu bytes), tag %#llx", text, len, (unsigned long long)c.my_tag());
      break;
    case Via::kSenddata:
      op.what = "fi_senddata";
      s.say("fi_senddata \"%s\" (%zu bytes), remote CQ data %#llx", text, len,
            (unsigned long long)c.my_data());
      break;
  }
  // A full transmit queue answers -FI_EAGAIN; try again shortly (it does not happen with one
  // message in flight, but an application must allow for it).
  const ssize_t rc = s.wait([&](int) {
    ssize_t r = -FI_EINVAL;
    switch (x.via) {
      case Via::kSend:
        r = fi_send(c.obj.ep, op.buf, len, nullptr, 0, &op.ctx);
        break;
      case Via::kTsend:
        r = fi_tsend(c.obj.ep, op.buf, len, nullptr, 0, c.my_tag(), &op.ctx);
        break;
      case Via::kSenddata:
        r = fi_senddata(c.obj.ep, op.buf, len, nullptr, c.my_data(), 0, &op.ctx);
        break;
    }
    if (r == -FI_EAGAIN) usleep(1000);
    return r;
  });
  if (rc != 0) return s.fail(op.what, rc);
  fi_cq_tagged_entry e;
  if (!wait_completion(c, op, &e)) return false;
  const uint64_t want = FI_SEND | (x.via == Via::kTsend ? FI_TAGGED : FI_MSG);
  if ((e.flags & want) != want) {
    return s.unexpected("%s completed with flags %s; fi_cq(3) says %s", op.what.c_str(),
                        cq_flags(e.flags).c_str(), cq_flags(want).c_str());
  }
  return true;
}

// Waits for the other side's message of exchange i and checks it arrived as it was sent.
[[nodiscard]] bool receive_message(Conn& c, size_t i) {
  const Exchange& x = kExchanges[i];
  const Side& s = c.side;
  const Op& op = c.rx[i];
  fi_cq_tagged_entry e;
  if (!wait_completion(c, op, &e)) return false;
  const uint64_t want = FI_RECV | (x.via == Via::kTsend ? FI_TAGGED : FI_MSG) |
                        (x.via == Via::kSenddata ? FI_REMOTE_CQ_DATA : 0);
  // FI_REMOTE_CQ_DATA must be there for fi_senddata, and only for it.
  if ((e.flags & (want | FI_REMOTE_CQ_DATA)) != want) {
    return s.unexpected("%s completed with flags %s; expected %s", op.what.c_str(),
                        cq_flags(e.flags).c_str(), cq_flags(want).c_str());
  }
  const char* text = c.peer_text(x);
  if (e.len != std::strlen(text) || std::memcmp(op.buf, text, e.len) != 0) {
    return s.unexpected("%s received %zu bytes, not the %zu bytes of \"%s\"", op.what.c_str(),
                        e.len, std::strlen(text), text);
  }
  if (x.via == Via::kTsend && e.tag != c.peer_tag()) {
    return s.unexpected("%s completed with tag %#llx, sent with %#llx", op.what.c_str(),
                        (unsigned long long)e.tag, (unsigned long long)c.peer_tag());
  }
  if (x.via == Via::kSenddata && e.data != c.peer_data()) {
    return s.unexpected("%s completed with data %#llx, sent with %#llx", op.what.c_str(),
                        (unsigned long long)e.data, (unsigned long long)c.peer_data());
  }
  return true;
}

// Step 3: the client sends each message, the server answers it the same way.
[[nodiscard]] bool exchange_messages(Conn& c) {
  for (size_t i = 0; i < kExchangeCount; ++i) {
    if (kExchanges[i].via == Via::kTsend && !c.tagged) continue;
    const bool ok = c.client ? send_message(c, i) && receive_message(c, i)
                             : receive_message(c, i) && send_message(c, i);
    if (!ok) return false;
  }
  return true;
}

// An EQ entry of the connection-management kinds, with room for the connection data that
// follows it (fi_eq_cm_entry ends in a flexible array: it cannot be a member).
struct CmEvent {
  uint32_t event = 0;
  alignas(fi_eq_cm_entry) unsigned char raw[sizeof(fi_eq_cm_entry) + 1024] = {};
  size_t data_len = 0;

  fi_eq_cm_entry* entry() { return reinterpret_cast<fi_eq_cm_entry*>(raw); }
  std::string data() { return printable(reinterpret_cast<const char*>(entry()->data), data_len); }
};

// Waits for the EQ event `want`; an error entry or another event is a failure, and is said.
// Some providers notice the end of a connection only while its CQ is progressed (libfabric
// 1.17's tcp reads the peer's FIN in fi_cq_read), so the CQ is read too while waiting; a
// completion found there is printed and kept for whoever waits for it.
[[nodiscard]] bool wait_cm_event(Conn& c, uint32_t want, CmEvent* ev) {
  const Side& s = c.side;
  const std::string what = std::string("waiting for ") + event_name(want);
  const ssize_t rc = s.wait([&](int ms) -> ssize_t {
    if (c.obj.cq != nullptr) {
      fi_cq_tagged_entry e{};
      const ssize_t r = fi_cq_read(c.obj.cq, &e, 1);
      if (r == 1) {
        print_completion(c, e);
        c.early.push_back(e);
      } else if (r != -FI_EAGAIN) {
        return kCqTrouble;
      }
    }
    return fi_eq_sread(c.obj.eq, &ev->event, ev->raw, sizeof(ev->raw), ms, 0);
  });
  if (rc == kCqTrouble) {
    fi_cq_tagged_entry e{};
    const ssize_t r = fi_cq_read(c.obj.cq, &e, 1);
    return r == -FI_EAVAIL ? report_cq_error(c, what) : s.fail(what + ": fi_cq_read", r);
  }
  if (rc == -FI_EAVAIL) {
    fi_eq_err_entry err{};
    const ssize_t r = fi_eq_readerr(c.obj.eq, &err, 0);
    if (r < 0) return s.fail(what + ": fi_eq_readerr", r);
    char text[128] = "";
    fi_eq_strerror(c.obj.eq, err.prov_errno, err.err_data, text, sizeof(text));
    return s.unexpected("%s: an error entry on %s: err %s, prov_errno %d (%s)", what.c_str(),
                        c.name_of_fid(err.fid).c_str(), describe(err.err, "").c_str(),
                        err.prov_errno, text);
  }
  if (rc < 0) return s.fail(what, rc);
  if (static_cast<size_t>(rc) < sizeof(fi_eq_cm_entry)) {
    return s.unexpected("%s: fi_eq_sread returned %zd bytes, less than an fi_eq_cm_entry",
                        what.c_str(), rc);
  }
  if (ev->event != want) {
    if (ev->event == FI_CONNREQ && ev->entry()->info != nullptr) {
      fi_freeinfo(ev->entry()->info);
    }
    return s.unexpected("%s: the EQ gave %s on %s", what.c_str(), event_name(ev->event),
                        c.name_of_fid(ev->entry()->fid).c_str());
  }
  ev->data_len = static_cast<size_t>(rc) - sizeof(fi_eq_cm_entry);
  return true;
}

// "0", or "0x1005 (FI_FABQ_EVENT_EP_FATAL)": fabq gives an event kind as prov_errno when an
// event caused the error.
std::string prov_errno_name(const fi_fabq_async_ops* ops, int prov_errno) {
  const auto kind = static_cast<uint32_t>(prov_errno);
  if (kind < FI_FABQ_EVENT_FIRST || kind > FI_FABQ_EVENT_LAST) return std::to_string(prov_errno);
  char text[96];
  std::snprintf(text, sizeof(text), "%#x (%s)", kind, ops->event_type_str(kind));
  return text;
}

// Reads one error completion of `op` (fi_cq_read, which answers -FI_EAVAIL while an error
// entry heads the queue, then fi_cq_readerr) and checks its err and prov_errno.
[[nodiscard]] bool expect_cq_error(Conn& c, const fi_fabq_async_ops* ops, const Op& op,
                                   int want_err, int want_prov) {
  const Side& s = c.side;
  fi_cq_tagged_entry e{};
  const ssize_t rc = s.wait([&](int) {
    const ssize_t r = fi_cq_read(c.obj.cq, &e, 1);
    if (r == -FI_EAGAIN) usleep(1000);
    return r;
  });
  if (rc != -FI_EAVAIL) {
    if (rc == 1) print_completion(c, e);
    return rc == 1 ? s.unexpected("fi_cq_read gave a completion, not -FI_EAVAIL")
                   : s.fail("fi_cq_read (waiting for the error completion of " + op.what + ")", rc);
  }
  s.say("fi_cq_read -> -FI_EAVAIL: an error completion heads the CQ");
  fi_cq_err_entry err{};
  const ssize_t r = fi_cq_readerr(c.obj.cq, &err, 0);
  if (r != 1) return s.fail("fi_cq_readerr", r);
  char text[128] = "";
  fi_cq_strerror(c.obj.cq, err.prov_errno, err.err_data, text, sizeof(text));
  s.say("fi_cq_readerr -> %s, flags %s, err %s, prov_errno %s", c.name_of(err.op_context).c_str(),
        cq_flags(err.flags).c_str(), describe(err.err, "").c_str(),
        prov_errno_name(ops, err.prov_errno).c_str());
  s.say("  fi_cq_strerror(prov_errno) -> \"%s\"", text);
  if (err.op_context != &op.ctx || err.err != want_err || err.prov_errno != want_prov) {
    return s.unexpected("expected the error completion of %s with err %s, prov_errno %d",
                        op.what.c_str(), errno_name(want_err).c_str(), want_prov);
  }
  return true;
}

[[nodiscard]] bool post_fault_receive(Conn& c, Op& op, const char* why) {
  op.what = "fi_recv #" + std::to_string(++c.receives_posted);
  const ssize_t rc = fi_recv(c.obj.ep, op.buf, sizeof(op.buf), nullptr, 0, &op.ctx);
  if (rc != 0) return c.side.fail(op.what, rc);
  c.side.say("%s -> 0: posted; %s", op.what.c_str(), why);
  return true;
}

// Step 4, on the server, fabq only: what an application sees of a failing receive and of a
// failing endpoint, the faults injected through fabq's extension (fi_fabq.h).
[[nodiscard]] bool inject_faults(Conn& c) {
  const Side& s = c.side;
  fi_fabq_async_ops* ops = nullptr;
  int rc = fi_open_ops(&c.obj.domain->fid, FI_FABQ_ASYNC_OPS, 0, reinterpret_cast<void**>(&ops),
                       nullptr);
  if (rc != 0) return s.fail("fi_open_ops(domain, FI_FABQ_ASYNC_OPS)", rc);
  // A named target finds this endpoint whatever else the domain holds; on=ep:0 would count.
  if ((rc = ops->set_name(&c.obj.ep->fid, kFaultTarget)) != 0) return s.fail("set_name", rc);
  s.say("fi_open_ops(domain, \"%s\") -> 0; set_name(endpoint, \"%s\") -> 0", FI_FABQ_ASYNC_OPS,
        kFaultTarget);

  // A receive completes in error: the application learns it from the CQ.
  const std::string receive_rule = std::string("error=FI_EIO,on=ep:") + kFaultTarget;
  if ((rc = ops->inject(c.obj.domain, receive_rule.c_str())) != 0) {
    return s.fail("inject(\"" + receive_rule + "\")", rc);
  }
  s.say("inject(\"%s\") -> 0: the next receive posted on the endpoint fails", receive_rule.c_str());
  if (!post_fault_receive(c, c.fault_rx[0], "the rule fails it")) return false;
  if (!expect_cq_error(c, ops, c.fault_rx[0], FI_EIO, 0)) return false;

  // The endpoint fails: an error entry on its EQ, an event on the domain's asynchronous
  // channel, its posted receives completed in error, later posts refused.
  if (!post_fault_receive(c, c.fault_rx[1], "waiting for data when the endpoint fails")) {
    return false;
  }
  const std::string fatal_rule = std::string("event=ep_fatal,on=ep:") + kFaultTarget;
  if ((rc = ops->inject(c.obj.domain, fatal_rule.c_str())) != 0) {
    return s.fail("inject(\"" + fatal_rule + "\")", rc);
  }
  s.say("inject(\"%s\") -> 0: the endpoint fails now", fatal_rule.c_str());
  CmEvent ev;
  const ssize_t got = s.wait(
      [&](int ms) { return fi_eq_sread(c.obj.eq, &ev.event, ev.raw, sizeof(ev.raw), ms, 0); });
  if (got != -FI_EAVAIL) {
    return got >= 0 ? s.unexpected("fi_eq_sread gave %s, not -FI_EAVAIL", event_name(ev.event))
                    : s.fail("fi_eq_sread (waiting for the error entry)", got);
  }
  s.say("fi_eq_sread -> -FI_EAVAIL: an error entry heads the EQ");
  fi_eq_err_entry err{};
  const ssize_t r = fi_eq_readerr(c.obj.eq, &err, 0);
  if (r < 0) return s.fail("fi_eq_readerr", r);
  char text[160] = "";
  fi_eq_strerror(c.obj.eq, err.prov_errno, err.err_data, text, sizeof(text));
  s.say("fi_eq_readerr -> fid = %s, err %s, prov_errno %s", c.name_of_fid(err.fid).c_str(),
        describe(err.err, "").c_str(), prov_errno_name(ops, err.prov_errno).c_str());
  s.say("  fi_eq_strerror(prov_errno) -> \"%s\"", text);
  if (err.fid != &c.obj.ep->fid || err.err != FI_EIO || err.prov_errno != FI_FABQ_EVENT_EP_FATAL) {
    return s.unexpected("expected the server endpoint, FI_EIO, FI_FABQ_EVENT_EP_FATAL");
  }

  // The channel holds the same failure as an event, after whatever came before it (fabq
  // raises FI_FABQ_EVENT_COMM_EST when a connection carries its first packet). Every event
  // read is acknowledged: until then the endpoint could not be closed.
  for (int seen = 0;; ++seen) {
    if (seen == 16) return s.unexpected("no FI_FABQ_EVENT_EP_FATAL among 16 events");
    fi_fabq_async_event ae{};
    rc = static_cast<int>(s.wait([&](int ms) { return ops->get_event(c.obj.domain, &ae, ms); }));
    if (rc != 0) return s.fail("get_event (waiting for FI_FABQ_EVENT_EP_FATAL)", rc);
    const int acked = ops->ack_event(c.obj.domain, &ae);
    s.say("get_event -> %s on %s (seq %llu); ack_event -> %d", ops->event_type_str(ae.type),
          c.name_of_fid(ae.fid).c_str(), (unsigned long long)ae.seq, acked);
    if (acked != 0) return s.fail("ack_event", acked);
    if (ae.type != FI_FABQ_EVENT_EP_FATAL) continue;
    if (ae.fid != &c.obj.ep->fid) return s.unexpected("the event names another object");
    break;
  }

  if (!expect_cq_error(c, ops, c.fault_rx[1], FI_EIO, FI_FABQ_EVENT_EP_FATAL)) return false;
  Op& refused = c.fault_rx[2];
  refused.what = "fi_recv";
  const ssize_t post =
      fi_recv(c.obj.ep, refused.buf, sizeof(refused.buf), nullptr, 0, &refused.ctx);
  s.say("fi_recv -> %s: a failed endpoint takes nothing more until it is closed",
        describe(post, "").c_str());
  if (post != -FI_EOPBADSTATE) return s.unexpected("fi_recv was not refused with -FI_EOPBADSTATE");
  return true;
}

const char kStep2[] = "== 2. Connection: fi_connect with data, FI_CONNREQ, fi_accept, FI_CONNECTED";
const char kStep3[] = "== 3. Messages both ways, and their completions";
const char kStep4[] =
    "== 4. Faults injected with fabq's extension (fi_fabq.h), as the server sees them";
const char kStep5[] = "== 5. Orderly shutdown: fi_shutdown, FI_SHUTDOWN, everything closed";

[[nodiscard]] bool serve(const Side& s, const Options& opt) {
  Conn c(s, /*is_client=*/false);
  Objects& o = c.obj;
  // Step 1 (its heading is the demo's first line): listen.
  if (!get_info(c, opt.provider, std::to_string(opt.port), /*source=*/true)) return false;
  int rc = fi_fabric(o.info->fabric_attr, &o.fabric, nullptr);
  if (rc != 0) return s.fail("fi_fabric", rc);
  if (!open_eq(c)) return false;
  if ((rc = fi_passive_ep(o.fabric, o.info, &o.pep, nullptr)) != 0) {
    return s.fail("fi_passive_ep", rc);
  }
  if ((rc = fi_pep_bind(o.pep, &o.eq->fid, 0)) != 0) return s.fail("fi_pep_bind(EQ)", rc);
  if ((rc = fi_listen(o.pep)) != 0) return s.fail("fi_listen", rc);
  // The port the system picked is known only from fi_getname; with --port it is known anyway.
  char name[128];
  size_t name_len = sizeof(name);
  rc = fi_getname(&o.pep->fid, name, &name_len);
  const unsigned port = rc == 0 ? port_of(name, name_len) : opt.port;
  if (rc != 0 && opt.port == 0) {
    return s.fail("fi_getname(passive endpoint) (--port N does without it)", rc);
  }
  s.say("fi_fabric, fi_eq_open, fi_passive_ep, fi_pep_bind, fi_listen: listening on %s",
        rc == 0 ? address(name, name_len).c_str()
                : (std::string(kNode) + ":" + std::to_string(port) + " (--port)").c_str());
  if (port == 0) return s.unexpected("fi_getname did not say which port");
  if (!s.tell("port " + std::to_string(port))) return false;

  // Step 2: accept the client's connection.
  if (!s.lead(kStep2)) return false;
  CmEvent req;
  if (!wait_cm_event(c, FI_CONNREQ, &req)) return false;
  o.conn_info = req.entry()->info;
  s.say("fi_eq_sread -> FI_CONNREQ on %s from %s, connect data \"%s\" (%zu bytes)",
        c.name_of_fid(req.entry()->fid).c_str(),
        o.conn_info != nullptr ? address(o.conn_info->dest_addr, o.conn_info->dest_addrlen).c_str()
                               : "?",
        req.data().c_str(), req.data_len);
  if (o.conn_info == nullptr) return s.unexpected("FI_CONNREQ without an fi_info");
  if (req.data() != kConnectData) return s.unexpected("the connect data is not the client's");
  if ((rc = fi_domain(o.fabric, o.conn_info, &o.domain, nullptr)) != 0) {
    return s.fail("fi_domain", rc);
  }
  if (!open_cq(c) || !open_endpoint(c, o.conn_info)) return false;
  s.say(
      "fi_domain, fi_cq_open, fi_endpoint (the FI_CONNREQ's info), fi_ep_bind EQ and CQ, "
      "fi_enable");
  if (!post_receives(c)) return false;
  s.say("fi_accept with accept data \"%s\" (%zu bytes)", kAcceptData, std::strlen(kAcceptData));
  if ((rc = fi_accept(o.ep, kAcceptData, std::strlen(kAcceptData))) != 0) {
    return s.fail("fi_accept", rc);
  }
  fi_freeinfo(o.conn_info);
  o.conn_info = nullptr;
  CmEvent connected;
  if (!wait_cm_event(c, FI_CONNECTED, &connected)) return false;
  s.say("fi_eq_sread -> FI_CONNECTED on %s", c.name_of_fid(connected.entry()->fid).c_str());
  if (connected.entry()->fid != &o.ep->fid) return s.unexpected("not on the endpoint");

  // Step 3: answer each message.
  if (!s.lead(kStep3) || !exchange_messages(c)) return false;

  // Step 4: faults, fabq's own.
  if (!s.lead(kStep4)) return false;
  if (std::strcmp(o.info->fabric_attr->prov_name, "fabq") == 0) {
    if (!inject_faults(c)) return false;
  } else {
    s.say(
        "skipped: fault injection is fabq's extension (fi_fabq.h, FI_FABQ_ASYNC_OPS); "
        "provider %s has none",
        o.info->fabric_attr->prov_name);
  }

  // Step 5: the client shuts the connection down; close everything.
  if (!s.lead(kStep5)) return false;
  CmEvent shutdown;
  if (!wait_cm_event(c, FI_SHUTDOWN, &shutdown)) return false;
  s.say("fi_eq_sread -> FI_SHUTDOWN on %s: the client has shut the connection down",
        c.name_of_fid(shutdown.entry()->fid).c_str());
  if (shutdown.entry()->fid != &o.ep->fid) return s.unexpected("not on the endpoint");
  const std::string failed = o.close_all();
  if (!failed.empty()) return s.unexpected("%s", failed.c_str());
  s.say("closed the endpoint, passive endpoint, CQ, EQ, domain and fabric");
  if (!s.tell("go")) return false;
  return true;
}

[[nodiscard]] bool connect_and_talk(const Side& s, const Options& opt) {
  Conn c(s, /*is_client=*/true);
  Objects& o = c.obj;
  // Step 1: the server says where it listens.
  std::string port;
  if (!s.hear("waiting for the server's port", &port)) return false;
  if (port.rfind("port ", 0) != 0) return s.unexpected("the server said \"%s\"", port.c_str());
  if (!get_info(c, opt.provider, port.substr(5), /*source=*/false)) return false;
  int rc = fi_fabric(o.info->fabric_attr, &o.fabric, nullptr);
  if (rc != 0) return s.fail("fi_fabric", rc);
  if ((rc = fi_domain(o.fabric, o.info, &o.domain, nullptr)) != 0) {
    return s.fail("fi_domain", rc);
  }
  if (!open_eq(c) || !open_cq(c)) return false;
  s.say("fi_fabric, fi_domain, fi_eq_open, fi_cq_open");

  // Step 2: connect.
  if (!s.follow()) return false;
  if (!open_endpoint(c, o.info)) return false;
  s.say("fi_endpoint, fi_ep_bind EQ and CQ, fi_enable");
  if (!post_receives(c)) return false;
  s.say("fi_connect to %s with connect data \"%s\" (%zu bytes)",
        address(o.info->dest_addr, o.info->dest_addrlen).c_str(), kConnectData,
        std::strlen(kConnectData));
  if ((rc = fi_connect(o.ep, o.info->dest_addr, kConnectData, std::strlen(kConnectData))) != 0) {
    return s.fail("fi_connect", rc);
  }
  CmEvent connected;
  if (!wait_cm_event(c, FI_CONNECTED, &connected)) return false;
  s.say("fi_eq_sread -> FI_CONNECTED on %s, accept data \"%s\" (%zu bytes)",
        c.name_of_fid(connected.entry()->fid).c_str(), connected.data().c_str(),
        connected.data_len);
  if (connected.entry()->fid != &o.ep->fid) return s.unexpected("not on the endpoint");
  if (connected.data() != kAcceptData) return s.unexpected("the accept data is not the server's");

  // Step 3: send each message, read each answer.
  if (!s.follow() || !exchange_messages(c)) return false;

  // Step 4 is the server's alone; step 5: shut down.
  if (!s.follow() || !s.follow()) return false;
  // Said before the call: the server may hear of it before this process could print.
  s.say("fi_shutdown(endpoint): the client ends the connection");
  if ((rc = fi_shutdown(o.ep, 0)) != 0) return s.fail("fi_shutdown", rc);
  std::string go;
  if (!s.hear("waiting for the server's FI_SHUTDOWN", &go)) return false;
  const std::string failed = o.close_all();
  if (!failed.empty()) return s.unexpected("%s", failed.c_str());
  s.say("closed the endpoint, CQ, EQ, domain and fabric");
  return true;
}

// Waits for the client process; kills it (by its PID) if it outlives kWaitMs.
int reap_client(const timespec& start, pid_t pid) {
  timespec begin;
  clock_gettime(CLOCK_MONOTONIC, &begin);
  int status = 0;
  for (;;) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) {
      emit(start, "demo", "FAILED: waitpid(client): %s", std::strerror(errno));
      return 1;
    }
    if (seconds_since(begin) * 1000 >= kWaitMs) {
      emit(start, "demo", "FAILED: the client did not end within %d s; stopping it",
           kWaitMs / 1000);
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return 1;
    }
    usleep(10'000);
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  emit(start, "demo", "FAILED: the client was killed by signal %d", WTERMSIG(status));
  return 1;
}

}  // namespace

int run_demo(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (!std::strcmp(a, "-h") || !std::strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else if (!std::strcmp(a, "--core")) {
      opt.core = true;
    } else if (!std::strcmp(a, "--provider") || !std::strcmp(a, "--port")) {
      if (i + 1 >= argc || argv[i + 1][0] == '\0') {
        std::fprintf(stderr, "fabq demo: %s needs a value\n", a);
        return 2;
      }
      const char* v = argv[++i];
      if (a[2] == 'p' && a[3] == 'r') {
        opt.provider = v;
        continue;
      }
      char* end = nullptr;
      const long port = std::strtol(v, &end, 10);
      if (*end != '\0' || port < 1 || port > 65535) {
        std::fprintf(stderr, "fabq demo: --port needs a number from 1 to 65535\n");
        return 2;
      }
      opt.port = static_cast<unsigned>(port);
    } else {
      std::fprintf(stderr, "fabq demo: unknown option '%s'\n", a);
      usage(stderr);
      return 2;
    }
  }
  if (opt.core) return run_core_demo();

  // libfabric reads its environment once, when the first fi_* call initialises it: set it
  // before, here, in the process that then forks both sides.
  if (getenv("FI_PROVIDER_PATH") == nullptr) setenv("FI_PROVIDER_PATH", FABQ_PROV_DIR, 1);
  setenv("FI_PROVIDER", opt.provider, 1);

  timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  emit(start, "demo", "a server and a client, two processes, connected over %s by libfabric",
       kNode);
  emit(start, "demo", "FI_PROVIDER=%s FI_PROVIDER_PATH=%s", opt.provider,
       getenv("FI_PROVIDER_PATH"));
  emit(start, "demo", "each line: seconds since the start, who speaks, what happened");
  emit(start, "demo", "== 1. fi_getinfo, and the server's passive endpoint listening");

  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    emit(start, "demo", "FAILED: socketpair: %s", std::strerror(errno));
    return 1;
  }
  std::fflush(nullptr);  // nothing buffered may be written twice, once by each process
  const pid_t server_pid = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    emit(start, "demo", "FAILED: fork: %s", std::strerror(errno));
    return 1;
  }
  if (pid == 0) {
    close(sv[0]);
    // The client ends with the server, even if the server is killed.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != server_pid) _exit(1);
    int status;
    {
      Side client("client", "server", start, sv[1]);
      status = connect_and_talk(client, opt) ? 0 : 1;
    }
    std::exit(status);
  }
  close(sv[1]);
  int server_status;
  {
    Side server("server", "client", start, sv[0]);
    server_status = serve(server, opt) ? 0 : 1;
    // Closing the channel tells a client still waiting that the server has stopped.
  }
  const int client_status = reap_client(start, pid);
  if (server_status != 0 || client_status != 0) {
    emit(start, "demo",
         "the demo failed (server exit %d, client exit %d): the FAILED lines say why",
         server_status, client_status);
    return 1;
  }
  emit(start, "demo", "done: server and client exited 0; every step behaved as it says");
  return 0;
}

}  // namespace fabq::tools
