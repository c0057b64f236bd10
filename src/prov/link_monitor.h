// fabq provider: the link state of network interfaces, the real cause of port and device events
// (fi_fabq.h: PORT_ACTIVE, PORT_ERR, ADDR_CHANGE, GID_CHANGE, DEVICE_FATAL).
//
// query_link() reads one interface's state now. LinkMonitor watches interfaces through one
// rtnetlink socket (groups RTMGRP_LINK, RTMGRP_IPV4_IFADDR, RTMGRP_IPV6_IFADDR) on a thread of
// its own and reports every real change of a watched interface exactly once:
//   kPortActive  the interface became up and running (IFF_UP and IFF_RUNNING), or an interface
//                appeared under the watched name (created, or renamed to it) already running
//   kPortErr     it stopped being up and running (taken down, or carrier lost)
//   kAddrChange  its link-layer (MAC) address changed
//   kGidChange   an IPv4 or IPv6 address was added to it or removed from it (an update of an
//                address it already has, like the end of IPv6 duplicate address detection, is
//                not a change)
//   kDeviceGone  it was deleted, moved to another namespace or renamed away; from then on the
//                name is watched as not existing
// The kernel sends RTM_NEWLINK for many reasons; a report is made only when the state the
// monitor keeps for the interface differs. Deleting an interface reports what the kernel does
// first: kPortErr if it was running, kGidChange for each address it had, then kDeviceGone.
//
// Baseline: watch() reads the interface's link state and addresses after the socket has been
// subscribed, and the thread skips the messages about it that were already queued then (older
// than that reading, they would replay past states). So a change made before watch() is not
// reported and a change made after watch() returns is. An interface that appears under a
// watched name (created, or renamed to it) is read the same way: kPortActive if it is running,
// nothing for the addresses it comes with.
//
// Overflow: when the kernel drops messages (ENOBUFS), the monitor discards what is still queued,
// reads every watched interface again and reports what differs (each kind at most once).
//
// Threads: watch(), unwatch() and flush() may be called from any thread, concurrently. The
// callback runs on the monitor's thread, one report at a time, in order, with no monitor lock
// held; it must not call watch(), unwatch(), flush() or the destructor. A report decided just
// before unwatch() may still arrive after it returns. The destructor stops and joins the thread,
// so it must not run while the caller holds a lock the callback takes.
//
// Ownership: the monitor owns its socket, its wake-up eventfd and its thread; the callback is
// copied in and destroyed with the monitor.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/mutex.h"
#include "core/thread_annotations.h"
#include "core/unique_fd.h"

struct nlmsghdr;  // <linux/netlink.h>

namespace fabq::prov {

enum class LinkChange { kPortActive, kPortErr, kAddrChange, kGidChange, kDeviceGone };

struct LinkState {
  bool exists = false;
  bool active = false;  // IFF_UP && IFF_RUNNING
  unsigned ifindex = 0;
  std::array<unsigned char, 32> hwaddr{};  // IFLA_ADDRESS; all of it, up to MAX_ADDR_LEN
  size_t hwaddr_len = 0;
};

// The current state of interface `ifname` in the caller's network namespace (one RTM_GETLINK
// request on a socket of its own). exists is false for an unknown name, and when netlink cannot
// be used at all. Any thread.
LinkState query_link(const std::string& ifname);

class LinkMonitor {
 public:
  using Callback = std::function<void(const std::string& ifname, LinkChange change)>;

  // Opens and subscribes the socket and starts the thread. If the socket cannot be opened, ok()
  // is false, nothing is ever reported and flush() returns false; nothing is logged (the caller
  // decides).
  explicit LinkMonitor(Callback cb);
  ~LinkMonitor();
  LinkMonitor(const LinkMonitor&) = delete;
  LinkMonitor& operator=(const LinkMonitor&) = delete;

  bool ok() const { return ok_; }

  // Starts reporting changes of `ifname` (which need not exist yet), from its state now.
  // Counted: as many unwatch() as watch() calls end the watch; an unwatch() of a name not
  // watched does nothing. Does not wait for the thread.
  void watch(const std::string& ifname);
  void unwatch(const std::string& ifname);

  // Returns true once the thread has handled (and reported, callbacks returned) every message
  // the kernel had queued for the monitor when flush() was called; false after timeout_ms
  // (>= 0) without that, or when !ok(). For tests, and for callers that must know the monitor
  // has seen everything up to now.
  bool flush(int timeout_ms);

 private:
  struct Watched {
    int refs = 0;
    LinkState state;
    std::set<std::string> addrs;  // the interface's IPv4/IPv6 addresses, as parse_addr() keys
    uint32_t barrier = 0;         // messages are ignored until this request's answer arrives
  };
  using Changes = std::vector<std::pair<std::string, LinkChange>>;

  uint32_t send_barrier_locked() FABQ_REQUIRES(mu_);
  void read_baseline_locked(const std::string& name, Watched& w) FABQ_REQUIRES(mu_);
  void run();
  void receive_all(std::vector<char>& buf);
  void complete_barrier(uint32_t seq);
  void handle(const nlmsghdr* h, Changes* out) FABQ_REQUIRES(mu_);
  void gone(const std::string& name, Watched& w, Changes* out);
  void update(const std::string& name, Watched& w, const LinkState& now,
              std::set<std::string>* addrs, Changes* out);
  void resync();
  void report(const Changes& changes);

  const Callback cb_;
  core::UniqueFd sock_;
  core::UniqueFd wake_;  // eventfd: the destructor wakes the thread through it
  uint32_t portid_ = 0;  // the socket's netlink address: answers to its requests carry it
  bool ok_ = false;

  core::Mutex mu_;  // a leaf: never held while the callback runs
  core::CondVar flushed_;
  std::map<std::string, Watched> watched_ FABQ_GUARDED_BY(mu_);
  // Barrier sequence numbers flush() waits for.
  std::set<uint32_t> pending_flushes_ FABQ_GUARDED_BY(mu_);
  uint32_t next_seq_ FABQ_GUARDED_BY(mu_) = 1;

  std::atomic<bool> stop_{false};  // set by the destructor

  std::thread thread_;  // last: starts after everything it uses exists
};

}  // namespace fabq::prov
