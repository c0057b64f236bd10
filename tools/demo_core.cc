// `fabq demo --core`: the core engine at work, in plain words, without libfabric or a network.
// Every line it prints is checked: the demo exits non-zero if the engine does not behave as the
// line says.
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "core/cq.h"
#include "core/eq.h"
#include "core/strerror.h"
#include "tools/commands.h"

namespace fabq::tools {
namespace {

using core::Code;

int failures = 0;

void say(const char* fmt, auto... args) {
  if constexpr (sizeof...(args) == 0) {
    std::fputs(fmt, stdout);
  } else {
    std::printf(fmt, args...);
  }
  std::printf("\n");
}

void expect(bool ok, const char* what) {
  if (!ok) {
    std::printf("  !! unexpected: %s\n", what);
    ++failures;
  }
}

const char* code_name(core::Status s) {
  if (s.ok()) return "success";
  const char* n = core::fi_errno_name(static_cast<int>(s.code()));
  return n != nullptr ? n : "?";
}

void events_in_order() {
  say("\n1. An event queue keeps events in the order they were written.");
  auto eq = core::EventQueue::create({.size = 8}).value();
  say("   opened an EQ for 8 events (room for %zu)", eq->capacity());
  for (uint64_t i = 1; i <= 3; ++i) {
    fi_eq_entry e{nullptr, nullptr, i * 100};
    auto w = eq->write(FI_NOTIFY, &e, sizeof(e));
    say("   wrote event %llu with data %llu -> %ld bytes", (unsigned long long)i,
        (unsigned long long)e.data, w.to_fi());
  }
  for (uint64_t i = 1; i <= 3; ++i) {
    fi_eq_entry e{};
    uint32_t event = 0;
    auto r = eq->read(&event, &e, sizeof(e), 0);
    say("   read  -> %ld bytes, data %llu", r.to_fi(), (unsigned long long)e.data);
    expect(r.ok() && e.data == i * 100, "events out of order");
  }
  auto r = eq->read(nullptr, nullptr, 0, 0);
  say("   read on the empty queue -> %s (nothing to read, try later)", code_name(r.status()));
  expect(r.status().code() == Code::kAgain, "empty read is not FI_EAGAIN");
}

void peek_and_short_buffer() {
  say("\n2. FI_PEEK looks without taking; a buffer too small is refused and takes nothing.");
  auto eq = core::EventQueue::create({.size = 4}).value();
  fi_eq_entry e{nullptr, nullptr, 42};
  (void)eq->write(FI_NOTIFY, &e, sizeof(e));
  fi_eq_entry out{};
  auto p = eq->read(nullptr, &out, sizeof(out), FI_PEEK);
  say("   peek  -> %ld bytes, data %llu; the event is still queued (%zu pending)", p.to_fi(),
      (unsigned long long)out.data, eq->pending());
  expect(p.ok() && eq->pending() == 1, "peek consumed the event");
  char tiny[8];
  auto s = eq->read(nullptr, tiny, sizeof(tiny), 0);
  say("   read into an 8-byte buffer -> %s; still %zu pending", code_name(s.status()),
      eq->pending());
  expect(s.status().code() == Code::kTooSmall && eq->pending() == 1, "short buffer consumed");
  auto r = eq->read(nullptr, &out, sizeof(out), 0);
  say("   read into a big enough buffer -> %ld bytes, data %llu", r.to_fi(),
      (unsigned long long)out.data);
  expect(r.ok() && out.data == 42, "event lost after short read");
}

void error_entry() {
  say("\n3. An error entry blocks normal reads until it is read with readerr.");
  auto eq = core::EventQueue::create({.size = 4}).value();
  const char detail[] = "link lost on port 1";
  (void)eq->write_error({.fid = nullptr,
                         .context = nullptr,
                         .data = 7,
                         .err = FI_EIO,
                         .prov_errno = FI_EIO,
                         .err_data = detail,
                         .err_data_size = sizeof(detail)});
  fi_eq_entry e{};
  auto r = eq->read(nullptr, &e, sizeof(e), 0);
  say("   read  -> %s (an error is waiting)", code_name(r.status()));
  expect(r.status().code() == Code::kAvail, "read did not report FI_EAVAIL");
  char mine[64] = {};
  fi_eq_err_entry err{};
  err.err_data = mine;
  err.err_data_size = sizeof(mine);
  auto x = eq->read_error(&err, 0);
  char text[64];
  say("   readerr -> err %s, prov_errno \"%s\", %zu bytes of err_data copied: \"%s\"",
      core::fi_errno_name(err.err), core::describe_prov_errno(err.prov_errno, text, sizeof(text)),
      err.err_data_size, mine);
  expect(x.ok() && err.err == FI_EIO && std::strcmp(mine, detail) == 0, "error entry wrong");
}

void overrun() {
  say("\n4. A full event queue is overrun: writes fail, reads drain, then the overrun error.");
  auto eq = core::EventQueue::create({.size = 2}).value();
  fi_eq_entry e{};
  int stored = 0;
  core::Status last;
  for (int i = 0; i < 4; ++i) {
    e.data = static_cast<uint64_t>(i);
    auto w = eq->write(FI_NOTIFY, &e, sizeof(e));
    if (w.ok()) ++stored;
    last = w.status();
  }
  say("   wrote 4 events into room for %zu: %d stored, then %s", eq->capacity(), stored,
      code_name(last));
  expect(stored == 2 && last.code() == Code::kOverrun, "overrun not reported to the writer");
  for (int i = 0; i < stored; ++i) {
    auto r = eq->read(nullptr, &e, sizeof(e), 0);
    say("   read  -> data %llu (stored events are still delivered, in order)",
        (unsigned long long)e.data);
    expect(r.ok() && e.data == static_cast<uint64_t>(i), "stored event lost");
  }
  auto r = eq->read(nullptr, &e, sizeof(e), 0);
  fi_eq_err_entry err{};
  auto x = eq->read_error(&err, 0);
  say("   read  -> %s; readerr -> err %s: the queue tells the reader it lost events",
      code_name(r.status()), core::fi_errno_name(err.err));
  expect(r.status().code() == Code::kAvail && x.ok() && err.err == FI_EOVERRUN,
         "overrun error entry missing");
}

void blocked_reader() {
  say("\n5. A reader blocked in sread is woken by a writer in another thread.");
  auto eq = core::EventQueue::create({.size = 16, .wait = core::WaitKind::kFd}).value();
  const auto start = std::chrono::steady_clock::now();
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    fi_eq_entry e{nullptr, nullptr, 99};
    (void)eq->write(FI_NOTIFY, &e, sizeof(e));
  });
  fi_eq_entry e{};
  auto r = eq->sread(nullptr, &e, sizeof(e), 5000, 0);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - start)
                      .count();
  writer.join();
  say("   sread(timeout 5 s) on an FD queue returned data %llu after %lld ms",
      (unsigned long long)e.data, (long long)ms);
  expect(r.ok() && e.data == 99, "blocked reader not woken");
  auto t = eq->sread(nullptr, &e, sizeof(e), 20, 0);
  say("   sread(timeout 20 ms) on the empty queue -> %s", code_name(t.status()));
  expect(t.status().code() == Code::kAgain, "timeout not honoured");
}

