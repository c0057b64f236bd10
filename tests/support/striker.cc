#include "support/striker.h"

#include <chrono>
#include <random>
#include <utility>

namespace fabq::testing {

Striker::Striker(int iterations, uint32_t seed, std::function<void(int)> strike)
    : thread_([this, iterations, seed, strike = std::move(strike)] {
        using Clock = std::chrono::steady_clock;
        std::mt19937 rng(seed);
        std::uniform_int_distribution<int64_t> delay_ns(0, 50'000);
        for (int i = 0; i < iterations; ++i) {
          while (armed_.load(std::memory_order_acquire) < i) {
            if (stop_.load(std::memory_order_acquire)) return;
          }
          if (i % 2 == 1) {
            const auto until = Clock::now() + std::chrono::nanoseconds(delay_ns(rng));
            while (Clock::now() < until) {
            }
          }
          strike(i);
        }
      }) {}

void Striker::stop() {
  stop_.store(true, std::memory_order_release);
  if (thread_.joinable()) thread_.join();
}

}  // namespace fabq::testing
