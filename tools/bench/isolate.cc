// Each provider runs in a child process of its own: a provider that deadlocks (libfabric 1.17's
// sockets counter does, once its signal socket fills) or crashes costs that scenario a FAILED
// line, not the whole run. The parent never loads libfabric, so forking it is safe; so is the
// child's fork of the RMA scenarios' server process, made before the child's first libfabric
// call.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <optional>

#include "tools/bench/bench.h"
#include "tools/bench/rma.h"

namespace fabq::tools::bench {
namespace {

// The exit status of a child that reported every scenario it ran but lost its RMA server
// process (which cannot be forked again once libfabric is initialised): the scenarios left
// go on in a new child, none of them failed.
constexpr int kStartAgain = 75;

// One line per finished scenario: "<index> <state> <value> <p99> <allocs> <cpu> <why>\n".
std::string encode(size_t index, const Sample& s) {
  std::string why = s.why;
  for (char& c : why) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  char head[200];
  std::snprintf(head, sizeof(head), "%zu %d %.17g %.17g %.17g %.17g ", index,
                static_cast<int>(s.state), s.value, s.p99, s.allocs, s.reader_cpu);
  return head + why + "\n";
}

bool decode(const std::string& line, size_t* index, Sample* s) {
  int state = 0, used = 0;
  if (std::sscanf(line.c_str(), "%zu %d %lg %lg %lg %lg %n", index, &state, &s->value, &s->p99,
                  &s->allocs, &s->reader_cpu, &used) != 6 ||
      state < 0 || state > 2) {
    return false;
  }
  s->state = static_cast<Sample::State>(state);
  s->why = line.substr(static_cast<size_t>(used));
  return true;
}

void write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

[[noreturn]] void child(int fd, const ProviderSpec& spec,
                        const std::vector<const Scenario*>& scenarios,
                        const std::vector<size_t>& todo, const Options& o) {
  // The RMA scenarios' server side is a process of its own, forked before Provider::open
  // initialises libfabric here.
  std::optional<rma::ServerProcess> server;
  if (!o.rma_threads &&
      std::any_of(todo.begin(), todo.end(), [&](size_t i) { return rma::is_rma(*scenarios[i]); })) {
    server.emplace(spec, scenarios, o, fd);
  }
  std::string why;
  std::unique_ptr<Provider> p = Provider::open(spec, &why);
  for (size_t k = 0; k < todo.size(); ++k) {
    const size_t i = todo[k];
    Sample s;
    if (!p) {
      s.state = Sample::State::kUnsupported;
      s.why = why;
    } else {
      if (server) server->next(i);
      s = scenarios[i]->run(*scenarios[i], *p, o);
    }
    write_all(fd, encode(i, s));
    if (server && server->lost() && k + 1 < todo.size()) {
      server.reset();
      _exit(kStartAgain);
    }
  }
  server.reset();
  // No destructors: a provider that hangs in its close would hold the parent up for nothing.
  _exit(0);
}

int64_t monotonic_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000 + ts.tv_nsec / 1'000'000;
}

}  // namespace

void run_isolated(const ProviderSpec& spec, const std::vector<const Scenario*>& scenarios,
                  std::vector<size_t> todo, const Options& o, int hang_ms,
                  std::vector<Sample>* out) {
  while (!todo.empty()) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
      for (const size_t i : todo) {
        (*out)[i] = Sample{.state = Sample::State::kFailed,
                           .why = std::string("pipe: ") + std::strerror(errno)};
      }
      return;
    }
    std::fflush(nullptr);
    const pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      child(fds[1], spec, scenarios, todo, o);
    }
    close(fds[1]);
    if (pid < 0) {
      close(fds[0]);
      for (const size_t i : todo) {
        (*out)[i] = Sample{.state = Sample::State::kFailed,
                           .why = std::string("fork: ") + std::strerror(errno)};
      }
      return;
    }
    std::string buffer;
    bool hung = false, reported = false;
    int64_t deadline = monotonic_ms() + hang_ms;  // for the scenario now running
    for (;;) {
      pollfd pfd{fds[0], POLLIN, 0};
      const int64_t left = deadline - monotonic_ms();
      const int n = left > 0 ? poll(&pfd, 1, static_cast<int>(left)) : 0;
      if (n < 0 && errno == EINTR) continue;
      if (n == 0) {
        hung = true;
        break;
      }
      char chunk[4096];
      const ssize_t got = read(fds[0], chunk, sizeof(chunk));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) break;  // the child is done (or died)
      buffer.append(chunk, static_cast<size_t>(got));
      for (size_t nl; (nl = buffer.find('\n')) != std::string::npos;) {
        size_t index;
        Sample s;
        if (decode(buffer.substr(0, nl), &index, &s) && index < out->size()) {
          (*out)[index] = s;
          std::erase(todo, index);
          reported = true;
          deadline = monotonic_ms() + hang_ms;
        }
        buffer.erase(0, nl + 1);
      }
    }
    close(fds[0]);
    if (hung) kill(pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (todo.empty()) return;
    if (!hung && reported && WIFEXITED(status) && WEXITSTATUS(status) == kStartAgain) continue;
    // The scenario the child was running when it hung or died fails; the rest get a new child.
    std::string why;
    if (hung) {
      why = "hung: the provider did not return within " + std::to_string(hang_ms / 1000) + " s";
    } else if (WIFSIGNALED(status)) {
      why = std::string("died: ") + strsignal(WTERMSIG(status));
    } else {
      // libfabric's own crash handler turns a fatal signal into exit(1).
      why = "died: exit status " + std::to_string(WEXITSTATUS(status));
    }
    (*out)[todo.front()] = Sample{.state = Sample::State::kFailed, .why = why};
    todo.erase(todo.begin());
  }
}

}  // namespace fabq::tools::bench
