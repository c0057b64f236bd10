#include "prov/eq.h"

#include <poll.h>

#include <algorithm>
#include <cstring>

#include "core/strerror.h"
#include "prov/fabric.h"
#include "prov/noop.h"
#include "prov/provider.h"
#include "prov/wait_set.h"

namespace fabq::prov {

int control_wait(core::WaitKind kind, core::WaitObject* obj, int command, void* arg) {
  if (command == FI_GETWAITOBJ) {
    if (arg == nullptr) return -FI_EINVAL;
    *static_cast<enum fi_wait_obj*>(arg) = core::wait_kind_to_fi(kind);
    return 0;
  }
  if (command != FI_GETWAIT) return -FI_ENOSYS;
  if (arg == nullptr) return -FI_EINVAL;
  switch (kind) {
    case core::WaitKind::kFd:
      *static_cast<int*>(arg) = obj->fd();
      return 0;
    case core::WaitKind::kMutexCond:
      *static_cast<fi_mutex_cond*>(arg) = obj->mutex_cond();
      return 0;
    case core::WaitKind::kPollFd: {
      auto* out = static_cast<fi_wait_pollfd*>(arg);
      const fi_wait_pollfd* mine = obj->pollfd_set();
      if (out->nfds < mine->nfds || out->fd == nullptr) {
        out->nfds = mine->nfds;
        return -FI_ETOOSMALL;
      }
      out->change_index = mine->change_index;
      out->nfds = mine->nfds;
      std::memcpy(out->fd, mine->fd, sizeof(pollfd) * mine->nfds);
      return 0;
    }
    default:
      return -FI_ENOSYS;
  }
}

struct EqOps {
  static int close(fid* f) { return close_object(Eq::from_fid(f)); }

  static int control(fid* f, int command, void* arg) {
    Eq* eq = Eq::from_fid(f);
    if (eq == nullptr) return -FI_EINVAL;
    return control_wait(eq->queue_->wait_kind(), eq->queue_->wait_object(), command, arg);
  }

  static ssize_t read(fid_eq* f, uint32_t* event, void* buf, size_t len, uint64_t flags) {
    Eq* eq = Eq::from_fid(&f->fid);
    if (eq == nullptr) return -FI_EINVAL;
    if ((flags & ~FI_PEEK) != 0) return -FI_EBADFLAGS;
    eq->drive();
    return eq->queue_->read(event, buf, len, flags).to_fi();
  }

  static ssize_t readerr(fid_eq* f, fi_eq_err_entry* buf, uint64_t flags) {
    Eq* eq = Eq::from_fid(&f->fid);
    if (eq == nullptr || buf == nullptr) return -FI_EINVAL;
    if ((flags & ~FI_PEEK) != 0) return -FI_EBADFLAGS;
    eq->drive();
    if (!eq->legacy_err_data_) return eq->queue_->read_error(buf, flags).to_fi();
    // API < 1.5: the application's struct ends before err_data_size.
    fi_eq_err_entry full{};
    auto r = eq->queue_->read_error(&full, flags);
    if (!r.ok()) return r.to_fi();
    constexpr size_t kLegacySize = offsetof(fi_eq_err_entry, err_data_size);
    std::memcpy(buf, &full, kLegacySize);
    return kLegacySize;
  }

  static ssize_t write(fid_eq* f, uint32_t event, const void* buf, size_t len, uint64_t flags) {
    Eq* eq = Eq::from_fid(&f->fid);
    if (eq == nullptr) return -FI_EINVAL;
    if ((eq->flags_ & FI_WRITE) == 0) return -FI_EINVAL;
    if (flags != 0) return -FI_EBADFLAGS;
    return eq->queue_->write(event, buf, len).to_fi();
  }

  static ssize_t sread(fid_eq* f, uint32_t* event, void* buf, size_t len, int timeout,
                       uint64_t flags) {
    Eq* eq = Eq::from_fid(&f->fid);
    if (eq == nullptr) return -FI_EINVAL;
    if ((flags & ~FI_PEEK) != 0) return -FI_EBADFLAGS;
    eq->drive();
    BlockingScope blocking(eq->fabric_);
    return eq->queue_->sread(event, buf, len, timeout, flags).to_fi();
  }

