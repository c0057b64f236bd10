// `fabq events`: the asynchronous event monitor. Opens a fabq domain, prints every event of
// its channel as it arrives (time, kind, object) together with the EQ error entry an error
// kind also produces, and acknowledges it.
#include <poll.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/async_event.h"
#include "fabq/fi_fabq.h"
#include "tools/commands.h"

namespace fabq::tools {
namespace {

void usage(FILE* out) {
  std::fprintf(out,
               "usage: fabq events [--domain NAME] [--count N] [--seconds S] [--faults SPEC]\n"
               "\n"
               "Prints each asynchronous event of a fabq domain as it arrives and acknowledges\n"
               "it, until Ctrl-C.\n"
               "  --domain NAME   the interface to watch (default: the first fabq domain)\n"
               "  --count N       stop after N events\n"
               "  --seconds S     stop after S seconds\n"
               "  --faults SPEC   inject these fault rules into the domain (FI_FABQ_FAULTS\n"
               "                  grammar, fi_fabq(7)), e.g. 'event=port_err,ms=500'\n");
}

std::string timestamp(uint64_t ns) {
  time_t secs = static_cast<time_t>(ns / 1'000'000'000u);
  tm t;
  gmtime_r(&secs, &t);
  char buf[64];
  size_t n = strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &t);
  std::snprintf(buf + n, sizeof(buf) - n, ".%06uZ",
                static_cast<unsigned>((ns % 1'000'000'000u) / 1000));
  return buf;
}

const char* class_name(size_t fclass) {
  switch (fclass) {
    case FI_CLASS_EP:
      return "endpoint";
    case FI_CLASS_CQ:
      return "cq";
    case FI_CLASS_SRX_CTX:
      return "srx";
    case FI_CLASS_DOMAIN:
      return "domain";
    default:
      return "object";
  }
}

struct Session {
  fi_info* info = nullptr;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_eq* eq = nullptr;
  // The domain holds the EQ bound to it, and the fabric both: domain, EQ, fabric.
  ~Session() {
    if (domain) fi_close(&domain->fid);
    if (eq) fi_close(&eq->fid);
    if (fabric) fi_close(&fabric->fid);
    if (info) fi_freeinfo(info);
  }
};

int fail(const char* what, int rc) {
  std::fprintf(stderr, "fabq events: %s: %s\n", what, fi_strerror(-rc));
  return 1;
}

}  // namespace

int run_events(int argc, char** argv) {
  const char* domain_name = nullptr;
  const char* faults = nullptr;
  long count = -1;
  long seconds = -1;
  for (int i = 1; i < argc; ++i) {
    auto value = [&](const char* opt) -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "fabq events: %s needs a value\n", opt);
        return nullptr;
      }
      return argv[++i];
    };
    const char* a = argv[i];
    if (!std::strcmp(a, "-h") || !std::strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else if (!std::strcmp(a, "--domain")) {
      if (!(domain_name = value(a))) return 2;
    } else if (!std::strcmp(a, "--faults")) {
      if (!(faults = value(a))) return 2;
    } else if (!std::strcmp(a, "--count") || !std::strcmp(a, "--seconds")) {
      const char* v = value(a);
      char* end = nullptr;
      long n = v ? std::strtol(v, &end, 10) : -1;
      if (v == nullptr || *end != '\0' || n <= 0) {
        std::fprintf(stderr, "fabq events: %s needs a positive number\n", a);
        return 2;
      }
      (a[2] == 'c' ? count : seconds) = n;
    } else {
      std::fprintf(stderr, "fabq events: unknown option '%s'\n", a);
      usage(stderr);
      return 2;
    }
  }
  if (getenv("FI_PROVIDER_PATH") == nullptr) setenv("FI_PROVIDER_PATH", FABQ_PROV_DIR, 1);

  Session s;
  fi_info* hints = fi_allocinfo();
  if (hints == nullptr) return fail("fi_allocinfo", -FI_ENOMEM);
  hints->fabric_attr->prov_name = strdup("fabq");
  if (domain_name != nullptr) hints->domain_attr->name = strdup(domain_name);
  int rc = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &s.info);
  fi_freeinfo(hints);
  if (rc != 0) {
    std::fprintf(stderr, "fabq events: no fabq domain%s%s: %s\n", domain_name ? " named " : "",
                 domain_name ? domain_name : "", fi_strerror(-rc));
    return 1;
  }
  if ((rc = fi_fabric(s.info->fabric_attr, &s.fabric, nullptr)) != 0) return fail("fi_fabric", rc);
  if ((rc = fi_domain(s.fabric, s.info, &s.domain, nullptr)) != 0) return fail("fi_domain", rc);
  fi_eq_attr eq_attr{.size = 256, .wait_obj = FI_WAIT_NONE};
  if ((rc = fi_eq_open(s.fabric, &eq_attr, &s.eq, nullptr)) != 0) return fail("fi_eq_open", rc);
  if ((rc = fi_domain_bind(s.domain, &s.eq->fid, 0)) != 0) return fail("fi_domain_bind", rc);
  fi_fabq_async_ops* ops = nullptr;
  rc = fi_open_ops(&s.domain->fid, FI_FABQ_ASYNC_OPS, 0, reinterpret_cast<void**>(&ops), nullptr);
  if (rc != 0) return fail("fi_open_ops", rc);
  int chan_fd = -1;
  if ((rc = ops->get_fd(s.domain, &chan_fd)) != 0) return fail("get_fd", rc);

  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  sigprocmask(SIG_BLOCK, &mask, nullptr);
  int sig_fd = signalfd(-1, &mask, SFD_CLOEXEC);

