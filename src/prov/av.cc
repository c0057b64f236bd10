#include "prov/av.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "prov/domain.h"
#include "prov/eq.h"
#include "prov/noop.h"
#include "prov/provider.h"

namespace fabq::prov {

namespace {

constexpr size_t kMaxReserve = 65536;
constexpr std::string_view kAddrStrPrefix = "fi_sockaddr_in://";

// What an AV stores and hands back: family, port and address; sin_zero cleared.
sockaddr_in normalized(const sockaddr_in& sa) {
  sockaddr_in n{};
  n.sin_family = AF_INET;
  n.sin_port = sa.sin_port;
  n.sin_addr = sa.sin_addr;
  return n;
}

sockaddr_in make_sin(uint32_t host_order_addr, uint16_t host_order_port) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(host_order_addr);
  sa.sin_port = htons(host_order_port);
  return sa;
}

// A decimal number made of digits only (no sign, no spaces), or nothing.
std::optional<uint64_t> parse_decimal(std::string_view s) {
  if (s.empty()) return std::nullopt;
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<uint16_t> parse_port(std::string_view s) {
  std::optional<uint64_t> v = parse_decimal(s);
  if (!v || *v > 65535) return std::nullopt;
  return static_cast<uint16_t>(*v);
}

// The positive error of a failed getaddrinfo.
int gai_error(int rc) {
  return rc == EAI_MEMORY ? FI_ENOMEM : FI_EADDRNOTAVAIL;
}

// One AF_INET address for node/service (either may be null, not both), or a positive error.
int resolve(const char* node, const char* service, sockaddr_in* out) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(node, service, &hints, &res);
  if (rc != 0) {
    FABQ_INFO(FI_LOG_AV, "%s:%s does not resolve: %s\n", node ? node : "", service ? service : "",
              gai_strerror(rc));
    return gai_error(rc);
  }
  int err = FI_EADDRNOTAVAIL;
  for (const addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    if (ai->ai_family == AF_INET && ai->ai_addrlen >= sizeof(sockaddr_in)) {
      std::memcpy(out, ai->ai_addr, sizeof(sockaddr_in));
      err = 0;
      break;
    }
  }
  freeaddrinfo(res);
  return err;
}

// "fi_sockaddr_in://A.B.C.D:PORT" (FI_ADDR_STR), or a positive error.
int parse_addr_str(std::string_view s, sockaddr_in* out) {
  if (!s.starts_with(kAddrStrPrefix)) return FI_EADDRNOTAVAIL;
  s.remove_prefix(kAddrStrPrefix.size());
  const size_t colon = s.rfind(':');
  if (colon == std::string_view::npos) return FI_EADDRNOTAVAIL;
  const std::string_view host = s.substr(0, colon);
  std::optional<uint16_t> port = parse_port(s.substr(colon + 1));
  char buf[INET_ADDRSTRLEN];
  if (!port || host.size() >= sizeof(buf)) return FI_EADDRNOTAVAIL;
  std::memcpy(buf, host.data(), host.size());
  buf[host.size()] = '\0';
  in_addr a{};
  if (inet_pton(AF_INET, buf, &a) != 1) return FI_EADDRNOTAVAIL;
  *out = make_sin(ntohl(a.s_addr), *port);
  return 0;
}

}  // namespace

struct AvOps {
  static Av* get(fid_av* f) { return Av::from_fid(f != nullptr ? &f->fid : nullptr); }

  static int close(fid* f) { return close_object(Av::from_fid(f)); }

  static int bind(fid* f, fid* bfid, uint64_t flags) {
    Av* av = Av::from_fid(f);
    if (av == nullptr) return -FI_EINVAL;
    Eq* eq = Eq::from_fid(bfid);
    if (eq == nullptr) return -FI_EINVAL;
    if (eq->parent() != av->domain_->parent()) {
      FABQ_WARN(FI_LOG_AV, "fi_av_bind: the EQ belongs to another fabric\n");
      return -FI_EINVAL;
    }
    if (flags != 0) return -FI_EBADFLAGS;
    std::unique_lock lock(av->mu_);
    if (av->eq_ != nullptr) return -FI_EBUSY;
    av->eq_ = eq;
    eq->hold();
    return 0;
  }

