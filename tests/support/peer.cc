#include "support/peer.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "support/side.h"

namespace fabq::testing {

Link::Link(Link&& o) noexcept : rd_(std::exchange(o.rd_, -1)), wr_(std::exchange(o.wr_, -1)) {}

Link& Link::operator=(Link&& o) noexcept {
  std::swap(rd_, o.rd_);
  std::swap(wr_, o.wr_);
  return *this;
}

Link::~Link() {
  if (rd_ >= 0) close(rd_);
  if (wr_ >= 0) close(wr_);
}

bool Link::put(const void* p, size_t n) {
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

bool Link::get(void* p, size_t n, int timeout_ms) {
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

bool Link::readable(int timeout_ms) {
  pollfd p{.fd = rd_, .events = POLLIN};
  int rc;
  do rc = poll(&p, 1, timeout_ms);
  while (rc < 0 && errno == EINTR);
  return rc > 0;
}

bool Link::wait(char step, int timeout_ms) {
  char got = 0;
  if (!get(&got, 1, timeout_ms)) return false;
  EXPECT_EQ(got, step) << "the peer is at another step";
  return got == step;
}

bool Link::get_str(std::string* s) {
  uint64_t n = 0;
  if (!get_u64(&n) || n > (1u << 20)) return false;
  s->assign(n, '\0');
  return get(s->data(), n);
}

Peer::Peer(const std::function<void(Link&)>& fn) {
  signal(SIGPIPE, SIG_IGN);
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

Peer::~Peer() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

void Peer::kill_now() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

int Peer::join(Side* progress) {
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

}  // namespace fabq::testing
