// fabq provider: the domain object (fi_domain(3)).
//
// A domain is one network interface (its name, e.g. "lo") of a fabric. It opens completion
// queues, counters and poll sets, counting CQs and counters against the cq_cnt and cntr_cnt
// it advertises. fi_domain_bind() attaches an EQ (flags 0 or FI_REG_MR) for the domain's
// asynchronous events; the EQ then cannot be closed before the domain (-FI_EBUSY). Endpoints,
// address vectors and memory registration come with the transport: until then they return
// -FI_ENOSYS.
//
// fi_close() with open CQs, counters or poll sets: -FI_EBUSY.
#pragma once

#include <rdma/fi_domain.h>

#include <atomic>
#include <mutex>
#include <string>

#include "prov/object.h"

namespace fabq::prov {

class Eq;
class Fabric;

class Domain final : public Object {
 public:
  static Domain* from_fid(const fid* f);

  Domain(Fabric* fabric, const fi_info& info, void* context);
  ~Domain() override;
  fid_domain* handle() { return &box_.fid; }
  Fabric* fabric() const { return fabric_; }
  const std::string& name() const { return name_; }

  bool acquire_cq_slot();
  void release_cq_slot() { cqs_.fetch_sub(1, std::memory_order_relaxed); }
  bool acquire_cntr_slot();
  void release_cntr_slot() { cntrs_.fetch_sub(1, std::memory_order_relaxed); }

 private:
  friend struct DomainOps;
  FidBox<fid_domain> box_;
  Fabric* const fabric_;
  std::string name_;
  std::atomic<size_t> cqs_{0};
  std::atomic<size_t> cntrs_{0};
  std::mutex mu_;
  Eq* eq_ = nullptr;  // bound EQ; guarded by mu_
  uint64_t eq_flags_ = 0;
};

int open_domain(fid_fabric* fabric, fi_info* info, fid_domain** domain, void* context);

}  // namespace fabq::prov
