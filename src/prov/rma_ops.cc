// fabq provider: the one-sided op tables of an endpoint (fi_rma(3), fi_atomic(3)) and the
// domain's fi_query_atomic. Each call becomes a SendRequest of its kind (prov/endpoint.h) and
// goes the way of a send: a transmit ring slot, a CQ slot, the connection to the peer.
//
// An RMA or atomic request names one remote range (rma_iov_count 1: tx_attr->rma_iov_limit);
// its local side may have up to iov_limit buffers. An atomic carries at most
// xport::kMaxAtomicBytes of operands (fi_query_atomic's count says how many elements that is).
#include <rdma/fi_atomic.h>
#include <rdma/fi_rma.h>

#include "core/atomic_op.h"
#include "prov/domain.h"
#include "prov/endpoint.h"
#include "prov/rma_ops.h"

namespace fabq::prov {
namespace {

constexpr uint64_t kRmaMsgFlags = FI_REMOTE_CQ_DATA | FI_INJECT | FI_COMPLETION | FI_FENCE |
                                  FI_INJECT_COMPLETE | FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE |
                                  FI_MORE;

}  // namespace

struct RmaOps {
  static Endpoint* of(fid_ep* f) { return Endpoint::from_fid(f ? &f->fid : nullptr); }

  // `msg_call`: the flags are the caller's (the *msg forms); else the endpoint's op_flags.
  static ssize_t one(fid_ep* f, SendRequest req, bool msg_call = false) {
    Endpoint* e = of(f);
    if (e == nullptr) return -FI_EINVAL;
    if (!msg_call && !req.inject_call) req.flags = e->tx_op_flags_;
    return e->post_send(req);
  }

  // --- fi_rma(3)

  static ssize_t read(fid_ep* f, void* buf, size_t len, void*, fi_addr_t src, uint64_t addr,
                      uint64_t key, void* context) {
    const iovec iov{buf, len};
    return one(f, {.dest = src,
                   .context = context,
                   .kind = xport::TxKind::kRead,
                   .key = key,
                   .addr = addr,
                   .result = &iov,
                   .result_count = 1});
  }
  static ssize_t readv(fid_ep* f, const iovec* iov, void**, size_t count, fi_addr_t src,
                       uint64_t addr, uint64_t key, void* context) {
    return one(f, {.dest = src,
                   .context = context,
                   .kind = xport::TxKind::kRead,
                   .key = key,
                   .addr = addr,
                   .result = iov,
                   .result_count = count});
  }
  // A *msg call's one remote range must hold what the local buffers move.
  static bool fits(const fi_msg_rma* msg) {
    if (msg == nullptr || msg->rma_iov_count != 1 || msg->rma_iov == nullptr) return false;
    if (msg->iov_count > xport::kMaxIov || (msg->iov_count > 0 && msg->msg_iov == nullptr)) {
      return false;
    }
    // Lengths whose sum wraps would fit any range.
    size_t len = 0;
    return iov_total(msg->msg_iov, msg->iov_count, &len) && len <= msg->rma_iov[0].len;
  }

