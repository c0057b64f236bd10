#include "tools/bench/msg_peer.h"

#include <rdma/fi_cm.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string_view>
#include <thread>

#include "tools/fabric_setup.h"

namespace fabq::tools::bench::msg {
namespace {

constexpr const char* kHost = "127.0.0.1";
constexpr char kConnectData[] = "fabq bench: connect";
constexpr char kAcceptData[] = "fabq bench: accept";
constexpr int kCmSliceMs = 20;  // a wait for a CM event looks at the stop flag this often

std::string event_name(uint32_t event) {
  switch (event) {
    case FI_CONNREQ:
      return "FI_CONNREQ";
    case FI_CONNECTED:
      return "FI_CONNECTED";
    case FI_SHUTDOWN:
      return "FI_SHUTDOWN";
    default:
      return "event " + std::to_string(event);
  }
}

Sample unsupported(std::string why) {
  Sample s;
  s.state = Sample::State::kUnsupported;
  s.why = std::move(why);
  return s;
}

}  // namespace

CpuPair pick_cpus() {
  CpuPair pair;
  CPU_ZERO(&pair.allowed);
  if (sched_getaffinity(0, sizeof(pair.allowed), &pair.allowed) != 0) return CpuPair{};
  for (int c = 0, n = 0; c < CPU_SETSIZE && n < 2; ++c) {
    if (CPU_ISSET(c, &pair.allowed)) pair.cpu[n++] = c;
  }
  if (pair.cpu[1] < 0) pair.cpu[0] = -1;
  return pair;
}

void pin_to(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  (void)sched_setaffinity(0, sizeof(set), &set);
}

std::string Peer::state() const {
  if (!tx_ || !rx_) return "";
  size_t sends_out = 0, recvs_out = 0;
  for (size_t i = 0; i < tx_->count(); ++i) sends_out += tx_->posted(i);
  for (size_t i = 0; i < rx_->count(); ++i) recvs_out += rx_->posted(i);
  return fmt(" (%llu sends and %llu receives completed; %zu sends and %zu receives posted)",
             static_cast<unsigned long long>(sends_done_),
             static_cast<unsigned long long>(recvs_done_), sends_out, recvs_out);
}

bool Peer::stopped() {
  if (out_.state == Sample::State::kOk) {
    out_.state = Sample::State::kFailed;
    out_.detail = state();
    out_.why = role_ + ": stopped, the other side failed" + out_.detail;
    out_.stopped = true;
  }
  return false;
}

bool Peer::wait_port(int* port) {
  const int64_t deadline = now_ns() + timeout_ns_;
  while ((*port = link_->port.load(std::memory_order_acquire)) == 0) {
    if (link_->stop.load(std::memory_order_relaxed)) return stopped();
    if (now_ns() > deadline) {
      return fail(fmt("the server did not listen within %d ms", link_->o.timeout_ms));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return true;
}

bool Peer::open(const char* service, uint64_t flags, const MsgFormat& f, size_t send_slots,
                size_t recv_slots) {
  setup::Hints hints;
  hints.provider = spec_.prov_name;
  // Both sides busy-poll their CQ, so that thread is the one to move data (fabq's default).
  // Left to FI_PROGRESS_AUTO, sockets moves it in threads of its own, which get a core from
  // the two pollers only at a preemption: 8 B one way took 16-27 ms instead of 20-30 us on a
  // two-core machine. tcp does the same either way.
  hints.data_progress = FI_PROGRESS_MANUAL;
  fi_info* info = nullptr;
  const setup::Result got = setup::getinfo(hints, kHost, service, flags, &info);
  info_.reset(info);
  if (got.rc == -FI_ENODATA) {
    return fail(got.call + ": no FI_EP_MSG endpoint of " + spec_.prov_name, true);
  }
  if (!got.ok()) return setup_fail(got.call, got.rc);
  if (info_->ep_attr->max_msg_size < f.size()) {
    return fail(fmt("max_msg_size %zu is below the message size %zu", info_->ep_attr->max_msg_size,
                    f.size()),
                true);
  }
  // Queue depths as asked, within what the provider offers.
  if (info_->tx_attr->size > 0) send_slots = std::min(send_slots, info_->tx_attr->size);
  if (info_->rx_attr->size > 0) recv_slots = std::min(recv_slots, info_->rx_attr->size);
  tx_.emplace(send_slots, f.size());
  rx_.emplace(recv_slots, f.size());
  if (!tx_->ok() || !rx_->ok()) return fail("no memory for the message buffers");
  for (size_t i = 0; i < send_slots; ++i) f.fill(tx_->buf(i));
  std::memset(rx_->buf(0), 0, recv_slots * f.size());
  pending_.resize(recv_slots);

  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  const setup::Result opened = setup::open_fabric(info_.get(), &fabric, &domain);
  fabric_.reset(fabric);
  domain_.reset(domain);
  if (!opened.ok()) return setup_fail(opened.call, opened.rc);
  fi_eq_attr eq_attr{};
  eq_attr.size = 64;
  eq_attr.wait_obj = FI_WAIT_UNSPEC;  // CM events are waited for in fi_eq_sread
  fid_eq* eq = nullptr;
  if (int r = fi_eq_open(fabric_.get(), &eq_attr, &eq, nullptr); r != 0) {
    return setup_fail("fi_eq_open", r);
  }
  eq_.reset(eq);
  fi_cq_attr cq_attr{};
  cq_attr.size = send_slots + recv_slots + 16;  // every operation's completion fits
  cq_attr.format = FI_CQ_FORMAT_MSG;
  cq_attr.wait_obj = FI_WAIT_NONE;  // both sides busy-poll
  fid_cq* cq = nullptr;
  if (int r = fi_cq_open(domain_.get(), &cq_attr, &cq, nullptr); r != 0) {
    return setup_fail("fi_cq_open", r);
  }
  cq_.reset(cq);
  return true;
}

bool Peer::listen() {
  fid_pep* pep = nullptr;
  uint16_t port = 0;
  const setup::Result r = setup::listen(fabric_.get(), info_.get(), eq_.get(), &pep, &port);
  pep_.reset(pep);
  if (!r.ok()) return setup_fail(r.call, r.rc);
  link_->port.store(port, std::memory_order_release);
  return true;
}

bool Peer::open_endpoint(fi_info* info) {
  fid_ep* ep = nullptr;
  const setup::Result r =
      setup::open_endpoint(domain_.get(), info, nullptr,
                           {{&eq_->fid, 0, "eq"}, {&cq_->fid, FI_TRANSMIT | FI_RECV, "cq"}}, &ep);
  ep_.reset(ep);
  if (!r.ok()) return setup_fail(r.call, r.rc);
  for (size_t i = 0; i < rx_->count(); ++i) {
    if (!post_recv(i)) return false;
  }
  return true;
}

bool Peer::accept() {
  std::string data;
  fi_info* req = nullptr;
  if (!wait_cm(FI_CONNREQ, &pep_->fid, &data, &req)) return false;
  const InfoPtr req_info(req);
  if (data != std::string_view(kConnectData, sizeof(kConnectData))) {
    return fail(fmt("FI_CONNREQ's data (%zu bytes) is not what fi_connect sent (%zu bytes)",
                    data.size(), sizeof(kConnectData)));
  }
  if (!open_endpoint(req_info.get())) return false;
  if (int r = fi_accept(ep_.get(), kAcceptData, sizeof(kAcceptData)); r != 0) {
    return setup_fail("fi_accept", r);
  }
  return wait_cm(FI_CONNECTED, &ep_->fid, &data, nullptr);
}

bool Peer::connect() {
  if (!open_endpoint(info_.get())) return false;
  if (int r = fi_connect(ep_.get(), info_->dest_addr, kConnectData, sizeof(kConnectData)); r != 0) {
    return setup_fail("fi_connect", r);
  }
  std::string data;
  if (!wait_cm(FI_CONNECTED, &ep_->fid, &data, nullptr)) return false;
  if (data != std::string_view(kAcceptData, sizeof(kAcceptData))) {
    return fail(fmt("FI_CONNECTED's data (%zu bytes) is not what fi_accept sent (%zu bytes)",
                    data.size(), sizeof(kAcceptData)));
  }
  return true;
}

bool Peer::wait_cm(uint32_t want, const fid* from, std::string* data, fi_info** info) {
  setup::CmEvent ev;
  uint32_t event = 0;
  const ssize_t r =
      setup::read_event(eq_.get(), &event, &ev, link_->o.timeout_ms, kCmSliceMs, 0,
                        [this] { return !link_->stop.load(std::memory_order_relaxed); });
  if (r == setup::kStopped) return stopped();
  if (r == -FI_ETIMEDOUT) {
    return fail("no " + event_name(want) + fmt(" within %d ms", link_->o.timeout_ms));
  }
  if (r == -FI_EAVAIL) return fail("waiting for " + event_name(want) + ": " + eq_error());
  if (r < 0) return fail(fi_error("fi_eq_sread", r));
  if (static_cast<size_t>(r) < setup::kCmEntrySize) {
    return fail(fmt("fi_eq_sread returned %zd bytes, less than a CM entry", r));
  }
  InfoPtr got_info(event == FI_CONNREQ ? ev.entry().info : nullptr);
  if (event != want) return fail(event_name(event) + " where " + event_name(want) + " was due");
  if (ev.entry().fid != from) return fail(event_name(event) + " names another fid");
  data->assign(ev.data(), static_cast<size_t>(r) - setup::kCmEntrySize);
  if (info != nullptr) *info = got_info.release();
  return true;
}

std::string Peer::eq_error() {
  fi_eq_err_entry err{};
  const ssize_t r = fi_eq_readerr(eq_.get(), &err, 0);
  if (r < 0) return fi_error("fi_eq_readerr", r);
  std::string s = std::string("EQ error ") + fi_strerror(err.err);
  if (err.prov_errno != 0) {
    s += fmt(" (prov_errno %d: %s)", err.prov_errno,
             fi_eq_strerror(eq_.get(), err.prov_errno, err.err_data, nullptr, 0));
  }
  return s;
}

std::string Peer::cq_error() {
  fi_cq_err_entry err{};
  const ssize_t r = fi_cq_readerr(cq_.get(), &err, 0);
  if (r < 0) return fi_error("fi_cq_readerr", r);
  const char* what = tx_->find(err.op_context) != kNone   ? "a send"
                     : rx_->find(err.op_context) != kNone ? "a receive"
                                                          : "an unknown operation";
  std::string s = std::string("completion error on ") + what + ": " + fi_strerror(err.err);
  if (err.prov_errno != 0) {
    s += fmt(" (prov_errno %d: %s)", err.prov_errno,
             fi_cq_strerror(cq_.get(), err.prov_errno, err.err_data, nullptr, 0));
  }
  return s;
}

Sample run_connected(const MsgFormat& f, const Provider& p, const Options& o, const Part& server,
                     const Part& client) {
  const ProviderSpec& spec = p.spec();
  if (spec.ep_type != FI_EP_MSG) {
    return unsupported("MSG scenarios need FI_EP_MSG endpoints; '" + spec.name + "' stands for " +
                       spec.note + (spec.name == "tcp" ? " (see tcp-core)" : ""));
  }
  Link link(o);
  Outcome s_out, c_out;
  const CpuPair cpus = pick_cpus();
  std::thread server_thread([&] {
    pin_to(cpus.cpu[0]);
    Peer s("server", &link, spec);
    (void)(s.start_server(f, server.send_slots, server.recv_slots) && server.body(s) && s.finish());
    s_out = s.outcome();
  });
  pin_to(cpus.cpu[1]);
  {
    Peer c("client", &link, spec);
    (void)(c.start_client(f, client.send_slots, client.recv_slots) && client.body(c) && c.finish());
    c_out = c.outcome();
  }
  server_thread.join();
  // This thread runs the provider's next scenarios: they get every allowed CPU back.
  if (cpus.cpu[1] >= 0) (void)sched_setaffinity(0, sizeof(cpus.allowed), &cpus.allowed);
  return sample_of(s_out, c_out);
}

Sample sample_of(const Outcome& s_out, const Outcome& c_out) {
  const Outcome* first = nullptr;
  for (const Outcome* x : {&s_out, &c_out}) {
    if (x->state == Sample::State::kOk) continue;
    if (first == nullptr || (first->stopped && !x->stopped) ||
        (first->stopped == x->stopped && x->order < first->order)) {
      first = x;
    }
  }
  Sample r;
  if (first != nullptr) {
    r.state = first->state;
    r.why = first->why;
    // Where the other side stood tells a stalled provider from a side that stopped polling.
    const Outcome* other = first == &s_out ? &c_out : &s_out;
    if (other->stopped && !other->detail.empty()) r.why += "; " + other->why;
  }
  return r;
}

}  // namespace fabq::tools::bench::msg