  static int insert(fid_av* f, const void* addr, size_t count, fi_addr_t* fi_addr, uint64_t flags,
                    void* context) {
    Av* av = get(f);
    if (av == nullptr) return -FI_EINVAL;
    Eq* eq = nullptr;
    if (int rc = av->check_insert(flags, context, &eq); rc != 0) return rc;
    if (count > INT_MAX || (addr == nullptr && count > 0)) return -FI_EINVAL;
    const auto* bytes = static_cast<const unsigned char*>(addr);
    auto source = [bytes](size_t i) {
      Av::Candidate c{};
      // The application's array need not be aligned for sockaddr_in: copy the bytes.
      std::memcpy(&c.sa, bytes + i * sizeof(sockaddr_in), sizeof(sockaddr_in));
      if (c.sa.sin_family != AF_INET) c.err = FI_EADDRNOTAVAIL;
      return c;
    };
    return av->insert_batch(count, source, fi_addr, flags, context, eq);
  }

  static int insertsvc(fid_av* f, const char* node, const char* service, fi_addr_t* fi_addr,
                       uint64_t flags, void* context) {
    Av* av = get(f);
    if (av == nullptr) return -FI_EINVAL;
    Eq* eq = nullptr;
    if (int rc = av->check_insert(flags, context, &eq); rc != 0) return rc;
    if (node == nullptr && service == nullptr) return -FI_EINVAL;
    Av::Candidate c{};
    if (node != nullptr && std::strstr(node, "://") != nullptr) {
      // FI_ADDR_STR: the whole address is in node.
      if (service != nullptr) return -FI_EINVAL;
      c.err = parse_addr_str(node, &c.sa);
    } else {
      c.err = resolve(node, service, &c.sa);
    }
    return av->insert_batch(
        1, [&c](size_t) { return c; }, fi_addr, flags, context, eq);
  }

  static int insertsym(fid_av* f, const char* node, size_t nodecnt, const char* service,
                       size_t svccnt, fi_addr_t* fi_addr, uint64_t flags, void* context) {
    Av* av = get(f);
    if (av == nullptr) return -FI_EINVAL;
    Eq* eq = nullptr;
    if (int rc = av->check_insert(flags, context, &eq); rc != 0) return rc;
    if (node == nullptr || service == nullptr) return -FI_EINVAL;
    std::vector<Av::Candidate> all;
    if (int rc = symmetric(node, nodecnt, service, svccnt, &all); rc != 0) return rc;
    auto source = [&all](size_t i) { return all[i]; };
    return av->insert_batch(all.size(), source, fi_addr, flags, context, eq);
  }

