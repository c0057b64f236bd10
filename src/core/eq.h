// fabq core: EventQueue, the storage and semantics behind fi_eq(3).
//
// Bounded storage sized at construction (the requested size rounded up to a power of two:
// size is a minimum). Each slot holds one event of up to kEqMaxEventSize bytes inline: a plain
// `fi_eq_entry`, an `fi_eq_cm_entry` with up to kCmDataSize bytes of connection data, an
// application event written with write(), or an error entry with up to kEqMaxErrData bytes of
// err_data. Nothing is allocated after create().
//
// Semantics (fi_eq(3) and fabq's contract):
//   - read(): one event per call; returns its size in bytes; FI_PEEK leaves it queued; a
//     buffer smaller than the event gives kTooSmall and consumes nothing; empty gives kAgain;
//     an error entry at the head gives kAvail.
//   - read_error(): the error entry at the head, or kAgain if the head is not an error.
//     err_data: when the caller passes err_data != NULL with err_data_size > 0, up to that many
//     bytes are copied there and err_data_size is set to the number copied; otherwise (or when
//     the queue was created with provider_owned_err_data, i.e. API < 1.5) err_data points at a
//     buffer owned by this queue, valid until the next read call on it.
//   - overrun: a write that finds no free slot puts the queue in the overrun state and fails
//     with kOverrun; so does every later write. Reads keep returning every stored event in
//     order; after the last one, read() gives kAvail and read_error() yields an entry with
//     err = FI_EOVERRUN and fid = EqConfig::owner. The overrun state is permanent (the EQ is
//     unusable, as fi_eq(3) says), so that entry is returned by every later read_error().
//
// Threads: any number of threads may write concurrently (lock-free); readers are serialized
// by an internal spin lock, so any thread may read. The provider-owned err_data buffer is
// shared by all readers: applications serialize error handling, as fi_eq(3) requires.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_eq.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "core/cm_data.h"
#include "core/ring.h"
#include "core/spinlock.h"
#include "core/status.h"
#include "core/wait.h"
#include "core/wait_set.h"

namespace fabq::core {

inline constexpr size_t kEqMaxErrData = 256;
inline constexpr size_t kEqMaxEventSize = sizeof(fi_eq_err_entry) + kEqMaxErrData;
static_assert(kEqMaxEventSize >= sizeof(fi_eq_cm_entry) + kCmDataSize);

struct EqConfig {
  size_t size = 1024;  // minimum number of events; must be > 0
  WaitKind wait = WaitKind::kNone;
  // Set when the application asked for API < 1.5: err_data is always provider-owned.
  bool provider_owned_err_data = false;
  int64_t spin_ns = kDefaultSpinNs;
  // For kSet: the wait set to signal (not owned; must outlive the queue).
  WaitSet* wait_set = nullptr;
  // fid reported in the FI_EOVERRUN error entry (the EQ's own fid, if it has one).
  fid_t owner = nullptr;
};

// An error event as a producer describes it. `err` is a positive fabric errno.
struct EqError {
  fid_t fid = nullptr;
  void* context = nullptr;
  uint64_t data = 0;
  int err = 0;
  int prov_errno = 0;
  const void* err_data = nullptr;  // copied at write; at most kEqMaxErrData bytes
  size_t err_data_size = 0;
};

class EventQueue final : public WaitSetMember {
 public:
  // kInval for size 0 or a size that does not fit in memory; kIo/kNoSpace if the wait object
  // cannot be made.
  static Result<std::unique_ptr<EventQueue>> create(const EqConfig& config);
  ~EventQueue() override;
  EventQueue(const EventQueue&) = delete;
  EventQueue& operator=(const EventQueue&) = delete;

  size_t capacity() const { return ring_.capacity(); }
  WaitKind wait_kind() const { return wait_kind_; }
  // The wait object behind FI_GETWAIT (null for kNone; the set's object for kSet).
  WaitObject* wait_object() const { return gate_->object(); }