  static ssize_t readmsg(fid_ep* f, const fi_msg_rma* msg, uint64_t flags) {
    if (!fits(msg)) return -FI_EINVAL;
    if ((flags & ~kRmaMsgFlags) != 0 || (flags & (FI_INJECT | FI_REMOTE_CQ_DATA)) != 0) {
      return -FI_EBADFLAGS;
    }
    return one(f,
               {.dest = msg->addr,
                .context = msg->context,
                .flags = flags,
                .kind = xport::TxKind::kRead,
                .key = msg->rma_iov[0].key,
                .addr = msg->rma_iov[0].addr,
                .result = msg->msg_iov,
                .result_count = msg->iov_count},
               true);
  }
  static ssize_t write(fid_ep* f, const void* buf, size_t len, void*, fi_addr_t dest, uint64_t addr,
                       uint64_t key, void* context) {
    const iovec iov{const_cast<void*>(buf), len};
    return one(f, {.iov = &iov,
                   .iov_count = 1,
                   .dest = dest,
                   .context = context,
                   .kind = xport::TxKind::kWrite,
                   .key = key,
                   .addr = addr});
  }
  static ssize_t writev(fid_ep* f, const iovec* iov, void**, size_t count, fi_addr_t dest,
                        uint64_t addr, uint64_t key, void* context) {
    return one(f, {.iov = iov,
                   .iov_count = count,
                   .dest = dest,
                   .context = context,
                   .kind = xport::TxKind::kWrite,
                   .key = key,
                   .addr = addr});
  }
  static ssize_t writemsg(fid_ep* f, const fi_msg_rma* msg, uint64_t flags) {
    if (!fits(msg)) return -FI_EINVAL;
    if ((flags & ~kRmaMsgFlags) != 0) return -FI_EBADFLAGS;
    return one(f,
               {.iov = msg->msg_iov,
                .iov_count = msg->iov_count,
                .dest = msg->addr,
                .context = msg->context,
                .flags = flags,
                .has_data = (flags & FI_REMOTE_CQ_DATA) != 0,
                .data = msg->data,
                .kind = xport::TxKind::kWrite,
                .key = msg->rma_iov[0].key,
                .addr = msg->rma_iov[0].addr},
               true);
  }
  static ssize_t inject(fid_ep* f, const void* buf, size_t len, fi_addr_t dest, uint64_t addr,
                        uint64_t key) {
    const iovec iov{const_cast<void*>(buf), len};
    return one(f, {.iov = &iov,
                   .iov_count = 1,
                   .dest = dest,
                   .flags = FI_INJECT,
                   .inject_call = true,
                   .kind = xport::TxKind::kWrite,
                   .key = key,
                   .addr = addr});
  }
  static ssize_t writedata(fid_ep* f, const void* buf, size_t len, void*, uint64_t data,
                           fi_addr_t dest, uint64_t addr, uint64_t key, void* context) {
    const iovec iov{const_cast<void*>(buf), len};
    return one(f, {.iov = &iov,
                   .iov_count = 1,
                   .dest = dest,
                   .context = context,
                   .has_data = true,
                   .data = data,
                   .kind = xport::TxKind::kWrite,
                   .key = key,
                   .addr = addr});
  }
  static ssize_t injectdata(fid_ep* f, const void* buf, size_t len, uint64_t data, fi_addr_t dest,
                            uint64_t addr, uint64_t key) {
    const iovec iov{const_cast<void*>(buf), len};
    return one(f, {.iov = &iov,
                   .iov_count = 1,
                   .dest = dest,
                   .flags = FI_INJECT,
                   .has_data = true,
                   .data = data,
                   .inject_call = true,
                   .kind = xport::TxKind::kWrite,
                   .key = key,
                   .addr = addr});
  }

  // --- fi_atomic(3)

  // An fi_ioc list as iovecs of `datatype` elements; false when it has too many entries, or a
  // count the buffers cannot hold.
  static bool ioc_iov(const fi_ioc* ioc, size_t n, int datatype, iovec* out, size_t* elems) {
    if (n > xport::kMaxIov || (n > 0 && ioc == nullptr)) return false;
    const size_t size = core::atomic_datatype_size(datatype);
    *elems = 0;
    for (size_t i = 0; i < n; ++i) {
      if (size == 0 || ioc[i].count > xport::kMaxAtomicBytes) return false;
      out[i] = {ioc[i].addr, ioc[i].count * size};
      *elems += ioc[i].count;
    }
    return true;
  }

  static SendRequest atomic_req(xport::AtomicKind kind, fi_addr_t dest, uint64_t addr, uint64_t key,
                                int datatype, int op, size_t count, void* context) {
    return {.dest = dest,
            .context = context,
            .kind = xport::TxKind::kAtomic,
            .key = key,
            .addr = addr,
            .atomic_kind = kind,
            .atomic_op = op,
            .datatype = datatype,
            .count = count};
  }

