// fabq provider: wait sets and poll sets (fi_poll(3)).
//
// Wait set (fi_wait_open on a fabric): wait objects UNSPEC, FD, POLLFD, MUTEX_COND, YIELD
// (NONE and SET: -FI_EINVAL); flags must be 0 (-FI_EBADFLAGS). EQs, CQs and counters opened
// with FI_WAIT_SET and this set as wait_set signal it. fi_wait returns 0 when a member is ready
// (see core/wait_set.h) and -FI_EAGAIN at the timeout; FI_GETWAIT hands out the set's fd or
// mutex/cond. fi_close while members exist: -FI_EBUSY.
//
// Poll set (fi_poll_open on a domain): fi_poll_add/fi_poll_del of fabq CQs and counters
// (anything else: -FI_EINVAL; adding twice: -FI_EBUSY; deleting a non-member: -FI_EINVAL). A
// member cannot be closed while it belongs to a poll set (-FI_EBUSY); closing the poll set
// releases its members. fi_poll first drives the fabric's transport, as every queue read does,
// so that an application that only polls sees its traffic complete; then it reports the CQs
// that are not empty and the counters that changed since the last fi_poll, fi_cntr_set or
// fi_cntr_add (core/counter.h: endpoints count with Counter::complete*, which marks the change
// for poll sets; fi_cntr_add and fi_cntr_set clear the mark). It returns the number of contexts
// written (0 when nothing is ready); count <= 0 or a null array: -FI_EINVAL.
#pragma once

#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>

#include <memory>
#include <vector>

#include "core/mutex.h"
#include "core/thread_annotations.h"
#include "core/wait_set.h"
#include "prov/fabric.h"
#include "prov/object.h"

namespace fabq::prov {

class Domain;
class Fabric;

class WaitSet final : public Object {
 public:
  static WaitSet* from_fid(const fid* f);

  WaitSet(Fabric* fabric, std::unique_ptr<core::WaitSet> set);
  fid_wait* handle() { return &box_.fid; }
  core::WaitSet& core() { return *set_; }
  ExternalWait& external() { return external_; }

 private:
  friend struct WaitSetOps;
  FidBox<fid_wait> box_;
  Fabric* const fabric_;
  std::unique_ptr<core::WaitSet> set_;
  ExternalWait external_;
};

class PollSet final : public Object {
 public:
  static PollSet* from_fid(const fid* f);

  explicit PollSet(Domain* domain);
  Domain* const domain_;
  ~PollSet() override;
  fid_poll* handle() { return &box_.fid; }

 private:
  friend struct PollSetOps;
  FidBox<fid_poll> box_;
  core::PollSet set_;
  core::Mutex mu_;
  std::vector<Object*> members_ FABQ_GUARDED_BY(mu_);  // each holds a reference
};

int open_wait_set(fid_fabric* fabric, fi_wait_attr* attr, fid_wait** waitset);
int open_poll_set(fid_domain* domain, fi_poll_attr* attr, fid_poll** pollset);

}  // namespace fabq::prov
