#include "core/wait_set.h"

#include <algorithm>
#include <new>

namespace fabq::core {

Result<std::unique_ptr<WaitSet>> WaitSet::create(WaitKind kind, int64_t spin_ns) {
  auto obj = WaitObject::create(kind);
  if (!obj.ok()) return obj.status();
  return std::unique_ptr<WaitSet>(new WaitSet(std::move(obj.value()), spin_ns));
}

WaitSet::WaitSet(std::unique_ptr<WaitObject> object, int64_t spin_ns)
    : object_(std::move(object)), gate_(object_.get()), spin_ns_(spin_ns) {}

void WaitSet::add(WaitSetMember* m) {
  MutexLock lock(mu_);
  members_.push_back({m, m->change_count()});
}

void WaitSet::remove(WaitSetMember* m) {
  MutexLock lock(mu_);
  std::erase_if(members_, [m](const Entry& e) { return e.member == m; });
}

size_t WaitSet::size() const {
  MutexLock lock(mu_);
  return members_.size();
}

bool WaitSet::any_ready_locked(bool consume) {
  bool ready = false;
  for (Entry& e : members_) {
    if (e.member->has_entries()) {
      ready = true;
      continue;
    }
    const uint64_t c = e.member->change_count();
    if (c != e.seen) {
      ready = true;
      if (consume) e.seen = c;
    }
  }
  return ready;
}

Status WaitSet::wait(int timeout_ms) {
  const Deadline deadline = Deadline::from_timeout_ms(timeout_ms);
  for (;;) {
    {
      MutexLock lock(mu_);
      if (any_ready_locked(/*consume=*/true)) return OkStatus();
    }
    if (deadline.expired()) return Code::kAgain;
    const Status s = wait_until(gate_, 0, deadline, spin_ns_, [this] {
      MutexLock lock(mu_);
      return any_ready_locked(/*consume=*/false);
    });
    if (!s.ok()) return s.code() == Code::kIntr ? Status(Code::kAgain) : s;
  }
}

Status WaitSet::try_wait() {
  gate_.arm_external();
  MutexLock lock(mu_);
  // A counter change is reported once: the application that gets kAgain goes and looks, and
  // the next try_wait lets it block until the next change.
  return any_ready_locked(/*consume=*/true) ? Status(Code::kAgain) : OkStatus();
}

Status PollSet::add(WaitSetMember* m, void* context) {
  MutexLock lock(mu_);
  for (const Entry& e : members_) {
    if (e.member == m) return Code::kBusy;
  }
  try {
    members_.push_back({m, context});
  } catch (const std::bad_alloc&) {
    return Code::kNoMem;
  }
  return OkStatus();
}

Status PollSet::remove(WaitSetMember* m) {
  MutexLock lock(mu_);
  const auto n = std::erase_if(members_, [m](const Entry& e) { return e.member == m; });
  return n == 0 ? Status(Code::kInval) : OkStatus();
}

size_t PollSet::size() const {
  MutexLock lock(mu_);
  return members_.size();
}

bool PollSet::contains(WaitSetMember* m) const {
  MutexLock lock(mu_);
  return std::any_of(members_.begin(), members_.end(),
                     [m](const Entry& e) { return e.member == m; });
}

size_t PollSet::poll(void** contexts, size_t count) {
  MutexLock lock(mu_);
  size_t n = 0;
  for (Entry& e : members_) {
    if (n == count) break;
    if (e.member->take_poll_event()) contexts[n++] = e.context;
  }
  return n;
}

}  // namespace fabq::core
