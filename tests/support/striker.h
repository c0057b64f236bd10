// Test support: the writer side of a lost-wake-up hunt. A reader blocks, many times over, in a
// call that another thread must wake (fi_eq_sread, fi_cntr_wait, fi_trywait and epoll, ...);
// the Striker is that other thread. For each iteration i it waits until the reader has armed
// iteration i (it is about to block, or its fi_trywait just returned 0), then strikes: at once
// for half of the iterations (the tightest race with the reader going to sleep), after a
// random 0-50 us spin for the others. The reader owns the loop; stop() ends it early.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>

namespace fabq::testing {

class Striker {
 public:
  // Starts the thread; strike(i) is its write (or add, or signal) of iteration i.
  Striker(int iterations, uint32_t seed, std::function<void(int)> strike);
  ~Striker() { stop(); }
  Striker(const Striker&) = delete;
  Striker& operator=(const Striker&) = delete;

  // The reader is about to block for iteration i.
  void arm(int i) { armed_.store(i, std::memory_order_release); }
  void stop();

 private:
  std::atomic<int> armed_{-1};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace fabq::testing
