// fabq provider: the fabric object (fi_fabric(3)).
//
// A fabric is one IPv4 subnet (its name, e.g. "127.0.0.0/8"). It opens domains, event
// queues and wait sets, and implements fi_trywait for fabq's EQs, CQs, counters and wait sets.
// It counts its open EQs against FI_FABQ_EQ_MAX_COUNT.
//
// fi_close() on a fabric with open domains, EQs or wait sets returns -FI_EBUSY.
#pragma once

#include <rdma/fabric.h>

#include <atomic>
#include <string>

#include "prov/object.h"

namespace fabq::prov {

class Fabric final : public Object {
 public:
  static Fabric* from_fid(const fid* f);

  Fabric(const fi_fabric_attr& attr, void* context);
  fid_fabric* handle() { return &box_.fid; }
  const std::string& name() const { return name_; }
  uint32_t api_version() const { return api_version_; }
  // API < 1.5: err_data of readerr is always provider-owned and err_data_size does not exist.
  bool legacy_err_data() const { return api_version_ < FI_VERSION(1, 5); }

  // EQ accounting against the per-fabric limit: false when the limit is reached.
  bool acquire_eq_slot();
  void release_eq_slot() { eqs_.fetch_sub(1, std::memory_order_relaxed); }

 private:
  static int close(fid* f);

  FidBox<fid_fabric> box_;
  std::string name_;
  uint32_t api_version_;
  std::atomic<size_t> eqs_{0};
};

// fi_provider::fabric.
int open_fabric(fi_fabric_attr* attr, fid_fabric** fabric, void* context);

}  // namespace fabq::prov