void cq_threshold() {
  say("\n6. A completion queue reader can wait for a batch: FI_CQ_COND_THRESHOLD.");
  auto cq = core::CompletionQueue::create(
                {.size = 64, .format = core::CqFormat::kMsg, .wait = core::WaitKind::kUnspec})
                .value();
  std::thread producer([&] {
    for (uintptr_t i = 1; i <= 8; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      while (
          !cq->write({.op_context = reinterpret_cast<void*>(i), .flags = FI_SEND | FI_MSG}).ok()) {
      }
    }
  });
  fi_cq_msg_entry entries[16];
  auto r = cq->sread(entries, 16, nullptr, /*threshold=*/8, 5000);
  producer.join();
  bool in_order = r.ok();
  for (size_t i = 0; in_order && i < r.value(); ++i) {
    in_order = entries[i].op_context == reinterpret_cast<void*>(i + 1);
  }
  say("   sread(threshold 8) returned %ld completions at once, contexts %s", r.to_fi(),
      in_order ? "1..8 in order" : "OUT OF ORDER");
  expect(r.ok() && r.value() == 8 && in_order, "threshold not honoured");
  auto s = cq->signal();
  auto w = cq->sread(entries, 16, nullptr, 1, 5000);
  say("   fi_cq_signal with nobody waiting, then sread -> %s at once", code_name(w.status()));
  expect(s.ok() && w.status().code() == Code::kAgain, "signal was not sticky");
}

}  // namespace

int run_core_demo() {
  say("fabq core engine demonstration: event queues (fi_eq) and completion queues (fi_cq).");
  events_in_order();
  peek_and_short_buffer();
  error_entry();
  overrun();
  blocked_reader();
  cq_threshold();
  if (failures != 0) {
    say("\n%d step(s) did not behave as described.", failures);
    return 1;
  }
  say("\nEvery step behaved as fi_eq(3) and fi_cq(3) describe.");
  return 0;
}

}  // namespace fabq::tools
