#include "xport/engine.h"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "core/deadline.h"
#include "core/lazy_global.h"
#include "xport/conn.h"
#include "xport/dgram.h"
#include "xport/listener.h"
#include "xport/socket_util.h"

namespace fabq::xport {
namespace {

constexpr int kMaxEvents = 64;

// Every engine of the process, so that the provider's unload can stop their threads.
struct Engines {
  core::Mutex mu;
  std::vector<Engine*> all FABQ_GUARDED_BY(mu);
};
core::LazyGlobal<Engines> g_engines;
Engines& engines() {
  return g_engines.get();
}

}  // namespace

Engine::Engine(const TransportConfig& config)
    : config_(config),
      direct_floor_([&] {
        size_t floor = 0;
        for (const size_t m :
             {config.direct_min, config.direct_msg_idle_min, config.direct_msg_min}) {
          if (m != 0 && (floor == 0 || m < floor)) floor = m;
        }
        return floor;
      }()),
      epfd_(epoll_create1(EPOLL_CLOEXEC)),
      kick_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
      recheck_fd_(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)) {
  // They swap, so each needs room before the first swap: else the first rounds allocate.
  scheduled_.reserve(kScheduleRoom);
  running_.reserve(kScheduleRoom);
  deadlines_.reserve(kScheduleRoom);
  Engines& e = engines();
  core::MutexLock lock(e.mu);
  e.all.push_back(this);
}

Engine::~Engine() {
  {
    Engines& e = engines();
    core::MutexLock lock(e.mu);
    std::erase(e.all, this);
  }
  stop_thread();
  // What the last round retired goes now, while the members its destructors use still exist.
  std::vector<std::unique_ptr<Pollable>> dead;
  {
    core::MutexLock lock(sched_mu_);
    dead.swap(graveyard_);
  }
  dead.clear();  // each takes the engine lock
}

void Engine::start_thread() {
  core::MutexLock lock(thread_mu_);
  if (thread_started_.load(std::memory_order_relaxed) || stop_.load(std::memory_order_acquire)) {
    return;
  }
  thread_ = std::thread([this] { thread_main(); });
  thread_started_.store(true, std::memory_order_release);
}

void Engine::stop_thread() {
  std::thread t;
  {
    core::MutexLock lock(thread_mu_);
    stop_.store(true, std::memory_order_release);
    t = std::move(thread_);
  }
  kick();
  if (t.joinable()) t.join();
}

bool Engine::add(int fd, Pollable* p, uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.ptr = p;
  return epoll_ctl(epfd_.get(), EPOLL_CTL_ADD, fd, &ev) == 0;
}

void Engine::modify(int fd, Pollable* p, uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.ptr = p;
  epoll_ctl(epfd_.get(), EPOLL_CTL_MOD, fd, &ev);
}

void Engine::remove(int fd, Pollable* p) {
  epoll_ctl(epfd_.get(), EPOLL_CTL_DEL, fd, nullptr);
  unschedule(p);
}

void Engine::unschedule(Pollable* p) {
  core::MutexLock lock(sched_mu_);
  std::erase(scheduled_, p);
  std::erase_if(deadlines_, [p](const Deadline& d) { return d.p == p; });
}

void Engine::remove_fd(int fd) {
  epoll_ctl(epfd_.get(), EPOLL_CTL_DEL, fd, nullptr);
}

void Engine::retire(std::unique_ptr<Pollable> p) {
  core::MutexLock lock(sched_mu_);
  std::erase(scheduled_, p.get());
  std::erase_if(deadlines_, [q = p.get()](const Deadline& d) { return d.p == q; });
  graveyard_.push_back(std::move(p));
  has_graves_.store(true, std::memory_order_release);
}

void Engine::schedule(Pollable* p) {
  {
    core::MutexLock lock(sched_mu_);
    if (std::find(scheduled_.begin(), scheduled_.end(), p) == scheduled_.end()) {
      scheduled_.push_back(p);
    }
    has_scheduled_.store(true, std::memory_order_release);
  }
  if (waiters_.load(std::memory_order_acquire) > 0) kick();
}

