// Micro-benchmarks of what a shared secret costs each datagram (xport/dgram_wire.h), on one
// core, without the kernel: ns per datagram and bytes per second, for payloads from 8 bytes to
// the largest.
//
//   plain        encode() then decode(): what every datagram costs without a secret
//   seal         the sender's part with a secret: encode() and DgramKey::seal() over the payload
//   receive      the receiver's part: decode(), ReplayGuard::check(), DgramKey::verify(),
//                ReplayGuard::accept() (in-order numbers from one sender)
//   guard/N      accept() alone, N senders taking turns (N up to the default table, 1024)
//
// Each benchmark reports `heap_allocs`: the allocations the process made while the timed loop
// ran (the benchmark library's own make a couple per run; the datagram path none).
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "alloc_counter.h"
#include "xport/dgram_wire.h"

namespace fabq::bench {
namespace {

using namespace xport::dgram;

const core::HmacSha256 kSecret("a shared secret", 15);

sockaddr_in addr(uint32_t host, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(host);
  a.sin_port = htons(port);
  return a;
}
const Ends kEnds(addr(0x7f000001, 4000), addr(0x7f000001, 5000));

void report(benchmark::State& state, uint64_t allocs_before, size_t bytes) {
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
  state.counters["heap_allocs"] = static_cast<double>(heap_allocations() - allocs_before);
}

void Plain(benchmark::State& state) {
  const size_t len = static_cast<size_t>(state.range(0));
  std::vector<unsigned char> d(kHeaderSize + len, 0x5a);
  const uint64_t before = heap_allocations();
  for (auto _ : state) {
    encode({.flags = kDgramData, .length = static_cast<uint32_t>(len), .data = 7}, d.data());
    Header h;
    benchmark::DoNotOptimize(decode(d.data(), d.size(), &h));
    benchmark::DoNotOptimize(h);
  }
  report(state, before, len);
}

void Seal(benchmark::State& state) {
  const size_t len = static_cast<size_t>(state.range(0));
  const DgramKey key(kSecret);
  std::vector<unsigned char> payload(len, 0x5a);
  unsigned char header[kAuthHeaderSize];
  const iovec iov{payload.data(), len};
  uint64_t seq = 0;
  const uint64_t before = heap_allocations();
  for (auto _ : state) {
    encode({.flags = kDgramAuth | kDgramData,
            .length = static_cast<uint32_t>(len),
            .data = 7,
            .epoch = 42,
            .seq = ++seq,
            .time_us = seq},
           header);
    key.seal(kEnds, header, &iov, 1);
    benchmark::DoNotOptimize(header);
  }
  report(state, before, len);
}

void Receive(benchmark::State& state) {
  const size_t len = static_cast<size_t>(state.range(0));
  const DgramKey key(kSecret);
  ReplayGuard guard(1024);
  std::vector<unsigned char> d(kAuthHeaderSize + len, 0x5a);
  const iovec iov{d.data() + kAuthHeaderSize, len};
  // Sealing is not the receiver's work: one datagram, whose number the loop rewrites under a
  // guard that is told nothing of it (accept() is called with the loop's own numbers).
  encode({.flags = kDgramAuth,
          .length = static_cast<uint32_t>(len),
          .epoch = 42,
          .seq = 1,
          .time_us = 1},
         d.data());
  key.seal(kEnds, d.data(), &iov, 1);
  uint64_t seq = 0;
  const uint64_t before = heap_allocations();
  for (auto _ : state) {
    Header h;
    if (decode(d.data(), d.size(), &h) != Refusal::kNone) state.SkipWithError("decode");
    ++seq;
    if (guard.check(kEnds, h.epoch, seq, seq) != Replay::kFresh) state.SkipWithError("check");
    if (!key.verify(kEnds, d.data(), d.size())) state.SkipWithError("verify");
    if (guard.accept(kEnds, h.epoch, seq, seq) != Replay::kFresh) state.SkipWithError("accept");
  }
  report(state, before, len);
}

void Guard(benchmark::State& state) {
  const size_t senders = static_cast<size_t>(state.range(0));
  ReplayGuard guard(1024);
  uint64_t n = 0;
  const uint64_t before = heap_allocations();
  for (auto _ : state) {
    ++n;
    const uint64_t epoch = n % senders + 1;
    benchmark::DoNotOptimize(guard.accept(kEnds, epoch, n / senders + 1, n));
  }
  report(state, before, 0);
}

constexpr int64_t kSizes[] = {8, 64, 1024, 4096, 16384, 65443};

void sizes(benchmark::internal::Benchmark* b) {
  for (int64_t s : kSizes) b->Arg(s);
}

BENCHMARK(Plain)->Apply(sizes);
BENCHMARK(Seal)->Apply(sizes);
BENCHMARK(Receive)->Apply(sizes);
BENCHMARK(Guard)->Arg(1)->Arg(64)->Arg(1024);

}  // namespace
}  // namespace fabq::bench

BENCHMARK_MAIN();
