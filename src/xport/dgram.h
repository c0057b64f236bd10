// fabq transport: datagram endpoints' UDP sockets (xport/transport.h Datagram, Membership).
//
//   DgramSocket  an endpoint's socket: bound to its address, in the engine's epoll set; sends
//                go out of it, unicast and multicast.
//   McSocket     one multicast membership: a socket bound to the group's address and port that
//                joined the group (IP_ADD_MEMBERSHIP) on the endpoint's interface. Reading it
//                gives only the group's datagrams; closing it leaves the group.
//
// Both read one datagram per readiness report, under the engine lock, into the DgramSocket's
// buffer (the engine runs one round at a time, so one buffer serves an endpoint and its
// memberships), check it (xport/dgram_wire.h) and hand it to the owner. epoll is
// level-triggered: what is left in the socket is reported again at the next round.
//
// With a shared secret the DgramSocket also authenticates: each datagram it sends gets the
// socket's epoch, its next sequence number, the time and the MAC (dgram::DgramKey::seal(), over
// the payload where it is); each one read, by it or a membership, must carry a MAC that
// verifies for its sender and the address it came to, and a number the replay guard (one for
// the socket and its memberships, made at open) has not seen. Nothing is allocated per
// datagram, with a secret or without.
#pragma once

#include <netinet/in.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/hmac.h"
#include "core/unique_fd.h"
#include "xport/dgram_wire.h"
#include "xport/engine.h"
#include "xport/transport.h"

namespace fabq::xport {

class McSocket;

class DgramSocket final : public Pollable, public Datagram {
 public:
  // `auth`: the shared secret (read here only; the socket keeps the datagram key derived from
  // it), or null.
  DgramSocket(Engine* engine, Owner* owner, const core::HmacSha256* auth);
  // Takes the engine lock.
  ~DgramSocket() override;
  // Binds at `at` and joins the engine. 0, -FI_EADDRINUSE, -FI_EINVAL (also: a secret and
  // INADDR_ANY), -FI_EMFILE, -FI_EIO.
  int open(const sockaddr_in& at);

  sockaddr_in name() const override { return name_; }
  size_t max_payload() const override {
    return auth_ != nullptr ? dgram::kMaxAuthPayload : dgram::kMaxPayload;
  }
  int send(const sockaddr_in& to, const DgramSend& s, core::NetFault fault) override;
  std::unique_ptr<Membership> join(const sockaddr_in& group, int* err) override;
  void resume() override { engine_->schedule(this); }

  // Under the engine lock.
  void on_ready(uint32_t events) override;
  // The busy socket of a ping-pong is read every round without epoll_wait() (Engine::hot_):
  // one datagram, if there is one.
  bool direct_read() const override { return true; }
  bool poll_read() override;
  // Reads one datagram of `fd`, a socket bound at `at` (this one's name, or a group's address
  // for a membership: `multicast`), and hands it to the owner if it is well-formed (and
  // authentic, with a secret); first the one kept pending, if any, and nothing more while it
  // stays. Under the engine lock.
  void read_one(int fd, const sockaddr_in& at, bool multicast);

  // Why datagrams were dropped before the owner saw them; counted under the engine lock.
  enum class Drop : uint8_t {
    kMalformed,        // not a whole, intact fabq datagram (dgram::decode())
    kUnauthenticated,  // with a secret: a datagram without authentication
    kUnexpectedAuth,   // without a secret: an authenticated datagram, which it cannot verify
    kBadMac,           // with a secret: the MAC is wrong (another secret, damaged, forwarded)
    kReplayed,         // with a secret: its number was seen, or is behind the window
    kStale,            // with a secret: a sender not tracked, no later than the guard's floor
    kCount,
  };
  // Under the engine lock (tests and statistics).
  uint64_t drops(Drop why) const { return drops_[static_cast<size_t>(why)]; }
  // A datagram waits for room (pending_): this socket and the memberships that reported one
  // meanwhile (park()) are out of the epoll set until resume() offers it again and it is taken.
  // Engine lock.
  bool paused() const { return paused_; }
  void park(McSocket* m);
  void unpark(McSocket* m);

 private:
  // The secret's state: what sends read (any thread) and what reads change (engine lock).
  struct Auth {
    Auth(const core::HmacSha256& secret, size_t senders) : key(secret), guard(senders) {}
    const dgram::DgramKey key;
    uint64_t epoch = 0;            // drawn at open, fixed afterwards
    std::atomic<uint64_t> seq{0};  // the last number sent
    dgram::ReplayGuard guard;      // engine lock
  };

  // Whether the datagram of n bytes in buf_ with header `h`, from `from` to `at`, may go to the
  // owner: always without a secret unless it is authenticated; with one, only if it is and its
  // MAC and number are good (then the guard notes it). Engine lock.
  bool authentic(const dgram::Header& h, const sockaddr_in& from, const sockaddr_in& at, size_t n);
  // Counts a drop; those a secret causes are logged, at most once a second. Engine lock.
  void dropped(Drop why, const sockaddr_in& from);

  Engine* const engine_;
  Owner* const owner_;
  const std::unique_ptr<Auth> auth_;  // null: no secret
  core::UniqueFd fd_;
  sockaddr_in name_{};
  // One datagram, and one byte more: a longer one is cut, and told apart (MSG_TRUNC).
  std::unique_ptr<unsigned char[]> buf_;
  // A datagram whose receive found the receive CQ full (Owner::take_retry()): it stays in buf_
  // and is offered again when the owner resumes the socket (the CQ has room) before anything
  // more is read, so the kernel keeps what comes after it; as a connection waits for the
  // application to read its CQ. Engine lock.
  bool pending_ = false;
  Incoming pending_in_;
  size_t pending_at_ = 0;  // where its payload starts in buf_ (after its header)
  bool paused_ = false;
  std::vector<McSocket*> parked_;
  // Offers the pending datagram (read now, or kept from before) to the owner: true when none is
  // pending any more (taken, or refused for another reason than a full CQ, and dropped).
  bool offer_pending();
  // Engine lock.
  uint64_t drops_[static_cast<size_t>(Drop::kCount)] = {};
  uint64_t unlogged_ = 0;  // drops a secret caused since the last line logged
  std::chrono::steady_clock::time_point next_log_{};
};

class McSocket final : public Pollable, public Membership {
 public:
  McSocket(Engine* engine, DgramSocket* parent);
  // Takes the engine lock; closing the socket leaves the group.
  ~McSocket() override;
  // 0 or the error Datagram::join() reports.
  int open(const sockaddr_in& group, in_addr iface);
  void on_ready(uint32_t events) override;
  int fd() const { return fd_.get(); }

 private:
  Engine* const engine_;
  DgramSocket* const parent_;
  core::UniqueFd fd_;
  sockaddr_in group_{};  // the address its datagrams were sent to
};

}  // namespace fabq::xport