void Engine::set_deadline(Pollable* p, int64_t ns) {
  {
    core::MutexLock lock(sched_mu_);
    std::erase_if(deadlines_, [p](const Deadline& d) { return d.p == p; });
    if (ns != 0) deadlines_.push_back({p, ns});
    has_deadlines_.store(!deadlines_.empty(), std::memory_order_release);
  }
  if (ns != 0 && waiters_.load(std::memory_order_acquire) > 0) kick();
}

void Engine::add_shm(Conn* c) {
  {
    core::MutexLock lock(shm_mu_);
    shm_.push_back(c);
    shm_changed_.store(true, std::memory_order_release);
    has_shm_.store(true, std::memory_order_release);
  }
  kick_if_waiting();
}

void Engine::remove_shm(Conn* c) {
  core::MutexLock lock(shm_mu_);
  if (std::erase(shm_, c) > 0) shm_changed_.store(true, std::memory_order_release);
  has_shm_.store(!shm_.empty(), std::memory_order_release);
}

void Engine::forget_shm(Conn* c) {
  remove_shm(c);
  // A round in progress may hold it in its copy.
  std::replace(shm_run_.begin(), shm_run_.end(), c, static_cast<Conn*>(nullptr));
}

void Engine::refresh_shm_locked() {
  if (!shm_changed_.load(std::memory_order_acquire)) return;
  core::MutexLock lock(shm_mu_);
  shm_run_ = shm_;
  shm_changed_.store(false, std::memory_order_release);
}

bool Engine::poll_shm_locked() {
  refresh_shm_locked();
  bool busy = false;
  // By index: a connection's callbacks may destroy another one, which nulls its entry.
  for (size_t i = 0; i < shm_run_.size(); ++i) {
    if (Conn* c = shm_run_[i]) busy = c->poll_shm() || busy;
  }
  return busy;
}

bool Engine::arm_shm_locked(bool* armed_now) {
  refresh_shm_locked();
  bool work = false;
  for (Conn* c : shm_run_) {
    if (c != nullptr && c->arm_shm(armed_now)) work = true;
  }
  return work;
}

bool Engine::shm_readable_locked() {
  for (Conn* c : shm_run_) {
    if (c != nullptr && c->shm_readable()) return true;
  }
  return false;
}

void Engine::kick_if_waiting() {
  if (waiters_.load(std::memory_order_acquire) > 0) kick();
}

void Engine::kick() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(kick_fd_.get(), &one, sizeof(one));
}

void Engine::progress() {
  std::vector<std::unique_ptr<Pollable>> dead;
  if (!mu_.try_lock()) return;
  run_locked(&dead, /*manual=*/true);
  mu_.unlock();
  dead.clear();
  after_round();
}

bool Engine::skip_epoll_locked() {
  if (hot_ == nullptr && !(epoll_idle_ && !shm_run_.empty())) return false;
  if (hot_ == nullptr && !shm_busy_ && ++idle_rounds_ < kIdleRoundsPerClock) return true;
  idle_rounds_ = 0;
  return now_ns() - last_epoll_ns_ < (hot_ != nullptr ? kEpollEveryNs : quiet_epoll_every_ns_);
}

