// fabq provider: counters (fi_cntr(3)) on core::Counter.
//
// Validation at open: attr/cntr not null, events other than FI_CNTR_EVENTS_COMP, an unknown
// wait object, or FI_WAIT_SET without a fabq wait set (-FI_EINVAL); flags (-FI_EBADFLAGS); the
// domain's cntr_cnt counters already open (-FI_ENOSPC).
//
// fi_cntr_wait returns 0 once the value reaches the threshold, -FI_ETIMEDOUT at the timeout,
// -FI_EAVAIL when the error value changed while waiting, -FI_EAGAIN when a POSIX signal
// interrupted it, and -FI_ENOSYS on FI_WAIT_NONE and FI_WAIT_SET counters.
#pragma once

#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>

#include <memory>

#include "core/counter.h"
#include "prov/fabric.h"
#include "prov/object.h"

namespace fabq::prov {

class Domain;
class WaitSet;

class Cntr final : public Object {
 public:
  static Cntr* from_fid(const fid* f);

  Cntr(Domain* domain, WaitSet* wait_set, std::unique_ptr<core::Counter> counter, void* context);
  ~Cntr() override;
  fid_cntr* handle() { return &box_.fid; }
  core::Counter& counter() { return *counter_; }
  // What every read does first: drives the transport (xport/transport.h).
  void drive();
  Fabric* fabric() const;
  ExternalWait& external() { return external_; }

 private:
  friend struct CntrOps;
  FidBox<fid_cntr> box_;
  Domain* const domain_;
  WaitSet* const wait_set_;
  std::unique_ptr<core::Counter> counter_;
  ExternalWait external_;
};

int open_cntr(fid_domain* domain, fi_cntr_attr* attr, fid_cntr** cntr, void* context);

}  // namespace fabq::prov
