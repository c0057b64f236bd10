// fabq provider: the endpoint's one-sided op tables (fi_rma(3), fi_atomic(3); rma_ops.cc) and
// fi_query_atomic.
//
// fi_query_atomic (and fi_atomicvalid, fi_fetch_atomicvalid, fi_compare_atomicvalid on an
// endpoint) answer for every (op, datatype) pair what fabq performs: 0 with the datatype's size
// and the most elements one request may carry (xport::kMaxAtomicBytes of operands), or
// -FI_EOPNOTSUPP (core/atomic_op.h has the table). Flags: 0, FI_FETCH_ATOMIC or
// FI_COMPARE_ATOMIC (-FI_EBADFLAGS otherwise); FI_TAGGED (tagged atomics) is -FI_EOPNOTSUPP.
#pragma once

#include <rdma/fi_atomic.h>
#include <rdma/fi_rma.h>

namespace fabq::prov {

fi_ops_rma* rma_ops();
fi_ops_atomic* atomic_ops();
int query_atomic(fid_domain* domain, fi_datatype datatype, fi_op op, fi_atomic_attr* attr,
                 uint64_t flags);

}  // namespace fabq::prov