  // Producers. write() returns len; kInval if len > kEqMaxEventSize or buf is null with len > 0;
  // kOverrun when full or already overrun.
  Result<size_t> write(uint32_t event, const void* buf, size_t len);
  // As write(), but only while more than `keep_free` slots are free; otherwise kAgain, and the
  // queue is not overrun: for events a producer can refuse at their source instead of losing
  // them (a connection request that the passive endpoint then refuses), so that they never
  // take the room other events need.
  Result<size_t> write_leaving(size_t keep_free, uint32_t event, const void* buf, size_t len);
  // kInval if err_data_size > kEqMaxErrData or err is not positive; kOverrun as write().
  Status write_error(const EqError& error);
  // As write_error(), but as write_leaving() when the queue has no room: kAgain, not overrun.
  // For the event of an operation its producer can still undo (a memory registration with
  // FI_REG_MR, a multicast join), so that an EQ without room fails the operation instead of
  // overrunning.
  Status write_error_leaving(size_t keep_free, const EqError& error);

  // Consumers. `flags` may hold FI_PEEK; other bits are ignored (the provider validates).
  Result<size_t> read(uint32_t* event, void* buf, size_t len, uint64_t flags);
  // Returns sizeof(fi_eq_err_entry) on success.
  Result<size_t> read_error(fi_eq_err_entry* entry, uint64_t flags);
  // Blocking read: as read(), waiting up to timeout_ms (negative = forever) for an event.
  // kAgain at timeout or when interrupted by a signal; kNoSys for kNone and kSet.
  Result<size_t> sread(uint32_t* event, void* buf, size_t len, int timeout_ms, uint64_t flags);

  // Removes every stored event about `fid` (the fid of an fi_eq_entry / fi_eq_cm_entry, or of
  // an error entry): fi_cm(3) purges a closed endpoint's events. Events a producer is writing
  // concurrently are not seen; the caller makes sure nobody writes about `fid` any more.
  // Returns how many were removed. `release`, when given, is called (under the readers' lock,
  // so it must not read this queue) with each removed event that is not an error entry: its
  // event number and payload, for a producer whose events own something (an FI_CONNREQ's
  // fi_info).
  using Release = std::function<void(uint32_t event, const void* payload, size_t len)>;
  size_t purge(const void* fid, const Release& release = nullptr);

  // fi_trywait: kAgain while anything is queued (events, errors, the overrun entry); otherwise
  // quiets the fd, arms the external wake-up and returns ok: the fd stays quiet (or the
  // condition unsignalled) until the next event. kNoSys for kNone.
  Status try_wait();

  // seq_cst: waiters look at it after announcing themselves on the gate (see wait.h).
  bool overrun() const { return overrun_.load(std::memory_order_seq_cst); }
  // Events stored and not yet consumed (including claimed, unpublished ones). A hint.
  size_t pending() const { return static_cast<size_t>(ring_.claimed()); }
  // The fid reported in the FI_EOVERRUN entry, when it is only known after create(). Call
  // before the queue is shared.
  void set_owner(fid_t owner) { owner_ = owner; }

  // WaitSetMember.
  bool has_entries() const override { return readable(); }
  uint64_t change_count() const override { return 0; }
  bool take_poll_event() override { return readable(); }

 private:
  struct alignas(kCacheLine) Slot {
    std::atomic<uint64_t> seq{0};
    uint32_t event = 0;
    uint32_t len = 0;  // payload bytes; for errors: err_data bytes
    unsigned char payload[kEqMaxEventSize];
  };
  static_assert(sizeof(Slot) % kCacheLine == 0);

  EventQueue(const EqConfig& config, std::unique_ptr<WaitObject> own_wait);
  bool readable() const { return ring_.claimed() != 0 || overrun(); }
  // The published slot at the head, after dropping purged ones; null when none is published.
  const Slot* head_slot(bool* is_error) FABQ_REQUIRES(read_lock_);
  [[gnu::always_inline]] inline Status claim_for_write(uint64_t* pos);
  void fill_event(uint64_t pos, uint32_t event, const void* buf, size_t len);
  void fill_error_slot(uint64_t pos, const EqError& error);
  void fill_error(const Slot& slot, fi_eq_err_entry* entry) FABQ_REQUIRES(read_lock_);

  BoundedRing<Slot> ring_;
  SpinLock read_lock_;
  std::atomic<bool> overrun_{false};
  const WaitKind wait_kind_;
  const bool provider_owned_err_data_;
  const int64_t spin_ns_;
  fid_t owner_;
  std::unique_ptr<WaitObject> own_wait_;
  WaitSet* const wait_set_;
  WaitGate own_gate_;
  WaitGate* const gate_;  // own_gate_, or the wait set's
  unsigned char err_buf_[kEqMaxErrData] FABQ_GUARDED_BY(read_lock_);  // provider-owned err_data
};

}  // namespace fabq::core
