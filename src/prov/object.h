// fabq provider: what every fabq object shares.
//
// Each libfabric-visible object (fabric, domain, EQ, CQ, counter, wait set, poll set, AV,
// endpoint, passive endpoint, SRX) is a C++ object that owns its libfabric descriptor in a FidBox:
// the `fid_*` struct first, then a pointer back to the owner. A `fid*` that libfabric hands to one
// of fabq's functions is turned back into its owner by `Object::from()`, which also checks that the
// descriptor is really one of fabq's (its fi_ops table is fabq's own for that class), so a foreign
// or mistyped fid is rejected with -FI_EINVAL instead of being dereferenced.
//
// Lifetimes follow fi_fabric(3) and the object model: every object knows its class, its
// parent and its context; `refs` counts what depends on it (children and bindings);
// fi_close() of an object whose refs are not zero returns -FI_EBUSY and changes nothing. A
// destroyed object's descriptor is poisoned (poison_fid), so it no longer passes from().
//
// Threads: refs is atomic; hold()/release() may be called from any thread.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include <atomic>
#include <cstddef>
#include <cstring>
#include <new>
#include <utility>

namespace fabq::prov {

class Object;

// Marks a descriptor whose object is being destroyed: class FI_CLASS_UNSPEC, and an fi_ops whose
// every call returns -FI_EINVAL. Using a closed fid is the application's error, and its memory
// may be reused at any time; but until it is, a second fi_close (or any call, since every fabq
// entry point validates its fid's class and ops) fails with -FI_EINVAL instead of freeing twice.
void poison_fid(fid* f);

// A libfabric descriptor followed by a pointer to its owner. Standard layout, so a pointer to
// the box and a pointer to its first member (and that member's own first member, `struct fid`)
// are interconvertible.
template <class Fid>
struct FidBox {
  Fid fid;
  Object* owner;
};

class Object {
 public:
  Object(size_t fclass, Object* parent) : fclass_(fclass), parent_(parent) {
    if (parent_ != nullptr) parent_->hold();
  }
  virtual ~Object() {
    if (fid_ != nullptr) poison_fid(fid_);
    if (parent_ != nullptr) parent_->release();
  }
  Object(const Object&) = delete;
  Object& operator=(const Object&) = delete;

  size_t fclass() const { return fclass_; }
  Object* parent() const { return parent_; }

  void hold() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void release() { refs_.fetch_sub(1, std::memory_order_release); }
  bool busy() const { return refs_.load(std::memory_order_acquire) != 0; }

  // The owner of `f` if `f` is a fabq object of class `fclass` whose fi_ops is `ops`; `Fid` is
  // the descriptor type the owner keeps in its FidBox.
  template <class T, class Fid>
  static T* from(const fid* f, size_t fclass, const fi_ops* ops) {
    if (f == nullptr || f->fclass != fclass || f->ops != ops) return nullptr;
    // fid is the first member of every fid_* struct, which is the first member of FidBox.
    const auto* box = reinterpret_cast<const FidBox<Fid>*>(f);
    return static_cast<T*>(box->owner);
  }

 protected:
  // Fills the descriptor's common part. `context` is the application's. The descriptor is
  // poisoned when the object is destroyed.
  void init_fid(fid* f, size_t fclass, void* context, fi_ops* ops) {
    f->fclass = fclass;
    f->context = context;
    f->ops = ops;
    fid_ = f;
  }

 private:
  fid* fid_ = nullptr;
  const size_t fclass_;
  Object* const parent_;
  std::atomic<int> refs_{0};
};

// The integer stored in an enum field the application filled in. C lets any int sit in a C enum
// field; reading an out-of-range one through the C++ enum type is undefined, so read the bytes.
template <class E>
int raw_enum(const E& e) {
  static_assert(sizeof(E) == sizeof(int));
  int v;
  std::memcpy(&v, &e, sizeof(v));
  return v;
}

// fi_close for any fabq object: -FI_EINVAL if `o` is null (not fabq's), -FI_EBUSY while
// something depends on it, else destroys it.
template <class T>
int close_object(T* o) {
  if (o == nullptr) return -FI_EINVAL;
  if (o->busy()) return -FI_EBUSY;
  delete o;
  return 0;
}

// Allocates without throwing; libfabric's error for a failed allocation.
template <class T, class... Args>
T* make_object(Args&&... args) {
  return new (std::nothrow) T(std::forward<Args>(args)...);
}

}  // namespace fabq::prov