void Engine::run_locked(std::vector<std::unique_ptr<Pollable>>* dead, bool manual) {
  epoll_event ev[kMaxEvents];
  int n = 0;
  if (manual && skip_epoll_locked()) {
    if (hot_ != nullptr && !hot_->poll_read()) hot_ = nullptr;
  } else {
    n = epoll_wait(epfd_.get(), ev, kMaxEvents, 0);
    last_epoll_ns_ = now_ns();
    round_ns_.store(last_epoll_ns_, std::memory_order_relaxed);
    epoll_idle_ = n == 0;
    quiet_epoll_every_ns_ =
        epoll_idle_ ? std::min(2 * quiet_epoll_every_ns_, kEpollQuietMaxNs) : kEpollEveryNs;
    // A quiet moment keeps the busy socket; another one, or more than one, ends its turn.
    if (n == 1 && ev[0].events == EPOLLIN) {
      auto* p = static_cast<Pollable*>(ev[0].data.ptr);
      hot_ = p->direct_read() ? p : nullptr;
    } else if (n != 0) {
      hot_ = nullptr;
    }
  }
  for (int i = 0; i < n; ++i) static_cast<Pollable*>(ev[i].data.ptr)->on_ready(ev[i].events);
  shm_busy_ =
      (!shm_run_.empty() || shm_changed_.load(std::memory_order_relaxed)) && poll_shm_locked();
  if (has_scheduled_.load(std::memory_order_acquire)) {
    {
      core::MutexLock lock(sched_mu_);
      running_.swap(scheduled_);  // both keep their capacity: no allocation in steady state
      has_scheduled_.store(false, std::memory_order_release);
    }
    for (Pollable* p : running_) p->on_ready(EPOLLIN);
    running_.clear();
  }
  std::vector<Pollable*> due;
  if (has_deadlines_.load(std::memory_order_acquire)) {
    core::MutexLock lock(sched_mu_);
    if (!deadlines_.empty()) {
      const int64_t t = now_ns();
      for (auto it = deadlines_.begin(); it != deadlines_.end();) {
        if (it->ns <= t) {
          due.push_back(it->p);
          it = deadlines_.erase(it);
        } else {
          ++it;
        }
      }
    }
  }
  for (Pollable* p : due) p->on_deadline();
  // Objects retired during this round: no readiness report of the round refers to them now.
  // Freed by the caller once the engine lock is released, since their destructors take it.
  if (has_graves_.load(std::memory_order_acquire)) {
    core::MutexLock lock(sched_mu_);
    dead->swap(graveyard_);
    has_graves_.store(false, std::memory_order_release);
  }
}

void Engine::begin_wait() {
  if (!thread_started_.load(std::memory_order_acquire)) start_thread();
  if (waiters_.fetch_add(1, std::memory_order_acq_rel) == 0) kick();
}

void Engine::end_wait() {
  waiters_.fetch_sub(1, std::memory_order_acq_rel);
}

