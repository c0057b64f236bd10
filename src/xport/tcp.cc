#include "xport/tcp.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_eq.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>

#include "core/deadline.h"
#include "core/hmac.h"
#include "core/lazy_global.h"
#include "prov/auth.h"
#include "prov/domain.h"
#include "prov/endpoint.h"
#include "prov/eq.h"
#include "prov/events.h"
#include "prov/fabric.h"
#include "prov/noop.h"
#include "prov/provider.h"

namespace fabq::xport {
namespace {

static_assert(wire::kMaxCmData == prov::kCmDataSize, "the wire carries what the API allows");

// Small enough that the payload of a large message mostly goes straight into the receive
// buffer (kDirectRead) instead of through this one; large enough to take many small frames
// in one recv().
constexpr size_t kReadBuffer = 16 * 1024;
// Payloads at least this large are read straight into the receive buffer, skipping a copy.
constexpr size_t kDirectRead = 16 * 1024;
// Control frames owed to the peer beyond this: stop reading until they are written.
constexpr size_t kCtrlBacklog = 64 * 1024;
constexpr size_t kSendRing = 1024;
constexpr int kMaxEvents = 64;
constexpr int kIovBatch = 16;
constexpr uint32_t kIn = EPOLLIN;
constexpr uint32_t kOut = EPOLLOUT;
// What each MAC of the authentication says (xport/wire.h), so that neither passes for the other.
constexpr std::string_view kAcceptLabel = "fabq-auth-accept";
constexpr std::string_view kRequestLabel = "fabq-auth-request";

int64_t now_ns() {
  return core::monotonic_ns();
}

bool is_data(wire::Op op) {
  return op == wire::Op::kMsg || op == wire::Op::kTagged;
}

void set_socket_options(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  const size_t ms = prov::params().keepalive_ms;
  if (ms == 0) return;
  // A peer that vanishes without a FIN or RST is noticed by keep-alive probes; the socket then
  // fails with ETIMEDOUT, and the endpoint with EP_FATAL.
  const int probe_s = std::max<int>(1, static_cast<int>(ms / 3000));
  const int count = 2;
  const unsigned user_timeout = static_cast<unsigned>(ms);
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &probe_s, sizeof(probe_s));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &probe_s, sizeof(probe_s));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof(user_timeout));
}

int copy_addr(const sockaddr_in& a, void* addr, size_t* len) {
  if (len == nullptr) return -FI_EINVAL;
  const size_t have = *len;
  *len = sizeof(sockaddr_in);
  if (addr == nullptr || have < sizeof(sockaddr_in)) return -FI_ETOOSMALL;
  std::memcpy(addr, &a, sizeof(a));
  return 0;
}

// The part of iov[0..n) that starts `skip` bytes in and is at most `limit` bytes long, as
// entries written to out (which has room for n). Returns how many were written.
int iov_slice(const iovec* iov, size_t n, size_t skip, size_t limit, iovec* out) {
  int cnt = 0;
  for (size_t j = 0; j < n && limit > 0; ++j) {
    const size_t l = iov[j].iov_len;
    if (skip >= l) {
      skip -= l;
      continue;
    }
    const size_t take = std::min(l - skip, limit);
    out[cnt++] = {static_cast<char*>(iov[j].iov_base) + skip, take};
    limit -= take;
    skip = 0;
  }
  return cnt;
}

// When a connection attempt (or an accepted request) that started now gives up.
int64_t connect_deadline() {
  return now_ns() + static_cast<int64_t>(prov::params().connect_timeout_ms) * 1'000'000;
}

int fi_errno_of(int e) {
  switch (e) {
    case ECONNREFUSED:
      return FI_ECONNREFUSED;
    case ETIMEDOUT:
      return FI_ETIMEDOUT;
    case EHOSTUNREACH:
    case ENETUNREACH:
      return FI_EHOSTUNREACH;
    case ECONNRESET:
      return FI_ECONNRESET;
    default:
      return FI_EIO;
  }
}

// Every engine of the process, so that the provider's unload can stop their threads.
struct Engines {
  std::mutex mu;
  std::vector<Engine*> all;
};
core::LazyGlobal<Engines> g_engines;
Engines& engines() {
  return g_engines.get();
}

}  // namespace

// --- Engine

Engine::Engine()
    : epfd_(epoll_create1(EPOLL_CLOEXEC)), kick_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  // They swap, so each needs room before the first swap: else the first rounds allocate.
  scheduled_.reserve(kScheduleRoom);
  running_.reserve(kScheduleRoom);
  deadlines_.reserve(kScheduleRoom);
  std::lock_guard lock(engines().mu);
  engines().all.push_back(this);
}

Engine::~Engine() {
  {
    std::lock_guard lock(engines().mu);
    std::erase(engines().all, this);
  }
  stop_thread();
}

void Engine::start_thread() {
  std::lock_guard lock(thread_mu_);
  if (thread_started_.load(std::memory_order_relaxed) || stop_.load(std::memory_order_acquire)) {
    return;
  }
  thread_ = std::thread([this] { thread_main(); });
  thread_started_.store(true, std::memory_order_release);
}

void Engine::stop_thread() {
  std::thread t;
  {
    std::lock_guard lock(thread_mu_);
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
  std::lock_guard lock(sched_mu_);
  std::erase(scheduled_, p);
  std::erase_if(deadlines_, [p](const Deadline& d) { return d.p == p; });
}

void Engine::remove_fd(int fd) {
  epoll_ctl(epfd_.get(), EPOLL_CTL_DEL, fd, nullptr);
}

void Engine::retire(std::unique_ptr<Pollable> p) {
  std::lock_guard lock(sched_mu_);
  std::erase(scheduled_, p.get());
  std::erase_if(deadlines_, [q = p.get()](const Deadline& d) { return d.p == q; });
  graveyard_.push_back(std::move(p));
  has_graves_.store(true, std::memory_order_release);
}

void Engine::schedule(Pollable* p) {
  {
    std::lock_guard lock(sched_mu_);
    if (std::find(scheduled_.begin(), scheduled_.end(), p) == scheduled_.end()) {
      scheduled_.push_back(p);
    }
    has_scheduled_.store(true, std::memory_order_release);
  }
  if (waiters_.load(std::memory_order_acquire) > 0) kick();
}

void Engine::set_deadline(Pollable* p, int64_t ns) {
  {
    std::lock_guard lock(sched_mu_);
    std::erase_if(deadlines_, [p](const Deadline& d) { return d.p == p; });
    if (ns != 0) deadlines_.push_back({p, ns});
    has_deadlines_.store(!deadlines_.empty(), std::memory_order_release);
  }
  if (ns != 0 && waiters_.load(std::memory_order_acquire) > 0) kick();
}

void Engine::add_shm(Conn* c) {
  {
    std::lock_guard lock(shm_mu_);
    shm_.push_back(c);
    shm_changed_.store(true, std::memory_order_release);
    has_shm_.store(true, std::memory_order_release);
  }
  kick_if_waiting();
}

void Engine::remove_shm(Conn* c) {
  std::lock_guard lock(shm_mu_);
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
  std::lock_guard lock(shm_mu_);
  shm_run_ = shm_;
  shm_changed_.store(false, std::memory_order_release);
}

void Engine::poll_shm_locked() {
  refresh_shm_locked();
  // By index: a connection's callbacks may destroy another one, which nulls its entry.
  for (size_t i = 0; i < shm_run_.size(); ++i) {
    if (Conn* c = shm_run_[i]) c->poll_shm();
  }
}

bool Engine::arm_shm_locked() {
  refresh_shm_locked();
  bool work = false;
  for (Conn* c : shm_run_) {
    if (c != nullptr && c->arm_shm()) work = true;
  }
  return work;
}

void Engine::kick_if_waiting() {
  if (waiters_.load(std::memory_order_acquire) > 0) kick();
}

void Engine::kick() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(kick_fd_.get(), &one, sizeof(one));
}

void Engine::progress() {
  if (!mu_.try_lock()) return;
  run_locked();
  mu_.unlock();
  prov::raise_deferred();
}

