// fabq TCP transport: the progress engine of one fabric (xport/transport.h Transport).
//
// An epoll set of every socket of the fabric, the shared-memory rings looked at every round, the
// progress thread that runs only while somebody blocks (or for FI_PROGRESS_AUTO), the scheduled
// calls and the deadlines (connect timers, back-off). Connections and listeners are made here
// and run here; docs/locking.md has the order of the locks below and theirs.
#pragma once

#include <atomic>
#include <cstdarg>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "core/mutex.h"
#include "core/thread_annotations.h"
#include "core/unique_fd.h"
#include "xport/transport.h"

namespace fabq::xport {

class Conn;

// Something whose fd is in the engine's epoll set. Called with the engine lock held (which the
// analysis cannot see through the virtual call: implementations say so in their comments).
class Pollable {
 public:
  virtual ~Pollable() = default;
  virtual void on_ready(uint32_t events) = 0;
  // A deadline passed (see Engine::set_deadline).
  virtual void on_deadline() {}
  // Whether a round may read it without epoll's word (Engine::run_locked: the one socket that
  // is busy), through poll_read(). One that may always leaves the engine through
  // Engine::forget_hot(). A connection and a datagram socket may.
  virtual bool direct_read() const { return false; }
  // Reads what its socket holds without asking epoll. False when it cannot be read that way
  // now: the engine goes back to epoll. Engine lock held.
  virtual bool poll_read() { return false; }
};

class Engine final : public Transport {
 public:
  explicit Engine(const TransportConfig& config);
  ~Engine() override;

  // Transport.
  void progress() override;
  void begin_wait() override;
  void end_wait() override;
  void wake() override { kick_if_waiting(); }
  std::unique_ptr<Connection> make_connection(Owner* owner, const ConnParams& params) override;
  std::unique_ptr<Listener> open_listener(Owner* owner, const ConnParams& params,
                                          const sockaddr_in& at, int* err) override;
  std::unique_ptr<PassiveListener> open_passive(PassiveOwner* owner,
                                                const core::HmacSha256* auth) override;
  std::unique_ptr<Datagram> open_datagram(Owner* owner, const sockaddr_in& at,
                                          const core::HmacSha256* auth, int* err) override;

  const TransportConfig& config() const { return config_; }
  // The smallest size at which any copy may go direct (the least of config()'s nonzero
  // direct_min, direct_msg_idle_min and direct_msg_min); 0 when none may.
  size_t direct_floor() const { return direct_floor_; }
  // printf-style, to config().log; at most one line.
  void log(LogLevel level, const char* fmt, ...) const __attribute__((format(printf, 3, 4)));
  // When a connection attempt (or an accepted request) that starts now gives up.
  int64_t connect_deadline() const;
  // The monotonic time (now_ns()) of the latest round that asked epoll, to within the pause
  // skip_epoll_locked() allows: a clock for what need not read one (how long ago a connection
  // was last active). Any thread; relaxed.
  int64_t round_ns() const { return round_ns_.load(std::memory_order_relaxed); }

  // Membership of the epoll set; any thread. Taking a socket out does not free its Pollable:
  // an object is destroyed only under the engine lock (or retired), so that no readiness
  // report of a round in progress can name it. remove() also forgets its scheduled calls.
  bool add(int fd, Pollable* p, uint32_t events);
  void modify(int fd, Pollable* p, uint32_t events);
  void remove(int fd, Pollable* p);
  void remove_fd(int fd);
  // Forgets p's scheduled calls and deadline.
  void unschedule(Pollable* p);
  // Frees p once the current round has released the engine lock (callbacks may retire
  // objects of the same round); p's destructor takes the engine lock itself.
  void retire(std::unique_ptr<Pollable> p);
  // Asks for p->on_ready(EPOLLIN) at the next progress (a stalled connection may go on).
  void schedule(Pollable* p);
  // p->on_deadline() once monotonic time passes `ns` (0 cancels).
  void set_deadline(Pollable* p, int64_t ns);
  core::Mutex& mu() FABQ_RETURN_CAPABILITY(mu_) { return mu_; }

  // Connections with a shared-memory ring, looked at every round. Any thread, with or without
  // the connection's lock; forget_shm() only under the engine lock (from ~Conn).
  void add_shm(Conn* c);
  void remove_shm(Conn* c);
  void forget_shm(Conn* c) FABQ_REQUIRES(mu_);
  // `p` is leaving the engine: no round reads it directly any more.
  void forget_hot(const Pollable* p) FABQ_REQUIRES(mu_) {
    if (hot_ == p) hot_ = nullptr;
  }
  // Wakes the progress thread if somebody waits (a ring it does not watch yet may fill).
  void kick_if_waiting();
  // Stops and joins the progress thread for good (the destructor, and the provider's unload);
  // any thread but that one.
  void stop_thread();