  // The nodecnt x svccnt candidates of fi_av_insertsym, node-major, in `out`; or -FI_EINVAL /
  // -FI_ENOMEM with nothing to insert.
  static int symmetric(const char* node, size_t nodecnt, const char* service, size_t svccnt,
                       std::vector<Av::Candidate>* out) {
    size_t total = 0;
    if (__builtin_mul_overflow(nodecnt, svccnt, &total) || total > INT_MAX) return -FI_EINVAL;
    if (total == 0) return 0;

    const std::optional<uint16_t> port = parse_port(service);
    if (svccnt > 1 && (!port || *port + (svccnt - 1) > 65535)) {
      FABQ_WARN(FI_LOG_AV, "fi_av_insertsym: %zu services from \"%s\" are not ports\n", svccnt,
                service);
      return -FI_EINVAL;
    }

    in_addr ip{};
    const bool numeric = inet_pton(AF_INET, node, &ip) == 1;
    const std::string_view name(node);
    size_t digits = 0;  // the numeric suffix of a host name
    uint64_t first = 0;
    if (numeric) {
      if (uint64_t{ntohl(ip.s_addr)} + (nodecnt - 1) > UINT32_MAX) return -FI_EINVAL;
    } else if (nodecnt > 1) {
      while (digits < name.size() && name[name.size() - 1 - digits] >= '0' &&
             name[name.size() - 1 - digits] <= '9') {
        ++digits;
      }
      std::optional<uint64_t> suffix = parse_decimal(name.substr(name.size() - digits));
      if (!suffix || *suffix > UINT64_MAX - (nodecnt - 1)) {
        FABQ_WARN(FI_LOG_AV, "fi_av_insertsym: host name \"%s\" has no numeric suffix\n", node);
        return -FI_EINVAL;
      }
      first = *suffix;
    }

    try {
      out->reserve(total);
      for (size_t n = 0; n < nodecnt; ++n) {
        if (numeric && port) {
          for (size_t s = 0; s < svccnt; ++s) {
            out->push_back({make_sin(ntohl(ip.s_addr) + static_cast<uint32_t>(n),
                                     static_cast<uint16_t>(*port + s)),
                            0});
          }
          continue;
        }
        std::string host;
        if (numeric) {
          char buf[INET_ADDRSTRLEN];
          const in_addr a{htonl(ntohl(ip.s_addr) + static_cast<uint32_t>(n))};
          host = inet_ntop(AF_INET, &a, buf, sizeof(buf));
        } else if (nodecnt == 1) {
          host = name;
        } else {
          char buf[32];
          std::snprintf(buf, sizeof(buf), "%0*llu", static_cast<int>(digits),
                        static_cast<unsigned long long>(first + n));
          host = std::string(name.substr(0, name.size() - digits)) + buf;
        }
        for (size_t s = 0; s < svccnt; ++s) {
          const std::string svc = svccnt == 1 ? std::string(service) : std::to_string(*port + s);
          Av::Candidate c{};
          c.err = resolve(host.c_str(), svc.c_str(), &c.sa);
          out->push_back(c);
        }
      }
    } catch (const std::exception&) {
      return -FI_ENOMEM;
    }
    return 0;
  }

  static int remove(fid_av* f, fi_addr_t* fi_addr, size_t count, uint64_t flags) {
    Av* av = get(f);
    if (av == nullptr) return -FI_EINVAL;
    if (flags != 0) return -FI_EBADFLAGS;
    if (count == 0) return 0;
    if (fi_addr == nullptr) return -FI_EINVAL;
    std::unique_lock lock(av->mu_);
    if (SharedAvTable* t = av->shared_.get(); t != nullptr) {
      if (t->read_only()) return -FI_EOPNOTSUPP;
      for (size_t i = 0; i < count; ++i) {
        if (!t->valid(fi_addr[i])) return -FI_EINVAL;
      }
      av->removed_.store(true, std::memory_order_release);
      for (size_t i = 0; i < count; ++i) t->remove(fi_addr[i]);
      return 0;
    }
    for (size_t i = 0; i < count; ++i) {
      const fi_addr_t a = fi_addr[i];
      if (a >= av->entries_.size() || !av->entries_[a].valid) return -FI_EINVAL;
    }
    for (size_t i = 0; i < count; ++i) {
      if (av->entries_[fi_addr[i]].valid) av->remove_locked(fi_addr[i]);
    }
    return 0;
  }

  static int lookup(fid_av* f, fi_addr_t fi_addr, void* addr, size_t* addrlen) {
    Av* av = get(f);
    if (av == nullptr || addrlen == nullptr || (addr == nullptr && *addrlen > 0)) {
      return -FI_EINVAL;
    }
    sockaddr_in sa;
    if (!av->lookup(fi_addr, &sa)) return -FI_EINVAL;
    if (*addrlen > 0) std::memcpy(addr, &sa, std::min(*addrlen, sizeof(sa)));
    *addrlen = sizeof(sa);
    return 0;
  }

