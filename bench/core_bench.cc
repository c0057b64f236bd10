// Micro-benchmarks of the core engine: ns per entry for the EQ and the CQ.
//
//   single-thread write+read pair   one write then one read, WAIT_NONE queue
//   burst 64 / 512                  write N, then read N (the CQ reads them in one call)
//   cross-thread hand-off           a producer thread writes, the benchmark thread reads
//
// Each benchmark reports items_per_second and `heap_allocs`: the heap allocations the whole
// process made while the timed loop ran, in total (the benchmark library's own bookkeeping
// makes a couple per run; the queues make none), beside the number of entries moved.
#include <benchmark/benchmark.h>
#include <rdma/fi_eq.h>

#include <atomic>
#include <thread>
#include <vector>

#include "alloc_counter.h"
#include "core/cq.h"
#include "core/eq.h"

namespace fabq::bench {
namespace {

using core::CompletionQueue;
using core::CqFormat;
using core::EventQueue;
using core::WaitKind;

// Records allocations across the timed loop.
class AllocWindow {
 public:
  AllocWindow() : start_(heap_allocations()) {}
  void report(benchmark::State& state, uint64_t entries) {
    const uint64_t allocs = heap_allocations() - start_;
    state.counters["heap_allocs"] = static_cast<double>(allocs);
    state.counters["entries"] = static_cast<double>(entries);
  }

