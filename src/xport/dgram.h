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
#pragma once

#include <netinet/in.h>

#include <memory>
#include <vector>

#include "core/unique_fd.h"
#include "xport/engine.h"
#include "xport/transport.h"

namespace fabq::xport {

class McSocket;

class DgramSocket final : public Pollable, public Datagram {
 public:
  DgramSocket(Engine* engine, Owner* owner);
  // Takes the engine lock.
  ~DgramSocket() override;
  // Binds at `at` and joins the engine. 0, -FI_EADDRINUSE, -FI_EINVAL, -FI_EMFILE, -FI_EIO.
  int open(const sockaddr_in& at);

  sockaddr_in name() const override { return name_; }
  int send(const sockaddr_in& to, const DgramSend& s, core::NetFault fault) override;
  std::unique_ptr<Membership> join(const sockaddr_in& group, int* err) override;
  void resume() override { engine_->schedule(this); }

  // Under the engine lock.
  void on_ready(uint32_t events) override;
  // The busy socket of a ping-pong is read every round without epoll_wait() (Engine::hot_):
  // one datagram, if there is one.
  bool direct_read() const override { return true; }
  bool poll_read() override;
  // Reads one datagram of `fd` and hands it to the owner, if it is well-formed; first the one
  // kept pending, if any, and nothing more while it stays. Under the engine lock.
  void read_one(int fd, bool multicast);
  // A datagram waits for room (pending_): this socket and the memberships that reported one
  // meanwhile (park()) are out of the epoll set until resume() offers it again and it is taken.
  // Engine lock.
  bool paused() const { return paused_; }
  void park(McSocket* m);
  void unpark(McSocket* m);

 private:
  Engine* const engine_;
  Owner* const owner_;
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
  bool paused_ = false;
  std::vector<McSocket*> parked_;
  // Offers the pending datagram (read now, or kept from before) to the owner: true when none is
  // pending any more (taken, or refused for another reason than a full CQ, and dropped).
  bool offer_pending();
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
};

}  // namespace fabq::xport
