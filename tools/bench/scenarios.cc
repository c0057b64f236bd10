// The scenarios. Each opens its queue on the provider under test, warms up, then times the
// steady state while checking every entry it reads (event, fid, context, data, order): a
// provider that loses, reorders or corrupts an entry, or wakes a reader without cause, fails
// the scenario instead of posting a figure.
#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <functional>
#include <thread>

#include "tools/bench/bench.h"
#include "tools/bench/msg.h"
#include "tools/bench/rma.h"

namespace fabq::tools::bench {
namespace {

template <typename T>
struct Closer {
  void operator()(T* p) const { fi_close(&p->fid); }
};
template <typename T>
using FidPtr = std::unique_ptr<T, Closer<T>>;

int64_t clock_ns(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return ts.tv_sec * 1'000'000'000LL + ts.tv_nsec;
}
int64_t now_ns() {
  return clock_ns(CLOCK_MONOTONIC);
}

const char* wait_name(int w) {
  switch (w) {
    case FI_WAIT_NONE:
      return "FI_WAIT_NONE";
    case FI_WAIT_UNSPEC:
      return "FI_WAIT_UNSPEC";
    case FI_WAIT_FD:
      return "FI_WAIT_FD";
    case FI_WAIT_POLLFD:
      return "FI_WAIT_POLLFD";
    case FI_WAIT_MUTEX_COND:
      return "FI_WAIT_MUTEX_COND";
    case FI_WAIT_YIELD:
      return "FI_WAIT_YIELD";
    default:
      return "?";
  }
}

std::string fi_error(const char* call, long rc) {
  return std::string(call) + " returned " + std::to_string(rc) +
         (rc < 0 ? std::string(" (") + fi_strerror(static_cast<int>(-rc)) + ")" : "");
}

Sample unsupported(std::string why) {
  Sample s;
  s.state = Sample::State::kUnsupported;
  s.why = std::move(why);
  return s;
}

Sample failed(std::string why) {
  Sample s;
  s.state = Sample::State::kFailed;
  s.why = std::move(why);
  return s;
}

double allocs_per(int64_t before, int64_t after, uint64_t events) {
  if (before < 0 || after < 0 || events == 0) return -1;
  return static_cast<double>(after - before) / static_cast<double>(events);
}

FidPtr<fid_eq> open_eq(const Provider& p, int wait, std::string* why) {
  fi_eq_attr attr{};
  attr.size = 1024;
  attr.flags = FI_WRITE;  // fi_eq(3): required for fi_eq_write
  attr.wait_obj = static_cast<fi_wait_obj>(wait);
  fid_eq* eq = nullptr;
  const int rc = fi_eq_open(p.fabric(), &attr, &eq, nullptr);
  if (rc != 0) {
    *why = std::string("fi_eq_open with ") + wait_name(wait) + ": " + fi_strerror(-rc);
    return nullptr;
  }
  return FidPtr<fid_eq>(eq);
}

FidPtr<fid_cq> open_cq(const Provider& p, int wait, std::string* why) {
  fi_cq_attr attr{};
  attr.size = 1024;
  attr.format = FI_CQ_FORMAT_CONTEXT;
  attr.wait_obj = static_cast<fi_wait_obj>(wait);
  attr.wait_cond = FI_CQ_COND_NONE;
  fid_cq* cq = nullptr;
  const int rc = fi_cq_open(p.domain(), &attr, &cq, nullptr);
  if (rc != 0) {
    *why = std::string("fi_cq_open with ") + wait_name(wait) + ": " + fi_strerror(-rc);
    return nullptr;
  }
  return FidPtr<fid_cq>(cq);
}

FidPtr<fid_cntr> open_cntr(const Provider& p, int wait, std::string* why) {
  fi_cntr_attr attr{};
  attr.events = FI_CNTR_EVENTS_COMP;
  attr.wait_obj = static_cast<fi_wait_obj>(wait);
  fid_cntr* cntr = nullptr;
  const int rc = fi_cntr_open(p.domain(), &attr, &cntr, nullptr);
  if (rc != 0) {
    *why = std::string("fi_cntr_open with ") + wait_name(wait) + ": " + fi_strerror(-rc);
    return nullptr;
  }
  return FidPtr<fid_cntr>(cntr);
}

void* as_context(uint64_t i) {
  return reinterpret_cast<void*>(static_cast<uintptr_t>(i));
}

// Writes event number i (i > 0) to `eq`: FI_NOTIFY with fid = the EQ, context and data = i.
bool eq_write(fid_eq* eq, uint64_t i, std::string* why) {
  const fi_eq_entry e{&eq->fid, as_context(i), i};
  const ssize_t w = fi_eq_write(eq, FI_NOTIFY, &e, sizeof(e), 0);
  if (w == static_cast<ssize_t>(sizeof(e))) return true;
  *why = fi_error("fi_eq_write", w);
  return false;
}

// Checks that a read returned event number i exactly as eq_write wrote it.
bool eq_check(fid_eq* eq, uint64_t i, ssize_t r, uint32_t event, const fi_eq_entry& e,
              std::string* why) {
  if (r != static_cast<ssize_t>(sizeof(e))) {
    *why = fi_error("reading", r) + " where event " + std::to_string(i) + " was expected";
    return false;
  }
  if (event != FI_NOTIFY || e.fid != &eq->fid || e.context != as_context(i) || e.data != i) {
    char buf[200];
    std::snprintf(buf, sizeof(buf),
                  "expected event %" PRIu64 " (FI_NOTIFY, data %" PRIu64
                  "), read event type %u with data %" PRIu64,
                  i, i, event, static_cast<uint64_t>(e.data));
    *why = buf;
    return false;
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Throughput: one thread writes and reads.

Sample eq_pair(const Scenario& sc, const Provider& p, const Options& o) {
  std::string why;
  FidPtr<fid_eq> eq = open_eq(p, sc.wait_obj, &why);
  if (!eq) return unsupported(why);
  auto pair = [&](uint64_t i) {
    if (!eq_write(eq.get(), i, &why)) return false;
    fi_eq_entry e{};
    uint32_t event = 0;
    const ssize_t r = fi_eq_read(eq.get(), &event, &e, sizeof(e), 0);
    return eq_check(eq.get(), i, r, event, e, &why);
  };
  const uint64_t warm = o.pairs / 10 + 1;
  for (uint64_t i = 1; i <= warm; ++i) {
    if (!pair(i)) return failed(why);
  }
  const int64_t a0 = heap_allocations_now();
  const int64_t t0 = now_ns();
  for (uint64_t i = warm + 1; i <= warm + o.pairs; ++i) {
    if (!pair(i)) return failed(why);
  }
  const int64_t t1 = now_ns();
  const int64_t a1 = heap_allocations_now();
  Sample s;
  s.value = static_cast<double>(t1 - t0) / static_cast<double>(o.pairs);
  s.allocs = allocs_per(a0, a1, o.pairs);
  return s;
}

Sample eq_burst(const Scenario& sc, const Provider& p, const Options& o) {
  std::string why;
  FidPtr<fid_eq> eq = open_eq(p, sc.wait_obj, &why);
  if (!eq) return unsupported(why);
  uint64_t next = 1;
  auto burst = [&] {
    const uint64_t first = next;
    for (uint64_t k = 0; k < o.burst; ++k) {
      if (!eq_write(eq.get(), next++, &why)) return false;
    }
    for (uint64_t k = 0; k < o.burst; ++k) {
      fi_eq_entry e{};
      uint32_t event = 0;
      const ssize_t r = fi_eq_read(eq.get(), &event, &e, sizeof(e), 0);
      if (!eq_check(eq.get(), first + k, r, event, e, &why)) return false;
    }
    return true;
  };
  const uint64_t warm = o.bursts / 10 + 1;
  for (uint64_t b = 0; b < warm; ++b) {
    if (!burst()) return failed(why);
  }
  const int64_t a0 = heap_allocations_now();
  const int64_t t0 = now_ns();
  for (uint64_t b = 0; b < o.bursts; ++b) {
    if (!burst()) return failed(why);
  }
  const int64_t t1 = now_ns();
  const int64_t a1 = heap_allocations_now();
  const uint64_t events = o.bursts * o.burst;
  Sample s;
  s.value = static_cast<double>(t1 - t0) / static_cast<double>(events);
  s.allocs = allocs_per(a0, a1, events);
  return s;
}

// ---------------------------------------------------------------------------------------------
// Wake latency: a reader thread blocks; once it has said so, the writer (this thread) waits the
// gap, notes the time and wakes it. The latency is from that time to the reader's return.

struct Wake {
  // Reader: block until wake number i (i > 0) arrives and check what it delivers. `sent` holds
  // the writer's timestamp once the wake was sent (0 before). False with *why on failure.
  std::function<bool(uint64_t i, const std::atomic<int64_t>& sent, std::string* why)> block;
  // Writer: send wake number i.
  std::function<bool(uint64_t i, std::string* why)> fire;
};

void pause_ns(int64_t ns) {
  if (ns >= 100'000) {  // long gaps: let the core go (the reader's CPU time is reported)
    const timespec ts{ns / 1'000'000'000, ns % 1'000'000'000};
    nanosleep(&ts, nullptr);
    return;
  }
  const int64_t end = now_ns() + ns;
  while (now_ns() < end) {
  }
}

Sample run_wake(const Options& o, int64_t gap_ns, uint64_t wakes, const Wake& w) {
  const uint64_t warm = std::max<uint64_t>(wakes / 10, 10);
  const uint64_t total = warm + wakes;
  const int64_t limit_ns = static_cast<int64_t>(o.timeout_ms) * 1'000'000;
  std::vector<std::atomic<int64_t>> sent(total);
  for (auto& s : sent) s.store(0, std::memory_order_relaxed);
  std::vector<double> latency(wakes);
  std::atomic<uint64_t> ready{0};
  std::atomic<bool> reader_done{false};
  std::string reader_why;
  int64_t cpu0 = 0, cpu1 = 0, wall0 = 0, wall1 = 0;

  std::thread reader([&] {
    for (uint64_t i = 0; i < total; ++i) {
      if (i == warm) {
        cpu0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
        wall0 = now_ns();
      }
      ready.store(i + 1, std::memory_order_release);
      if (!w.block(i + 1, sent[i], &reader_why)) break;
      const int64_t t1 = now_ns();
      const int64_t t0 = sent[i].load(std::memory_order_acquire);
      if (t0 == 0) {
        reader_why = "the blocked call returned before the wake was sent";
        break;
      }
      if (t1 - t0 >= limit_ns) {
        reader_why =
            "lost wake-up: woke only after " + std::to_string((t1 - t0) / 1'000'000) + " ms";
        break;
      }
      if (i >= warm) latency[i - warm] = static_cast<double>(t1 - t0);
    }
    cpu1 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    wall1 = now_ns();
    reader_done.store(true, std::memory_order_release);
  });

  std::string writer_why;
  int64_t a0 = -1;
  for (uint64_t i = 0; i < total; ++i) {
    const int64_t deadline = now_ns() + limit_ns;
    while (ready.load(std::memory_order_acquire) < i + 1 &&
           !reader_done.load(std::memory_order_acquire)) {
      if (now_ns() > deadline) {
        writer_why = "the reader never came back to block again";
        break;
      }
    }
    if (!writer_why.empty() || reader_done.load(std::memory_order_acquire)) break;
    if (i == warm) a0 = heap_allocations_now();
    pause_ns(gap_ns);
    sent[i].store(now_ns(), std::memory_order_release);
    if (!w.fire(i + 1, &writer_why)) break;
  }
  reader.join();  // a reader left blocked by a failed wake gives up at its timeout
  const int64_t a1 = heap_allocations_now();
  if (!reader_why.empty()) return failed(reader_why);
  if (!writer_why.empty()) return failed(writer_why);

  Sample s;
  s.p99 = quantile(&latency, 0.99);
  s.value = quantile(&latency, 0.50);
  s.allocs = allocs_per(a0, a1, wakes);
  if (wall1 > wall0) s.reader_cpu = static_cast<double>(cpu1 - cpu0) / (wall1 - wall0);
  return s;
}

// Retries a blocking read that returned -FI_EAGAIN (a spurious return is allowed; the reader
// goes back to sleep) until the deadline.
bool eq_sread_until(fid_eq* eq, uint64_t i, int timeout_ms, std::string* why) {
  const int64_t deadline = now_ns() + static_cast<int64_t>(timeout_ms) * 1'000'000;
  for (;;) {
    fi_eq_entry e{};
    uint32_t event = 0;
    const ssize_t r = fi_eq_sread(eq, &event, &e, sizeof(e), timeout_ms, 0);
    if (r == -FI_EAGAIN && now_ns() < deadline) continue;
    if (r == -FI_EAGAIN) {
      *why = "fi_eq_sread timed out: lost wake-up";
      return false;
    }
    return eq_check(eq, i, r, event, e, why);
  }
}

Sample eq_wake_with_gap(const Scenario& sc, const Provider& p, const Options& o, int64_t gap,
                        uint64_t wakes) {
  std::string why;
  FidPtr<fid_eq> eq = open_eq(p, sc.wait_obj, &why);
  if (!eq) return unsupported(why);
  const Wake w{
      [&](uint64_t i, const std::atomic<int64_t>&, std::string* err) {
        return eq_sread_until(eq.get(), i, o.timeout_ms, err);
      },
      [&](uint64_t i, std::string* err) { return eq_write(eq.get(), i, err); },
  };
  return run_wake(o, gap, wakes, w);
}

Sample eq_wake(const Scenario& sc, const Provider& p, const Options& o) {
  return eq_wake_with_gap(sc, p, o, o.gap_ns, o.wakes);
}

Sample eq_wake_idle(const Scenario& sc, const Provider& p, const Options& o) {
  return eq_wake_with_gap(sc, p, o, o.idle_gap_ns, std::max<uint64_t>(o.wakes / 2, 20));
}

// fi_trywait, then epoll_wait on the EQ's fd, as an application with its own event loop does.
Sample eq_fd_wake_with_gap(const Scenario& sc, const Provider& p, const Options& o, int64_t gap,
                           uint64_t wakes) {
  std::string why;
  FidPtr<fid_eq> eq = open_eq(p, sc.wait_obj, &why);
  if (!eq) return unsupported(why);
  int fd = -1;
  int rc = fi_control(&eq->fid, FI_GETWAIT, &fd);
  if (rc != 0 || fd < 0) return unsupported(fi_error("fi_control(FI_GETWAIT)", rc));
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) return failed(std::string("epoll_create1: ") + std::strerror(errno));
  struct EpollFd {
    int fd;
    ~EpollFd() { close(fd); }
  } ep_guard{ep};
  epoll_event ev{};
  ev.events = EPOLLIN;
  if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
    return failed(std::string("epoll_ctl: ") + std::strerror(errno));
  }
  fid_fabric* fabric = p.fabric();
  const Wake w{
      [&](uint64_t i, const std::atomic<int64_t>&, std::string* err) {
        const int64_t deadline = now_ns() + static_cast<int64_t>(o.timeout_ms) * 1'000'000;
        for (;;) {
          fi_eq_entry e{};
          uint32_t event = 0;
          const ssize_t r = fi_eq_read(eq.get(), &event, &e, sizeof(e), 0);
          if (r != -FI_EAGAIN) return eq_check(eq.get(), i, r, event, e, err);
          if (now_ns() > deadline) {
            *err = "nothing to read before the timeout: lost wake-up";
            return false;
          }
          fid_t fids[1] = {&eq->fid};
          const int t = fi_trywait(fabric, fids, 1);
          if (t == -FI_EAGAIN) continue;
          if (t != 0) {
            *err = fi_error("fi_trywait", t);
            return false;
          }
          epoll_event out{};
          const int n = epoll_wait(ep, &out, 1, o.timeout_ms);
          if (n < 0 && errno != EINTR) {
            *err = std::string("epoll_wait: ") + std::strerror(errno);
            return false;
          }
        }
      },
      [&](uint64_t i, std::string* err) { return eq_write(eq.get(), i, err); },
  };
  return run_wake(o, gap, wakes, w);
}

Sample eq_fd_wake(const Scenario& sc, const Provider& p, const Options& o) {
  return eq_fd_wake_with_gap(sc, p, o, o.gap_ns, o.wakes);
}

Sample eq_fd_wake_idle(const Scenario& sc, const Provider& p, const Options& o) {
  return eq_fd_wake_with_gap(sc, p, o, o.idle_gap_ns, std::max<uint64_t>(o.wakes / 2, 20));
}

// fi_cq_signal wakes a reader blocked in fi_cq_sread on an empty CQ.
Sample cq_wake(const Scenario& sc, const Provider& p, const Options& o) {
  std::string why;
  FidPtr<fid_cq> cq = open_cq(p, sc.wait_obj, &why);
  if (!cq) return unsupported(why);
  const Wake w{
      [&](uint64_t, const std::atomic<int64_t>& sent, std::string* err) {
        const int64_t deadline = now_ns() + static_cast<int64_t>(o.timeout_ms) * 1'000'000;
        for (;;) {
          fi_cq_entry e{};
          const ssize_t r = fi_cq_sread(cq.get(), &e, 1, nullptr, o.timeout_ms);
          if (r != -FI_EAGAIN && r != -FI_ECANCELED) {
            *err = fi_error("fi_cq_sread", r) + " on an empty CQ (expected the signal)";
            return false;
          }
          // The call may return without cause; it counts once the signal was sent.
          if (sent.load(std::memory_order_acquire) != 0) return true;
          if (now_ns() > deadline) {
            *err = "fi_cq_sread timed out: lost wake-up";
            return false;
          }
        }
      },
      [&](uint64_t, std::string* err) {
        const int rc = fi_cq_signal(cq.get());
        if (rc == 0) return true;
        *err = fi_error("fi_cq_signal", rc);
        return false;
      },
  };
  return run_wake(o, o.gap_ns, o.wakes, w);
}

// fi_cntr_add wakes a reader blocked in fi_cntr_wait for exactly that value.
Sample cntr_wake(const Scenario& sc, const Provider& p, const Options& o) {
  std::string why;
  FidPtr<fid_cntr> cntr = open_cntr(p, sc.wait_obj, &why);
  if (!cntr) return unsupported(why);
  const Wake w{
      [&](uint64_t i, const std::atomic<int64_t>&, std::string* err) {
        const int rc = fi_cntr_wait(cntr.get(), i, o.timeout_ms);
        if (rc != 0) {
          *err = fi_error("fi_cntr_wait", rc) + (rc == -FI_ETIMEDOUT ? ": lost wake-up" : "");
          return false;
        }
        const uint64_t v = fi_cntr_read(cntr.get());
        if (v != i) {
          *err = "fi_cntr_wait for " + std::to_string(i) + " returned with the counter at " +
                 std::to_string(v);
          return false;
        }
        return true;
      },
      [&](uint64_t, std::string* err) {
        const int rc = fi_cntr_add(cntr.get(), 1);
        if (rc == 0) return true;
        *err = fi_error("fi_cntr_add", rc);
        return false;
      },
  };
  return run_wake(o, o.gap_ns, o.wakes, w);
}

// The scenarios of this file: EQ, CQ and counter operations, no connection.
const std::vector<Scenario>& queue_scenarios() {
  using M = Measure;
  static const std::vector<Scenario> all = {
      {"eq-pair/none", "fi_eq_write + fi_eq_read, one thread, EQ without wait object",
       M::kNsPerEvent, eq_pair, FI_WAIT_NONE},
      {"eq-pair/unspec", "fi_eq_write + fi_eq_read, one thread, EQ with FI_WAIT_UNSPEC",
       M::kNsPerEvent, eq_pair, FI_WAIT_UNSPEC},
      {"eq-burst/none", "256 fi_eq_write, then 256 fi_eq_read, one thread", M::kNsPerEvent,
       eq_burst, FI_WAIT_NONE},
      {"eq-wake/unspec", "fi_eq_write wakes a reader blocked in fi_eq_sread", M::kWakeNs, eq_wake,
       FI_WAIT_UNSPEC},
      {"eq-wake/fd", "fi_eq_write wakes a reader blocked in fi_eq_sread", M::kWakeNs, eq_wake,
       FI_WAIT_FD},
      {"eq-wake/pollfd", "fi_eq_write wakes a reader blocked in fi_eq_sread", M::kWakeNs, eq_wake,
       FI_WAIT_POLLFD},
      {"eq-wake/mutex_cond", "fi_eq_write wakes a reader blocked in fi_eq_sread", M::kWakeNs,
       eq_wake, FI_WAIT_MUTEX_COND},
      {"eq-wake/yield", "fi_eq_write wakes a reader blocked in fi_eq_sread", M::kWakeNs, eq_wake,
       FI_WAIT_YIELD},
      {"eq-wake-idle/unspec", "as eq-wake, the reader blocked long enough to be asleep", M::kWakeNs,
       eq_wake_idle, FI_WAIT_UNSPEC},
      {"eq-wake-idle/fd", "as eq-wake, the reader blocked long enough to be asleep", M::kWakeNs,
       eq_wake_idle, FI_WAIT_FD},
      {"eq-fd-wake/fd", "fi_eq_write wakes a reader in fi_trywait + epoll_wait", M::kWakeNs,
       eq_fd_wake, FI_WAIT_FD},
      {"eq-fd-wake-idle/fd", "as eq-fd-wake, the reader asleep in epoll_wait", M::kWakeNs,
       eq_fd_wake_idle, FI_WAIT_FD},
      {"cq-wake/unspec", "fi_cq_signal wakes a reader blocked in fi_cq_sread", M::kWakeNs, cq_wake,
       FI_WAIT_UNSPEC},
      {"cq-wake/fd", "fi_cq_signal wakes a reader blocked in fi_cq_sread", M::kWakeNs, cq_wake,
       FI_WAIT_FD},
      {"cq-wake/mutex_cond", "fi_cq_signal wakes a reader blocked in fi_cq_sread", M::kWakeNs,
       cq_wake, FI_WAIT_MUTEX_COND},
      {"cq-wake/yield", "fi_cq_signal wakes a reader blocked in fi_cq_sread", M::kWakeNs, cq_wake,
       FI_WAIT_YIELD},
      {"cntr-wake/unspec", "fi_cntr_add wakes a reader blocked in fi_cntr_wait", M::kWakeNs,
       cntr_wake, FI_WAIT_UNSPEC},
      {"cntr-wake/fd", "fi_cntr_add wakes a reader blocked in fi_cntr_wait", M::kWakeNs, cntr_wake,
       FI_WAIT_FD},
      {"cntr-wake/mutex_cond", "fi_cntr_add wakes a reader blocked in fi_cntr_wait", M::kWakeNs,
       cntr_wake, FI_WAIT_MUTEX_COND},
      {"cntr-wake/yield", "fi_cntr_add wakes a reader blocked in fi_cntr_wait", M::kWakeNs,
       cntr_wake, FI_WAIT_YIELD},
  };
  return all;
}

}  // namespace

const std::vector<Scenario>& all_scenarios() {
  static const std::vector<Scenario> all = [] {
    std::vector<Scenario> v = queue_scenarios();
    v.insert(v.end(), msg_scenarios().begin(), msg_scenarios().end());
    v.insert(v.end(), rma_scenarios().begin(), rma_scenarios().end());
    return v;
  }();
  return all;
}

}  // namespace fabq::tools::bench
