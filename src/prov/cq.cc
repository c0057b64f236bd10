#include "prov/cq.h"

#include <cstring>

#include "core/deadline.h"

#include "core/strerror.h"
#include "prov/domain.h"
#include "prov/eq.h"
#include "prov/fabric.h"
#include "prov/noop.h"
#include "prov/provider.h"
#include "prov/wait_set.h"

namespace fabq::prov {

struct CqOps {
  static int close(fid* f) { return close_target(Cq::from_fid(f)); }

  static int control(fid* f, int command, void* arg) {
    Cq* cq = Cq::from_fid(f);
    if (cq == nullptr) return -FI_EINVAL;
    return control_wait(cq->queue_->wait_kind(), cq->queue_->wait_object(), command, arg);
  }

  static ssize_t read(fid_cq* f, void* buf, size_t count) {
    Cq* cq = Cq::from_fid(&f->fid);
    if (cq == nullptr) return -FI_EINVAL;
    cq->drive(count);
    return cq->after_read(cq->queue_->read(buf, count, nullptr).to_fi());
  }

  static ssize_t readfrom(fid_cq* f, void* buf, size_t count, fi_addr_t* src_addr) {
    Cq* cq = Cq::from_fid(&f->fid);
    if (cq == nullptr) return -FI_EINVAL;
    cq->drive(count);
    return cq->after_read(cq->queue_->read(buf, count, src_addr).to_fi());
  }

  static ssize_t readerr(fid_cq* f, fi_cq_err_entry* buf, uint64_t flags) {
    Cq* cq = Cq::from_fid(&f->fid);
    if (cq == nullptr || buf == nullptr) return -FI_EINVAL;
    if ((flags & ~FI_PEEK) != 0) return -FI_EBADFLAGS;
    cq->drive();
    if (!cq->legacy_err_data_) {
      auto r = cq->queue_->read_error(buf, flags);
      if (r.ok() && cq->err_src_addr_) abi2::write_cq_err_src_addr(buf, FI_ADDR_NOTAVAIL);
      return cq->after_read(r.to_fi());
    }
    // API < 1.5: the application's struct ends before err_data_size.
    fi_cq_err_entry full{};
    auto r = cq->queue_->read_error(&full, flags);
    if (!r.ok()) return r.to_fi();
    std::memcpy(buf, &full, offsetof(fi_cq_err_entry, err_data_size));
    return cq->after_read(r.value());
  }

  static ssize_t sreadfrom(fid_cq* f, void* buf, size_t count, fi_addr_t* src_addr,
                           const void* cond, int timeout) {
    Cq* cq = Cq::from_fid(&f->fid);
    if (cq == nullptr) return -FI_EINVAL;
    const size_t threshold = cq->threshold_cond_ ? reinterpret_cast<size_t>(cond) : 1;
    cq->drive();
    Fabric* fabric = cq->domain_->fabric();
    if (Transport* t = fabric->transport_if_any(); t != nullptr && timeout != 0) {
      // Spin with progress first, as the core spins before it sleeps: a reply that comes back
      // within the spin costs no thread hand-off.
      const size_t want = std::max<size_t>(threshold, 1);
      const int64_t spin = static_cast<int64_t>(params().spin_us) * 1000;
      const int64_t end = core::monotonic_ns() +
                          (timeout > 0 ? std::min<int64_t>(spin, timeout * 1'000'000LL) : spin);
      while (cq->queue_->pending() < want && core::monotonic_ns() < end) t->progress();
      BlockingScope blocking(fabric);
      return cq->after_read(cq->queue_->sread(buf, count, src_addr, threshold, timeout).to_fi());
    }
    return cq->after_read(cq->queue_->sread(buf, count, src_addr, threshold, timeout).to_fi());
  }

  static ssize_t sread(fid_cq* f, void* buf, size_t count, const void* cond, int timeout) {
    return sreadfrom(f, buf, count, nullptr, cond, timeout);
  }

  static int signal(fid_cq* f) {
    Cq* cq = Cq::from_fid(&f->fid);
    if (cq == nullptr) return -FI_EINVAL;
    return cq->queue_->signal().to_fi();
  }

  static const char* strerror(fid_cq*, int prov_errno, const void*, char* buf, size_t len) {
    return core::describe_prov_errno(prov_errno, buf, len);
  }