 private:
  uint64_t start_;
};

void BM_EqWriteReadPair(benchmark::State& state) {
  auto eq = EventQueue::create({.size = 1024, .wait = WaitKind::kNone}).value();
  fi_eq_entry in{nullptr, nullptr, 1};
  fi_eq_entry out{};
  uint32_t event;
  AllocWindow allocs;
  for (auto _ : state) {
    auto w = eq->write(FI_NOTIFY, &in, sizeof(in));
    auto r = eq->read(&event, &out, sizeof(out), 0);
    benchmark::DoNotOptimize(w);
    benchmark::DoNotOptimize(r);
    if (!r.ok() || out.data != in.data) state.SkipWithError("EQ lost an event");
    ++in.data;
  }
  state.SetItemsProcessed(state.iterations());
  allocs.report(state, state.iterations());
}
BENCHMARK(BM_EqWriteReadPair);

void BM_CqWriteReadPair(benchmark::State& state) {
  auto cq =
      CompletionQueue::create({.size = 1024, .format = CqFormat::kTagged, .wait = WaitKind::kNone})
          .value();
  core::Completion c{.flags = FI_RECV | FI_TAGGED, .len = 64};
  fi_cq_tagged_entry out{};
  AllocWindow allocs;
  uint64_t tag = 0;
  for (auto _ : state) {
    c.tag = ++tag;
    auto w = cq->write(c);
    auto r = cq->read(&out, 1, nullptr);
    benchmark::DoNotOptimize(w);
    if (!r.ok() || out.tag != tag) state.SkipWithError("CQ lost a completion");
  }
  state.SetItemsProcessed(state.iterations());
  allocs.report(state, state.iterations());
}
BENCHMARK(BM_CqWriteReadPair);

void BM_EqBurst(benchmark::State& state) {
  const auto n = static_cast<size_t>(state.range(0));
  auto eq = EventQueue::create({.size = n, .wait = WaitKind::kNone}).value();
  fi_eq_entry in{nullptr, nullptr, 0};
  fi_eq_entry out{};
  AllocWindow allocs;
  for (auto _ : state) {
    for (size_t i = 0; i < n; ++i) {
      in.data = i;
      if (!eq->write(FI_NOTIFY, &in, sizeof(in)).ok()) state.SkipWithError("EQ write failed");
    }
    for (size_t i = 0; i < n; ++i) {
      auto r = eq->read(nullptr, &out, sizeof(out), 0);
      if (!r.ok() || out.data != i) state.SkipWithError("EQ lost an event");
    }
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(n));
  allocs.report(state, state.iterations() * n);
}
BENCHMARK(BM_EqBurst)->Arg(64)->Arg(512);

void BM_CqBurst(benchmark::State& state) {
  const auto n = static_cast<size_t>(state.range(0));
  auto cq = CompletionQueue::create({.size = n, .format = CqFormat::kData}).value();
  std::vector<fi_cq_data_entry> out(n);
  AllocWindow allocs;
  for (auto _ : state) {
    for (size_t i = 0; i < n; ++i) {
      if (!cq->write({.op_context = nullptr, .flags = FI_SEND, .data = i}).ok()) {
        state.SkipWithError("CQ write failed");
      }
    }
    size_t got = 0;
    while (got < n) {
      auto r = cq->read(out.data() + got, n - got, nullptr);
      if (!r.ok()) {
        state.SkipWithError("CQ lost a completion");
        break;
      }
      got += r.value();
    }
    if (out[n - 1].data != n - 1) state.SkipWithError("CQ out of order");
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(n));
  allocs.report(state, state.iterations() * n);
}
BENCHMARK(BM_CqBurst)->Arg(64)->Arg(512);

// One producer thread feeds the CQ as fast as credits allow; the timed thread reads in
// batches of up to 64. Time per iteration = time per entry handed over.
void BM_CqCrossThreadHandoff(benchmark::State& state) {
  auto cq = CompletionQueue::create({.size = 4096, .format = CqFormat::kContext}).value();
  const uint64_t total = state.max_iterations;
  std::atomic<bool> stop{false};
  std::thread producer([&] {
    for (uint64_t i = 0; i < total && !stop.load(std::memory_order_relaxed);) {
      if (cq->write({.op_context = reinterpret_cast<void*>(i + 1)}).ok()) ++i;
    }
  });
  fi_cq_entry batch[64];
  size_t have = 0, next = 0;
  uint64_t expect = 1;
  AllocWindow allocs;
  for (auto _ : state) {
    while (next == have) {
      auto r = cq->read(batch, 64, nullptr);
      have = r.ok() ? r.value() : 0;
      next = 0;
    }
    if (batch[next++].op_context != reinterpret_cast<void*>(expect++)) {
      state.SkipWithError("CQ hand-off out of order");
    }
  }
  stop.store(true);
  producer.join();
  state.SetItemsProcessed(state.iterations());
  allocs.report(state, state.iterations());
}
BENCHMARK(BM_CqCrossThreadHandoff)->UseRealTime();

void BM_EqCrossThreadHandoff(benchmark::State& state) {
  // The EQ overruns rather than back-pressure, so the producer paces itself on what the
  // reader has consumed.
  auto eq = EventQueue::create({.size = 4096}).value();
  const uint64_t total = state.max_iterations;
  std::atomic<uint64_t> consumed{0};
  std::atomic<bool> stop{false};
  std::thread producer([&] {
    fi_eq_entry e{nullptr, nullptr, 0};
    for (uint64_t i = 0; i < total; ++i) {
      while (i - consumed.load(std::memory_order_acquire) >= 4096) {
        if (stop.load(std::memory_order_relaxed)) return;
      }
      e.data = i;
      if (!eq->write(FI_NOTIFY, &e, sizeof(e)).ok()) return;
    }
  });
  fi_eq_entry out{};
  uint64_t expect = 0;
  AllocWindow allocs;
  for (auto _ : state) {
    while (!eq->read(nullptr, &out, sizeof(out), 0).ok()) {
    }
    if (out.data != expect++) state.SkipWithError("EQ hand-off out of order");
    consumed.store(expect, std::memory_order_release);
  }
  stop.store(true);
  producer.join();
  state.SetItemsProcessed(state.iterations());
  allocs.report(state, state.iterations());
}
BENCHMARK(BM_EqCrossThreadHandoff)->UseRealTime();

}  // namespace
}  // namespace fabq::bench

BENCHMARK_MAIN();
