#include "support/side.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>

#include "support/peer.h"

namespace fabq::testing {

Options rdm_options(const char* auth_key) {
  Options o;
  o.type = FI_EP_RDM;
  o.caps = FI_TAGGED | FI_MSG | FI_SOURCE;
  o.cq_format = FI_CQ_FORMAT_TAGGED;
  o.cq_size = 1024;
  o.one_cq = true;
  o.auth_key = auth_key;
  return o;
}

std::string cq_str(const Completion& c) {
  if (c.rc == 1) {
    return "completion{flags=0x" + std::to_string(c.entry.flags) +
           " len=" + std::to_string(c.entry.len) + "}";
  }
  if (c.rc == -FI_EAVAIL) {
    return "error completion{err=" + std::to_string(c.err.err) + " (" + fi_strerror(c.err.err) +
           ") olen=" + std::to_string(c.err.olen) + "}";
  }
  return std::string("no completion: ") + fi_strerror(static_cast<int>(-c.rc));
}

std::string addr_str(const sockaddr_in& a) {
  char ip[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &a.sin_addr, ip, sizeof(ip));
  return std::string(ip) + ":" + std::to_string(ntohs(a.sin_port));
}

bool same_addr(const sockaddr_in& a, const sockaddr_in& b) {
  return a.sin_family == b.sin_family && a.sin_port == b.sin_port &&
         a.sin_addr.s_addr == b.sin_addr.s_addr;
}

std::string pattern(size_t len, unsigned seed) {
  std::string s(len, '\0');
  for (size_t i = 0; i < len; ++i) s[i] = static_cast<char>((i * 131 + seed * 7 + 1) & 0xff);
  return s;
}

ssize_t wait_cq(fid_cq* cq, fi_cq_tagged_entry* entry, fi_cq_err_entry* err, int timeout_ms) {
  const ssize_t n = fi_cq_sread(cq, entry, 1, nullptr, timeout_ms);
  if (n == -FI_EAVAIL && err != nullptr) {
    EXPECT_EQ(fi_cq_readerr(cq, err, 0), 1);
  }
  return n;
}

// ---------------------------------------------------------------------------------------------

Side::Side(Options opts, Side* domain_of) : opts_(opts), domain_of_(domain_of) {
  hints_.provider = opts_.provider != nullptr ? opts_.provider : provider();
  hints_.type = opts_.type;
  hints_.caps = opts_.caps;
  hints_.data_progress = opts_.data_progress;
  if (opts_.auth_key != nullptr) hints_.auth_key = opts_.auth_key;
}

Side::~Side() {
  close_all();
}

int Side::getinfo(const char* node, const char* service, uint64_t flags, fi_info** out) const {
  return setup::getinfo(hints_, node, service, flags, out).rc;
}

bool Side::check(int rc, const char* what) {
  if (rc == 0) return true;
  ADD_FAILURE() << what << ": " << fi_strerror(-rc) << " (provider " << hints_.provider << ")";
  return false;
}

bool Side::check(const setup::Result& r) {
  return check(r.rc, r.call.c_str());
}

int Side::close_fid(fid_t* f) {
  if (*f == nullptr) return 0;
  const int rc = fi_close(*f);
  EXPECT_EQ(rc, 0) << "fi_close: " << fi_strerror(-rc);
  *f = nullptr;
  return rc;
}

// fi_getinfo, then the fabric and domain (or the other side's), the EQ (FI_EP_MSG), the CQs
// and counters.
bool Side::start(const char* node, const char* service, uint64_t flags) {
  if (info_ != nullptr) {
    ADD_FAILURE() << "this side is open already";
    return false;
  }
  if (!select_shm(opts_.shm)) return false;
  if (!check(setup::getinfo(hints_, node, service, flags, &info_))) return false;
  if (domain_of_ != nullptr) {
    if (domain_of_->domain_ == nullptr) {
      ADD_FAILURE() << "the side whose domain this one shares has not opened it";
      return false;
    }
    fabric_ = domain_of_->fabric_;
    domain_ = domain_of_->domain_;
  } else if (!check(setup::open_fabric(info_, &fabric_, &domain_))) {
    return false;
  }
  if (opts_.type == FI_EP_MSG) {
    fi_eq_attr eq_attr{.size = 64, .wait_obj = FI_WAIT_UNSPEC};
    if (!check(fi_eq_open(fabric_, &eq_attr, &eq_, nullptr), "fi_eq_open")) return false;
  }
  return open_queues();
}

// The CQs and counters, opened once: a later endpoint (after close_ep) shares them.
bool Side::open_queues() {
  fi_cq_attr cq_attr{.size = opts_.cq_size, .format = opts_.cq_format, .wait_obj = opts_.cq_wait};
  if (!check(fi_cq_open(domain_, &cq_attr, &tx_cq_, nullptr), "fi_cq_open")) return false;
  if (opts_.one_cq) {
    rx_cq_ = tx_cq_;
  } else if (!check(fi_cq_open(domain_, &cq_attr, &rx_cq_, nullptr), "fi_cq_open")) {
    return false;
  }
  if (opts_.counters) {
    fi_cntr_attr cntr_attr{.events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_UNSPEC};
    if (!check(fi_cntr_open(domain_, &cntr_attr, &tx_cntr_, nullptr), "fi_cntr_open") ||
        !check(fi_cntr_open(domain_, &cntr_attr, &rx_cntr_, nullptr), "fi_cntr_open")) {
      return false;
    }
  }
  return true;
}

bool Side::bind_and_enable(fi_info* info) {
  const bool one = tx_cq_ == rx_cq_;
  return check(setup::open_endpoint(
      domain_, info, &ep_ctx_,
      {{eq_ != nullptr ? &eq_->fid : nullptr, 0, "eq"},
       {av_ != nullptr ? &av_->fid : nullptr, 0, "av"},
       {&tx_cq_->fid, one ? opts_.tx_cq_flags | opts_.rx_cq_flags : opts_.tx_cq_flags,
        one ? "cq" : "tx cq"},
       {one ? nullptr : &rx_cq_->fid, opts_.rx_cq_flags, "rx cq"},
       {tx_cntr_ != nullptr ? &tx_cntr_->fid : nullptr, FI_SEND, "send cntr"},
       {rx_cntr_ != nullptr ? &rx_cntr_->fid : nullptr, FI_RECV, "recv cntr"}},
      &ep_));
}

uint16_t Side::listen() {
  if (!start("127.0.0.1", "0", FI_SOURCE)) return 0;
  uint16_t port = 0;
  if (!check(setup::listen(fabric_, info_, eq_, &pep_, &port))) return 0;
  return port;
}

fi_info* Side::wait_connreq(std::string* data, int timeout_ms) {
  uint32_t event = 0;
  CmEvent ev{};
  const ssize_t n = read_event(&event, &ev, timeout_ms);
  if (n < 0) return nullptr;
  if (event != FI_CONNREQ) {
    ADD_FAILURE() << "expected FI_CONNREQ, got event " << event;
    return nullptr;
  }
  if (data != nullptr) data->assign(ev.data(), n - kCmEntrySize);
  return ev.entry().info;
}

bool Side::open_endpoint(fi_info* info, bool free_info) {
  if (tx_cq_ == nullptr || rx_cq_ == nullptr) {
    ADD_FAILURE() << "open_endpoint before listen, open_active or open";
    if (free_info && info != info_) fi_freeinfo(info);
    return false;
  }
  const bool ok = bind_and_enable(info);
  if (free_info && info != info_) fi_freeinfo(info);
  return ok;
}

bool Side::accept(const void* data, size_t len) {
  if (!check(fi_accept(ep_, data, len), "fi_accept")) return false;
  return wait_connected();
}

bool Side::serve(Link& link, std::string* connect_data, const std::string& accept_data) {
  const uint16_t port = listen();
  if (port == 0 || !link.put_u64(port)) return false;
  fi_info* req = wait_connreq(connect_data);
  if (req == nullptr || !open_endpoint(req)) return false;
  return accept(accept_data.data(), accept_data.size());
}

int Side::close_pep() {
  return close_fid(reinterpret_cast<fid_t*>(&pep_));
}

bool Side::open_active(uint16_t port) {
  const std::string service = std::to_string(port);
  return start("127.0.0.1", service.c_str(), 0) && open_endpoint(info_);
}

int Side::connect(const void* data, size_t len) {
  return fi_connect(ep_, info_->dest_addr, data, len);
}

bool Side::dial(Link& link, const std::string& connect_data, std::string* accept_data) {
  uint64_t port = 0;
  if (!link.get_u64(&port) || !open_active(static_cast<uint16_t>(port))) return false;
  if (!check(connect(connect_data.data(), connect_data.size()), "fi_connect")) return false;
  return wait_connected(accept_data);
}

bool Side::open() {
  if (!start("127.0.0.1", "0", FI_SOURCE)) return false;
  fi_av_attr av_attr{};
  av_attr.type = FI_AV_TABLE;
  if (!check(fi_av_open(domain_, &av_attr, &av_, nullptr), "fi_av_open") || !open_endpoint(info_)) {
    return false;
  }
  size_t len = sizeof(address_);
  return check(fi_getname(&ep_->fid, &address_, &len), "fi_getname");
}

fi_addr_t Side::insert(const sockaddr_in& a) {
  fi_addr_t addr = FI_ADDR_NOTAVAIL;
  EXPECT_EQ(fi_av_insert(av_, &a, 1, &addr, 0, nullptr), 1);
  return addr;
}

bool Side::tell(Link& link) {
  return link.put(&address_, sizeof(address_));
}

fi_addr_t Side::learn(Link& link) {
  sockaddr_in a{};
  if (!link.get(&a, sizeof(a))) return FI_ADDR_NOTAVAIL;
  return insert(a);
}

// ---- events

ssize_t Side::read_event(uint32_t* event, CmEvent* ev, int timeout_ms, CmError* err, uint64_t flags,
                         bool quiet) {
  const int ms = bound(timeout_ms);
  const auto t0 = Clock::now();
  const ssize_t n = setup::read_event(eq_, event, ev, ms, 20, flags, [this] {
    progress_cqs();
    idle();
    return true;
  });
  if (n >= 0) return n;
  if (n == -FI_EAVAIL) {
    CmError local;
    CmError* e = err != nullptr ? err : &local;
    read_eq_error(e);
    if (err == nullptr) {
      ADD_FAILURE() << "EQ error entry: err " << e->entry.err << " (" << fi_strerror(e->entry.err)
                    << "), prov_errno " << e->entry.prov_errno;
    }
    return -FI_EAVAIL;
  }
  if (!quiet) {
    ADD_FAILURE() << "fi_eq_sread: " << fi_strerror(static_cast<int>(-n)) << " after "
                  << ms_since(t0) << " ms";
  }
  return n == -FI_ETIMEDOUT ? -FI_EAGAIN : n;
}

ssize_t Side::read_eq_error(CmError* e) {
  e->entry = {};
  e->entry.err_data = e->data;
  e->entry.err_data_size = sizeof(e->data);
  const ssize_t rc = fi_eq_readerr(eq_, &e->entry, 0);
  EXPECT_GT(rc, 0) << "fi_eq_readerr: " << fi_strerror(static_cast<int>(-rc));
  return rc;
}

bool Side::wait_connected(std::string* data, int timeout_ms) {
  uint32_t event = 0;
  CmEvent ev{};
  const ssize_t n = read_event(&event, &ev, timeout_ms);
  if (n < 0) return false;
  if (event != FI_CONNECTED) {
    ADD_FAILURE() << "expected FI_CONNECTED, got event " << event;
    return false;
  }
  EXPECT_EQ(ev.entry().fid, &ep_->fid) << "FI_CONNECTED names another fid";
  if (data != nullptr) data->assign(ev.data(), n - kCmEntrySize);
  return true;
}

// ---- completions

bool Side::read_one(fid_cq* cq, Completion* c) {
  const ssize_t n = opts_.caps & FI_SOURCE ? fi_cq_readfrom(cq, &c->entry, 1, &c->src)
                                           : fi_cq_read(cq, &c->entry, 1);
  if (n == 1) {
    c->rc = 1;
    return true;
  }
  if (n == -FI_EAVAIL) {
    c->rc = read_cq_error(cq, &c->err);
    return true;
  }
  return false;
}

Completion Side::next(fid_cq* cq, int timeout_ms) {
  auto& kept = kept_[cq];
  if (!kept.empty()) {
    Completion c = kept.front();
    kept.pop_front();
    return c;
  }
  const int ms = bound(timeout_ms);
  Completion c;
  const auto t0 = Clock::now();
  for (;;) {
    const int left = std::max(0, ms - ms_since(t0));
    // Two sides of one process take turns: the other one is read between short waits.
    const int slice = also_ ? std::min(left, 20) : left;
    const ssize_t n = opts_.caps & FI_SOURCE
                          ? fi_cq_sreadfrom(cq, &c.entry, 1, &c.src, nullptr, slice)
                          : fi_cq_sread(cq, &c.entry, 1, nullptr, slice);
    if (n == 1) {
      c.rc = 1;
      return c;
    }
    if (n == -FI_EAVAIL) {
      c.rc = read_cq_error(cq, &c.err);
      return c;
    }
    if ((n == -FI_EAGAIN || n == -FI_EINTR || n == -FI_ETIMEDOUT) && ms_since(t0) < ms) {
      idle();
      continue;
    }
    c.rc = (n == -FI_EAGAIN || n == -FI_ETIMEDOUT) ? -FI_ETIMEDOUT : n;
    return c;
  }
}

Completion Side::next_for(const void* ctx, int timeout_ms) {
  const int ms = bound(timeout_ms);
  const auto t0 = Clock::now();
  for (;;) {
    for (fid_cq* cq : cqs()) {
      if (cq == nullptr) continue;
      auto& kept = kept_[cq];
      for (auto it = kept.begin(); it != kept.end(); ++it) {
        if (it->context() == ctx) {
          Completion c = *it;
          kept.erase(it);
          return c;
        }
      }
    }
    if (ms_since(t0) > ms) return Completion{};
    progress();
  }
}

ssize_t Side::read_cq_error(fid_cq* cq, fi_cq_err_entry* err) {
  *err = {};
  const ssize_t rc = fi_cq_readerr(cq, err, 0);
  EXPECT_EQ(rc, 1) << "fi_cq_readerr: " << fi_strerror(static_cast<int>(-rc));
  return rc == 1 ? -FI_EAVAIL : rc;
}

bool Side::quiet_for(fid_cq* cq, int ms) {
  if (!kept_[cq].empty()) return false;
  Completion c = next(cq, ms);
  if (c.rc == -FI_ETIMEDOUT) return true;
  kept_[cq].push_back(c);
  return false;
}

void Side::progress() {
  progress_cqs();
  for (fid_cntr* cntr : {tx_cntr_, rx_cntr_}) {
    if (cntr != nullptr) (void)fi_cntr_read(cntr);
  }
  if (eq_ != nullptr) {
    uint32_t event;
    CmEvent ev;
    (void)fi_eq_read(eq_, &event, ev.bytes, sizeof(ev.bytes), FI_PEEK);
  }
  idle();
}

void Side::progress_cqs() {
  bool any = false;
  for (fid_cq* cq : cqs()) {
    Completion c;
    if (cq == nullptr || !read_one(cq, &c)) continue;
    kept_[cq].push_back(c);
    any = true;
  }
  if (!any) usleep(50);
}

void Side::idle() {
  if (also_) also_();
}

ssize_t Side::retry(const std::function<ssize_t()>& op, int timeout_ms) {
  const int ms = bound(timeout_ms);
  const auto t0 = Clock::now();
  ssize_t rc;
  while ((rc = op()) == -FI_EAGAIN && ms_since(t0) < ms) progress();
  return rc;
}

ssize_t Side::send(const void* buf, size_t len, void* ctx) {
  return retry([&] { return fi_send(ep_, buf, len, nullptr, FI_ADDR_UNSPEC, ctx); });
}

ssize_t Side::recv(void* buf, size_t len, void* ctx) {
  return retry([&] { return fi_recv(ep_, buf, len, nullptr, FI_ADDR_UNSPEC, ctx); });
}

ssize_t Side::tsend(const void* buf, size_t len, fi_addr_t to, uint64_t tag, void* ctx) {
  return retry([&] { return fi_tsend(ep_, buf, len, nullptr, to, tag, ctx); });
}

ssize_t Side::trecv(void* buf, size_t len, uint64_t tag, void* ctx) {
  return retry([&] { return fi_trecv(ep_, buf, len, nullptr, FI_ADDR_UNSPEC, tag, 0, ctx); });
}

bool Side::await(Link& link, char step, int timeout_ms) {
  const int ms = bound(timeout_ms);
  const auto t0 = Clock::now();
  while (!link.readable(1)) {
    if (ms_since(t0) > ms) {
      ADD_FAILURE() << "the peer did not reach step '" << step << "' within " << ms << " ms";
      return false;
    }
    progress();
  }
  return link.wait(step, 0);
}

// ---- names

sockaddr_in Side::name(fid_t fid) {
  sockaddr_in a{};
  size_t len = sizeof(a);
  const int rc = fi_getname(fid, &a, &len);
  EXPECT_EQ(rc, 0) << "fi_getname: " << fi_strerror(-rc);
  return a;
}

sockaddr_in Side::peer_name() {
  sockaddr_in a{};
  size_t len = sizeof(a);
  const int rc = fi_getpeer(ep_, &a, &len);
  EXPECT_EQ(rc, 0) << "fi_getpeer: " << fi_strerror(-rc);
  return a;
}

int Side::close_ep() {
  return close_fid(reinterpret_cast<fid_t*>(&ep_));
}

void Side::close_all() {
  close_fid(reinterpret_cast<fid_t*>(&ep_));
  close_fid(reinterpret_cast<fid_t*>(&pep_));
  if (tx_cq_ == rx_cq_) tx_cq_ = nullptr;  // one CQ for both
  close_fid(reinterpret_cast<fid_t*>(&tx_cq_));
  close_fid(reinterpret_cast<fid_t*>(&rx_cq_));
  close_fid(reinterpret_cast<fid_t*>(&tx_cntr_));
  close_fid(reinterpret_cast<fid_t*>(&rx_cntr_));
  close_fid(reinterpret_cast<fid_t*>(&av_));
  if (domain_of_ != nullptr) {
    domain_ = nullptr;  // the other side's
    fabric_ = nullptr;
  }
  close_fid(reinterpret_cast<fid_t*>(&domain_));
  close_fid(reinterpret_cast<fid_t*>(&eq_));
  close_fid(reinterpret_cast<fid_t*>(&fabric_));
  fi_freeinfo(info_);
  info_ = nullptr;
  kept_.clear();
}

}  // namespace fabq::testing