  static const char* straddr(fid_av* f, const void* addr, char* buf, size_t* len) {
    if (get(f) == nullptr || addr == nullptr || len == nullptr) return nullptr;
    if (buf == nullptr && *len > 0) return nullptr;
    sockaddr_in sa;
    std::memcpy(&sa, addr, sizeof(sa));
    if (sa.sin_family != AF_INET) return nullptr;
    char ip[INET_ADDRSTRLEN];
    if (inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof(ip)) == nullptr) return nullptr;
    // snprintf truncates to *len and always terminates what it writes.
    const int size = std::snprintf(buf, *len, "%.*s%s:%u", static_cast<int>(kAddrStrPrefix.size()),
                                   kAddrStrPrefix.data(), ip, unsigned{ntohs(sa.sin_port)});
    if (size < 0) return nullptr;
    *len = static_cast<size_t>(size) + 1;
    return buf;
  }

  static inline fi_ops fi_ops_ = {
      .size = sizeof(fi_ops),
      .close = close,
      .bind = bind,
      .control = no_control,
      .ops_open = no_ops_open,
      .tostr = no_tostr,
      .ops_set = no_ops_set,
  };
  static inline fi_ops_av av_ops_ = {
      .size = sizeof(fi_ops_av),
      .insert = insert,
      .insertsvc = insertsvc,
      .insertsym = insertsym,
      .remove = remove,
      .lookup = lookup,
      .straddr = straddr,
      .av_set = enosys<fid_av*, fi_av_set_attr*, fid_av_set**, void*>,
  };
};

Av* Av::from_fid(const fid* f) {
  return Object::from<Av, fid_av>(f, FI_CLASS_AV, &AvOps::fi_ops_);
}

Av::Av(Domain* domain, fi_av_type type, uint64_t flags, void* context)
    : Object(FI_CLASS_AV, domain), domain_(domain), type_(type), flags_(flags) {
  init_fid(&box_.fid.fid, FI_CLASS_AV, context, &AvOps::fi_ops_);
  box_.fid.ops = &AvOps::av_ops_;
  box_.owner = this;
}

Av::~Av() {
  if (eq_ != nullptr) {
    // Its unread insert events name a fid that is about to go, and that a later AV may reuse.
    eq_->queue().purge(&box_.fid.fid);
    eq_->release();
  }
}