  static ssize_t awrite(fid_ep* f, const void* buf, size_t count, void*, fi_addr_t dest,
                        uint64_t addr, uint64_t key, fi_datatype dt, fi_op op, void* context) {
    const iovec iov{const_cast<void*>(buf), count * core::atomic_datatype_size(dt)};
    SendRequest r = atomic_req(xport::AtomicKind::kPlain, dest, addr, key, dt, op, count, context);
    r.iov = &iov;
    r.iov_count = 1;
    return one(f, r);
  }
  static ssize_t awritev(fid_ep* f, const fi_ioc* ioc, void**, size_t n, fi_addr_t dest,
                         uint64_t addr, uint64_t key, fi_datatype dt, fi_op op, void* context) {
    iovec iov[xport::kMaxIov];
    size_t count = 0;
    if (!ioc_iov(ioc, n, dt, iov, &count)) return -FI_EINVAL;
    SendRequest r = atomic_req(xport::AtomicKind::kPlain, dest, addr, key, dt, op, count, context);
    r.iov = iov;
    r.iov_count = n;
    return one(f, r);
  }
  static ssize_t awritemsg(fid_ep* f, const fi_msg_atomic* msg, uint64_t flags) {
    if (msg == nullptr || msg->rma_iov_count != 1 || msg->rma_iov == nullptr) return -FI_EINVAL;
    if ((flags & ~kRmaMsgFlags) != 0 || (flags & FI_REMOTE_CQ_DATA) != 0) return -FI_EBADFLAGS;
    iovec iov[xport::kMaxIov];
    size_t count = 0;
    if (!ioc_iov(msg->msg_iov, msg->iov_count, msg->datatype, iov, &count)) return -FI_EINVAL;
    SendRequest r = atomic_req(xport::AtomicKind::kPlain, msg->addr, msg->rma_iov[0].addr,
                               msg->rma_iov[0].key, msg->datatype, msg->op, count, msg->context);
    r.iov = iov;
    r.iov_count = msg->iov_count;
    r.flags = flags;
    r.inject_call = false;
    return one(f, r, true);
  }
  static ssize_t ainject(fid_ep* f, const void* buf, size_t count, fi_addr_t dest, uint64_t addr,
                         uint64_t key, fi_datatype dt, fi_op op) {
    const iovec iov{const_cast<void*>(buf), count * core::atomic_datatype_size(dt)};
    SendRequest r = atomic_req(xport::AtomicKind::kPlain, dest, addr, key, dt, op, count, nullptr);
    r.iov = &iov;
    r.iov_count = 1;
    r.flags = FI_INJECT;
    r.inject_call = true;
    return one(f, r);
  }