void Engine::run_locked() {
  epoll_event ev[kMaxEvents];
  const int n = epoll_wait(epfd_.get(), ev, kMaxEvents, 0);
  for (int i = 0; i < n; ++i) static_cast<Pollable*>(ev[i].data.ptr)->on_ready(ev[i].events);
  if (!shm_run_.empty() || shm_changed_.load(std::memory_order_relaxed)) poll_shm_locked();
  if (has_scheduled_.load(std::memory_order_acquire)) {
    {
      std::lock_guard lock(sched_mu_);
      running_.swap(scheduled_);  // both keep their capacity: no allocation in steady state
      has_scheduled_.store(false, std::memory_order_release);
    }
    for (Pollable* p : running_) p->on_ready(EPOLLIN);
    running_.clear();
  }
  std::vector<Pollable*> due;
  if (has_deadlines_.load(std::memory_order_acquire)) {
    std::lock_guard lock(sched_mu_);
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
  if (has_graves_.load(std::memory_order_acquire)) {
    std::vector<std::unique_ptr<Pollable>> dead;
    {
      std::lock_guard lock(sched_mu_);
      dead.swap(graveyard_);
      has_graves_.store(false, std::memory_order_release);
    }
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
  while (!stop_.load(std::memory_order_acquire)) {
    uint64_t drained;
    if (waiters_.load(std::memory_order_acquire) == 0) {
      pollfd k{kick_fd_.get(), POLLIN, 0};
      poll(&k, 1, -1);
      [[maybe_unused]] ssize_t r = read(kick_fd_.get(), &drained, sizeof(drained));
      continue;
    }
    int timeout = -1;
    if (has_shm_.load(std::memory_order_acquire)) {
      // Rings are not in the epoll set: ask their peers for a doorbell before sleeping.
      std::lock_guard lock(mu_);
      if (arm_shm_locked()) timeout = 0;
    }
    {
      std::lock_guard lock(sched_mu_);
      if (has_scheduled_.load(std::memory_order_acquire)) timeout = 0;
      const int64_t t = now_ns();
      for (const Deadline& d : deadlines_) {
        const int64_t ms = d.ns <= t ? 0 : (d.ns - t + 999'999) / 1'000'000;
        if (timeout < 0 || ms < timeout) timeout = static_cast<int>(ms);
      }
    }
    pollfd fds[2] = {{epfd_.get(), POLLIN, 0}, {kick_fd_.get(), POLLIN, 0}};
    poll(fds, 2, timeout);
    if (fds[1].revents & POLLIN) {
      [[maybe_unused]] ssize_t r = read(kick_fd_.get(), &drained, sizeof(drained));
    }
    // The last waiter may have left while this thread slept: then the bytes are the
    // application's to move (manual progress), not this thread's.
    if (waiters_.load(std::memory_order_acquire) == 0) continue;
    {
      std::lock_guard lock(mu_);
      run_locked();
    }
    prov::raise_deferred();
  }
}

// --- Conn

Conn::Conn(Engine* engine, prov::Endpoint* ep, core::UniqueFd fd, size_t max_payload)
    : engine_(engine),
      ep_(ep),
      rdm_(ep != nullptr && ep->rdm()),
      auth_(ep != nullptr ? ep->auth_key() : nullptr),
      fd_(std::move(fd)),
      framer_(max_payload),
      rbuf_(new unsigned char[kReadBuffer]),
      sendq_(kSendRing, nullptr) {
  ctrl_.reserve(4096);
}

Conn::~Conn() {
  std::lock_guard elock(engine_->mu());
  std::lock_guard lock(mu_);
  // Destroyed inside a message (its endpoint is closing): the receive it was filling goes back.
  if (have_place_ && ep_ != nullptr) ep_->unplace(&place_);
  if (fd_.valid() && registered_) engine_->remove_fd(fd_.get());
  engine_->unschedule(this);  // its calls and its deadline
  engine_->forget_shm(this);  // the mapping goes with the members, once no round can see it
  fd_.reset();
}

void Conn::close_socket_locked() {
  if (have_place_ && ep_ != nullptr) {
    // Closed inside a message: whatever receive it was filling is not lost.
    ep_->unplace(&place_);
    have_place_ = false;
  }
  if (fd_.valid()) {
    engine_->remove(fd_.get(), this);
    registered_ = false;
    interest_ = 0;
    // The fd stays open until the Conn is destroyed: a readiness report already in flight
    // for it must not reach a reused descriptor. Shutting it down makes it inert.
    ::shutdown(fd_.get(), SHUT_RDWR);
  }
  engine_->set_deadline(this, 0);
  set_state(State::kClosed);
  if (shm_agreed_) {
    engine_->remove_shm(this);
    shm_rx_open_.store(false, std::memory_order_relaxed);
    shm_tx_blocked_.store(false, std::memory_order_relaxed);
  }
  seg_.unlink();  // a handshake cut short: the name must not outlive it
  // Ended before it was handed over: its acceptor frees it (at the end of this round).
  if (owner_ != nullptr) owner_->reap(this);
}

void Conn::want_write_locked(bool on) {
  if (writing_ == on) return;
  writing_ = on;
  update_interest_locked();
}

// The socket is in the epoll set exactly while there is something to wait for. Out of it, a
// peer's hang-up is not reported either: a stalled or pending connection whose peer left does
// not make the progress thread spin; it is looked at again when it is resumed.
//
// Once frames go through shared memory, the socket carries doorbells for both directions: it
// is read while it is open, stalled or not, and never waited on for writing.
void Conn::update_interest_locked() {
  if (!fd_.valid()) return;
  const State s = state();
  const bool open = s != State::kClosed && s != State::kIdle;
  if (shm_agreed_) {
    const bool rx_open = open && rx_shm_ && !stalled_;
    if (rx_open && !shm_rx_open_.exchange(true, std::memory_order_relaxed)) {
      // The progress thread may be asleep without having asked this ring for a doorbell.
      engine_->kick_if_waiting();
    } else if (!rx_open) {
      shm_rx_open_.store(false, std::memory_order_relaxed);
    }
  }
  const bool reading =
      open && (rx_shm_ || tx_shm_ ? !peer_eof_ : !stalled_ && s != State::kPending);
  const bool waiting_out = open && !tx_shm_ && (writing_ || s == State::kConnecting);
  const uint32_t want = (reading ? kIn : 0) | (waiting_out ? kOut : 0);
  if (want == interest_ && registered_ == (want != 0)) return;
  if (want == 0) {
    if (registered_) engine_->remove_fd(fd_.get());
    registered_ = false;
  } else if (!registered_) {
    registered_ = engine_->add(fd_.get(), this, want);
  } else {
    engine_->modify(fd_.get(), this, want);
  }
  interest_ = want;
}

void Conn::queue_ctrl_locked(wire::Op op, uint32_t seq, const void* data, size_t len,
                             uint32_t flags, uint64_t tag, uint64_t hdata) {
  wire::Header h;
  h.op = op;
  h.seq = seq;
  h.length = static_cast<uint32_t>(len);
  h.flags = flags;
  h.tag = tag;
  h.data = hdata;
  unsigned char hdr[wire::kHeaderSize];
  wire::encode(h, hdr);
  ctrl_.insert(ctrl_.end(), hdr, hdr + sizeof(hdr));
  if (len > 0) {
    const auto* p = static_cast<const unsigned char*>(data);
    ctrl_.insert(ctrl_.end(), p, p + len);
  }
}

int Conn::connect(const sockaddr_in& peer, const void* data, size_t len) {
  std::lock_guard lock(mu_);
  if (state() != State::kIdle) return -FI_EISCONN;
  peer_ = peer;
  switch (ep_->take_net_fault()) {
    case core::NetFault::kReject:
      // Injected: refused as if the peer had called fi_reject without data.
      set_state(State::kClosed);
      reported_ = true;
      refused_locked(FI_ECONNREFUSED, nullptr, 0);
      return 0;
    case core::NetFault::kTimeout:
      // Injected: the request never gets an answer; the connect timer ends it.
      set_state(State::kConnecting);
      engine_->set_deadline(this, connect_deadline());
      return 0;
    default:
      break;
  }
  core::UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) {
    if (!rdm_) return -FI_EIO;
    set_state(State::kClosed);
    refused_locked(FI_EIO, nullptr, 0);
    return 0;
  }
  set_socket_options(fd.get());
  // An RDM endpoint's source address is its listener's; it connects from any port.
  if (const sockaddr_in& src = ep_->src_addr(); src.sin_port != 0 && !rdm_) {
    // A source port was asked for (fi_getinfo's service, or a passive endpoint's address
    // taken over through info->handle): connect from it.
    const int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&src), sizeof(src)) != 0) {
      return errno == EADDRINUSE ? -FI_EADDRINUSE : -FI_EINVAL;
    }
  }
  peer_ = peer;
  // A peer on this host is offered shared memory; it takes it or not in its answer.
  if (prov::params().shm != 0 && is_local(peer)) seg_ = shm::Segment::create();
  uint32_t flags = seg_.valid() ? uint32_t{wire::kShmOffer} : 0u;
  unsigned char req[wire::kMaxConnReq];
  if (len > 0) std::memcpy(req, data, len);
  size_t req_len = len;
  if (auth_ != nullptr) {
    // With a secret, the request carries this side's nonce and waits for a challenge.
    if (!core::fill_random(nonce_c_, sizeof(nonce_c_)).ok()) {
      if (!rdm_) return -FI_EIO;
      set_state(State::kClosed);
      refused_locked(FI_EIO, nullptr, 0);
      return 0;
    }
    std::memcpy(req + len, nonce_c_, sizeof(nonce_c_));
    req_len += sizeof(nonce_c_);
    flags |= wire::kAuth;
    auth_sent_ = true;
  }
  queue_ctrl_locked(wire::Op::kConnReq, 0, req, req_len, flags, seg_.valid() ? seg_.id() : 0,
                    seg_.valid() ? seg_.nonce() : 0);
  if (auth_sent_) {
    // What both MACs vouch for: the request as it went out (name, data, offer and nonce).
    const size_t frame = wire::kHeaderSize + req_len;
    req_digest_ = core::Sha256::hash(ctrl_.data() + ctrl_.size() - frame, frame);
  }
  const int rc = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&peer), sizeof(peer));
  const int e = rc == 0 ? 0 : errno;
  fd_ = std::move(fd);
  if (rc != 0 && e != EINPROGRESS) {
    // Refused at once (nobody listens on a local port): reported like any other refusal.
    set_state(State::kClosed);
    reported_ = true;
    refused_locked(fi_errno_of(e), nullptr, 0);
    return 0;
  }
  set_state(State::kConnecting);
  writing_ = true;
  update_interest_locked();
  engine_->set_deadline(this, connect_deadline());
  if (registered_) return 0;
  if (!rdm_) return -FI_EIO;
  close_socket_locked();
  refused_locked(FI_EIO, nullptr, 0);
  return 0;
}

void Conn::refused_locked(int err, const void* data, size_t len) {
  if (ep_ == nullptr) return;
  if (rdm_) {
    send_count_ = 0;
    mid_frame_ = false;
    ep_->abort_sends(this, err);
  } else {
    ep_->cm_error(err, data, len);
    ep_->connection_ended();
  }
}

void Conn::start_accepted(Acceptor* owner, bool passive) {
  std::lock_guard lock(mu_);
  owner_ = owner;
  pep_ = passive ? static_cast<PassiveEp*>(owner) : nullptr;
  if (passive) auth_ = pep_->auth_key();
  inbound_ = !passive;
  set_socket_options(fd_.get());
  socklen_t len = sizeof(peer_);
  getpeername(fd_.get(), reinterpret_cast<sockaddr*>(&peer_), &len);
  set_state(State::kIncoming);
  update_interest_locked();
  engine_->set_deadline(this, connect_deadline());
}