bool Av::reserve(size_t n) {
  try {
    entries_.reserve(n);
    first_.reserve(n);
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

uint64_t Av::key(const sockaddr_in& sa) {
  // Both in network order: only equality matters.
  return uint64_t{sa.sin_addr.s_addr} << 16 | sa.sin_port;
}

bool Av::lookup(fi_addr_t addr, sockaddr_in* out) const {
  if (shared_ != nullptr) return shared_->lookup(addr, out);
  std::shared_lock lock(mu_);
  if (addr >= entries_.size() || !entries_[addr].valid) return false;
  *out = entries_[addr].sa;
  return true;
}

fi_addr_t Av::reverse_lookup(const sockaddr_in& sa) const {
  if (sa.sin_family != AF_INET) return FI_ADDR_NOTAVAIL;
  if (shared_ != nullptr) {
    std::unique_lock lock(mu_);
    return const_cast<Av*>(this)->shared_find_locked(sa);
  }
  std::shared_lock lock(mu_);
  auto it = first_.find(key(sa));
  return it == first_.end() ? FI_ADDR_NOTAVAIL : it->second;
}

fi_addr_t Av::shared_find_locked(const sockaddr_in& sa) {
  auto hit = [&]() -> fi_addr_t {
    auto it = first_.find(key(sa));
    return it == first_.end() ? kNone : it->second;
  };
  fi_addr_t a = hit();
  if (a != kNone && !shared_->valid(a)) {
    // Removed since: the address may be in the table again, at an index seen earlier.
    first_.clear();
    scanned_ = 0;
    a = kNone;
  }
  if (a != kNone) return a;
  try {
    for (const size_t n = shared_->count(); scanned_ < n; ++scanned_) {
      sockaddr_in e;
      if (shared_->lookup(scanned_, &e)) {
        first_.try_emplace(key(e), scanned_);
      } else if (shared_->state(scanned_) == SharedAvTable::State::kEmpty) {
        break;  // claimed but not written yet: looked at again next time
      }
    }
  } catch (const std::exception&) {
    return kNone;  // no memory for the cache: not found, this time
  }
  return hit();
}

fi_addr_t Av::insert_locked(const sockaddr_in& sa) {
  const fi_addr_t index = entries_.size();
  try {
    entries_.push_back({normalized(sa), kNone, true});
    auto [it, fresh] = first_.try_emplace(key(sa), index);
    if (!fresh) {
      // A duplicate: the lowest valid index stays first; this one goes last in the chain.
      fi_addr_t tail = it->second;
      while (entries_[tail].next_dup != kNone) tail = entries_[tail].next_dup;
      entries_[tail].next_dup = index;
    }
  } catch (const std::exception&) {
    if (entries_.size() > index) entries_.pop_back();
    return kNone;
  }
  return index;
}

void Av::remove_locked(fi_addr_t addr) {
  removed_.store(true, std::memory_order_release);
  Entry& e = entries_[addr];
  e.valid = false;
  auto it = first_.find(key(e.sa));
  if (it->second == addr) {
    if (e.next_dup == kNone) {
      first_.erase(it);
    } else {
      it->second = e.next_dup;
    }
  } else {
    fi_addr_t prev = it->second;
    while (entries_[prev].next_dup != addr) prev = entries_[prev].next_dup;
    entries_[prev].next_dup = e.next_dup;
  }
  e.next_dup = kNone;
}

int Av::check_insert(uint64_t flags, void* context, Eq** eq) {
  *eq = nullptr;
  if ((flags & ~(FI_MORE | FI_SYNC_ERR)) != 0) return -FI_EBADFLAGS;
  if ((flags_ & FI_EVENT) == 0) {
    if ((flags & FI_SYNC_ERR) != 0 && context == nullptr) return -FI_EINVAL;
    return 0;
  }
  // FI_SYNC_ERR applies to synchronous insertions only (fi_av(3)).
  if ((flags & FI_SYNC_ERR) != 0) return -FI_EBADFLAGS;
  std::shared_lock lock(mu_);
  if (eq_ == nullptr) return -FI_ENOEQ;
  *eq = eq_;  // bound until the AV closes
  return 0;
}

template <class Source>
int Av::insert_batch(size_t count, Source source, fi_addr_t* fi_addr, uint64_t flags, void* context,
                     Eq* eq) {
  int* sync_err = (flags & FI_SYNC_ERR) != 0 ? static_cast<int*>(context) : nullptr;
  // FI_EVENT: an EQ without room for the call's FI_AV_COMPLETE fails the call with nothing
  // inserted instead of overrunning. Error entries (one per failed address) are written as they
  // come: an EQ with no room for them, or filled by another producer meanwhile, overruns.
  if (eq != nullptr) {
    if (eq->queue().overrun()) return -FI_EOVERRUN;
    if (eq->queue().pending() >= eq->queue().capacity()) return -FI_EAGAIN;
  }
  size_t inserted = 0;
  {
    // One lock for the whole call: its indices are consecutive, in the order of its addresses.
    std::unique_lock lock(mu_);
    for (size_t i = 0; i < count; ++i) {
      const Candidate c = source(i);
      int err = c.err;
      fi_addr_t a = kNone;
      if (err == 0 && shared_ == nullptr) {
        a = insert_locked(c.sa);
        if (a == kNone) err = FI_ENOMEM;
      } else if (err == 0 && shared_->read_only()) {
        // A read-only named AV inserts nothing: it finds the address another process inserted.
        a = shared_find_locked(normalized(c.sa));
        if (a == kNone) err = FI_EADDRNOTAVAIL;
      } else if (err == 0) {
        a = shared_->insert(c.sa);
        if (a == kNone) err = FI_ENOSPC;
      }
      if (fi_addr != nullptr) fi_addr[i] = a;
      if (sync_err != nullptr) sync_err[i] = err;
      if (err == 0) {
        ++inserted;
      } else if (eq != nullptr) {
        // The EQ's writers are lock-free and never block: safe under mu_.
        core::EqError e{.fid = &box_.fid.fid, .context = context, .data = i, .err = err};
        if (!eq->queue().write_error(e).ok()) {
          FABQ_WARN(FI_LOG_AV, "AV insert error entry not written: the EQ is overrun\n");
        }
      }
    }
  }
  if (eq == nullptr) return static_cast<int>(inserted);
  fi_eq_entry done{};
  done.fid = &box_.fid.fid;
  done.context = context;
  done.data = inserted;
  if (!eq->queue().write(FI_AV_COMPLETE, &done, sizeof(done)).ok()) {
    FABQ_WARN(FI_LOG_AV, "FI_AV_COMPLETE not written: the EQ is overrun\n");
  }
  return 0;
}

int open_av(fid_domain* domain_fid, fi_av_attr* attr, fid_av** out, void* context) {
  if (out != nullptr) *out = nullptr;
  Domain* domain = Domain::from_fid(domain_fid ? &domain_fid->fid : nullptr);
  if (domain == nullptr || attr == nullptr || out == nullptr) return -FI_EINVAL;
  if ((attr->flags & ~(FI_EVENT | FI_READ | FI_SYMMETRIC)) != 0) {
    FABQ_WARN(FI_LOG_AV, "fi_av_open: unsupported flags 0x%llx\n",
              (unsigned long long)(attr->flags & ~(FI_EVENT | FI_READ | FI_SYMMETRIC)));
    return -FI_EBADFLAGS;
  }
  if (attr->rx_ctx_bits < 0 || attr->rx_ctx_bits > Av::kMaxRxCtxBits) {
    FABQ_WARN(FI_LOG_AV, "fi_av_open: rx_ctx_bits %d: fabq takes 0 to %d\n", attr->rx_ctx_bits,
              Av::kMaxRxCtxBits);
    return -FI_EINVAL;
  }
  int type = raw_enum(attr->type);
  if (type != FI_AV_UNSPEC && type != FI_AV_MAP && type != FI_AV_TABLE) return -FI_EINVAL;
  const int domain_type = domain->av_type();
  if (type == FI_AV_UNSPEC) {
    type = domain_type == FI_AV_MAP ? FI_AV_MAP : FI_AV_TABLE;
  } else if (domain_type != FI_AV_UNSPEC && type != domain_type) {
    FABQ_WARN(FI_LOG_AV, "fi_av_open: the domain was opened for another av_type\n");
    return -FI_EINVAL;
  }
  // fi_av(3): "An AV opened for read-only access must be named".
  if (attr->name == nullptr && (attr->flags & FI_READ) != 0) return -FI_EINVAL;
  if (domain->failed()) return -FI_EOPBADSTATE;
  std::unique_ptr<SharedAvTable> table;
  if (attr->name != nullptr) {
    int err = 0;
    table = SharedAvTable::open(attr->name, (attr->flags & FI_READ) != 0, attr->count, &err);
    if (table == nullptr) {
      FABQ_WARN(FI_LOG_AV, "fi_av_open: named AV \"%s\": %s\n", attr->name, fi_strerror(-err));
      return err;
    }
  }
  Av* av = make_object<Av>(domain, static_cast<fi_av_type>(type), attr->flags, context);
  if (av == nullptr) return -FI_ENOMEM;
  if (table != nullptr) {
    // Every process that opens the name gets the same fi_addr_t for an entry: map_addr is the
    // table's array of them, in this process's mapping.
    attr->map_addr = table->map_addr();
    av->share(std::move(table));
  } else if (!av->reserve(std::min(attr->count, kMaxReserve))) {
    delete av;
    return -FI_ENOMEM;
  }
  av->set_rx_ctx_bits(attr->rx_ctx_bits);
  attr->type = static_cast<fi_av_type>(type);
  *out = av->handle();
  domain->note_operation();
  return 0;
}

}  // namespace fabq::prov