  static inline fi_ops fi_ops_ = {
      .size = sizeof(fi_ops),
      .close = close,
      .bind = no_bind,
      .control = control,
      .ops_open = no_ops_open,
      .tostr = no_tostr,
      .ops_set = no_ops_set,
  };
  static inline fi_ops_cq cq_ops_ = {
      .size = sizeof(fi_ops_cq),
      .read = read,
      .readfrom = readfrom,
      .readerr = readerr,
      .sread = sread,
      .sreadfrom = sreadfrom,
      .signal = signal,
      .strerror = strerror,
  };
};

Cq* Cq::from_fid(const fid* f) {
  return Object::from<Cq, fid_cq>(f, FI_CLASS_CQ, &CqOps::fi_ops_);
}

Cq::Cq(Domain* domain, const fi_cq_attr& attr, WaitSet* wait_set,
       std::unique_ptr<core::CompletionQueue> queue, void* context)
    : Object(FI_CLASS_CQ, domain),
      AsyncTarget(core::FaultTargetKind::kCq, &box_.fid.fid),
      domain_(domain),
      domain_fabric_(domain->fabric()),
      wait_set_(wait_set),
      threshold_cond_(raw_enum(attr.wait_cond) == FI_CQ_COND_THRESHOLD),
      legacy_err_data_(domain->fabric()->legacy_err_data()),
      err_src_addr_(domain->fabric()->api().cq_err_src_addr()),
      queue_(std::move(queue)),
      receive_share_(queue_->capacity() / 4) {
  init_fid(&box_.fid.fid, FI_CLASS_CQ, context, &CqOps::fi_ops_);
  box_.fid.ops = &CqOps::cq_ops_;
  box_.owner = this;
  // Room made by a read or a cancelled reservation resumes the messages waiting for it; the
  // fabric outlives the CQ.
  queue_->set_room_hook([](void* fabric) { static_cast<Fabric*>(fabric)->room_given(); },
                        domain->fabric());
  if (wait_set_ != nullptr) wait_set_->hold();
}

Cq::~Cq() {
  queue_.reset();
  if (wait_set_ != nullptr) wait_set_->release();
  domain_->release_cq_slot();
}

std::vector<uint32_t> Cq::complete(const core::Completion& c) {
  FaultAction a = count_operation();
  if (a.err != 0) {
    queue_->complete_error({.completion = c, .err = a.err, .prov_errno = a.prov_errno});
  } else {
    queue_->complete(c);
  }
  return std::move(a.events);
}

std::vector<uint32_t> Cq::complete_error(const core::CompletionError& e) {
  FaultAction a = count_operation();
  queue_->complete_error(e);
  return std::move(a.events);
}

void Cq::drive(size_t want) {
  external_.disarm();
  // A read that the CQ can satisfy whole needs no progress first (the syscalls of a round
  // would be spent for nothing); one that it cannot always drives the transport.
  if (want != 0 && queue_->pending() >= want) return;
  progress(domain_->fabric());
}

bool Cq::inject_error(int err, int prov_errno) {
  core::CompletionError e{.err = err, .prov_errno = prov_errno};
  // No room for it is a real overrun: the CQ says so itself and with CQ_ERR.
  return !queue_->write_error(e).ok() && !queue_->overrun();
}

int open_cq(fid_domain* domain_fid, fi_cq_attr* attr, fid_cq** out, void* context) {
  if (out != nullptr) *out = nullptr;
  Domain* domain = Domain::from_fid(domain_fid ? &domain_fid->fid : nullptr);
  if (domain == nullptr || attr == nullptr || out == nullptr) return -FI_EINVAL;
  if ((attr->flags & ~FI_AFFINITY) != 0) return -FI_EBADFLAGS;
  if (domain->failed()) return -FI_EOPBADSTATE;
  const Params& p = params();
  if (attr->size > p.cq_max_size) {
    FABQ_WARN(FI_LOG_CQ, "fi_cq_open: size %zu exceeds FI_FABQ_CQ_MAX_SIZE=%zu\n", attr->size,
              p.cq_max_size);
    return -FI_EINVAL;
  }
  auto format = core::cq_format_from_fi(raw_enum(attr->format));
  if (!format.ok()) return -FI_EINVAL;
  if (const int cond = raw_enum(attr->wait_cond);
      cond != FI_CQ_COND_NONE && cond != FI_CQ_COND_THRESHOLD) {
    return -FI_EINVAL;
  }
  auto kind = core::wait_kind_from_fi(raw_enum(attr->wait_obj));
  if (!kind.ok()) return -FI_EINVAL;
  WaitSet* set = nullptr;
  if (*kind == core::WaitKind::kSet) {
    set = WaitSet::from_fid(attr->wait_set ? &attr->wait_set->fid : nullptr);
    if (set == nullptr) return -FI_EINVAL;
  }
  if (!domain->acquire_cq_slot()) return -FI_ENOSPC;
  core::CqConfig config{
      .size = attr->size == 0 ? p.cq_default_size : attr->size,
      .format = *format,
      .wait = *kind,
      .provider_owned_err_data = domain->fabric()->legacy_err_data(),
      .spin_ns = static_cast<int64_t>(p.spin_us) * 1000,
      .wait_set = set != nullptr ? &set->core() : nullptr,
  };
  auto queue = core::CompletionQueue::create(config);
  if (!queue.ok()) {
    domain->release_cq_slot();
    return queue.status().to_fi();
  }
  Cq* cq = make_object<Cq>(domain, *attr, set, std::move(queue.value()), context);
  if (cq == nullptr) {
    domain->release_cq_slot();
    return -FI_ENOMEM;
  }
  *out = cq->handle();
  domain->register_target(cq);
  domain->note_operation();
  return 0;
}

}  // namespace fabq::prov
