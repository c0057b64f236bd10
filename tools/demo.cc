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
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tools/commands.h"
#include "tools/demo_conn.h"
#include "tools/demo_print.h"

namespace fabq::tools {
namespace demo {
namespace {

constexpr char kConnectData[] = "hello from client";
constexpr char kAcceptData[] = "hello from server";

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
}  // namespace demo

int run_demo(int argc, char** argv) {
  demo::Options opt;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (!std::strcmp(a, "-h") || !std::strcmp(a, "--help")) {
      demo::usage(stdout);
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
      demo::usage(stderr);
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
  demo::emit(start, "demo", "a server and a client, two processes, connected over %s by libfabric",
             demo::kNode);
  demo::emit(start, "demo", "FI_PROVIDER=%s FI_PROVIDER_PATH=%s", opt.provider,
             getenv("FI_PROVIDER_PATH"));
  demo::emit(start, "demo", "each line: seconds since the start, who speaks, what happened");
  demo::emit(start, "demo", "== 1. fi_getinfo, and the server's passive endpoint listening");

  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    demo::emit(start, "demo", "FAILED: socketpair: %s", std::strerror(errno));
    return 1;
  }
  std::fflush(nullptr);  // nothing buffered may be written twice, once by each process
  const pid_t server_pid = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    demo::emit(start, "demo", "FAILED: fork: %s", std::strerror(errno));
    return 1;
  }
  if (pid == 0) {
    close(sv[0]);
    // The client ends with the server, even if the server is killed.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != server_pid) _exit(1);
    int status;
    {
      demo::Side client("client", "server", start, sv[1]);
      status = demo::connect_and_talk(client, opt) ? 0 : 1;
    }
    std::exit(status);
  }
  close(sv[1]);
  int server_status;
  {
    demo::Side server("server", "client", start, sv[0]);
    server_status = demo::serve(server, opt) ? 0 : 1;
    // Closing the channel tells a client still waiting that the server has stopped.
  }
  const int client_status = demo::reap_client(start, pid);
  if (server_status != 0 || client_status != 0) {
    demo::emit(start, "demo",
               "the demo failed (server exit %d, client exit %d): the FAILED lines say why",
               server_status, client_status);
    return 1;
  }
  demo::emit(start, "demo", "done: server and client exited 0; every step behaved as it says");
  return 0;
}

}  // namespace fabq::tools