bool Conn::in_handshake() const {
  const State s = state();
  return s == State::kIncoming || s == State::kProving || s == State::kPending ||
         s == State::kAccepted;
}

bool Conn::adopt(prov::Endpoint* ep) {
  std::lock_guard lock(mu_);
  owner_ = nullptr;  // handed over: the endpoint owns it now
  pep_ = nullptr;
  if (state() != State::kPending || ep_ != nullptr) return false;
  ep_ = ep;
  auth_ = ep->auth_key();  // the passive endpoint's may go before it
  framer_ = wire::Framer(ep->max_msg_size());
  return true;
}

int Conn::accept(const void* data, size_t len) {
  std::lock_guard lock(mu_);
  if (state() != State::kPending || ep_ == nullptr) {
    return state() == State::kClosed ? -FI_ECONNABORTED : -FI_EOPBADSTATE;
  }
  queue_accept_locked(data, len);
  set_state(State::kAccepted);
  update_interest_locked();
  engine_->set_deadline(this, connect_deadline());
  flush_locked();
  // The peer may have answered already: look at the socket at the next progress.
  engine_->schedule(this);
  return 0;
}

int Conn::reject(const void* data, size_t len) {
  std::lock_guard lock(mu_);
  owner_ = nullptr;  // handed over to fi_reject, which frees it
  pep_ = nullptr;
  if (state() != State::kPending) return -FI_EOPBADSTATE;
  return reject_locked(data, len);
}

int Conn::reject_locked(const void* data, size_t len) {
  queue_ctrl_locked(wire::Op::kConnReject, 0, data, len);
  flush_locked();
  close_socket_locked();
  return 0;
}

int Conn::shutdown() {
  std::lock_guard lock(mu_);
  if (reported_ && was_connected_) return 0;  // already shut down, by the peer or by us
  if (state() != State::kConnected) return -FI_ENOTCONN;
  if (shutting_) return 0;
  shutting_ = true;
  flush_locked();
  return 0;
}

int Conn::submit(prov::TxOp* op) {
  std::lock_guard lock(mu_);
  // An RDM connection queues sends until it is established.
  if (shutting_ || (rdm_ ? state() == State::kClosed : state() != State::kConnected)) {
    return -FI_ENOTCONN;
  }
  if (send_count_ == sendq_.size()) return -FI_EAGAIN;  // the transmit ring is no larger
  wire::Header h;
  h.op = op->tagged ? wire::Op::kTagged : wire::Op::kMsg;
  h.length = static_cast<uint32_t>(op->len);
  h.seq = op->seq;
  h.tag = op->tag;
  if (op->has_data) {
    h.flags |= wire::kRemoteData;
    h.data = op->data;
  }
  if (op->level == prov::TxLevel::kTransmit) h.flags |= wire::kWantReceived;
  if (op->level == prov::TxLevel::kDelivery) h.flags |= wire::kWantDelivered;
  wire::encode(h, op->header);
  op->written = 0;
  op->accepted = true;
  switch (ep_->take_net_fault()) {
    case core::NetFault::kDrop:
      // Injected loss: the message never reaches the peer.
      ep_->tx_lost(op, FI_ETIMEDOUT);
      return 0;
    case core::NetFault::kCorrupt:
      // Injected damage: the peer sees a header that is not fabq's and fails the connection.
      op->header[0] ^= 0xff;
      break;
    default:
      break;
  }
  sendq_[(send_head_ + send_count_) % sendq_.size()] = op;
  ++send_count_;
  if (!writing_ || send_count_ == 1) flush_locked();
  return 0;
}

void Conn::ack_delivered(uint32_t seq) {
  std::lock_guard lock(mu_);
  if (state() != State::kConnected) return;
  queue_ctrl_locked(wire::Op::kAckDelivered, seq, nullptr, 0);
  flush_locked();
}

void Conn::ack_delivered_later(uint32_t seq) {
  {
    std::lock_guard lock(owed_mu_);
    owed_acks_.push_back(seq);
    acks_owed_.store(true, std::memory_order_release);
  }
  engine_->schedule(this);
}

void Conn::resume() {
  engine_->schedule(this);
}

int Conn::getname(void* addr, size_t* len) {
  std::lock_guard lock(mu_);
  sockaddr_in local{};
  if (fd_.valid()) {
    socklen_t l = sizeof(local);
    getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&local), &l);
  } else if (ep_ != nullptr) {
    local = ep_->src_addr();
  }
  return copy_addr(local, addr, len);
}

int Conn::getpeer(void* addr, size_t* len) {
  std::lock_guard lock(mu_);
  if (state() != State::kConnected && state() != State::kAccepted && state() != State::kPending) {
    return -FI_ENOTCONN;
  }
  return copy_addr(peer_, addr, len);
}

// Writes control frames and queued sends until the kernel takes no more. False when the
// connection failed.
bool Conn::flush_locked() {
  if (!fd_.valid() || state() == State::kConnecting || state() == State::kClosed) return true;
  bool bell = false;
  for (;;) {
    if (tx_switch_pending_ && ctrl_off_ == tx_switch_at_) {
      // The handshake's last frame is on the socket: everything after it goes to the ring.
      tx_switch_pending_ = false;
      tx_shm_ = true;
      update_interest_locked();
      if (std::exchange(bell_owed_, false)) bell = true;
    }
    iovec iov[kIovBatch];
    int cnt = 0;
    const bool with_ctrl = !mid_frame_ && ctrl_off_ < ctrl_.size();
    const size_t ctrl_end = tx_switch_pending_ ? tx_switch_at_ : ctrl_.size();
    if (with_ctrl) iov[cnt++] = {ctrl_.data() + ctrl_off_, ctrl_end - ctrl_off_};
    const size_t sendable = state() == State::kConnected && !tx_switch_pending_ ? send_count_ : 0;
    for (size_t i = 0; i < sendable && cnt + 1 + static_cast<int>(prov::kMaxIov) <= kIovBatch;
         ++i) {
      prov::TxOp* op = sendq_[(send_head_ + i) % sendq_.size()];
      size_t skip = op->written;
      if (skip < wire::kHeaderSize) {
        iov[cnt++] = {op->header + skip, wire::kHeaderSize - skip};
        skip = 0;
      } else {
        skip -= wire::kHeaderSize;
      }
      cnt += iov_slice(op->iov, op->iov_count, skip, SIZE_MAX, iov + cnt);
    }
    if (cnt == 0) {
      want_write_locked(false);
      shm_tx_blocked_.store(false, std::memory_order_relaxed);
      if (shutting_ && !shut_queued_ && state() == State::kConnected) {
        // Every send is out: announce the end through the same path, after everything else.
        shut_queued_ = true;
        queue_ctrl_locked(wire::Op::kShutdown, 0, nullptr, 0);
        continue;
      }
      if (shut_queued_ && !shut_done_) {
        // The announcement is written: close the sending side (reads go on, for the peer's
        // acknowledgements and its own kShutdown) and tell the application its queue drained.
        // Through shared memory the socket stays whole: it still carries doorbells both ways.
        shut_done_ = true;
        if (!tx_shm_) ::shutdown(fd_.get(), SHUT_WR);
        if (ep_ != nullptr) {
          prov::raise_later(ep_->domain(), ep_, FI_FABQ_EVENT_SQ_DRAINED);
          // Both sides see FI_SHUTDOWN, as with rdma_disconnect(): this one now, the peer when
          // the kShutdown arrives.
          if (!reported_) ep_->cm_event(FI_SHUTDOWN, nullptr, 0);
        }
        reported_ = true;
      }
      if (bell) doorbell_locked();
      return true;
    }
    ssize_t n;
    if (tx_shm_) {
      size_t w = 0;
      bool b = false;
      if (tx_ring_.write(iov, cnt, &w, &b) != shm::Status::kOk) {
        fail_locked(FI_EREMOTEIO, FI_FABQ_EVENT_EP_REQ_ERR, "the peer corrupted a shared ring");
        return false;
      }
      bell |= b;
      if (w == 0) {
        if (tx_ring_.arm_producer()) continue;  // the peer made room meanwhile
        if (bell) doorbell_locked();
        // Full: the peer rings when it makes room; the engine also looks every round.
        shm_tx_blocked_.store(true, std::memory_order_relaxed);
        want_write_locked(true);
        return true;
      }
      shm_tx_blocked_.store(false, std::memory_order_relaxed);
      n = static_cast<ssize_t>(w);
    } else {
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = static_cast<size_t>(cnt);
      n = sendmsg(fd_.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        want_write_locked(true);
        return true;
      }
      if (errno == EPIPE || errno == ECONNRESET) {
        peer_closed_locked();
      } else {
        fail_locked(FI_EIO, FI_FABQ_EVENT_EP_FATAL, strerror(errno));
      }
      return false;
    }
    size_t left = static_cast<size_t>(n);
    if (with_ctrl) {
      const size_t c = std::min(left, ctrl_end - ctrl_off_);
      ctrl_off_ += c;
      left -= c;
      if (ctrl_off_ == ctrl_.size() && !tx_switch_pending_) {
        ctrl_.clear();
        ctrl_off_ = 0;
      }
    }
    while (left > 0 && send_count_ > 0) {
      prov::TxOp* op = sendq_[send_head_];
      const size_t total = wire::kHeaderSize + op->len;
      const size_t c = std::min(left, total - op->written);
      op->written += c;
      left -= c;
      if (op->written < total) {
        mid_frame_ = true;
        break;
      }
      mid_frame_ = false;
      send_head_ = (send_head_ + 1) % sendq_.size();
      --send_count_;
      ep_->tx_written(op);
    }
  }
}

void Conn::on_deadline() {
  std::lock_guard lock(mu_);
  switch (state()) {
    case State::kConnecting:
    case State::kRequested:
    case State::kAccepted:
      reported_ = true;
      close_socket_locked();
      refused_locked(FI_ETIMEDOUT, nullptr, 0);
      break;
    case State::kIncoming:
    case State::kProving:
      close_socket_locked();
      break;
    default:
      break;
  }
}

