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
  // What every read does first: drives the transport (xport/transport.h).
  void drive();

  // A connection-management event of `fid`, packed the one way fi_cm(3) and fi_eq(3) say:
  // err 0: an fi_eq_cm_entry of `event` (FI_CONNREQ with `info`, which the entry then owns;
  // FI_CONNECTED with the peer's data; FI_SHUTDOWN without), followed by up to kCmDataSize bytes
  // of `data`; err != 0: an error entry (err, the fid's context, `data` as err_data).
  // `keep_free`: written only while more than that many slots stay free (else kAgain), so that
  // requests never crowd out the events of connections already made.
  struct CmEvent {
    fid_t fid = nullptr;
    uint32_t event = 0;
    int err = 0;
    fi_info* info = nullptr;
    const void* data = nullptr;
    size_t len = 0;
    size_t keep_free = 0;
  };
  core::Status write_cm(const CmEvent& e);
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
