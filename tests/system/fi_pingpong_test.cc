// libfabric's own fi_pingpong (libfabric-bin, or FABQ_FI_PINGPONG) over the provider under test
// with MSG endpoints: a server and a client process, both exiting 0, with data checks (-c).
//
// fi_pingpong (1.17) binds its server's control socket to INADDR_ANY and opens the fabric on
// the first interface the provider lists, with no option to name an address: the test runs it
// in a network namespace of its own, where the only interface is lo (127.0.0.1). It makes the
// namespace itself (as root, or in a user namespace), and skips when it cannot.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "support/provider.h"

namespace fabq::testing {
namespace {

// libfabric-bin's, or the one FABQ_FI_PINGPONG names (scripts/test: libfabric 2.x's, which
// asks fi_getinfo for API 2.x).
const char* const kPingpong = [] {
  const char* p = std::getenv("FABQ_FI_PINGPONG");
  return p != nullptr && *p != '\0' ? p : "/usr/bin/fi_pingpong";
}();
// The control port: any port is free in a namespace of our own.
constexpr uint16_t kControlPort = 47592;
constexpr int kRunSeconds = 8;

bool write_file(const char* path, const std::string& s) {
  std::ofstream f(path);
  return static_cast<bool>(f << s);
}

// Moves this process into a new network namespace with lo up. nullopt on success, the reason
// otherwise.
std::optional<std::string> enter_private_network() {
  if (unshare(CLONE_NEWNET) != 0) {
    const uid_t uid = getuid();
    const gid_t gid = getgid();
    if (unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0) {
      return std::string("cannot make a network namespace: ") + std::strerror(errno);
    }
    write_file("/proc/self/setgroups", "deny");
    if (!write_file("/proc/self/uid_map", "0 " + std::to_string(uid) + " 1") ||
        !write_file("/proc/self/gid_map", "0 " + std::to_string(gid) + " 1")) {
      return std::string("cannot map ids in the user namespace");
    }
  }
  const int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  const bool up = s >= 0 && ioctl(s, SIOCGIFFLAGS, &ifr) == 0 &&
                  (ifr.ifr_flags |= IFF_UP, ioctl(s, SIOCSIFFLAGS, &ifr) == 0);
  const int err = errno;
  if (s >= 0) close(s);
  if (!up) return std::string("cannot bring lo up in the namespace: ") + std::strerror(err);
  return std::nullopt;
}

// The sanitizer runtime this binary was built with, which a provider built with it needs
// preloaded into the uninstrumented fi_pingpong; empty without one.
std::string sanitizer_runtime() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    const size_t slash = line.find('/');
    if (slash == std::string::npos) continue;
    if (line.find("libasan.so", slash) != std::string::npos ||
        line.find("libtsan.so", slash) != std::string::npos) {
      return line.substr(slash);
    }
  }
  return std::string();
}

// True once something listens on `port` in this namespace (/proc/self/net/tcp, state 0A).
bool listening_on(uint16_t port) {
  std::ifstream tcp("/proc/self/net/tcp");
  std::string line;
  char want[8];
  std::snprintf(want, sizeof(want), ":%04X", port);
  std::getline(tcp, line);  // header
  while (std::getline(tcp, line)) {
    std::istringstream f(line);
    std::string slot, local, remote, state;
    f >> slot >> local >> remote >> state;
    if (local.size() >= 5 && local.compare(local.size() - 5, 5, want) == 0 && state == "0A") {
      return true;
    }
  }
  return false;
}

// fi_pingpong with `args`, its output into a memory file; killed by SIGALRM after
// kRunSeconds (alarm survives exec).
struct Process {
  pid_t pid = -1;
  int out = -1;
};
Process start(const std::vector<std::string>& args) {
  Process r;
  r.out = memfd_create("fi_pingpong", MFD_CLOEXEC);
  std::fflush(nullptr);
  r.pid = fork();
  if (r.pid == 0) {
    dup2(r.out, STDOUT_FILENO);
    dup2(r.out, STDERR_FILENO);
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    alarm(kRunSeconds);
    execv(kPingpong, argv.data());
    _exit(127);
  }
  return r;
}
// Exit status, or -1 (killed or still running after the deadline: then killed).
int finish(Process& r, Clock::time_point deadline, std::string* output) {
  int status = 0;
  pid_t got = 0;
  while ((got = waitpid(r.pid, &status, WNOHANG)) == 0 && Clock::now() < deadline) usleep(5000);
  if (got != r.pid) {
    kill(r.pid, SIGKILL);
    waitpid(r.pid, &status, 0);
  }
  std::string text;
  char buf[4096];
  ssize_t n;
  lseek(r.out, 0, SEEK_SET);
  while ((n = read(r.out, buf, sizeof(buf))) > 0) text.append(buf, static_cast<size_t>(n));
  close(r.out);
  *output = text;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return -1;
}

TEST(FiPingpong, MsgEndpointsPingPongBetweenTwoProcessesAndBothExitZero) {
  if (access(kPingpong, X_OK) != 0) GTEST_SKIP() << kPingpong << " is not installed";
  if (auto why = enter_private_network()) GTEST_SKIP() << *why;
  const std::string runtime = sanitizer_runtime();
  if (!runtime.empty()) {
    setenv("LD_PRELOAD", runtime.c_str(), 1);
    setenv("ASAN_OPTIONS", "detect_leaks=0", 1);
  }
  const std::string port = std::to_string(kControlPort);
  // 10 iterations of each size from 64 bytes to 1 MiB, data checked.
  Process server =
      start({kPingpong, "-p", provider(), "-e", "msg", "-d", "lo", "-B", port, "-I", "10", "-c"});
  const auto deadline = Clock::now() + std::chrono::seconds(kRunSeconds + 1);
  while (!listening_on(kControlPort) && Clock::now() < deadline &&
         waitpid(server.pid, nullptr, WNOHANG) == 0) {
    usleep(2000);
  }
  Process client = start({kPingpong, "-p", provider(), "-e", "msg", "-d", "lo", "-P", port, "-I",
                          "10", "-c", "127.0.0.1"});
  std::string client_out, server_out;
  const int client_status = finish(client, deadline, &client_out);
  const int server_status = finish(server, deadline, &server_out);
  if (!runtime.empty()) unsetenv("LD_PRELOAD");
  EXPECT_EQ(server_status, 0) << "fi_pingpong server (-p " << provider() << "):\n" << server_out;
  EXPECT_EQ(client_status, 0) << "fi_pingpong client (-p " << provider() << "):\n" << client_out;
}

}  // namespace
}  // namespace fabq::testing