void Conn::on_ready(uint32_t events) {
  std::lock_guard lock(mu_);
  const State s = state();
  if (s == State::kClosed || !fd_.valid()) return;
  if (acks_owed_.load(std::memory_order_acquire)) {
    std::vector<uint32_t> owed;
    {
      std::lock_guard olock(owed_mu_);
      owed.swap(owed_acks_);
      acks_owed_.store(false, std::memory_order_relaxed);
    }
    if (s == State::kConnected) {
      for (uint32_t seq : owed) queue_ctrl_locked(wire::Op::kAckDelivered, seq, nullptr, 0);
      if (!flush_locked()) return;
    }
  }
  if (s == State::kConnecting) {
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd_.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err == 0 && (events & (EPOLLERR | EPOLLHUP)) != 0) err = ECONNREFUSED;
    if (err != 0) {
      reported_ = true;
      close_socket_locked();
      refused_locked(fi_errno_of(err), nullptr, 0);
      return;
    }
    if ((events & EPOLLOUT) == 0) return;
    set_state(State::kRequested);
    writing_ = false;
    update_interest_locked();
    flush_locked();
    return;
  }
  if (rx_shm_) {
    // A doorbell, the end of the socket, or a call from schedule(): look at both rings.
    if ((events & (EPOLLIN | EPOLLHUP | EPOLLERR)) != 0) drain_doorbells_locked();
    if (state() == State::kClosed) return;
    if (!flush_locked()) return;
    if (stalled_ && (events & EPOLLIN) != 0) {
      stalled_ = false;
      update_interest_locked();
    }
    if (!stalled_) read_locked();
    return;
  }
  if (events & EPOLLOUT) {
    if (!flush_locked()) return;
  }
  if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
    if (stalled_) {
      stalled_ = false;
      update_interest_locked();
    }
    read_locked();
  }
}

