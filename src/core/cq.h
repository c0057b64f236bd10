// fabq core: CompletionQueue, the storage and semantics behind fi_cq(3).
//
// Each slot holds one canonical completion (context, flags, len, buf, data, tag, source
// address: the first cache line) and, for error completions, the error fields with up to
// kCqMaxErrData bytes of err_data inline (the second line). Reads convert the canonical entry
// into the queue's format: CONTEXT, MSG, DATA or TAGGED. Nothing is allocated after create().
//
// No completion is ever silently lost. Capacity is counted in credits:
//   - a local operation calls reserve() when it is posted and gets kAgain when every slot is
//     taken or promised; when it finishes it calls complete() / complete_error(), which cannot
//     fail; if it is abandoned before it finishes, cancel_reservation() returns the credit;
//   - an unsolicited completion (no post to reserve at) calls write() / write_error(), which
//     reserve and complete in one step and give kAgain when the queue has no room, so the
//     transport can hold it back until a reader makes room.
// A read returns the credits of what it consumed.
//
// Waiting for room: a producer that holds back an unsolicited completion for want of a credit
// (the transport keeps the message it belongs to) calls await_room(). It says whether a credit
// came back meanwhile (then reserve again); if none did, the next thread that gives credits
// back (a read, a cancelled reservation) calls the room hook once (set_room_hook). So the
// producer waits for the queue's room instead of asking again and again. The hook runs on
// that thread, which may hold any of fabq's locks: it must take leaf locks only.
//
// Semantics (fi_cq(3) and fabq's contract):
//   - read(): as many entries as are ready, up to `count`, stopping before an error entry;
//     kAvail when an error entry is first; kAgain when empty. With `src_addr`, src_addr[i] is
//     the source recorded with entry i (FI_ADDR_NOTAVAIL unless the producer set one).
//   - read_error(): the error entry at the head, or kAgain. err_data as in EventQueue.
//   - sread(): with a threshold (FI_CQ_COND_THRESHOLD), waits until at least that many
//     entries are ready (clamped to count and to the capacity), an error is at the head, or
//     the timeout, and then returns what is there (kAgain if nothing).
//   - signal(): every thread blocked in sread() returns kAgain; with nobody blocked the next
//     sread() returns at once.
//   - overrun happens only through enter_overrun() (fault injection): reserve()/write() then
//     give kOverrun, outstanding reservations complete into nothing (the queue is dead, as
//     fi_cq(3) says), reads drain what is stored and then give kAvail, and read_error() yields
//     an entry with err = FI_EOVERRUN (sticky).
//
// Threads: producers (reserve/complete/write) are lock-free and may run on any thread; readers
// are serialized by an internal spin lock; signal() and try_wait() may be called from anywhere.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_eq.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/ring.h"
#include "core/spinlock.h"
#include "core/status.h"
#include "core/wait.h"
#include "core/wait_set.h"

namespace fabq::core {

inline constexpr size_t kCqMaxErrData = 40;

enum class CqFormat { kContext, kMsg, kData, kTagged };

// FI_CQ_FORMAT_* -> CqFormat (UNSPEC -> kContext, the provider default); kInval otherwise.
// Takes an int so that callers can pass whatever an application stored in the field.
Result<CqFormat> cq_format_from_fi(int format);
// Bytes one entry of `format` occupies in the caller's buffer.
size_t cq_entry_size(CqFormat format);

struct Completion {
  void* op_context = nullptr;
  uint64_t flags = 0;
  size_t len = 0;
  void* buf = nullptr;
  uint64_t data = 0;
  uint64_t tag = 0;
  fi_addr_t src_addr = FI_ADDR_NOTAVAIL;
};

struct CompletionError {
  Completion completion;
  size_t olen = 0;
  int err = 0;  // positive fabric errno
  int prov_errno = 0;
  const void* err_data = nullptr;  // copied; at most kCqMaxErrData bytes
  size_t err_data_size = 0;
};

struct CqConfig {
  size_t size = 1024;  // minimum number of entries; must be > 0
  CqFormat format = CqFormat::kContext;
  WaitKind wait = WaitKind::kNone;
  bool provider_owned_err_data = false;  // API < 1.5
  int64_t spin_ns = kDefaultSpinNs;
  WaitSet* wait_set = nullptr;  // for kSet; not owned, must outlive the queue
};

class CompletionQueue final : public WaitSetMember {
 public:
  static Result<std::unique_ptr<CompletionQueue>> create(const CqConfig& config);
  ~CompletionQueue() override;
  CompletionQueue(const CompletionQueue&) = delete;
  CompletionQueue& operator=(const CompletionQueue&) = delete;

  size_t capacity() const { return ring_.capacity(); }
  CqFormat format() const { return format_; }
  WaitKind wait_kind() const { return wait_kind_; }
  WaitObject* wait_object() const { return gate_->object(); }

