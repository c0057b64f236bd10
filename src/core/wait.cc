#include "core/wait.h"

#include <errno.h>
#include <linux/futex.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>

namespace fabq::core {
namespace {

long futex(std::atomic<uint32_t>* word, int op, uint32_t val, const timespec* ts) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, val, ts, nullptr, 0);
}

}  // namespace

Result<WaitKind> wait_kind_from_fi(int obj) {
  switch (obj) {
    case FI_WAIT_NONE:
      return WaitKind::kNone;
    case FI_WAIT_UNSPEC:
      return WaitKind::kUnspec;
    case FI_WAIT_SET:
      return WaitKind::kSet;
    case FI_WAIT_FD:
      return WaitKind::kFd;
    case FI_WAIT_MUTEX_COND:
      return WaitKind::kMutexCond;
    case FI_WAIT_YIELD:
      return WaitKind::kYield;
    case FI_WAIT_POLLFD:
      return WaitKind::kPollFd;
  }
  return Code::kInval;
}

enum fi_wait_obj wait_kind_to_fi(WaitKind kind) {
  switch (kind) {
    case WaitKind::kNone:
      return FI_WAIT_NONE;
    case WaitKind::kUnspec:
      return FI_WAIT_UNSPEC;
    case WaitKind::kSet:
      return FI_WAIT_SET;
    case WaitKind::kFd:
      return FI_WAIT_FD;
    case WaitKind::kMutexCond:
      return FI_WAIT_MUTEX_COND;
    case WaitKind::kYield:
      return FI_WAIT_YIELD;
    case WaitKind::kPollFd:
      return FI_WAIT_POLLFD;
  }
  return FI_WAIT_NONE;
}

const char* wait_kind_name(WaitKind kind) {
  switch (kind) {
    case WaitKind::kNone:
      return "none";
    case WaitKind::kUnspec:
      return "unspec";
    case WaitKind::kSet:
      return "set";
    case WaitKind::kFd:
      return "fd";
    case WaitKind::kMutexCond:
      return "mutex_cond";
    case WaitKind::kYield:
      return "yield";
    case WaitKind::kPollFd:
      return "pollfd";
  }
  return "?";
}

Result<std::unique_ptr<WaitObject>> WaitObject::create(WaitKind kind) {
  if (kind == WaitKind::kNone || kind == WaitKind::kSet) return Code::kInval;
  std::unique_ptr<WaitObject> w(new WaitObject(kind));
  if (kind == WaitKind::kFd || kind == WaitKind::kPollFd) {
    w->fd_.reset(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (!w->fd_.valid()) return errno == EMFILE || errno == ENFILE ? Code::kNoSpace : Code::kIo;
    w->pollfd_ = {.fd = w->fd_.get(), .events = POLLIN, .revents = 0};
    w->pollset_ = {.change_index = 0, .nfds = 1, .fd = &w->pollfd_};
  }
  if (kind == WaitKind::kMutexCond) {
    // Default (realtime) clock: applications wait on this condition with their own
    // pthread_cond_timedwait and expect the default. fabq's sleepers use the futex instead.
    if (pthread_cond_init(&w->cond_, nullptr) != 0) return Code::kNoMem;
    w->cond_ready_ = true;
  }
  return w;
}

WaitObject::~WaitObject() {
  if (cond_ready_) pthread_cond_destroy(&cond_);
  pthread_mutex_destroy(&mutex_);
}

fi_mutex_cond WaitObject::mutex_cond() {
  if (kind_ != WaitKind::kMutexCond) return {nullptr, nullptr};
  return {&mutex_, &cond_};
}

fi_wait_pollfd* WaitObject::pollfd_set() {
  return kind_ == WaitKind::kPollFd ? &pollset_ : nullptr;
}

Status WaitObject::sleep(uint32_t ticket, const Deadline& deadline) {
  timespec ts;
  const timespec* tsp = nullptr;
  if (!deadline.is_never()) {
    const int64_t left = deadline.remaining_ns();
    if (left == 0) return Code::kAgain;
    ts = timespec_of_ns(left);
    tsp = &ts;
  }
  if (futex(&futex_, FUTEX_WAIT_PRIVATE, ticket, tsp) == 0) return OkStatus();
  switch (errno) {
    case EAGAIN:
      return OkStatus();  // ticket already stale: a wake happened
    case EINTR:
      return Code::kIntr;
    case ETIMEDOUT:
      return Code::kAgain;
    default:
      return Code::kIo;
  }
}

void WaitObject::wake_sleepers() {
  futex_.fetch_add(1, std::memory_order_release);
  futex(&futex_, FUTEX_WAKE_PRIVATE, std::numeric_limits<int>::max(), nullptr);
}

void WaitObject::wake_external() {
  if (fd_.valid()) {
    const uint64_t one = 1;
    // EAGAIN means the counter is saturated, i.e. the fd is readable already.
    [[maybe_unused]] ssize_t n = write(fd_.get(), &one, sizeof(one));
  } else if (kind_ == WaitKind::kMutexCond) {
    pthread_mutex_lock(&mutex_);
    pthread_cond_broadcast(&cond_);
    pthread_mutex_unlock(&mutex_);
  }
}

void WaitObject::quiet() {
  if (!fd_.valid()) return;
  uint64_t value;
  [[maybe_unused]] ssize_t n = read(fd_.get(), &value, sizeof(value));
}

void WaitGate::enter(uint64_t wake_at) {
  // Keep the smallest target among concurrent sleepers. The store of kWakeAlways in
  // notify_slow() happens before the futex bump, and a sleeper takes its ticket (acquire)
  // before it gets here, so a sleeper that saw the bump also sees the reset and its target
  // survives; one that did not see the bump sleeps on a stale ticket and returns at once.
  uint64_t cur = wake_at_.load(std::memory_order_relaxed);
  while (wake_at < cur && !wake_at_.compare_exchange_weak(cur, wake_at, std::memory_order_seq_cst,
                                                          std::memory_order_relaxed)) {
  }
  arm_.fetch_add(1, std::memory_order_seq_cst);
}

void WaitGate::notify_slow(uint64_t filled) {
  if (obj_ == nullptr) return;
  const uint32_t arm = arm_.load(std::memory_order_seq_cst);
  if ((arm & kExternal) != 0 &&
      (arm_.fetch_and(~kExternal, std::memory_order_seq_cst) & kExternal) != 0) {
    obj_->wake_external();
  }
  if ((arm & ~kExternal) != 0 && filled >= wake_at_.load(std::memory_order_seq_cst)) {
    wake_at_.store(kWakeAlways, std::memory_order_seq_cst);
    obj_->wake_sleepers();
  }
}

}  // namespace fabq::core