  const int state = ops->port_state(s.domain);
  std::printf("watching domain %s (fabric %s): port 1 %s; Ctrl-C to stop\n",
              s.info->domain_attr->name, s.info->fabric_attr->name,
              state == FI_FABQ_PORT_ACTIVE ? "ACTIVE" : "DOWN");
  std::fflush(stdout);
  if (faults != nullptr && (rc = ops->inject(s.domain, faults)) != 0) {
    std::fprintf(stderr, "fabq events: --faults '%s' is not a valid fault spec\n", faults);
    if (sig_fd >= 0) close(sig_fd);
    return 2;
  }

  timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  long seen = 0;
  int status = 0;
  while (count < 0 || seen < count) {
    int wait_ms = -1;
    if (seconds > 0) {
      timespec now;
      clock_gettime(CLOCK_MONOTONIC, &now);
      long elapsed = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
      if (elapsed >= seconds * 1000) break;
      wait_ms = static_cast<int>(seconds * 1000 - elapsed);
    }
    pollfd fds[2] = {{chan_fd, POLLIN, 0}, {sig_fd, POLLIN, 0}};
    int n = poll(fds, sig_fd >= 0 ? 2 : 1, wait_ms);
    if (n < 0 && errno != EINTR) {
      status = 1;
      break;
    }
    if (n > 0 && (fds[1].revents & POLLIN)) break;
    fi_fabq_async_event ev;
    while ((count < 0 || seen < count) && ops->get_event(s.domain, &ev, 0) == 0) {
      ++seen;
      std::printf("%s  %-32s", timestamp(ev.time_ns).c_str(), ops->event_type_str(ev.type));
      if (ev.port_num != 0) {
        std::printf(" port %u of %s\n", ev.port_num, s.info->domain_attr->name);
      } else if (ev.fid == &s.domain->fid) {
        std::printf(" domain %s\n", s.info->domain_attr->name);
      } else {
        std::printf(" %s %p\n", class_name(ev.fid->fclass), static_cast<void*>(ev.fid));
      }
      // An error kind has its twin on the EQ, in the same order.
      const core::AsyncKind* kind = core::async_kind(ev.type);
      fi_eq_err_entry err{};
      uint32_t event;
      fi_eq_entry entry;
      if (kind != nullptr && kind->error &&
          fi_eq_read(s.eq, &event, &entry, sizeof(entry), 0) == -FI_EAVAIL &&
          fi_eq_readerr(s.eq, &err, 0) > 0) {
        char text[128];
        std::printf("%29s  EQ error entry: err %s, prov_errno %s\n", "", fi_strerror(err.err),
                    fi_eq_strerror(s.eq, err.prov_errno, err.err_data, text, sizeof(text)));
      }
      if ((rc = ops->ack_event(s.domain, &ev)) != 0) {
        std::fprintf(stderr, "fabq events: ack_event: %s\n", fi_strerror(-rc));
        status = 1;
      }
      std::fflush(stdout);
    }
  }
  if (sig_fd >= 0) close(sig_fd);
  std::printf("%ld event%s\n", seen, seen == 1 ? "" : "s");
  return status;
}

}  // namespace fabq::tools