  // Producers.
  // kAgain when fewer than n credits are free; kOverrun once overrun.
  Status reserve(size_t n = 1);
  // reserve(), leaving at least `keep` credits free for other producers: kAgain when fewer than
  // n + keep are free. The same one read-modify-write.
  Status reserve_leaving(size_t n, size_t keep);
  void cancel_reservation(size_t n = 1);
  // Each consumes one reservation and cannot fail. err_data beyond kCqMaxErrData is truncated
  // (the entry's err_data_size says how much was kept).
  void complete(const Completion& c);
  void complete_error(const CompletionError& e);
  Status write(const Completion& c);             // reserve(1) + complete()
  Status write_error(const CompletionError& e);  // reserve(1) + complete_error()
  // Fault injection: the queue enters the overrun state (see above).
  void enter_overrun();
  // Waiting for room (see above). The hook is set once, before the queue is shared.
  using RoomHook = void (*)(void* arg);
  void set_room_hook(RoomHook hook, void* arg) {
    room_hook_ = hook;
    room_arg_ = arg;
  }
  // True when a credit is free now; else the hook runs once credits come back. seq_cst with
  // give_back(): either this sees the credit or that sees the wish.
  bool await_room();

  // Consumers. A null buf with count > 0 is kInval. count == 0 reads nothing and says what is
  // at the head (fi_cq(3) lets an application read nothing to drive progress): 0 when a
  // completion is ready, kAvail when an error entry (or the overrun) is, kAgain when nothing is.
  Result<size_t> read(void* buf, size_t count, fi_addr_t* src_addr);
  Result<size_t> read_error(fi_cq_err_entry* entry, uint64_t flags);
  // `threshold` is the FI_CQ_COND_THRESHOLD value (0 or 1 = any entry). kNoSys for kNone/kSet.
  Result<size_t> sread(void* buf, size_t count, fi_addr_t* src_addr, size_t threshold,
                       int timeout_ms);
  // kNoSys for kNone (fi_cq_signal needs a wait object).
  Status signal();
  // fi_trywait: as EventQueue::try_wait().
  Status try_wait();

  // seq_cst: waiters look at it after announcing themselves on the gate (see wait.h).
  bool overrun() const { return overrun_.load(std::memory_order_seq_cst); }
  size_t pending() const { return static_cast<size_t>(ring_.claimed()); }
  // Free credits (capacity minus stored minus reserved). A hint.
  int64_t free_credits() const { return credits_.load(std::memory_order_relaxed); }

  // WaitSetMember.
  bool has_entries() const override { return ring_.claimed() != 0 || overrun(); }
  uint64_t change_count() const override { return 0; }
  bool take_poll_event() override { return has_entries(); }

 private:
  struct alignas(kCacheLine) Slot {
    std::atomic<uint64_t> seq{0};
    Completion c;
    // Second cache line: written for error completions only.
    size_t olen = 0;
    int err = 0;
    int prov_errno = 0;
    uint32_t err_data_size = 0;
    unsigned char err_data[kCqMaxErrData] = {};
  };
  static_assert(sizeof(Slot) == 2 * kCacheLine);

  CompletionQueue(const CqConfig& config, std::unique_ptr<WaitObject> own_wait);
  uint64_t claim_reserved();
  // Returns n credits, and calls the room hook if somebody waits for room.
  void give_back(size_t n);
  // Calls the room hook once if somebody waits for room (room_wanted_, cleared here).
  void wake_room_waiter();
  Result<size_t> read_locked(void* buf, size_t count, fi_addr_t* src_addr, size_t min_ready)
      FABQ_REQUIRES(read_lock_);
  bool signalled_since(uint64_t seen) const {
    return signals_.load(std::memory_order_seq_cst) != seen;
  }

  BoundedRing<Slot> ring_;
  alignas(kCacheLine) std::atomic<int64_t> credits_;
  std::atomic<uint32_t> errors_queued_{0};
  std::atomic<bool> overrun_{false};
  std::atomic<uint64_t> signals_{0};       // fi_cq_signal calls so far
  std::atomic<uint64_t> signals_seen_{0};  // signals already answered by an sread
  std::atomic<bool> room_wanted_{false};   // await_room() found no credit
  RoomHook room_hook_ = nullptr;
  void* room_arg_ = nullptr;
  SpinLock read_lock_;
  const CqFormat format_;
  const size_t entry_size_;
  const WaitKind wait_kind_;
  const bool provider_owned_err_data_;
  const int64_t spin_ns_;
  std::unique_ptr<WaitObject> own_wait_;
  WaitSet* const wait_set_;
  WaitGate own_gate_;
  WaitGate* const gate_;  // own_gate_, or the wait set's
  unsigned char err_buf_[kCqMaxErrData] FABQ_GUARDED_BY(read_lock_);  // provider-owned err_data
};

}  // namespace fabq::core
