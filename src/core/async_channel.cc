#include "core/async_channel.h"

#include <sys/eventfd.h>
#include <time.h>

#include <algorithm>
#include <chrono>

namespace fabq::core {
namespace {

uint64_t realtime_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace

Result<std::unique_ptr<AsyncChannel>> AsyncChannel::create() {
  UniqueFd efd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!efd.valid()) return Code::kIo;
  return std::unique_ptr<AsyncChannel>(new (std::nothrow) AsyncChannel(std::move(efd)));
}

// The eventfd's counter is nonzero exactly while the queue is not empty, so poll() on it is
// level-triggered on "an event waits"; only the transitions touch it.
void AsyncChannel::sync_fd_locked() {
  const bool want = !queue_.empty();
  if (want == fd_signalled_) return;
  uint64_t v = 1;
  if (want) {
    [[maybe_unused]] ssize_t n = ::write(efd_.get(), &v, sizeof(v));
  } else {
    [[maybe_unused]] ssize_t n = ::read(efd_.get(), &v, sizeof(v));
  }
  fd_signalled_ = want;
}

uint64_t AsyncChannel::push(AsyncEvent ev) {
  MutexLock lock(mu_);
  ev.time_ns = realtime_ns();
  ev.seq = next_seq_++;
  ev.tracker->queued++;
  queue_.push_back(ev);
  sync_fd_locked();
  cv_.notify_one();
  return ev.seq;
}

Result<AsyncEvent> AsyncChannel::get(int timeout_ms) {
  MutexLock lock(mu_);
  if (timeout_ms < 0) {
    while (queue_.empty()) cv_.wait(mu_);
  } else if (timeout_ms > 0) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (queue_.empty() && cv_.wait_until(mu_, deadline)) {
    }
  }
  if (queue_.empty()) return Code::kAgain;
  AsyncEvent ev = queue_.front();
  queue_.pop_front();
  ev.tracker->queued--;
  ev.tracker->unacked++;
  delivered_.push_back(ev);
  sync_fd_locked();
  return ev;
}

Status AsyncChannel::ack(uint64_t seq, fid_t fid) {
  MutexLock lock(mu_);
  auto it = std::find_if(delivered_.begin(), delivered_.end(),
                         [seq](const AsyncEvent& e) { return e.seq == seq; });
  if (it == delivered_.end() || it->fid != fid) return Code::kInval;
  it->tracker->unacked--;
  delivered_.erase(it);
  return OkStatus();
}

void AsyncChannel::purge_locked(const AsyncTracker* t) {
  std::erase_if(queue_, [t](const AsyncEvent& e) { return e.tracker == t; });
  sync_fd_locked();
}

size_t AsyncChannel::size() const {
  MutexLock lock(mu_);
  return queue_.size();
}

}  // namespace fabq::core