void Conn::read_locked() {
  bool drained = false;
  for (;;) {
    const State s = state();
    if (s == State::kClosed || s == State::kPending) return;
    size_t used = 0;
    if (!handle_bytes_locked(rbuf_.get() + rpos_, rlen_ - rpos_, &used)) {
      rpos_ += used;
      return;
    }
    rpos_ = rlen_ = 0;
    if (rx_shm_) {
      // The handshake is over: the peer's frames are in the ring.
      read_shm_locked();
      return;
    }
    // A short read emptied the socket: asking again would only hear EAGAIN. What comes next is
    // read at the next progress (epoll is level-triggered, so a waiter still hears of it).
    if (drained) return;
    if (ctrl_.size() - ctrl_off_ > kCtrlBacklog) {
      want_write_locked(true);
      return;
    }
    ssize_t n;
    if (!framer_.in_header() && have_place_ && !framer_.frame_done() &&
        framer_.payload_left() >= kDirectRead && placed_ < place_.capacity) {
      // Straight into the application's buffer.
      iovec iov[prov::kMaxIov + 1];
      const int cnt = iov_slice(place_.iov, place_.iov_count, placed_,
                                std::min(framer_.payload_left(), place_.capacity - placed_), iov);
      n = readv(fd_.get(), iov, cnt);
      if (n > 0) {
        framer_.take_payload(static_cast<size_t>(n));
        placed_ += static_cast<size_t>(n);
        continue;
      }
    } else {
      n = recv(fd_.get(), rbuf_.get(), kReadBuffer, MSG_DONTWAIT);
      if (n > 0) {
        rlen_ = static_cast<size_t>(n);
        drained = rlen_ < kReadBuffer;
        continue;
      }
    }
    if (n == 0) {
      // The peer closed. Between frames that is a close; inside one, a violation.
      if (framer_.between_frames()) {
        peer_closed_locked();
      } else {
        fail_locked(FI_EREMOTEIO, FI_FABQ_EVENT_EP_REQ_ERR, "connection closed inside a frame");
      }
      return;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return;
    if (errno == ECONNRESET || errno == EPIPE) {
      peer_closed_locked();
    } else {
      fail_locked(fi_errno_of(errno), FI_FABQ_EVENT_EP_FATAL, strerror(errno));
    }
    return;
  }
}

// Consumes bytes p[0..n) of the stream. True when all were consumed (more are wanted); false
// when the connection stalled or ended (*used says how far it got).
bool Conn::handle_bytes_locked(const unsigned char* p, size_t n, size_t* used) {
  const bool from_socket = !rx_shm_;
  size_t off = 0;
  for (;;) {
    if (state() == State::kClosed) {
      *used = off;
      return false;
    }
    if (!framer_.in_header() || framer_.frame_done()) {
      const wire::Header& h = framer_.header();
      if (is_data(h.op) && !have_place_) {
        if (ep_ == nullptr || !ep_->place(in_, &place_)) {
          stalled_ = true;
          update_interest_locked();
          if (ep_ != nullptr && ep_->take_retry()) engine_->schedule(this);
          *used = off;
          return false;
        }
        have_place_ = true;
        placed_ = 0;
      }
      if (framer_.frame_done()) {
        if (!frame_done_locked()) {
          *used = off;
          return false;
        }
        framer_.next_frame();
        have_place_ = false;
        placed_ = 0;
        if (from_socket && rx_shm_) {
          // That was the handshake's last frame on the socket; what follows it there is
          // doorbells, and the frames are in the ring.
          *used = n;
          return true;
        }
        continue;
      }
      if (off == n) break;
      const size_t take = framer_.take_payload(n - off);
      if (is_data(h.op)) {
        // Into the placement, up to its capacity; the rest of a too-long message is dropped.
        const size_t room =
            placed_ < place_.capacity ? std::min(take, place_.capacity - placed_) : 0;
        iovec dst[prov::kMaxIov + 1];
        const int cnt = iov_slice(place_.iov, place_.iov_count, placed_, room, dst);
        const unsigned char* src = p + off;
        for (int j = 0; j < cnt; ++j) {
          std::memcpy(dst[j].iov_base, src, dst[j].iov_len);
          src += dst[j].iov_len;
        }
      } else {
        std::memcpy(cm_buf_ + placed_, p + off, take);
      }
      placed_ += take;
      off += take;
      continue;
    }
    if (off == n) break;
    off += framer_.take_header(p + off, n - off);
    if (framer_.dead()) {
      *used = off;
      fail_locked(FI_EREMOTEIO, FI_FABQ_EVENT_EP_REQ_ERR, wire::violation_str(framer_.violation()));
      return false;
    }
    if (framer_.in_header()) continue;
    // A whole header: is it allowed now?
    const wire::Header& h = framer_.header();
    const State s = state();
    bool ok = false;
    switch (h.op) {
      case wire::Op::kConnReq:
        ok = s == State::kIncoming;
        break;
      case wire::Op::kConnAccept:
        // A side that asked to authenticate takes no accept from a peer that has not proved
        // it holds the secret.
        ok = s == State::kRequested && (!auth_sent_ || challenged_);
        break;
      case wire::Op::kConnReject:
        ok = s == State::kRequested;
        break;
      case wire::Op::kChallenge:
        ok = s == State::kRequested && auth_sent_ && !challenged_;
        break;
      case wire::Op::kProof:
        ok = s == State::kProving;
        break;
      case wire::Op::kConnReady:
        ok = s == State::kAccepted;
        break;
      case wire::Op::kMsg:
      case wire::Op::kTagged:
        // On an RDM connection, messages flow only from the side that connected.
        ok = s == State::kConnected && (!rdm_ || inbound_);
        break;
      default:
        ok = s == State::kConnected;
        break;
    }
    if (!ok) {
      *used = off;
      fail_locked(FI_EREMOTEIO, FI_FABQ_EVENT_EP_REQ_ERR, "a frame the connection's state forbids");
      return false;
    }
    if (is_data(h.op)) {
      in_.tagged = h.op == wire::Op::kTagged;
      in_.tag = h.tag;
      in_.has_data = (h.flags & wire::kRemoteData) != 0;
      in_.data = h.data;
      in_.len = h.length;
      in_.seq = h.seq;
      in_.from = peer_name_;
      in_.via = this;
      in_.ack = (h.flags & wire::kWantDelivered)  ? prov::AckWanted::kDelivered
                : (h.flags & wire::kWantReceived) ? prov::AckWanted::kReceived
                                                  : prov::AckWanted::kNone;
      have_place_ = false;
    }
    placed_ = 0;
  }
  *used = off;
  return true;
}

// A request, authenticated if this side holds a secret: reported (MSG) or accepted (RDM).
bool Conn::take_request_locked(const wire::Header& h, const unsigned char* data, size_t len) {
  if (rdm_) {
    // The peer endpoint's name, then accepted at once: an RDM endpoint takes every peer.
    sockaddr_in name{};
    if (len == sizeof(name)) std::memcpy(&name, data, sizeof(name));
    if (name.sin_family != AF_INET) {
      fail_locked(FI_EREMOTEIO, FI_FABQ_EVENT_EP_REQ_ERR, "an RDM request without a name");
      return false;
    }
    peer_name_ = name;
    map_offer_locked(h);
    queue_accept_locked(nullptr, 0);
    set_state(State::kAccepted);
    engine_->set_deadline(this, connect_deadline());
    return flush_locked();
  }
  // Mapped now, taken (or dropped) by fi_accept / fi_reject.
  map_offer_locked(h);
  set_state(State::kPending);
  engine_->set_deadline(this, 0);
  update_interest_locked();
  // A request the passive endpoint cannot queue is refused at once: the peer is told, and
  // nothing of it stays behind.
  if (pep_ == nullptr || !pep_->request(this, data, len)) reject_locked(nullptr, 0);
  return false;
}

core::Digest Conn::auth_mac_locked(std::string_view label) const {
  core::HmacSha256 m = *auth_;
  m.update(label.data(), label.size());
  m.update(nonce_c_, sizeof(nonce_c_));
  m.update(nonce_s_, sizeof(nonce_s_));
  m.update(req_digest_.data(), req_digest_.size());
  return m.final();
}

// The passive side of a request that must be authenticated: it is kept, unreported, until the
// peer answers the challenge.
bool Conn::challenge_locked(const wire::Header& h) {
  if (auth_ == nullptr || (h.flags & wire::kAuth) == 0 || h.length < wire::kNonceSize) {
    // One side holds a secret and the other does not: no connection either way.
    FABQ_WARN(FI_LOG_EP_CTRL, "connection from %s:%u refused: %s\n", inet_ntoa(peer_.sin_addr),
              ntohs(peer_.sin_port),
              auth_ == nullptr ? "it asks to authenticate and this side holds no secret"
                               : "it does not authenticate and this side holds a secret");
    reject_locked(nullptr, 0);
    return false;
  }
  held_req_ = h;
  const size_t data_len = h.length - wire::kNonceSize;
  std::memcpy(held_data_, cm_buf_, data_len);
  std::memcpy(nonce_c_, cm_buf_ + data_len, wire::kNonceSize);
  unsigned char hdr[wire::kHeaderSize];
  wire::encode(h, hdr);
  core::Sha256 digest;
  digest.update(hdr, sizeof(hdr));
  digest.update(cm_buf_, h.length);
  req_digest_ = digest.final();
  if (!core::fill_random(nonce_s_, sizeof(nonce_s_)).ok()) {
    reject_locked(nullptr, 0);
    return false;
  }
  unsigned char challenge[wire::kChallengeSize];
  std::memcpy(challenge, nonce_s_, sizeof(nonce_s_));
  const core::Digest mac = auth_mac_locked(kAcceptLabel);
  std::memcpy(challenge + sizeof(nonce_s_), mac.data(), mac.size());
  queue_ctrl_locked(wire::Op::kChallenge, 0, challenge, sizeof(challenge));
  set_state(State::kProving);
  return flush_locked();
}

// The active side, challenged: the peer proves it holds the secret, then this side does.
bool Conn::prove_locked() {
  if (framer_.header().length != wire::kChallengeSize) {
    fail_locked(FI_EREMOTEIO, FI_FABQ_EVENT_EP_REQ_ERR, "a challenge of the wrong size");
    return false;
  }
  std::memcpy(nonce_s_, cm_buf_, sizeof(nonce_s_));
  if (!core::mac_equal(auth_mac_locked(kAcceptLabel).data(), cm_buf_ + sizeof(nonce_s_))) {
    FABQ_WARN(FI_LOG_EP_CTRL, "connection to %s:%u refused: the peer did not prove the secret\n",
              inet_ntoa(peer_.sin_addr), ntohs(peer_.sin_port));
    reported_ = true;
    close_socket_locked();
    refused_locked(FI_ECONNREFUSED, nullptr, 0);
    return false;
  }
  challenged_ = true;
  const core::Digest proof = auth_mac_locked(kRequestLabel);
  queue_ctrl_locked(wire::Op::kProof, 0, proof.data(), proof.size());
  return flush_locked();
}

// Acts on a complete frame. False when the connection ended or stalled.
bool Conn::frame_done_locked() {
  const wire::Header& h = framer_.header();
  switch (h.op) {
    case wire::Op::kConnReq:
      return auth_ == nullptr && (h.flags & wire::kAuth) == 0
                 ? take_request_locked(h, cm_buf_, h.length)
                 : challenge_locked(h);
    case wire::Op::kChallenge:
      return prove_locked();
    case wire::Op::kProof:
      if (h.length != wire::kProofSize ||
          !core::mac_equal(auth_mac_locked(kRequestLabel).data(), cm_buf_)) {
        FABQ_WARN(FI_LOG_EP_CTRL, "connection from %s:%u refused: it did not prove the secret\n",
                  inet_ntoa(peer_.sin_addr), ntohs(peer_.sin_port));
        reject_locked(nullptr, 0);
        return false;
      }
      return take_request_locked(held_req_, held_data_, held_req_.length - wire::kNonceSize);
    case wire::Op::kConnAccept:
      if ((h.flags & wire::kShmAccept) != 0) {
        if (!seg_.valid()) {
          fail_locked(FI_EREMOTEIO, FI_FABQ_EVENT_EP_REQ_ERR,
                      "shared memory taken but not offered");
          return false;
        }
        // The peer's frames come through the ring from here on; ours after kConnReady.
        shm_agreed_locked(/*connecting=*/true);
        rx_shm_ = true;
      } else {
        seg_ = {};  // declined (another host, or shared memory off there)
      }
      engine_->set_deadline(this, 0);
      was_connected_ = true;
      set_state(State::kConnected);
      queue_ctrl_locked(wire::Op::kConnReady, 0, nullptr, 0);
      if (shm_agreed_) tx_switch_at_ = ctrl_.size();
      update_interest_locked();
      // kConnReady goes to the kernel before the application hears FI_CONNECTED (as verbs
      // sends its RTU before ESTABLISHED): an application that exits at once must not leave
      // the peer with a handshake cut short.
      if (!flush_locked()) return false;  // and the sends queued while connecting
      if (!rdm_) ep_->cm_event(FI_CONNECTED, cm_buf_, h.length);
      return true;
    case wire::Op::kConnReject:
      reported_ = true;
      close_socket_locked();
      // A peer that has not proved the secret refuses, but its words are not reported.
      refused_locked(FI_ECONNREFUSED, auth_sent_ && !challenged_ ? nullptr : cm_buf_,
                     auth_sent_ && !challenged_ ? 0 : h.length);
      return false;
    case wire::Op::kConnReady:
      engine_->set_deadline(this, 0);
      was_connected_ = true;
      set_state(State::kConnected);
      if (shm_agreed_) rx_shm_ = true;  // the peer's next frame is in the ring
      update_interest_locked();
      if (!rdm_) ep_->cm_event(FI_CONNECTED, nullptr, 0);
      return true;
    case wire::Op::kMsg:
    case wire::Op::kTagged: {
      if (!comm_est_ && !rdm_) {
        comm_est_ = true;
        prov::raise_later(ep_->domain(), ep_, FI_FABQ_EVENT_COMM_EST);
      }
      const bool delivered_now = ep_->placed(in_, &place_);
      if (in_.ack == prov::AckWanted::kReceived) {
        queue_ctrl_locked(wire::Op::kAckReceived, in_.seq, nullptr, 0);
      } else if (in_.ack == prov::AckWanted::kDelivered && delivered_now) {
        queue_ctrl_locked(wire::Op::kAckDelivered, in_.seq, nullptr, 0);
      }
      if (in_.ack != prov::AckWanted::kNone) return flush_locked();
      return true;
    }
    case wire::Op::kAckReceived:
    case wire::Op::kAckDelivered:
      if (!ep_->tx_acked(this, h.seq, h.op == wire::Op::kAckDelivered)) {
        fail_locked(FI_EREMOTEIO, FI_FABQ_EVENT_EP_REQ_ERR, "an acknowledgement of no send");
        return false;
      }
      return true;
    case wire::Op::kShutdown:
      peer_closed_locked();
      return false;
  }
  return true;
}

// --- Conn: shared memory

// Same host: the peer's address is one of this host's (which includes every loopback one).
bool Conn::is_local(const sockaddr_in& peer) const {
  if ((ntohl(peer.sin_addr.s_addr) >> 24) == 127) return true;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  bool local = false;
  for (ifaddrs* i = list; i != nullptr && !local; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    local =
        reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr == peer.sin_addr.s_addr;
  }
  freeifaddrs(list);
  return local;
}

void Conn::map_offer_locked(const wire::Header& req) {
  if (prov::params().shm != 0 && (req.flags & wire::kShmOffer) != 0) {
    seg_ = shm::Segment::open(req.tag, req.data);
  }
}

void Conn::queue_accept_locked(const void* data, size_t len) {
  if (!seg_.valid()) {
    queue_ctrl_locked(wire::Op::kConnAccept, 0, data, len);
    return;
  }
  queue_ctrl_locked(wire::Op::kConnAccept, 0, data, len, wire::kShmAccept);
  shm_agreed_locked(/*connecting=*/false);
}

void Conn::shm_agreed_locked(bool connecting) {
  seg_.unlink();
  tx_ring_ = seg_.tx(connecting);
  rx_ring_ = seg_.rx(connecting);
  shm_agreed_ = true;
  tx_switch_pending_ = true;
  tx_switch_at_ = ctrl_.size();
  engine_->add_shm(this);
}

void Conn::poll_shm() {
  const bool rx = shm_rx_open_.load(std::memory_order_relaxed) && rx_ring_.readable();
  const bool tx = shm_tx_blocked_.load(std::memory_order_relaxed) && tx_ring_.writable();
  if (!rx && !tx) return;
  std::lock_guard lock(mu_);
  if (state() == State::kClosed) return;
  if (tx && !flush_locked()) return;
  if (rx_shm_ && !stalled_) read_locked();
}

bool Conn::arm_shm() {
  bool work = false;
  if (shm_rx_open_.load(std::memory_order_relaxed)) work = rx_ring_.arm_consumer();
  if (shm_tx_blocked_.load(std::memory_order_relaxed) && tx_ring_.arm_producer()) work = true;
  return work;
}

// Reads the peer's frames from the ring until it is empty, the connection stalls or ends.
void Conn::read_shm_locked() {
  bool bell = false;
  for (;;) {
    const State s = state();
    if (s == State::kClosed || s == State::kPending) break;
    if (ctrl_.size() - ctrl_off_ > kCtrlBacklog) break;  // resumed by the flush that empties it
    const unsigned char* p = nullptr;
    size_t contiguous = 0;
    size_t avail = 0;
    if (rx_ring_.peek(&p, &contiguous, &avail) != shm::Status::kOk) {
      fail_locked(FI_EREMOTEIO, FI_FABQ_EVENT_EP_REQ_ERR, "the peer corrupted a shared ring");
      return;
    }
    if (avail == 0) {
      if (!peer_eof_) break;
      // The socket ended and the ring is empty: everything the peer wrote has been read.
      if (bell) doorbell_locked();
      if (framer_.between_frames()) {
        peer_closed_locked();
      } else {
        fail_locked(FI_EREMOTEIO, FI_FABQ_EVENT_EP_REQ_ERR, "connection closed inside a frame");
      }
      return;
    }
    size_t used = 0;
    const bool more = handle_bytes_locked(p, contiguous, &used);
    if (rx_ring_.consume(used)) bell = true;
    if (!more) break;
  }
  if (bell && state() != State::kClosed) doorbell_locked();
}

// Empties the socket of doorbells; notes its end or fails the connection on its error.
void Conn::drain_doorbells_locked() {
  for (;;) {
    const ssize_t n = recv(fd_.get(), rbuf_.get(), kReadBuffer, MSG_DONTWAIT);
    if (n > 0) {
      if (static_cast<size_t>(n) < kReadBuffer) return;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n == 0 || errno == ECONNRESET || errno == EPIPE) {
      // The peer is gone or closed; the ring may still hold its last frames.
      peer_eof_ = true;
      update_interest_locked();
      return;
    }
    fail_locked(fi_errno_of(errno), FI_FABQ_EVENT_EP_FATAL, strerror(errno));
    return;
  }
}

void Conn::doorbell_locked() {
  if (!tx_shm_) {
    // The handshake's last frame is not on the socket yet: the bell must not go before it.
    bell_owed_ = true;
    return;
  }
  if (!fd_.valid() || peer_eof_) return;
  const unsigned char bell = 0;
  // A full socket already holds a doorbell the peer has not read: this one is not needed.
  [[maybe_unused]] ssize_t n = send(fd_.get(), &bell, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

void Conn::peer_closed_locked() {
  const State s = state();
  close_socket_locked();
  if (rdm_) {
    // The peer endpoint closed (or never answered): what was sent to it and not acknowledged
    // fails; the next send to it connects anew.
    refused_locked(s == State::kConnected ? FI_ECONNABORTED : FI_ECONNREFUSED, nullptr, 0);
    return;
  }
  const bool was_reported = std::exchange(reported_, true);
  if (s == State::kConnected && ep_ != nullptr) {
    if (!was_reported) ep_->cm_event(FI_SHUTDOWN, nullptr, 0);
    // Sends still waiting for the peer's acknowledgement will not get it.
    ep_->abort_sends(this, FI_ECONNABORTED);
  }
  send_count_ = 0;
  mid_frame_ = false;
  if (!was_reported && s != State::kConnected) {
    switch (s) {
      case State::kIncoming:
      case State::kProving:
      case State::kPending:
        break;  // its acceptor frees it (close_socket_locked)
      case State::kConnecting:
      case State::kRequested:
        ep_->cm_error(FI_ECONNREFUSED, nullptr, 0);
        break;
      case State::kAccepted:
        ep_->cm_error(FI_ECONNABORTED, nullptr, 0);
        break;
      default:
        break;
    }
  }
  // Nothing more can arrive: the posted receives end too, after FI_SHUTDOWN or the error.
  if (ep_ != nullptr) ep_->connection_ended();
}

void Conn::fail_locked(int err, uint32_t event, const char* why) {
  FABQ_WARN(FI_LOG_EP_DATA, "connection with %s:%u failed: %s\n", inet_ntoa(peer_.sin_addr),
            ntohs(peer_.sin_port), why);
  const State s = state();
  close_socket_locked();
  if (rdm_) {
    // Only this connection ends: its sends fail, the endpoint goes on.
    refused_locked(err == FI_EREMOTEIO ? FI_EIO : err, nullptr, 0);
    return;
  }
  send_count_ = 0;
  mid_frame_ = false;
  const bool was_reported = std::exchange(reported_, true);
  if (ep_ == nullptr) return;  // not reported yet: its acceptor frees it
  if (s == State::kConnected) ep_->abort_sends(this, err == FI_EREMOTEIO ? FI_EIO : err);
  if (!was_reported && s == State::kConnected) {
    // The event writes the EQ error entry and fails the posted receives.
    prov::raise_later(ep_->domain(), ep_, event);
    return;
  }
  if (!was_reported) ep_->cm_error(err, nullptr, 0);
  // Already shut down, or never connected: the receives end as with the peer's close.
  ep_->connection_ended();
}

// --- PassiveEp

struct PepOps {
  static PassiveEp* of(const fid* f) { return PassiveEp::from_fid(f); }
  static int close(fid* f) {
    PassiveEp* p = of(f);
    if (p == nullptr) return -FI_EINVAL;
    delete p;
    return 0;
  }
  static int bind(fid* f, fid* bfid, uint64_t flags) {
    PassiveEp* p = of(f);
    if (p == nullptr) return -FI_EINVAL;
    return p->bind(bfid, flags);
  }
  static int control(fid* f, int, void*) { return of(f) == nullptr ? -FI_EINVAL : -FI_ENOSYS; }
  static int listen(fid_pep* f) {
    PassiveEp* p = of(f != nullptr ? &f->fid : nullptr);
    return p == nullptr ? -FI_EINVAL : p->listen();
  }
  static int getname(fid* f, void* addr, size_t* len) {
    PassiveEp* p = of(f);
    return p == nullptr ? -FI_EINVAL : p->getname(addr, len);
  }
  static int setname(fid* f, void* addr, size_t len) {
    PassiveEp* p = of(f);
    return p == nullptr ? -FI_EINVAL : p->setname(addr, len);
  }
  static int reject(fid_pep* f, fid_t handle, const void* data, size_t len) {
    PassiveEp* p = of(f != nullptr ? &f->fid : nullptr);
    return p == nullptr ? -FI_EINVAL : p->reject(handle, data, len);
  }
  static int getopt(fid* f, int level, int name, void* val, size_t* len) {
    if (of(f) == nullptr || val == nullptr || len == nullptr) return -FI_EINVAL;
    if (level != FI_OPT_ENDPOINT || name != FI_OPT_CM_DATA_SIZE) return -FI_ENOPROTOOPT;
    if (*len < sizeof(size_t)) return -FI_ETOOSMALL;
    *static_cast<size_t*>(val) = prov::kCmDataSize;
    *len = sizeof(size_t);
    return 0;
  }

  static inline fi_ops fi_ops_ = {
      .size = sizeof(fi_ops),
      .close = close,
      .bind = bind,
      .control = control,
      .ops_open = prov::no_ops_open,
      .tostr = prov::no_tostr,
      .ops_set = prov::no_ops_set,
  };
  static inline fi_ops_ep ep_ops_ = {
      .size = sizeof(fi_ops_ep),
      .cancel = prov::enosys_ssize<fid*, void*>,
      .getopt = getopt,
      .setopt = prov::enosys<fid*, int, int, const void*, size_t>,
      .tx_ctx = prov::enosys<fid_ep*, int, fi_tx_attr*, fid_ep**, void*>,
      .rx_ctx = prov::enosys<fid_ep*, int, fi_rx_attr*, fid_ep**, void*>,
      .rx_size_left = prov::enosys_ssize<fid_ep*>,
      .tx_size_left = prov::enosys_ssize<fid_ep*>,
  };
  static inline fi_ops_cm cm_ops_ = {
      .size = sizeof(fi_ops_cm),
      .setname = setname,
      .getname = getname,
      .getpeer = prov::enosys<fid_ep*, void*, size_t*>,
      .connect = prov::enosys<fid_ep*, const void*, const void*, size_t>,
      .listen = listen,
      .accept = prov::enosys<fid_ep*, const void*, size_t>,
      .reject = reject,
      .shutdown = prov::enosys<fid_ep*, uint64_t>,
      .join = prov::enosys<fid_ep*, const void*, uint64_t, fid_mc**, void*>,
  };
};

PassiveEp* PassiveEp::from_fid(const fid* f) {
  if (f == nullptr || f->fclass != FI_CLASS_PEP || f->ops != &PepOps::fi_ops_) return nullptr;
  // The fid is the first member of the fid_pep, the first member of box_.
  struct Box {
    fid_pep pep;
    PassiveEp* owner;
  };
  return reinterpret_cast<const Box*>(f)->owner;
}

// --- ConnReq

// A connection request as an FI_CONNREQ's info->handle names it.
//
// The application may hand that info to fi_endpoint or fi_reject at any time: also after the
// request was used, refused, or its passive endpoint closed; and fi_endpoint reads the handle's
// fclass to tell a request from a passive endpoint. So a request's memory is never freed: a
// finished one is reused for a new request only once kReuseAfter others have finished after it,
// and what a handle names is decided under the pool's lock from the request's state, never from
// memory the application may have given back. (An info kept past kReuseAfter newer requests
// names a newer request of a passive endpoint: a misuse, but never a read of freed memory.)
struct ConnReq {
  enum class State : uint8_t { kPending, kTaken, kAborted };

  fid fid_{};  // first: info->handle points here
  State state = State::kAborted;
  Engine* engine = nullptr;
  PassiveEp* pep = nullptr;
  Conn* conn = nullptr;
  const fi_info* info = nullptr;  // the FI_CONNREQ's, which the application owns once read

  // The request `handle` names, or null if it is not one.
  static ConnReq* of(fid_t handle);
  // A pending request of `pep` for `conn`, reported with `info`.
  static ConnReq* open(Engine* engine, PassiveEp* pep, Conn* conn, const fi_info* info);
  // Takes a pending request of `engine` (and of `only`, if not null) for fi_endpoint or
  // fi_reject: 0 and *pep, *conn; -FI_EINVAL if it was taken already or belongs to another
  // fabric or passive endpoint; -FI_ECONNABORTED if its passive endpoint ended it.
  static int claim(ConnReq* req, const Engine* engine, const PassiveEp* only, PassiveEp** pep,
                   Conn** conn);
  // Its passive endpoint closes, or could not queue it: it ends; returns the info it had.
  static const fi_info* abort(ConnReq* req);

 private:
  void finish_locked(State why);
};

namespace {

inline constexpr size_t kReuseAfter = 256;

struct ConnReqPool {
  std::mutex mu;
  std::vector<std::unique_ptr<ConnReq>> all;  // every request ever made, for the unload
  std::deque<ConnReq*> finished;              // oldest first
};

// Freed only when the provider is unloaded: handles stay readable until then.
core::LazyGlobal<ConnReqPool> g_conn_reqs;
ConnReqPool& conn_req_pool() {
  return g_conn_reqs.get();
}

fi_ops g_conn_req_ops = {
    .size = sizeof(fi_ops),
    .close = prov::enosys<fid*>,
    .bind = prov::no_bind,
    .control = prov::no_control,
    .ops_open = prov::no_ops_open,
    .tostr = prov::no_tostr,
    .ops_set = prov::no_ops_set,
};

}  // namespace

ConnReq* ConnReq::of(fid_t handle) {
  if (handle == nullptr) return nullptr;
  // Looked up, not read: `handle` may be anything the application passed.
  ConnReqPool* pool = g_conn_reqs.if_made();
  if (pool == nullptr) return nullptr;
  std::lock_guard lock(pool->mu);
  for (const auto& r : pool->all) {
    if (&r->fid_ == handle) return r.get();
  }
  return nullptr;
}

ConnReq* ConnReq::open(Engine* engine, PassiveEp* pep, Conn* conn, const fi_info* info) {
  ConnReqPool& pool = conn_req_pool();
  std::lock_guard lock(pool.mu);
  ConnReq* req = nullptr;
  if (pool.finished.size() > kReuseAfter) {
    req = pool.finished.front();
    pool.finished.pop_front();
  } else {
    req = pool.all.emplace_back(std::make_unique<ConnReq>()).get();
    req->fid_.fclass = FI_CLASS_CONNREQ;
    req->fid_.ops = &g_conn_req_ops;
  }
  req->state = State::kPending;
  req->engine = engine;
  req->pep = pep;
  req->conn = conn;
  req->info = info;
  return req;
}

void ConnReq::finish_locked(State why) {
  state = why;
  pep = nullptr;
  conn = nullptr;
  info = nullptr;
  conn_req_pool().finished.push_back(this);
}

int ConnReq::claim(ConnReq* req, const Engine* engine, const PassiveEp* only, PassiveEp** pep,
                   Conn** conn) {
  std::lock_guard lock(conn_req_pool().mu);
  if (req->state == State::kAborted) return -FI_ECONNABORTED;
  if (req->state != State::kPending || req->engine != engine ||
      (only != nullptr && req->pep != only)) {
    return -FI_EINVAL;
  }
  *pep = req->pep;
  *conn = req->conn;
  req->finish_locked(State::kTaken);
  return 0;
}

const fi_info* ConnReq::abort(ConnReq* req) {
  std::lock_guard lock(conn_req_pool().mu);
  const fi_info* info = req->info;
  if (req->state == State::kPending) req->finish_locked(State::kAborted);
  return info;
}

// --- Acceptor

namespace {

constexpr int64_t kAcceptBackoffNs = 100'000'000;

// accept4() failures that say nothing about the listening socket: Linux passes a pending
// network error of the new connection up through accept (accept(2)), and the next one may be
// fine.
bool accept_retryable(int e) {
  switch (e) {
    case EINTR:
    case ECONNABORTED:
    case EPROTO:
    case ENETDOWN:
    case ENOPROTOOPT:
    case EHOSTDOWN:
    case ENONET:
    case EHOSTUNREACH:
    case EOPNOTSUPP:
    case ENETUNREACH:
    case EPERM:
      return true;
    default:
      return false;
  }
}

}  // namespace

int Acceptor::listen_at(const sockaddr_in& at, sockaddr_in* bound) {
  core::UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return errno == EMFILE || errno == ENFILE ? -FI_EMFILE : -FI_EIO;
  const int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a = at;
  a.sin_family = AF_INET;
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&a), sizeof(a)) != 0) {
    return errno == EADDRINUSE ? -FI_EADDRINUSE : -FI_EINVAL;
  }
  if (::listen(fd.get(), SOMAXCONN) != 0) return -FI_EIO;
  socklen_t len = sizeof(*bound);
  getsockname(fd.get(), reinterpret_cast<sockaddr*>(bound), &len);
  std::lock_guard elock(engine_->mu());
  if (!engine_->add(fd.get(), this, EPOLLIN)) return -FI_EIO;
  fd_ = std::move(fd);
  return 0;
}

