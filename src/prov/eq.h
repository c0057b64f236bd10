// fabq provider: event queues (fi_eq(3)) on core::EventQueue.
//
// Validation at open, in this order: attr/eq not null (-FI_EINVAL); flags other than FI_WRITE
// and FI_AFFINITY (-FI_EBADFLAGS); size above FI_FABQ_EQ_MAX_SIZE (-FI_EINVAL); a wait object
// libfabric does not define, or FI_WAIT_SET without a fabq wait set (-FI_EINVAL); the fabric's
// FI_FABQ_EQ_MAX_COUNT open EQs (-FI_ENOSPC). size 0 means FI_FABQ_EQ_DEFAULT_SIZE. With
// FI_AFFINITY, signaling_vector is a hint: fabq has no interrupts to steer, so it is recorded
// and otherwise ignored.
//
// fi_eq_write without FI_WRITE at open: -FI_EINVAL. fi_close while something is bound to the
// EQ (a domain, an endpoint): -FI_EBUSY. Closing frees pending events.
#pragma once

#include <rdma/fi_eq.h>

#include <memory>

#include "core/eq.h"
#include "prov/fabric.h"
#include "prov/object.h"

namespace fabq::prov {

class Fabric;
class WaitSet;

class Eq final : public Object {
 public:
  static Eq* from_fid(const fid* f);

  Eq(Fabric* fabric, const fi_eq_attr& attr, WaitSet* wait_set,
     std::unique_ptr<core::EventQueue> queue, void* context);
  ~Eq() override;
  fid_eq* handle() { return &box_.fid; }
  core::EventQueue& queue() { return *queue_; }
  // What every read does first: drives the transport (prov/transport.h).
  void drive();
  ExternalWait& external() { return external_; }

 private:
  friend struct EqOps;
  FidBox<fid_eq> box_;
  Fabric* const fabric_;
  WaitSet* const wait_set_;
  const uint64_t flags_;
  const bool legacy_err_data_;
  std::unique_ptr<core::EventQueue> queue_;
  ExternalWait external_;
};

int open_eq(fid_fabric* fabric, fi_eq_attr* attr, fid_eq** eq, void* context);

// FI_GETWAIT / FI_GETWAITOBJ for any fabq object with a core wait object (EQ, CQ, counter,
// wait set). -FI_ENOSYS when the kind has nothing to hand out (NONE, UNSPEC, YIELD, SET).
int control_wait(core::WaitKind kind, core::WaitObject* obj, int command, void* arg);

}  // namespace fabq::prov
