// fabq and the application's signals: opening and using fabq's objects leaves every signal's
// disposition and the threads' signal masks as the application set them, so the default action
// of a signal (SIGINT ending the process) still happens while fabq's threads run. fabtests'
// sighandler_test checks the same on a child that opens a provider and spins; with Debian's
// libfabric 1.17 it fails for every provider, tcp and shm included, because libinfinipath.so.4
// (loaded through its psm provider) installs SIGINT and SIGTERM handlers from its constructor,
// before main. Here the child puts SIG_DFL back first, so that only fabq's doing is measured.
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "support/side.h"

namespace fabq::testing {
namespace {

constexpr int kWatched[] = {SIGINT, SIGTERM, SIGPIPE, SIGSEGV, SIGBUS, SIGUSR1, SIGCHLD};

// The disposition of each watched signal: the handler (or SIG_DFL/SIG_IGN) and its flags.
struct Dispositions {
  struct sigaction of[std::size(kWatched)];
  bool read() {
    for (size_t i = 0; i < std::size(kWatched); ++i) {
      if (sigaction(kWatched[i], nullptr, &of[i]) != 0) return false;
    }
    return true;
  }
};

Options rdm() {
  Options o;
  o.type = FI_EP_RDM;
  o.caps = FI_MSG | FI_TAGGED;
  return o;
}

TEST(Signals, OpeningAndUsingAnEndpointChangesNoDispositionAndNoMask) {
  Dispositions before;
  ASSERT_TRUE(before.read());
  sigset_t mask_before;
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, nullptr, &mask_before), 0);
  {
    Side a(rdm());
    Side b(rdm());
    ASSERT_TRUE(a.open());
    ASSERT_TRUE(b.open());
    Dispositions open;
    ASSERT_TRUE(open.read());
    for (size_t i = 0; i < std::size(kWatched); ++i) {
      EXPECT_EQ(open.of[i].sa_handler, before.of[i].sa_handler) << strsignal(kWatched[i]);
      EXPECT_EQ(open.of[i].sa_flags, before.of[i].sa_flags) << strsignal(kWatched[i]);
    }
    sigset_t mask;
    ASSERT_EQ(pthread_sigmask(SIG_BLOCK, nullptr, &mask), 0);
    for (int s : kWatched) EXPECT_EQ(sigismember(&mask, s), sigismember(&mask_before, s));
  }
  Dispositions closed;
  ASSERT_TRUE(closed.read());
  for (size_t i = 0; i < std::size(kWatched); ++i) {
    EXPECT_EQ(closed.of[i].sa_handler, before.of[i].sa_handler) << strsignal(kWatched[i]);
  }
}

// The child opens two endpoints (fabq's progress and link threads running), then spins; SIGINT
// ends it by the default action, whichever of its threads the kernel picks.
TEST(Signals, AChildSpinningWithFabqOpenIsEndedBySigint) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    signal(SIGINT, SIG_DFL);
    Side a(rdm());
    Side b(rdm());
    if (!a.open() || !b.open()) _exit(3);
    const auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10)) {
    }
    _exit(4);  // SIGINT did not end it
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ASSERT_EQ(kill(child, SIGINT), 0);
  int status = 0;
  pid_t got = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while ((got = waitpid(child, &status, WNOHANG)) == 0 &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (got == 0) {
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
    FAIL() << "the child outlived SIGINT by 5 s";
  }
  ASSERT_TRUE(WIFSIGNALED(status)) << "exit status " << WEXITSTATUS(status)
                                   << " (3: fabq did not open, 4: SIGINT did not end it)";
  EXPECT_EQ(WTERMSIG(status), SIGINT);
}

}  // namespace
}  // namespace fabq::testing