void Acceptor::close_locked() {
  if (fd_.valid()) engine_->remove(fd_.get(), this);  // also forgets a back-off deadline
  std::vector<std::unique_ptr<Conn>> conns;
  {
    std::lock_guard lock(mu_);
    conns.swap(conns_);
  }
  // Destroyed without the acceptor's lock: each takes its own, which comes first.
  conns.clear();
}

void Acceptor::on_ready(uint32_t) {
  size_t busy = 0;
  {
    std::lock_guard lock(mu_);
    sweep_locked();
    for (const auto& c : conns_) busy += c->in_handshake();
  }
  const size_t backlog = prov::params().cm_backlog;
  for (;;) {
    core::UniqueFd fd(accept4(fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd.valid()) {
      const int e = errno;
      if (accept_retryable(e)) continue;
      if (e == EAGAIN || e == EWOULDBLOCK) return;
      // Out of descriptors or memory (or worse): the socket stays readable, so waiting on it
      // now would spin. Listen again after a pause; what is connected keeps being served.
      if (!std::exchange(warned_, true)) {
        FABQ_WARN(FI_LOG_EP_CTRL, "accepting connections failed (%s); retrying every %lld ms\n",
                  strerror(e), static_cast<long long>(kAcceptBackoffNs / 1'000'000));
      }
      engine_->remove_fd(fd_.get());
      backing_off_ = true;
      engine_->set_deadline(this, now_ns() + kAcceptBackoffNs);
      return;
    }
    if (busy >= backlog) continue;  // closed at once: the peer sees a refusal
    ++busy;
    std::unique_ptr<Conn> conn = make_conn(std::move(fd));
    Conn* c = conn.get();
    {
      std::lock_guard lock(mu_);
      conns_.push_back(std::move(conn));
    }
    start(c);
  }
}

void Acceptor::on_deadline() {
  if (!std::exchange(backing_off_, false) || !fd_.valid()) return;
  if (!engine_->add(fd_.get(), this, EPOLLIN)) {
    backing_off_ = true;
    engine_->set_deadline(this, now_ns() + kAcceptBackoffNs);
    return;
  }
  on_ready(EPOLLIN);
}

void Acceptor::reap(Conn* c) {
  std::lock_guard lock(mu_);
  auto it = std::find_if(conns_.begin(), conns_.end(), [c](const auto& p) { return p.get() == c; });
  if (it == conns_.end() || !may_free_locked(c)) return;
  engine_->retire(std::move(*it));
  conns_.erase(it);
}

// Through the engine: a readiness report of the round in progress may still name one.
void Acceptor::sweep_locked() {
  for (auto it = conns_.begin(); it != conns_.end();) {
    if ((*it)->closed() && may_free_locked(it->get())) {
      engine_->retire(std::move(*it));
      it = conns_.erase(it);
    } else {
      ++it;
    }
  }
}

// --- PassiveEp

namespace {

// The open passive endpoints, so that a handle can be recognised as one without being read.
struct PassiveEps {
  std::mutex mu;  // taken before a passive endpoint's own lock
  std::vector<PassiveEp*> all;
};
core::LazyGlobal<PassiveEps> g_peps;

}  // namespace

PassiveEp::PassiveEp(prov::Fabric* fabric, Engine* engine, const fi_info& info, void* context)
    : Acceptor(engine), fabric_(fabric), info_(fi_dupinfo(&info)), auth_(prov::auth_key_of(info)) {
  fabric_->hold();
  box_.pep.fid.fclass = FI_CLASS_PEP;
  box_.pep.fid.context = context;
  box_.pep.fid.ops = &PepOps::fi_ops_;
  box_.pep.ops = &PepOps::ep_ops_;
  box_.pep.cm = &PepOps::cm_ops_;
  box_.owner = this;
  addr_.sin_family = AF_INET;
  if (info.src_addr != nullptr && info.src_addrlen >= sizeof(sockaddr_in)) {
    std::memcpy(&addr_, info.src_addr, sizeof(addr_));
  }
  PassiveEps& peps = g_peps.get();
  std::lock_guard lock(peps.mu);
  peps.all.push_back(this);
}

bool PassiveEp::name_if_open(fid_t handle, sockaddr_in* name) {
  PassiveEps* peps = g_peps.if_made();
  if (peps == nullptr) return false;
  std::lock_guard lock(peps->mu);
  for (PassiveEp* p : peps->all) {
    if (&p->box_.pep.fid != handle) continue;
    std::lock_guard plock(p->mu_);
    *name = p->addr_;
    return true;
  }
  return false;
}

PassiveEp::~PassiveEp() {
  {
    PassiveEps& peps = g_peps.get();
    std::lock_guard lock(peps.mu);
    std::erase(peps.all, this);
  }
  {
    // Under the engine lock, which make_connection() and reject() hold while they take a
    // request: each request is taken before this, or ended here.
    std::lock_guard elock(engine_->mu());
    std::vector<const fi_info*> unread;
    {
      std::lock_guard lock(mu_);
      if (eq_ != nullptr) {
        // fi_cm(3): a closed endpoint's events are purged. An unread FI_CONNREQ owns its info.
        eq_->queue().purge(&box_.pep.fid, [&](uint32_t event, const void* payload, size_t len) {
          if (event != FI_CONNREQ || len < sizeof(fi_eq_cm_entry)) return;
          fi_eq_cm_entry e;
          std::memcpy(&e, payload, sizeof(e));
          unread.push_back(e.info);
        });
      }
      for (const auto& c : conns_) {
        if (c->req_ == nullptr) continue;
        // Only an info this endpoint reported is freed (an application may write FI_CONNREQ
        // events of its own into the EQ).
        const fi_info* info = ConnReq::abort(c->req_);
        if (std::find(unread.begin(), unread.end(), info) != unread.end()) {
          fi_freeinfo(const_cast<fi_info*>(info));
        }
      }
    }
    // Its peers see the connection close: a refusal.
    close_locked();
  }
  if (eq_ != nullptr) eq_->release();
  fi_freeinfo(info_);
  fabric_->release();
  prov::poison_fid(&box_.pep.fid);
}

fid_pep* PassiveEp::handle() {
  return &box_.pep;
}

std::unique_ptr<Conn> PassiveEp::make_conn(core::UniqueFd fd) {
  return std::make_unique<Conn>(engine_, nullptr, std::move(fd), wire::kMaxCmData);
}

void PassiveEp::start(Conn* c) {
  c->start_accepted(this, /*passive=*/true);
}

// One whose request was reported stays until the application takes or refuses it.
bool PassiveEp::may_free_locked(Conn* c) {
  return c->req_ == nullptr;
}

int PassiveEp::bind(fid* bfid, uint64_t flags) {
  prov::Eq* eq = prov::Eq::from_fid(bfid);
  if (eq == nullptr) return -FI_EINVAL;
  if (flags != 0) return -FI_EBADFLAGS;
  std::lock_guard lock(mu_);
  if (eq_ != nullptr) return -FI_EBUSY;
  eq->hold();
  eq_ = eq;
  return 0;
}

int PassiveEp::listen() {
  sockaddr_in at{};
  {
    std::lock_guard lock(mu_);
    if (listening_) return -FI_EOPBADSTATE;
    if (eq_ == nullptr) return -FI_ENOEQ;
    at = addr_;
    listening_ = true;  // one listen at a time
  }
  sockaddr_in bound{};
  const int rc = listen_at(at, &bound);
  std::lock_guard lock(mu_);
  if (rc != 0) {
    listening_ = false;
    return rc;
  }
  addr_ = bound;
  return 0;
}

int PassiveEp::getname(void* addr, size_t* len) {
  std::lock_guard lock(mu_);
  return copy_addr(addr_, addr, len);
}

int PassiveEp::setname(const void* addr, size_t len) {
  std::lock_guard lock(mu_);
  if (addr == nullptr || len < sizeof(sockaddr_in)) return -FI_EINVAL;
  if (listening_) return -FI_EOPBADSTATE;
  sockaddr_in a;
  std::memcpy(&a, addr, sizeof(a));
  if (a.sin_family != AF_INET) return -FI_EINVAL;
  addr_ = a;
  return 0;
}

bool PassiveEp::request(Conn* conn, const void* data, size_t len) {
  std::lock_guard lock(mu_);
  if (eq_ == nullptr) return false;
  fi_info* info = fi_dupinfo(info_);
  if (info == nullptr) return false;
  ConnReq* req = ConnReq::open(engine_, this, conn, info);
  info->handle = &req->fid_;
  std::free(info->dest_addr);
  info->dest_addr = std::malloc(sizeof(sockaddr_in));
  if (info->dest_addr != nullptr) {
    std::memcpy(info->dest_addr, &conn->peer_, sizeof(sockaddr_in));
    info->dest_addrlen = sizeof(sockaddr_in);
  } else {
    info->dest_addrlen = 0;
  }
  unsigned char buf[sizeof(fi_eq_cm_entry) + wire::kMaxCmData];
  fi_eq_cm_entry entry{};
  entry.fid = &box_.pep.fid;
  entry.info = info;
  std::memcpy(buf, &entry, sizeof(entry));
  len = std::min(len, wire::kMaxCmData);
  if (len > 0) std::memcpy(buf + sizeof(entry), data, len);
  // Requests may fill half of the EQ, never more: the other half stays for the events of the
  // connections already made (FI_CONNECTED, FI_SHUTDOWN, errors), which are never dropped. A
  // request that finds no room is refused, so a flood of them cannot overrun the EQ.
  core::EventQueue& q = eq_->queue();
  if (!q.write_leaving(q.capacity() / 2, FI_CONNREQ, buf, sizeof(entry) + len).ok()) {
    ConnReq::abort(req);
    fi_freeinfo(info);
    return false;
  }
  conn->req_ = req;
  return true;
}

std::unique_ptr<Conn> PassiveEp::take(Conn* conn) {
  std::lock_guard lock(mu_);
  auto it =
      std::find_if(conns_.begin(), conns_.end(), [conn](const auto& p) { return p.get() == conn; });
  if (it == conns_.end()) return nullptr;
  std::unique_ptr<Conn> c = std::move(*it);
  conns_.erase(it);
  return c;
}

int PassiveEp::reject(fid_t handle, const void* data, size_t len) {
  if (len > wire::kMaxCmData || (len > 0 && data == nullptr)) return -FI_EINVAL;
  ConnReq* req = ConnReq::of(handle);
  if (req == nullptr) return -FI_EINVAL;
  std::unique_ptr<Conn> conn;
  {
    std::lock_guard elock(engine_->mu());
    PassiveEp* pep = nullptr;
    Conn* c = nullptr;
    if (const int rc = ConnReq::claim(req, engine_, this, &pep, &c); rc != 0) return rc;
    conn = take(c);
  }
  if (conn == nullptr) return -FI_ECONNABORTED;
  return conn->reject(data, len);
}

// --- RdmListener

RdmListener::RdmListener(Engine* engine, prov::Endpoint* ep) : Acceptor(engine), ep_(ep) {}

RdmListener::~RdmListener() {
  std::lock_guard elock(engine_->mu());
  close_locked();
}

int RdmListener::open(const sockaddr_in& addr) {
  return listen_at(addr, &addr_);
}

int RdmListener::getname(void* addr, size_t* len) {
  return copy_addr(addr_, addr, len);
}

void RdmListener::sweep() {
  std::lock_guard lock(mu_);
  sweep_locked();
}

std::unique_ptr<Conn> RdmListener::make_conn(core::UniqueFd fd) {
  return std::make_unique<Conn>(engine_, ep_, std::move(fd), ep_->max_msg_size());
}

void RdmListener::start(Conn* c) {
  c->start_accepted(this, /*passive=*/false);
}

const core::HmacSha256* RdmListener::auth_key() const {
  return ep_->auth_key();
}

// A buffered message that came through one still owes its sender a delivery acknowledgement.
bool RdmListener::may_free_locked(Conn* c) {
  return ep_->can_free(c);
}

}  // namespace fabq::xport