  // The fetching forms. FI_ATOMIC_READ reads no operand (fi_atomic(3)): the request carries the
  // result buffers' bytes in its place, which the target ignores.
  static ssize_t fetching(fid_ep* f, xport::AtomicKind kind, const fi_ioc* ioc, size_t n,
                          const fi_ioc* cmp, size_t cmp_n, fi_ioc* res, size_t res_n,
                          fi_addr_t dest, uint64_t addr, uint64_t key, fi_datatype dt, fi_op op,
                          void* context, uint64_t flags, bool msg_call) {
    iovec iov[xport::kMaxIov];
    iovec cmp_iov[xport::kMaxIov];
    iovec res_iov[xport::kMaxIov];
    size_t count = 0;
    size_t cmp_count = 0;
    size_t res_count = 0;
    if (!ioc_iov(res, res_n, dt, res_iov, &res_count)) return -FI_EINVAL;
    if (op == FI_ATOMIC_READ) {
      std::copy(res_iov, res_iov + res_n, iov);
      n = res_n;
      count = res_count;
    } else if (!ioc_iov(ioc, n, dt, iov, &count)) {
      return -FI_EINVAL;
    }
    if (!ioc_iov(cmp, cmp_n, dt, cmp_iov, &cmp_count)) return -FI_EINVAL;
    SendRequest r = atomic_req(kind, dest, addr, key, dt, op, count, context);
    r.iov = iov;
    r.iov_count = n;
    r.result = res_iov;
    r.result_count = res_n;
    r.compare = cmp_iov;
    r.compare_count = cmp_n;
    r.flags = flags;
    return one(f, r, msg_call);
  }
  static ssize_t readwrite(fid_ep* f, const void* buf, size_t count, void*, void* result, void*,
                           fi_addr_t dest, uint64_t addr, uint64_t key, fi_datatype dt, fi_op op,
                           void* context) {
    const fi_ioc in{const_cast<void*>(buf), count};
    fi_ioc res{result, count};
    return fetching(f, xport::AtomicKind::kFetch, &in, 1, nullptr, 0, &res, 1, dest, addr, key, dt,
                    op, context, 0, false);
  }
  static ssize_t readwritev(fid_ep* f, const fi_ioc* iov, void**, size_t count, fi_ioc* resultv,
                            void**, size_t result_count, fi_addr_t dest, uint64_t addr,
                            uint64_t key, fi_datatype dt, fi_op op, void* context) {
    return fetching(f, xport::AtomicKind::kFetch, iov, count, nullptr, 0, resultv, result_count,
                    dest, addr, key, dt, op, context, 0, false);
  }
  static ssize_t readwritemsg(fid_ep* f, const fi_msg_atomic* msg, fi_ioc* resultv, void**,
                              size_t result_count, uint64_t flags) {
    if (msg == nullptr || msg->rma_iov_count != 1 || msg->rma_iov == nullptr) return -FI_EINVAL;
    if ((flags & ~kRmaMsgFlags) != 0 || (flags & (FI_REMOTE_CQ_DATA | FI_INJECT)) != 0) {
      return -FI_EBADFLAGS;
    }
    return fetching(f, xport::AtomicKind::kFetch, msg->msg_iov, msg->iov_count, nullptr, 0, resultv,
                    result_count, msg->addr, msg->rma_iov[0].addr, msg->rma_iov[0].key,
                    msg->datatype, msg->op, msg->context, flags, true);
  }
  static ssize_t compwrite(fid_ep* f, const void* buf, size_t count, void*, const void* compare,
                           void*, void* result, void*, fi_addr_t dest, uint64_t addr, uint64_t key,
                           fi_datatype dt, fi_op op, void* context) {
    const fi_ioc in{const_cast<void*>(buf), count};
    const fi_ioc cmp{const_cast<void*>(compare), count};
    fi_ioc res{result, count};
    return fetching(f, xport::AtomicKind::kCompare, &in, 1, &cmp, 1, &res, 1, dest, addr, key, dt,
                    op, context, 0, false);
  }
  static ssize_t compwritev(fid_ep* f, const fi_ioc* iov, void**, size_t count,
                            const fi_ioc* comparev, void**, size_t compare_count, fi_ioc* resultv,
                            void**, size_t result_count, fi_addr_t dest, uint64_t addr,
                            uint64_t key, fi_datatype dt, fi_op op, void* context) {
    return fetching(f, xport::AtomicKind::kCompare, iov, count, comparev, compare_count, resultv,
                    result_count, dest, addr, key, dt, op, context, 0, false);
  }
  static ssize_t compwritemsg(fid_ep* f, const fi_msg_atomic* msg, const fi_ioc* comparev, void**,
                              size_t compare_count, fi_ioc* resultv, void**, size_t result_count,
                              uint64_t flags) {
    if (msg == nullptr || msg->rma_iov_count != 1 || msg->rma_iov == nullptr) return -FI_EINVAL;
    if ((flags & ~kRmaMsgFlags) != 0 || (flags & (FI_REMOTE_CQ_DATA | FI_INJECT)) != 0) {
      return -FI_EBADFLAGS;
    }
    return fetching(f, xport::AtomicKind::kCompare, msg->msg_iov, msg->iov_count, comparev,
                    compare_count, resultv, result_count, msg->addr, msg->rma_iov[0].addr,
                    msg->rma_iov[0].key, msg->datatype, msg->op, msg->context, flags, true);
  }

