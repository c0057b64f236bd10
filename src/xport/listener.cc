#include "xport/listener.h"

#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "core/sockaddr.h"
#include "xport/socket_util.h"

namespace fabq::xport {

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
  core::MutexLock elock(engine_->mu());
  if (!engine_->add(fd.get(), this, EPOLLIN)) return -FI_EIO;
  fd_ = std::move(fd);
  return 0;
}

void Acceptor::close_locked() {
  if (fd_.valid()) engine_->remove(fd_.get(), this);  // also forgets a back-off deadline
  std::vector<std::unique_ptr<Conn>> conns;
  {
    core::MutexLock lock(mu_);
    conns.swap(conns_);
  }
  // Without the acceptor's lock: each takes its own, which comes first. The engine lock is held
  // already, so they leave the engine here and their destructors take no lock.
  for (const auto& c : conns) c->leave_engine_locked(engine_);
  conns.clear();
}

void Acceptor::on_ready(uint32_t) {
  size_t busy = 0;
  size_t up = 0;
  size_t held = 0;
  std::vector<const Conn*> fresh;
  {
    core::MutexLock lock(mu_);
    sweep_locked();
    fresh.swap(fresh_);
    for (const auto& c : conns_) {
      const bool handshake = c->in_handshake();
      busy += handshake;
      up += !handshake && !c->closed();
    }
    held = conns_.size();
  }
  const size_t backlog = engine_->config().cm_backlog;
  // Connections that came up beyond the bound (each that comes up asks for this look) make
  // room at once. A connection in its handshake takes no one's place: with a secret, a
  // stranger never gets further, and must not close a peer's connection for nothing.
  const size_t limit = bound();
  while (up > limit && (make_room(Room::kAny, fresh) || make_room(Room::kAny))) --up;
  // Only descriptors run short (half the process's, with those in their handshake): then a
  // connection that arrives takes another's place, but with a secret never an authenticated
  // peer's that still does something.
  const size_t cap = descriptor_cap();
  const Room room = auth_key() != nullptr ? Room::kStrangers : Room::kAny;
  for (;;) {
    core::UniqueFd fd(accept4(fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd.valid()) {
      const int e = errno;
      if (accept_retryable(e)) continue;
      if (e == EAGAIN || e == EWOULDBLOCK) return;
      if ((e == EMFILE || e == ENFILE) && make_room(room)) {
        // Its descriptor comes back once this round frees it: the next round accepts.
        engine_->schedule(this);
        return;
      }
      // Out of descriptors or memory (or worse): the socket stays readable, so waiting on it
      // now would spin. Listen again after a pause; what is connected keeps being served.
      if (!std::exchange(warned_, true)) {
        engine_->log(LogLevel::kWarn, "accepting connections failed (%s); retrying every %lld ms\n",
                     strerror(e), static_cast<long long>(kAcceptBackoffNs / 1'000'000));
      }
      engine_->remove_fd(fd_.get());
      backing_off_ = true;
      engine_->set_deadline(this, now_ns() + kAcceptBackoffNs);
      return;
    }
    if (busy >= backlog) continue;  // closed at once: the peer sees a refusal
    const bool at_bound = held >= cap;
    if (at_bound && !make_room(room)) continue;  // nothing to give up: refused as above
    ++busy;
    if (!at_bound) ++held;
    std::unique_ptr<Conn> conn = make_conn(std::move(fd));
    Conn* c = conn.get();
    {
      core::MutexLock lock(mu_);
      conns_.push_back(std::move(conn));
    }
    start(c);
    if (at_bound) {
      // One at a time at the bound: the connection given up keeps its descriptor until this
      // round frees it.
      engine_->schedule(this);
      return;
    }
  }
}

void Acceptor::came_up(const Conn* c) {
  {
    core::MutexLock lock(mu_);
    fresh_.push_back(c);
  }
  engine_->schedule(this);
}

bool Acceptor::make_room(Room which, const std::vector<const Conn*>& spare) {
  // Each with its last activity, read once: the order must not change while sorting.
  std::vector<std::pair<int64_t, Conn*>> held;
  {
    core::MutexLock lock(mu_);
    held.reserve(conns_.size());
    for (const auto& c : conns_) {
      if (c->closed() || std::find(spare.begin(), spare.end(), c.get()) != spare.end()) continue;
      held.emplace_back(c->last_active_ns(), c.get());
    }
  }
  std::sort(held.begin(), held.end());
  // Without mu_: each takes its connection's lock, which comes first (docs/locking.md).
  for (const Conn::Shed how : {Conn::Shed::kIdle, Conn::Shed::kGone}) {
    if (how == Conn::Shed::kIdle && which == Room::kStrangers) continue;
    for (const auto& [at, c] : held) {
      if (c->shed(how, 0)) return true;
    }
  }
  const int64_t stale_before =
      engine_->round_ns() - static_cast<int64_t>(engine_->config().connect_timeout_ms) * 1'000'000;
  for (const auto& [at, c] : held) {
    if (at >= stale_before) break;
    if (which == Room::kStrangers && !c->in_handshake()) continue;
    if (c->shed(Conn::Shed::kStale, stale_before)) return true;
  }
  return false;
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
  core::MutexLock lock(mu_);
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

PassiveAcceptor::PassiveAcceptor(Engine* engine, PassiveOwner* owner, const core::HmacSha256* auth)
    : Acceptor(engine), owner_(owner), auth_(auth) {}

PassiveAcceptor::~PassiveAcceptor() {
  core::MutexLock elock(engine_->mu());
  // Its peers see the connection close: a refusal.
  close_locked();
}

int PassiveAcceptor::listen(const sockaddr_in& at, sockaddr_in* bound) {
  return listen_at(at, bound);
}

std::unique_ptr<Conn> PassiveAcceptor::make_conn(core::UniqueFd fd) {
  return std::make_unique<Conn>(engine_, nullptr, ConnParams{.max_msg_size = core::kCmDataSize},
                                std::move(fd));
}

void PassiveAcceptor::start(Conn* c) {
  c->start_accepted(this, this);
}

// One whose request was reported stays until the application takes or refuses it.
bool PassiveAcceptor::may_free_locked(Conn* c) {
  return !c->requested();
}

bool PassiveAcceptor::request(Conn* conn, const sockaddr_in& peer, const void* data, size_t len) {
  // Marked first: once the owner reports it, the application may take it at once.
  conn->requested_.store(true, std::memory_order_release);
  if (owner_->request(conn, peer, data, len)) return true;
  conn->requested_.store(false, std::memory_order_release);
  return false;
}

std::unique_ptr<Connection> PassiveAcceptor::take(Connection* pending) {
  core::MutexLock lock(mu_);
  auto it = std::find_if(conns_.begin(), conns_.end(),
                         [pending](const auto& p) { return p.get() == pending; });
  if (it == conns_.end()) return nullptr;
  std::unique_ptr<Conn> c = std::move(*it);
  conns_.erase(it);
  return c;
}

RdmListener::RdmListener(Engine* engine, Owner* owner, const ConnParams& params)
    : Acceptor(engine), owner_(owner), params_(params) {}

RdmListener::~RdmListener() {
  core::MutexLock elock(engine_->mu());
  close_locked();
}

int RdmListener::open(const sockaddr_in& addr) {
  return listen_at(addr, &addr_);
}

int RdmListener::getname(void* addr, size_t* len) {
  return core::copy_sockaddr(addr_, addr, len);
}

void RdmListener::sweep() {
  core::MutexLock lock(mu_);
  sweep_locked();
}

void RdmListener::release(Owner* owner) {
  core::MutexLock elock(engine_->mu());
  std::vector<std::unique_ptr<Conn>> gone;
  {
    core::MutexLock lock(mu_);
    for (auto it = conns_.begin(); it != conns_.end();) {
      if ((*it)->owner() == owner) {
        gone.push_back(std::move(*it));
        it = conns_.erase(it);
      } else {
        ++it;
      }
    }
  }
  // As close_locked(): each takes its own lock, which comes before the acceptor's.
  for (const auto& c : gone) c->leave_engine_locked(engine_);
}

std::unique_ptr<Conn> RdmListener::make_conn(core::UniqueFd fd) {
  return std::make_unique<Conn>(engine_, owner_, params_, std::move(fd));
}

void RdmListener::start(Conn* c) {
  c->start_accepted(this, nullptr);
}

const core::HmacSha256* RdmListener::auth_key() const {
  return params_.auth;
}

size_t RdmListener::descriptor_cap() const {
  // Half the descriptors the process may have: the other half stays the application's (and
  // its own connections' and files').
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) != 0 || nofile.rlim_cur == RLIM_INFINITY) return SIZE_MAX;
  return std::max<size_t>(static_cast<size_t>(nofile.rlim_cur) / 2, 1);
}

size_t RdmListener::bound() const {
  return std::min(engine_->config().inbound_max, descriptor_cap());
}

// A buffered message that came through one still owes its sender a delivery acknowledgement.
bool RdmListener::may_free_locked(Conn* c) {
  return c->owner()->can_free(c);
}

}  // namespace fabq::xport