  static const char* strerror(fid_eq*, int prov_errno, const void*, char* buf, size_t len) {
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
  static inline fi_ops_eq eq_ops_ = {
      .size = sizeof(fi_ops_eq),
      .read = read,
      .readerr = readerr,
      .write = write,
      .sread = sread,
      .strerror = strerror,
  };
};

void Eq::drive() {
  external_.disarm();
  progress(fabric_);
}

Eq* Eq::from_fid(const fid* f) {
  return Object::from<Eq, fid_eq>(f, FI_CLASS_EQ, &EqOps::fi_ops_);
}

Eq::Eq(Fabric* fabric, const fi_eq_attr& attr, WaitSet* wait_set,
       std::unique_ptr<core::EventQueue> queue, void* context)
    : Object(FI_CLASS_EQ, fabric),
      fabric_(fabric),
      wait_set_(wait_set),
      flags_(attr.flags),
      legacy_err_data_(fabric->legacy_err_data()),
      queue_(std::move(queue)) {
  init_fid(&box_.fid.fid, FI_CLASS_EQ, context, &EqOps::fi_ops_);
  box_.fid.ops = &EqOps::eq_ops_;
  box_.owner = this;
  if (wait_set_ != nullptr) wait_set_->hold();
}

Eq::~Eq() {
  queue_.reset();  // leaves the wait set before the set may go
  if (wait_set_ != nullptr) wait_set_->release();
  fabric_->release_eq_slot();
}

core::Status Eq::write_cm(const CmEvent& e) {
  const size_t len = std::min(e.len, core::kCmDataSize);
  if (e.err != 0) {
    core::EqError err{};
    err.fid = e.fid;
    err.context = e.fid != nullptr ? e.fid->context : nullptr;
    err.err = e.err;
    err.err_data = len > 0 ? e.data : nullptr;
    err.err_data_size = std::min(len, core::kEqMaxErrData);
    return queue_->write_error(err);
  }
  unsigned char buf[sizeof(fi_eq_cm_entry) + core::kCmDataSize];
  fi_eq_cm_entry entry{};
  entry.fid = e.fid;
  entry.info = e.info;
  std::memcpy(buf, &entry, sizeof(entry));
  // Only a request and an accept carry the peer's data.
  const size_t data_len = e.event == FI_CONNREQ || e.event == FI_CONNECTED ? len : 0;
  if (data_len > 0) std::memcpy(buf + sizeof(entry), e.data, data_len);
  const size_t size = sizeof(entry) + data_len;
  if (e.keep_free > 0) return queue_->write_leaving(e.keep_free, e.event, buf, size).status();
  return queue_->write(e.event, buf, size).status();
}

int open_eq(fid_fabric* fabric_fid, fi_eq_attr* attr, fid_eq** out, void* context) {
  if (out != nullptr) *out = nullptr;
  Fabric* fabric = Fabric::from_fid(fabric_fid ? &fabric_fid->fid : nullptr);
  if (fabric == nullptr || attr == nullptr || out == nullptr) return -FI_EINVAL;
  if ((attr->flags & ~(FI_WRITE | FI_AFFINITY)) != 0) {
    FABQ_WARN(FI_LOG_EQ, "fi_eq_open: unsupported flags 0x%llx\n",
              (unsigned long long)(attr->flags & ~(FI_WRITE | FI_AFFINITY)));
    return -FI_EBADFLAGS;
  }
  const Params& p = params();
  if (attr->size > p.eq_max_size) {
    FABQ_WARN(FI_LOG_EQ, "fi_eq_open: size %zu exceeds FI_FABQ_EQ_MAX_SIZE=%zu\n", attr->size,
              p.eq_max_size);
    return -FI_EINVAL;
  }
  auto kind = core::wait_kind_from_fi(raw_enum(attr->wait_obj));
  if (!kind.ok()) return -FI_EINVAL;
  WaitSet* set = nullptr;
  if (*kind == core::WaitKind::kSet) {
    set = WaitSet::from_fid(attr->wait_set ? &attr->wait_set->fid : nullptr);
    if (set == nullptr) return -FI_EINVAL;
  }
  if (!fabric->acquire_eq_slot()) {
    FABQ_WARN(FI_LOG_EQ, "fi_eq_open: FI_FABQ_EQ_MAX_COUNT=%zu EQs already open\n", p.eq_max_count);
    return -FI_ENOSPC;
  }
  core::EqConfig config{
      .size = attr->size == 0 ? p.eq_default_size : attr->size,
      .wait = *kind,
      .provider_owned_err_data = fabric->legacy_err_data(),
      .spin_ns = static_cast<int64_t>(p.spin_us) * 1000,
      .wait_set = set != nullptr ? &set->core() : nullptr,
      .owner = nullptr,
  };
  auto queue = core::EventQueue::create(config);
  if (!queue.ok()) {
    fabric->release_eq_slot();
    return queue.status().to_fi();
  }
  Eq* eq = make_object<Eq>(fabric, *attr, set, std::move(queue.value()), context);
  if (eq == nullptr) {
    fabric->release_eq_slot();
    return -FI_ENOMEM;
  }
  eq->queue().set_owner(&eq->handle()->fid);
  *out = eq->handle();
  return 0;
}

}  // namespace fabq::prov