  static int valid(xport::AtomicKind kind, fid_ep* f, fi_datatype dt, fi_op op, size_t* count) {
    if (of(f) == nullptr || count == nullptr) return -FI_EINVAL;
    if (!core::atomic_valid(kind, op, dt)) return -FI_EOPNOTSUPP;
    *count = xport::kMaxAtomicBytes / core::atomic_datatype_size(dt);
    return 0;
  }
  static int writevalid(fid_ep* f, fi_datatype dt, fi_op op, size_t* count) {
    return valid(xport::AtomicKind::kPlain, f, dt, op, count);
  }
  static int readwritevalid(fid_ep* f, fi_datatype dt, fi_op op, size_t* count) {
    return valid(xport::AtomicKind::kFetch, f, dt, op, count);
  }
  static int compwritevalid(fid_ep* f, fi_datatype dt, fi_op op, size_t* count) {
    return valid(xport::AtomicKind::kCompare, f, dt, op, count);
  }

  static inline fi_ops_rma rma_ops_ = {
      .size = sizeof(fi_ops_rma),
      .read = read,
      .readv = readv,
      .readmsg = readmsg,
      .write = write,
      .writev = writev,
      .writemsg = writemsg,
      .inject = inject,
      .writedata = writedata,
      .injectdata = injectdata,
  };
  static inline fi_ops_atomic atomic_ops_ = {
      .size = sizeof(fi_ops_atomic),
      .write = awrite,
      .writev = awritev,
      .writemsg = awritemsg,
      .inject = ainject,
      .readwrite = readwrite,
      .readwritev = readwritev,
      .readwritemsg = readwritemsg,
      .compwrite = compwrite,
      .compwritev = compwritev,
      .compwritemsg = compwritemsg,
      .writevalid = writevalid,
      .readwritevalid = readwritevalid,
      .compwritevalid = compwritevalid,
  };
};

fi_ops_rma* rma_ops() {
  return &RmaOps::rma_ops_;
}

fi_ops_atomic* atomic_ops() {
  return &RmaOps::atomic_ops_;
}

int query_atomic(fid_domain* domain, fi_datatype datatype, fi_op op, fi_atomic_attr* attr,
                 uint64_t flags) {
  if (Domain::from_fid(domain ? &domain->fid : nullptr) == nullptr || attr == nullptr) {
    return -FI_EINVAL;
  }
  if ((flags & ~(FI_FETCH_ATOMIC | FI_COMPARE_ATOMIC | FI_TAGGED)) != 0 ||
      (flags & FI_FETCH_ATOMIC && flags & FI_COMPARE_ATOMIC)) {
    return -FI_EBADFLAGS;
  }
  if ((flags & FI_TAGGED) != 0) return -FI_EOPNOTSUPP;  // no tagged atomics
  const xport::AtomicKind kind = (flags & FI_COMPARE_ATOMIC) != 0 ? xport::AtomicKind::kCompare
                                 : (flags & FI_FETCH_ATOMIC) != 0 ? xport::AtomicKind::kFetch
                                                                  : xport::AtomicKind::kPlain;
  if (!core::atomic_valid(kind, op, datatype)) return -FI_EOPNOTSUPP;
  attr->size = core::atomic_datatype_size(datatype);
  attr->count = xport::kMaxAtomicBytes / attr->size;
  return 0;
}

}  // namespace fabq::prov
