// A POSIX signal delivered to a thread blocked in a fabq call, as fi_eq(3), fi_cq(3) and
// fi_cntr(3) allow: the call returns -FI_EAGAIN soon after the handler ran.
#pragma once

#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <thread>

namespace fabq::testing {

inline std::atomic<int> g_handled_signals{0};
inline void count_signal(int) {
  g_handled_signals.fetch_add(1, std::memory_order_relaxed);
}

// SIGUSR1 handled, without SA_RESTART, while the object lives; the old disposition after.
class SignalHandled {
 public:
  SignalHandled() {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof(sa));
    sa.sa_handler = count_signal;
    sigemptyset(&sa.sa_mask);
    ok_ = sigaction(SIGUSR1, &sa, &old_) == 0;
  }
  ~SignalHandled() {
    if (ok_) sigaction(SIGUSR1, &old_, nullptr);
  }
  SignalHandled(const SignalHandled&) = delete;
  SignalHandled& operator=(const SignalHandled&) = delete;
  bool ok() const { return ok_; }

 private:
  struct sigaction old_;
  bool ok_ = false;
};

struct Interrupted {
  ssize_t rc = 0;                            // what the call returned
  int signals_sent = 0;                      // before it returned
  std::chrono::milliseconds after_first{0};  // from the first signal to its return
  bool returned = false;                     // false: no signal ended it, `release` did
};

// Runs `call`, a blocking call nothing else will end, on a thread; once it has had 100 ms to
// block, sends that thread SIGUSR1 every 20 ms until it returns (a signal that lands between two
// of the call's own sleeps is absorbed by the handler and the call goes on waiting, so one may
// not be enough), for at most 5 s; then `release` ends the call so that a failure never hangs.
inline Interrupted interrupt_with_signals(const std::function<ssize_t()>& call,
                                          const std::function<void()>& release) {
  using Clock = std::chrono::steady_clock;
  Interrupted out;
  std::atomic<bool> done{false};
  std::thread t([&] {
    out.rc = call();
    done.store(true);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto first = Clock::now();
  while (!done.load() && Clock::now() - first < std::chrono::seconds(5)) {
    pthread_kill(t.native_handle(), SIGUSR1);
    ++out.signals_sent;
    for (int i = 0; i < 20 && !done.load(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  out.returned = done.load();
  out.after_first = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - first);
  if (!out.returned) release();
  t.join();
  return out;
}

}  // namespace fabq::testing