// --- Entry points (prov/transport.h)

namespace fabq::prov {

Transport* make_transport(Fabric* fabric) {
  (void)fabric;  // one engine per fabric; it needs nothing of it
  return new xport::Engine();
}

HandleKind classify_handle(fid_t handle, sockaddr_in* pep_name) {
  if (handle == nullptr) return HandleKind::kNone;
  if (xport::ConnReq::of(handle) != nullptr) return HandleKind::kConnReq;
  if (xport::PassiveEp::name_if_open(handle, pep_name)) return HandleKind::kPassiveEp;
  return HandleKind::kUnknown;
}

Connection* make_connection(Endpoint* ep, fid_t handle, int* err) {
  Fabric* fabric = ep->domain()->fabric();
  auto* engine = static_cast<xport::Engine*>(fabric->transport());
  if (handle == nullptr) {
    return new xport::Conn(engine, ep, core::UniqueFd(), ep->max_msg_size());
  }
  xport::ConnReq* req = xport::ConnReq::of(handle);
  if (req == nullptr) {
    *err = -FI_EINVAL;
    return nullptr;
  }
  std::unique_ptr<xport::Conn> conn;
  {
    // Passive endpoints close under the engine lock: the one that reported it stays meanwhile.
    std::lock_guard elock(engine->mu());
    xport::PassiveEp* pep = nullptr;
    xport::Conn* c = nullptr;
    if (const int rc = xport::ConnReq::claim(req, engine, nullptr, &pep, &c); rc != 0) {
      *err = rc;
      return nullptr;
    }
    conn = pep->take(c);
  }
  // Its peer gave up meanwhile: the connection (if any is left) closes.
  if (conn == nullptr || !conn->adopt(ep)) {
    *err = -FI_ECONNABORTED;
    return nullptr;
  }
  return conn.release();
}

void unload_transport() {
  if (xport::Engines* e = xport::g_engines.if_made()) {
    std::lock_guard lock(e->mu);
    for (xport::Engine* engine : e->all) engine->stop_thread();
  }
  // Nothing of fabq's runs any more: the process-wide state goes with the provider.
  xport::g_engines.free();
  xport::g_conn_reqs.free();
  xport::g_peps.free();
}

Listener* open_listener(Endpoint* ep, const sockaddr_in& addr, int* err) {
  auto* engine = static_cast<xport::Engine*>(ep->domain()->fabric()->transport());
  auto l = std::make_unique<xport::RdmListener>(engine, ep);
  if (const int rc = l->open(addr); rc != 0) {
    *err = rc;
    return nullptr;
  }
  return l.release();
}

int open_passive_ep(fid_fabric* fabric_fid, fi_info* info, fid_pep** out, void* context) {
  if (out != nullptr) *out = nullptr;
  Fabric* fabric = Fabric::from_fid(fabric_fid != nullptr ? &fabric_fid->fid : nullptr);
  if (fabric == nullptr || info == nullptr || out == nullptr) return -FI_EINVAL;
  if (info->ep_attr != nullptr && info->ep_attr->type != FI_EP_MSG &&
      info->ep_attr->type != FI_EP_UNSPEC) {
    return -FI_EINVAL;
  }
  auto* engine = static_cast<xport::Engine*>(fabric->transport());
  auto* pep = new (std::nothrow) xport::PassiveEp(fabric, engine, *info, context);
  if (pep == nullptr) return -FI_ENOMEM;
  *out = pep->handle();
  return 0;
}

}  // namespace fabq::prov
