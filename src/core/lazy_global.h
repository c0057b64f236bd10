// fabq core: LazyGlobal<T>, a process-wide object made on first use and freed only on request.
//
// For what a dynamically loaded library keeps for the whole process and its own threads use.
// A C++ static would be destroyed at exit before the library's unload hook has stopped those
// threads; a LazyGlobal has no destructor (it is constant-initialized, an atomic pointer), so its
// object lives until free() is called, from the unload hook once nothing uses it any more.
//
// Threads: get() from any thread; the first callers race to make the object and all get the one
// that won (acquire/release on the pointer: the object is fully made before anyone sees it).
// free() only when no thread uses the object or will; a get() after it makes a new one.
#pragma once

#include <atomic>

namespace fabq::core {

template <class T>
class LazyGlobal {
 public:
  constexpr LazyGlobal() = default;
  LazyGlobal(const LazyGlobal&) = delete;
  LazyGlobal& operator=(const LazyGlobal&) = delete;

  T& get() {
    T* p = ptr_.load(std::memory_order_acquire);
    if (p != nullptr) return *p;
    T* fresh = new T;
    if (ptr_.compare_exchange_strong(p, fresh, std::memory_order_acq_rel)) return *fresh;
    delete fresh;  // another thread's won; p holds it
    return *p;
  }
  // The object if it was made, else null. Does not make one.
  T* if_made() const { return ptr_.load(std::memory_order_acquire); }
  void free() { delete ptr_.exchange(nullptr, std::memory_order_acq_rel); }

 private:
  std::atomic<T*> ptr_{nullptr};
};

}  // namespace fabq::core