 private:
  // One round; what it retired is moved to *dead, to be freed once mu_ is released. `manual`:
  // called by the application's progress (not the progress thread, which sleeps on the epoll
  // set and must take its events), which may read the busy socket instead of asking epoll.
  void run_locked(std::vector<std::unique_ptr<Pollable>>* dead, bool manual) FABQ_REQUIRES(mu_);
  // Whether this round may skip epoll_wait(): the application polls fast, and either one
  // socket is all epoll reported lately (hot_) or epoll reported nothing and rings are
  // polled anyway. epoll_wait() is still called at least every kEpollEveryNs while a socket is
  // busy; while epoll keeps reporting nothing, the pause doubles, up to kEpollQuietMaxNs. The
  // clock that says so is read every kIdleRoundsPerClock rounds while the rings are idle, since
  // reading it costs as much as the rest of such a round.
  bool skip_epoll_locked() FABQ_REQUIRES(mu_);
  void after_round() const {
    if (config_.after_round != nullptr) config_.after_round(config_.after_round_arg);
  }
  void refresh_shm_locked() FABQ_REQUIRES(mu_);
  // True if a ring had work.
  bool poll_shm_locked() FABQ_REQUIRES(mu_);
  // Before the progress thread sleeps: asks every ring for a doorbell. True if one has work
  // already (do not sleep). Sets *armed_now if one was armed afresh (Conn::arm_shm()).
  bool arm_shm_locked(bool* armed_now) FABQ_REQUIRES(mu_);
  // Whether a receiving ring holds bytes (Conn::shm_readable()).
  bool shm_readable_locked() FABQ_REQUIRES(mu_);
  void start_thread();
  void thread_main();
  void kick();

  const TransportConfig config_;
  const size_t direct_floor_;
  // The engine lock (docs/locking.md #3): one round at a time, and what a round reaches is
  // not destroyed under it (destructors take it; retired objects are freed after it).
  core::Mutex mu_;
  core::UniqueFd epfd_;
  core::UniqueFd kick_fd_;
  // The progress thread's look again at its rings (shm::RecheckTimer): a timerfd, so that it is
  // set once a period, not on every sleep. Invalid if it could not be made: then each sleep
  // that owes a look is bounded instead.
  core::UniqueFd recheck_fd_;
  static constexpr size_t kScheduleRoom = 16;
  core::Mutex sched_mu_;  // leaf
  std::vector<Pollable*> scheduled_ FABQ_GUARDED_BY(sched_mu_);
  std::vector<Pollable*> running_ FABQ_GUARDED_BY(mu_);  // scheduled_ being run
  struct Deadline {
    Pollable* p;
    int64_t ns;
  };
  std::vector<Deadline> deadlines_ FABQ_GUARDED_BY(sched_mu_);
  std::vector<std::unique_ptr<Pollable>> graveyard_ FABQ_GUARDED_BY(sched_mu_);
  core::Mutex shm_mu_;  // leaf: taken after a connection's lock, never before
  std::vector<Conn*> shm_ FABQ_GUARDED_BY(shm_mu_);
  std::atomic<bool> shm_changed_{false};
  std::atomic<bool> has_shm_{false};  // shm_ is not empty: a hint for the progress thread
  std::vector<Conn*> shm_run_ FABQ_GUARDED_BY(mu_);  // shm_ as of this round (null: destroyed)
  // Busy polling. A syscall costs about as much as a message's whole path through the
  // provider, and a busy-polling application pays epoll_wait() plus recv() for each message
  // on a socket; reading the one socket epoll keeps reporting pays recv() only.
  static constexpr int64_t kEpollEveryNs = 8000;
  // Rings only, epoll quiet: a 250 ns syscall every 8 us is a few percent of a ping-pong over
  // the rings, and lands on one message in eight; a socket that wakes up waits at most this long.
  static constexpr int64_t kEpollQuietMaxNs = 64000;
  int64_t quiet_epoll_every_ns_ FABQ_GUARDED_BY(mu_) = kEpollEveryNs;
  // The only one epoll reported the last time it reported anything, if it may be read directly.
  Pollable* hot_ FABQ_GUARDED_BY(mu_) = nullptr;
  bool epoll_idle_ FABQ_GUARDED_BY(mu_) = false;  // ... or it reported nothing
  int64_t last_epoll_ns_ FABQ_GUARDED_BY(mu_) = 0;
  std::atomic<int64_t> round_ns_{0};  // last_epoll_ns_, for round_ns()
  static constexpr uint32_t kIdleRoundsPerClock = 16;
  uint32_t idle_rounds_ FABQ_GUARDED_BY(mu_) = 0;
  bool shm_busy_ FABQ_GUARDED_BY(mu_) = false;  // the last round's rings had work
  std::atomic<bool> has_scheduled_{false};
  std::atomic<bool> has_deadlines_{false};  // hints that spare the common round a lock
  std::atomic<bool> has_graves_{false};
  std::atomic<int> waiters_{0};
  std::atomic<bool> stop_{false};
  std::atomic<bool> thread_started_{false};
  core::Mutex thread_mu_;
  std::thread thread_ FABQ_GUARDED_BY(thread_mu_);  // started on the first wait, joined once
};

}  // namespace fabq::xport