void Engine::thread_main() {
  shm::RecheckTimer recheck;
  const auto set_recheck = [this](int64_t due) {
    if (due == 0 || !recheck_fd_.valid()) return;
    itimerspec when{};
    when.it_value = core::timespec_of_ns(due);
    timerfd_settime(recheck_fd_.get(), TFD_TIMER_ABSTIME, &when, nullptr);
  };
  while (!stop_.load(std::memory_order_acquire)) {
    uint64_t drained;
    if (waiters_.load(std::memory_order_acquire) == 0) {
      pollfd k{kick_fd_.get(), POLLIN, 0};
      poll(&k, 1, -1);
      [[maybe_unused]] ssize_t r = read(kick_fd_.get(), &drained, sizeof(drained));
      continue;
    }
    int64_t until = -1;  // when to wake at the latest (monotonic ns); -1 for no limit
    const auto wake_by = [&until](int64_t ns) {
      if (until < 0 || ns < until) until = ns;
    };
    bool armed_now = false;
    if (has_shm_.load(std::memory_order_acquire)) {
      // Rings are not in the epoll set: ask their peers for a doorbell before sleeping.
      core::MutexLock lock(mu_);
      if (arm_shm_locked(&armed_now)) wake_by(0);
      if (armed_now) set_recheck(recheck.armed(now_ns()));
    }
    {
      core::MutexLock lock(sched_mu_);
      if (has_scheduled_.load(std::memory_order_acquire)) wake_by(0);
      for (const Deadline& d : deadlines_) wake_by(d.ns);
    }
    if (armed_now && until != 0) {
      // A tail that was on its way at the arm has most likely landed by now: a look before
      // sleeping takes it at once, where the timer alone would take it only at its expiry.
      core::MutexLock lock(mu_);
      if (shm_readable_locked()) wake_by(0);
    }
    if (!recheck_fd_.valid() && recheck.due() != 0) wake_by(recheck.due());
    timespec ts{};
    timespec* timeout = nullptr;
    if (until >= 0) {
      ts = core::timespec_of_ns(std::max<int64_t>(until - now_ns(), 0));
      timeout = &ts;
    }
    pollfd fds[3] = {{epfd_.get(), POLLIN, 0},
                     {kick_fd_.get(), POLLIN, 0},
                     {recheck_fd_.get(), POLLIN, 0}};  // a negative fd is skipped
    ppoll(fds, 3, timeout, nullptr);
    if (fds[1].revents & POLLIN) {
      [[maybe_unused]] ssize_t r = read(kick_fd_.get(), &drained, sizeof(drained));
    }
    // The last waiter may have left while this thread slept: then the bytes are the
    // application's to move (manual progress), not this thread's. An expired timer stays
    // readable meanwhile; the first round after the return is its look.
    if (waiters_.load(std::memory_order_acquire) == 0) continue;
    // The look again is the round below: a tail on its way when a ring was armed is visible by
    // now, and later ones see the flag.
    if (fds[2].revents & POLLIN) {
      [[maybe_unused]] ssize_t r = read(recheck_fd_.get(), &drained, sizeof(drained));
      set_recheck(recheck.expired(now_ns()));
    } else if (!recheck_fd_.valid() && recheck.due() != 0 && now_ns() >= recheck.due()) {
      recheck.expired(now_ns());  // bounded sleeps from here on owe the arms since
    }
    std::vector<std::unique_ptr<Pollable>> dead;
    {
      core::MutexLock lock(mu_);
      run_locked(&dead, /*manual=*/false);
    }
    dead.clear();
    after_round();
  }
}

void Engine::log(LogLevel level, const char* fmt, ...) const {
  if (config_.log == nullptr) return;
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  config_.log(level, line);
}

int64_t Engine::connect_deadline() const {
  return now_ns() + static_cast<int64_t>(config_.connect_timeout_ms) * 1'000'000;
}

std::unique_ptr<Connection> Engine::make_connection(Owner* owner, const ConnParams& params) {
  return std::make_unique<Conn>(this, owner, params, core::UniqueFd());
}

std::unique_ptr<Listener> Engine::open_listener(Owner* owner, const ConnParams& params,
                                                const sockaddr_in& at, int* err) {
  auto l = std::make_unique<RdmListener>(this, owner, params);
  if (const int rc = l->open(at); rc != 0) {
    *err = rc;
    return nullptr;
  }
  return l;
}

std::unique_ptr<PassiveListener> Engine::open_passive(PassiveOwner* owner,
                                                      const core::HmacSha256* auth) {
  return std::make_unique<PassiveAcceptor>(this, owner, auth);
}

std::unique_ptr<Datagram> Engine::open_datagram(Owner* owner, const sockaddr_in& at,
                                                const core::HmacSha256* auth, int* err) {
  auto d = std::make_unique<DgramSocket>(this, owner, auth);
  if (const int rc = d->open(at); rc != 0) {
    *err = rc;
    return nullptr;
  }
  return d;
}

std::unique_ptr<Transport> make_tcp_transport(const TransportConfig& config) {
  return std::make_unique<Engine>(config);
}

void unload_tcp() {
  if (Engines* e = g_engines.if_made()) {
    core::MutexLock lock(e->mu);
    for (Engine* engine : e->all) engine->stop_thread();
  }
  // Nothing of the transport runs any more: its process-wide state goes with the provider.
  g_engines.free();
}

}  // namespace fabq::xport
