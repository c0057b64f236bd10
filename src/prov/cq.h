// fabq provider: completion queues (fi_cq(3)) on core::CompletionQueue.
//
// Validation at open: attr/cq not null (-FI_EINVAL); flags other than FI_AFFINITY
// (-FI_EBADFLAGS); size above FI_FABQ_CQ_MAX_SIZE, an unknown format, wait object or wait
// condition, or FI_WAIT_SET without a fabq wait set (-FI_EINVAL); the domain's cq_cnt CQs
// already open (-FI_ENOSPC). size 0 means FI_FABQ_CQ_DEFAULT_SIZE; FI_CQ_FORMAT_UNSPEC means
// FI_CQ_FORMAT_CONTEXT.
//
// fi_cq_sread with FI_CQ_COND_THRESHOLD reads `cond` as a size_t threshold: (size_t)cond.
// fi_cq_signal on FI_WAIT_NONE: -FI_ENOSYS. fi_close while bound, or while asynchronous events
// read about it are not acknowledged: -FI_EBUSY. A domain after DEVICE_FATAL: -FI_EOPBADSTATE.
#pragma once

#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>

#include <atomic>
#include <memory>
#include <vector>

#include "core/cq.h"
#include "prov/events.h"
#include "prov/fabric.h"
#include "prov/object.h"

namespace fabq::prov {

class Domain;
class WaitSet;

class Cq final : public Object, public AsyncTarget {
 public:
  static Cq* from_fid(const fid* f);

  Cq(Domain* domain, const fi_cq_attr& attr, WaitSet* wait_set,
     std::unique_ptr<core::CompletionQueue> queue, void* context);
  ~Cq() override;
  fid_cq* handle() { return &box_.fid; }
  core::CompletionQueue& queue() { return *queue_; }
  Domain* domain() const { return domain_; }

  // Completions of operations posted on fabq endpoints (their credit reserved at post). They
  // are the CQ's operations for fault rules: a rule's error turns one into an error completion.
  // Returns the events rules raise on the CQ, for the caller to raise() once it holds no
  // endpoint or SRX lock.
  [[nodiscard]] std::vector<uint32_t> complete(const core::Completion& c);
  [[nodiscard]] std::vector<uint32_t> complete_error(const core::CompletionError& e);
  // An error completion with no operation (op_context NULL), as fault injection writes it.
  // True when it found no room and the CQ was not overrun already: a real overrun, which the
  // caller (holding the domain's lock) raises as CQ_ERR.
  [[nodiscard]] bool inject_error(int err, int prov_errno);
  // What every read does first: drives the transport (xport/transport.h), unless the CQ
  // already holds the `want` entries the read asks for (0: always).
  void drive(size_t want = 0);
  ExternalWait& external() { return external_; }
  // A transmit's slot, taken when it is posted (kAgain: none). On a CQ that also takes receive
  // completions, transmits leave a quarter of its slots (none of fewer than 4) to those: a send
  // whose completion waits for its peer's receive (a direct copy through shared memory) must never
  // hold every slot while the peer, in the same state, waits for a slot to complete the
  // receive that would complete it. Two ranks each posting a window of large sends to the
  // other through one CQ apiece (IMB Biband) otherwise wait on each other for ever.
  core::Status reserve_transmit() {
    return queue_->reserve_leaving(
        1, takes_receives_.load(std::memory_order_relaxed) ? receive_share_ : 0);
  }
  // Bound with FI_RECV: from now on transmits leave receives their share.
  void takes_receives() { takes_receives_.store(true, std::memory_order_relaxed); }
  // After a read (which may have made room): the messages that waited for room go on
  // (Fabric::resume_room_waiters()). Returns `rc`. Holding no lock.
  ssize_t after_read(ssize_t rc) {
    domain_fabric_->resume_room_waiters();
    return rc;
  }

 private:
  friend struct CqOps;
  FidBox<fid_cq> box_;
  Domain* const domain_;
  Fabric* const domain_fabric_;  // domain_'s
  WaitSet* const wait_set_;
  const bool threshold_cond_;
  const bool legacy_err_data_;
  // API >= 1.20: the application's fi_cq_err_entry ends with src_addr, which readerr sets.
  const bool err_src_addr_;
  std::unique_ptr<core::CompletionQueue> queue_;
  const size_t receive_share_;  // reserve_transmit(): a quarter of the capacity, rounded down
  std::atomic<bool> takes_receives_{false};
  ExternalWait external_;
};

int open_cq(fid_domain* domain, fi_cq_attr* attr, fid_cq** cq, void* context);

}  // namespace fabq::prov
