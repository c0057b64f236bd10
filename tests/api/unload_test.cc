// The provider's unload (fi_provider::cleanup, fi_prov_ini's counterpart): libfabric's fi_fini
// runs at exit, calls cleanup and then dlclose()s the provider, so every thread fabq started
// must be stopped and joined by then, whatever the application left open. A thread that still
// ran fabq's code after the unmap would die with SIGSEGV, in a few runs out of a hundred.
//
// Each run is a forked child that opens objects that start threads of fabq's (a domain starts
// the link monitor; FI_PROGRESS_AUTO the progress thread; a timed fault rule the fault timer)
// and exits at once, with them still open, through exit() (so fi_fini runs). The test process
// calls fi_getinfo once first, so that each child inherits a libfabric that has loaded its
// providers already (Debian's psm provider alone takes over 100 ms to start) and the runs are
// quick; the test process itself opens nothing and starts no thread of fabq's.
#include <gtest/gtest.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

constexpr uint32_t kVersion = FI_VERSION(1, 17);
constexpr int kRuns = 300;

enum class Opened { kDomain, kAutoProgressListening, kTimedFault };

// What the child leaves open, held where LeakSanitizer looks (it runs at exit, before fi_fini):
// an application that exits with objects open still holds them.
struct LeftOpen {
  fi_info* info = nullptr;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_eq* eq = nullptr;
  fid_pep* pep = nullptr;
} g_open;

// In the child: opens what `what` says and exits with it all open. Exit status 0 unless a
// call failed (2); a crash at exit shows as a signal.
[[noreturn]] void open_and_exit(Opened what) {
  if (what == Opened::kTimedFault) {
    setenv("FI_FABQ_FAULTS", "event=port_err,ms=60000", 1);
  }
  fi_info* hints = fi_allocinfo();
  hints->fabric_attr->prov_name = strdup("fabq");
  hints->ep_attr->type = FI_EP_MSG;
  hints->caps = FI_MSG;
  if (what == Opened::kAutoProgressListening) {
    hints->domain_attr->control_progress = FI_PROGRESS_AUTO;
    hints->domain_attr->data_progress = FI_PROGRESS_AUTO;
  }
  LeftOpen& o = g_open;
  const int rc = fi_getinfo(kVersion, "127.0.0.1", "0", FI_SOURCE, hints, &o.info);
  fi_freeinfo(hints);
  if (rc != 0 || fi_fabric(o.info->fabric_attr, &o.fabric, nullptr) != 0 ||
      fi_domain(o.fabric, o.info, &o.domain, nullptr) != 0) {
    std::exit(2);
  }
  if (what == Opened::kAutoProgressListening) {
    fi_eq_attr attr{};
    attr.wait_obj = FI_WAIT_UNSPEC;
    if (fi_eq_open(o.fabric, &attr, &o.eq, nullptr) != 0 ||
        fi_passive_ep(o.fabric, o.info, &o.pep, nullptr) != 0 ||
        fi_pep_bind(o.pep, &o.eq->fid, 0) != 0 || fi_listen(o.pep) != 0) {
      std::exit(2);
    }
  }
  std::exit(0);
}

// Runs the child kRuns times; returns how many ended other than with status 0, and describes
// the first of them.
int failed_runs(Opened what, std::string* first) {
  fi_info* loaded = nullptr;
  if (fi_getinfo(kVersion, nullptr, nullptr, 0, nullptr, &loaded) == 0) fi_freeinfo(loaded);
  int failed = 0;
  for (int i = 0; i < kRuns; ++i) {
    std::fflush(nullptr);
    const pid_t pid = fork();
    if (pid == 0) {
      alarm(20);  // a hang at exit is a failure too
      open_and_exit(what);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid) {
      ADD_FAILURE() << "fork/waitpid: " << std::strerror(errno);
      return failed + 1;
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
    if (failed++ == 0) {
      *first = "run " + std::to_string(i) + ": " +
               (WIFSIGNALED(status) ? std::string("killed by ") + strsignal(WTERMSIG(status))
                                    : "exit status " + std::to_string(WEXITSTATUS(status)));
    }
  }
  return failed;
}

TEST(Unload, ExitingRightAfterFiDomainStopsTheLinkMonitorBeforeTheProviderIsUnmapped) {
  std::string first;
  EXPECT_EQ(failed_runs(Opened::kDomain, &first), 0) << first;
}

TEST(Unload, ExitingWithAnAutoProgressDomainAndAListenerOpenStopsTheProgressThread) {
  std::string first;
  EXPECT_EQ(failed_runs(Opened::kAutoProgressListening, &first), 0) << first;
}

TEST(Unload, ExitingWithATimedFaultPendingStopsTheFaultTimer) {
  std::string first;
  EXPECT_EQ(failed_runs(Opened::kTimedFault, &first), 0) << first;
}

}  // namespace
