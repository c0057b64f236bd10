// fabq core: AsyncChannel, the asynchronous event channel of one domain (fi_fabq.h).
//
// A FIFO of events with the verbs channel's rules:
//   - get(): the oldest event, to exactly one caller however many threads read; blocks up to
//     a timeout (milliseconds; 0 never blocks, negative blocks without limit); kAgain when
//     none came in time.
//   - fd(): an eventfd that is readable exactly while the channel holds an event.
//   - ack(): each event get() returned must be acknowledged once, by its sequence number.
//   - Accounting per affected object, in an AsyncTracker the object embeds: how many of its
//     events wait unread and how many were read and not acknowledged. retire() is how an
//     object closes: kBusy while it has unacknowledged events, otherwise its unread events are
//     removed and the object may go.
//
// Memory: one heap node per queued event (events are rare: faults, link changes); nothing is
// dropped, so an application that never reads the channel holds every event until the domain
// closes.
//
// Threads: every member may be called from any thread. One internal mutex orders everything;
// push() never blocks beyond it, so producers (the link monitor, fault triggers, transports)
// may raise events from any context that does not hold the mutex already.
#pragma once

#include <rdma/fabric.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "core/mutex.h"
#include "core/status.h"
#include "core/unique_fd.h"

namespace fabq::core {

// Embedded in every object an event can be about. Guarded by the channel's mutex (which the
// analysis cannot see from here: the tracker lives in another object).
struct AsyncTracker {
  uint32_t queued = 0;
  uint32_t unacked = 0;
};

struct AsyncEvent {
  uint32_t type = 0;  // FI_FABQ_EVENT_*
  uint32_t port_num = 0;
  fid_t fid = nullptr;
  void* context = nullptr;
  uint64_t time_ns = 0;             // set by push(): CLOCK_REALTIME
  uint64_t seq = 0;                 // set by push(): 1, 2, ...
  AsyncTracker* tracker = nullptr;  // the object whose counts this event moves; not null
};

class AsyncChannel {
 public:
  // kIo if the eventfd cannot be made.
  static Result<std::unique_ptr<AsyncChannel>> create();
  ~AsyncChannel() = default;
  AsyncChannel(const AsyncChannel&) = delete;
  AsyncChannel& operator=(const AsyncChannel&) = delete;

  int fd() const { return efd_.get(); }

  // Appends `ev` (its time and seq are filled in here) and wakes one reader. Returns the seq.
  uint64_t push(AsyncEvent ev) FABQ_EXCLUDES(mu_);
  Result<AsyncEvent> get(int timeout_ms) FABQ_EXCLUDES(mu_);
  // kInval when `seq` is not an event read from this channel and not yet acknowledged, or
  // `fid` is not the one it was about.
  Status ack(uint64_t seq, fid_t fid) FABQ_EXCLUDES(mu_);

  // Runs `close` (returning Status) under the channel's lock if `t` has no unacknowledged
  // events (else kBusy without running it); when `close` succeeds, the unread events of `t`
  // are removed. `close` may destroy the object that holds `t`; it must not call back into
  // the channel.
  template <class F>
  Status retire(AsyncTracker* t, F&& close) FABQ_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    if (t->unacked != 0) return Code::kBusy;
    const bool had_queued = t->queued != 0;
    Status s = close();
    if (s.ok() && had_queued) purge_locked(t);
    return s;
  }

  size_t size() const FABQ_EXCLUDES(mu_);

 private:
  explicit AsyncChannel(UniqueFd efd) : efd_(std::move(efd)) {}
  // Removes the events of `t` without dereferencing it: its object may be gone.
  void purge_locked(const AsyncTracker* t) FABQ_REQUIRES(mu_);
  void sync_fd_locked() FABQ_REQUIRES(mu_);

  mutable Mutex mu_;
  CondVar cv_;
  std::deque<AsyncEvent> queue_ FABQ_GUARDED_BY(mu_);
  std::vector<AsyncEvent> delivered_ FABQ_GUARDED_BY(mu_);  // read, not yet acknowledged
  uint64_t next_seq_ FABQ_GUARDED_BY(mu_) = 1;
  bool fd_signalled_ FABQ_GUARDED_BY(mu_) = false;
  UniqueFd efd_;
};

}  // namespace fabq::core
