#include "core/fault_spec.h"

#include <rdma/fi_errno.h>

#include <charconv>
#include <cstddef>
#include <iterator>
#include <string>
#include <system_error>
#include <utility>

#include "core/async_event.h"
#include "core/strerror.h"

namespace fabq::core {
namespace {

constexpr size_t kMaxName = 63;     // set_name(): at most 63 bytes
constexpr size_t kMaxQuoted = 200;  // rule text quoted in an error message

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_alpha(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
char lower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

bool iequal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

bool istarts_with(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && iequal(s.substr(0, prefix.size()), prefix);
}

bool all_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!is_digit(c)) return false;
  }
  return true;
}

// [A-Za-z_][A-Za-z0-9_.-]{0,62}
bool is_valid_name(std::string_view s) {
  if (s.empty() || s.size() > kMaxName) return false;
  if (!is_alpha(s[0]) && s[0] != '_') return false;
  for (char c : s.substr(1)) {
    if (!is_alpha(c) && !is_digit(c) && c != '_' && c != '.' && c != '-') return false;
  }
  return true;
}

// Error messages are one line: control characters (a newline inside a rule) become spaces.
std::string printable(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  }
  return out;
}

std::string quoted(std::string_view s) {
  if (s.size() > kMaxQuoted) return "'" + printable(s.substr(0, kMaxQuoted)) + "...'";
  return "'" + printable(s) + "'";
}

// The whole of `s` as an integer of type T.
template <class T>
std::errc to_integer(std::string_view s, T* out) {
  T v{};
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, v);
  if (ec != std::errc()) return ec;
  if (p != end) return std::errc::invalid_argument;
  *out = v;
  return std::errc();
}

// key=<non-negative integer>.
bool parse_u64(std::string_view key, std::string_view value, uint64_t* out, std::string* why) {
  const std::string kv = std::string(key) + "=" + std::string(value);
  if (value.front() == '-') {
    *why = kv + ": must not be negative";
    return false;
  }
  const std::errc ec = all_digits(value) ? to_integer(value, out) : std::errc::invalid_argument;
  if (ec == std::errc::result_out_of_range) {
    *why = kv + ": out of range (at most 18446744073709551615)";
    return false;
  }
  if (ec != std::errc()) {
    *why = kv + ": not a whole number";
    return false;
  }
  return true;
}

bool parse_prob(std::string_view value, double* out, std::string* why) {
  double p = 0;
  const char* end = value.data() + value.size();
  auto [ptr, ec] = std::from_chars(value.data(), end, p);
  if (ec == std::errc::result_out_of_range) {
    *why = "prob=" + std::string(value) + ": must be in (0, 1]";
    return false;
  }
  if (ec != std::errc() || ptr != end) {
    *why = "prob=" + std::string(value) + ": not a number";
    return false;
  }
  if (!(p > 0 && p <= 1)) {  // also rejects nan
    *why = "prob=" + std::string(value) + ": must be in (0, 1]";
    return false;
  }
  *out = p;
  return true;
}

// The positive fabric errno named `name` ("FI_EIO", "EIO", any case), or 0.
int errno_by_name(std::string_view name) {
  if (istarts_with(name, "FI_")) name.remove_prefix(3);
  if (name.empty()) return 0;
  for (int e = 1; e < FI_ERRNO_MAX; ++e) {
    const char* n = fi_errno_name(e);
    if (n == nullptr) continue;
    std::string_view sv(n);
    if (istarts_with(sv, "FI_")) sv.remove_prefix(3);
    if (iequal(sv, name)) return e;
  }
  // The one alias fi_errno_name() cannot report: it shares its value with EAGAIN.
  if (iequal(name, "EWOULDBLOCK")) return FI_EWOULDBLOCK;
  return 0;
}

// error=<err>[:<prov_errno>]
bool parse_error(std::string_view value, int* err, int* prov_errno, std::string* why) {
  const std::string kv = "error=" + std::string(value);
  const size_t colon = value.find(':');
  const std::string_view e = trim(value.substr(0, colon));
  int prov = 0;
  if (colon != std::string_view::npos) {
    const std::string_view p = trim(value.substr(colon + 1));
    if (p.empty()) {
      *why = kv + ": no provider errno after ':'";
      return false;
    }
    const std::errc ec = to_integer(p, &prov);
    if (ec == std::errc::result_out_of_range) {
      *why = kv + ": provider errno " + quoted(p) + " is out of range for an int";
      return false;
    }
    if (ec != std::errc()) {
      *why = kv + ": provider errno " + quoted(p) + " is not a whole number";
      return false;
    }
  }
  if (e.empty()) {
    *why = kv + ": no errno before ':'";
    return false;
  }
  int code = 0;
  if (is_digit(e.front()) || e.front() == '-' || e.front() == '+') {
    const std::errc ec = to_integer(e, &code);
    if (ec == std::errc::result_out_of_range) {
      *why = kv + ": errno " + quoted(e) + " is out of range for an int";
      return false;
    }
    if (ec != std::errc()) {
      *why = kv + ": errno " + quoted(e) + " is not a whole number";
      return false;
    }
    if (code <= 0) {
      *why = kv + ": the errno must be positive";
      return false;
    }
  } else {
    code = errno_by_name(e);
    if (code == 0) {
      *why = "unknown fabric errno " + quoted(e) +
             " (a name such as FI_EIO or EIO, or a positive number)";
      return false;
    }
  }
  *err = code;
  *prov_errno = prov;
  return true;
}

bool parse_target(std::string_view value, FaultTarget* out, std::string* why) {
  const std::string kv = "on=" + std::string(value);
  if (iequal(value, "domain")) {
    *out = FaultTarget{};
    return true;
  }
  const size_t colon = value.find(':');
  if (colon == std::string_view::npos) {
    *why = "unknown target " + quoted(value) +
           " (domain, ep:<i>, cq:<i>, srx:<i>, or ep:, cq:, srx: with a name)";
    return false;
  }
  const std::string_view kind = trim(value.substr(0, colon));
  const std::string_view rest = trim(value.substr(colon + 1));
  FaultTarget t;
  if (iequal(kind, "ep")) {
    t.kind = FaultTargetKind::kEndpoint;
  } else if (iequal(kind, "cq")) {
    t.kind = FaultTargetKind::kCq;
  } else if (iequal(kind, "srx")) {
    t.kind = FaultTargetKind::kSrx;
  } else if (iequal(kind, "domain")) {
    *why = kv + ": the domain takes no index or name (on=domain)";
    return false;
  } else {
    *why = kv + ": unknown object kind " + quoted(kind) + " (ep, cq or srx)";
    return false;
  }
  if (rest.empty()) {
    *why = kv + ": no index or name after ':'";
    return false;
  }
  if (all_digits(rest)) {
    if (to_integer(rest, &t.index) != std::errc()) {
      *why = kv + ": index out of range";
      return false;
    }
  } else if (is_valid_name(rest)) {
    t.name = std::string(rest);
  } else {
    *why = kv + ": " + quoted(rest) +
           " is neither an index (0, 1, ...) nor a name ([A-Za-z_][A-Za-z0-9_.-], at most 63 "
           "characters)";
    return false;
  }
  *out = std::move(t);
  return true;
}

const char* object_noun(AsyncObject o) {
  switch (o) {
    case AsyncObject::kEndpoint:
      return "an endpoint";
    case AsyncObject::kCq:
      return "a CQ";
    case AsyncObject::kSrx:
      return "an SRX";
    case AsyncObject::kPort:
      return "a port";
    case AsyncObject::kDevice:
      return "a device";
  }
  return "an unknown";
}

const char* target_noun(FaultTargetKind k) {
  switch (k) {
    case FaultTargetKind::kDomain:
      return "a domain";
    case FaultTargetKind::kEndpoint:
      return "an endpoint";
    case FaultTargetKind::kCq:
      return "a CQ";
    case FaultTargetKind::kSrx:
      return "an SRX";
  }
  return "an unknown";
}

const char* target_prefix(FaultTargetKind k) {
  switch (k) {
    case FaultTargetKind::kDomain:
      return "domain";
    case FaultTargetKind::kEndpoint:
      return "ep";
    case FaultTargetKind::kCq:
      return "cq";
    case FaultTargetKind::kSrx:
      return "srx";
  }
  return "domain";
}

FaultTargetKind target_for(AsyncObject o) {
  switch (o) {
    case AsyncObject::kEndpoint:
      return FaultTargetKind::kEndpoint;
    case AsyncObject::kCq:
      return FaultTargetKind::kCq;
    case AsyncObject::kSrx:
      return FaultTargetKind::kSrx;
    case AsyncObject::kPort:
    case AsyncObject::kDevice:
      break;
  }
  return FaultTargetKind::kDomain;
}

// "an endpoint" -> "endpoint"
std::string_view bare(const char* noun) {
  std::string_view s(noun);
  const size_t space = s.find(' ');
  return space == std::string_view::npos ? s : s.substr(space + 1);
}

enum Key {
  kEventKey,
  kErrorKey,
  kNetKey,
  kOnKey,
  kOpsKey,
  kMsKey,
  kProbKey,
  kSeedKey,
  kCountKey,
  kKeys
};
constexpr std::string_view kKeyNames[] = {"event", "error", "net",  "on",   "ops",
                                          "ms",    "prob",  "seed", "count"};

constexpr NetFault kNetFaults[] = {NetFault::kReject, NetFault::kTimeout, NetFault::kDrop,
                                   NetFault::kCorrupt};
static_assert(std::size(kKeyNames) == kKeys);

bool parse_rule(std::string_view text, FaultRule* out, std::string* why) {
  bool seen[kKeys] = {};
  std::string_view values[kKeys];
  std::string_view rest = text;
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view item = trim(rest.substr(0, comma));
    if (item.empty()) {
      *why = "empty key=value pair";
      return false;
    }
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      *why = quoted(item) + " is not key=value";
      return false;
    }
    const std::string_view key = trim(item.substr(0, eq));
    const std::string_view value = trim(item.substr(eq + 1));
    if (key.empty()) {
      *why = quoted(item) + " has no key";
      return false;
    }
    int k = 0;
    while (k < kKeys && !iequal(key, kKeyNames[k])) ++k;
    if (k == kKeys) {
      *why = "unknown key " + quoted(key) +
             " (keys: event, error, net, on, ops, ms, prob, seed, count)";
      return false;
    }
    if (seen[k]) {
      *why = "duplicate key '" + std::string(kKeyNames[k]) + "'";
      return false;
    }
    if (value.empty()) {
      *why = std::string(kKeyNames[k]) + "= has no value";
      return false;
    }
    seen[k] = true;
    values[k] = value;
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }

  FaultRule r;
  // What.
  const int whats = seen[kEventKey] + seen[kErrorKey] + seen[kNetKey];
  if (whats > 1) {
    *why = "event=, error= and net= are exclusive (a rule does one thing)";
    return false;
  }
  if (whats == 0) {
    *why = "no event=, error= or net= (a rule needs exactly one)";
    return false;
  }
  // When: at most one.
  int first_when = -1;
  for (int k : {kOpsKey, kMsKey, kProbKey}) {
    if (!seen[k]) continue;
    if (first_when >= 0) {
      *why = std::string(kKeyNames[first_when]) + "= and " + std::string(kKeyNames[k]) +
             "= are exclusive (at most one of ops=, ms=, prob=)";
      return false;
    }
    first_when = k;
  }

  if (seen[kOnKey] && !parse_target(values[kOnKey], &r.target, why)) return false;

  const AsyncKind* kind = nullptr;
  if (seen[kEventKey]) {
    r.what = FaultWhat::kEvent;
    kind = async_kind_by_name(values[kEventKey]);
    if (kind == nullptr) {
      *why = "unknown event kind " + quoted(values[kEventKey]) +
             " (ep_fatal, cq_err, port_err, ...: fi_fabq.h without FI_FABQ_EVENT_)";
      return false;
    }
    r.event = kind->type;
  } else if (seen[kErrorKey]) {
    r.what = FaultWhat::kError;
    if (!parse_error(values[kErrorKey], &r.err, &r.prov_errno, why)) return false;
  } else {
    r.what = FaultWhat::kNet;
    for (NetFault f : kNetFaults) {
      if (iequal(values[kNetKey], net_fault_name(f))) r.net = f;
    }
    if (r.net == NetFault::kNone) {
      *why = "unknown net fault " + quoted(values[kNetKey]) + " (reject, timeout, drop, corrupt)";
      return false;
    }
  }

  if (seen[kOpsKey]) {
    r.when = FaultWhen::kOps;
    if (!parse_u64("ops", values[kOpsKey], &r.ops, why)) return false;
    if (r.ops == 0) {
      *why = "ops=0: operations count from 1 (ops= must be at least 1)";
      return false;
    }
  } else if (seen[kMsKey]) {
    r.when = FaultWhen::kMs;
    if (!parse_u64("ms", values[kMsKey], &r.ms, why)) return false;
    if (r.ms == 0) {
      *why = "ms=0: the delay must be at least 1 ms (leave out ms= to fire at once)";
      return false;
    }
  } else if (seen[kProbKey]) {
    r.when = FaultWhen::kProb;
    if (!parse_prob(values[kProbKey], &r.prob, why)) return false;
  }
  if (seen[kSeedKey] && !parse_u64("seed", values[kSeedKey], &r.seed, why)) return false;
  if (seen[kCountKey] && !parse_u64("count", values[kCountKey], &r.count, why)) return false;

  // Does the target take it?
  if (kind != nullptr) {
    const FaultTargetKind want = target_for(kind->object);
    if (want != r.target.kind) {
      *why = std::string(kind->short_name) + " is " + object_noun(kind->object) + " event, not " +
             target_noun(r.target.kind) + " event";
      if (want == FaultTargetKind::kDomain) {
        *why += " (" + std::string(bare(object_noun(kind->object))) +
                " events need on=domain, the default)";
      } else if (r.target.kind == FaultTargetKind::kDomain) {
        *why += std::string(" (it needs on=") + target_prefix(want) + ":<index or name>)";
      }
      return false;
    }
  } else if (r.what == FaultWhat::kNet) {
    if (r.target.kind != FaultTargetKind::kEndpoint) {
      *why = std::string("net= applies to an endpoint's connection (on=ep:...), not ") +
             target_noun(r.target.kind);
      return false;
    }
  } else if (r.target.kind == FaultTargetKind::kSrx) {
    *why = std::string(
               "error= applies to an endpoint, a CQ or the domain (on=ep:..., on=cq:... "
               "or on=domain), not ") +
           target_noun(r.target.kind);
    return false;
  }
  *out = std::move(r);
  return true;
}

}  // namespace

const char* net_fault_name(NetFault f) {
  switch (f) {
    case NetFault::kNone:
      return "none";
    case NetFault::kReject:
      return "reject";
    case NetFault::kTimeout:
      return "timeout";
    case NetFault::kDrop:
      return "drop";
    case NetFault::kCorrupt:
      return "corrupt";
  }
  return "none";
}

bool parse_fault_spec(std::string_view spec, std::vector<FaultRule>* rules, std::string* error) {
  std::vector<FaultRule> parsed;
  int number = 0;
  std::string_view rest = spec;
  while (true) {
    const size_t semi = rest.find(';');
    const std::string_view text = trim(rest.substr(0, semi));
    if (!text.empty()) {
      ++number;
      FaultRule rule;
      std::string why;
      if (!parse_rule(text, &rule, &why)) {
        if (error != nullptr) {
          *error = "rule " + std::to_string(number) + " " + quoted(text) + ": " + printable(why);
        }
        return false;
      }
      parsed.push_back(std::move(rule));
    }
    if (semi == std::string_view::npos) break;
    rest.remove_prefix(semi + 1);
  }
  if (rules != nullptr) *rules = std::move(parsed);
  return true;
}

std::string format_fault_rule(const FaultRule& rule) {
  std::string out;
  if (rule.what == FaultWhat::kEvent) {
    const AsyncKind* kind = async_kind(rule.event);
    out = "event=";
    out += kind != nullptr ? std::string(kind->short_name) : std::to_string(rule.event);
  } else if (rule.what == FaultWhat::kNet) {
    out = "net=";
    out += net_fault_name(rule.net);
  } else {
    const char* name = fi_errno_name(rule.err);
    out = "error=";
    out += name != nullptr ? std::string(name) : std::to_string(rule.err);
    if (rule.prov_errno != 0) out += ":" + std::to_string(rule.prov_errno);
  }
  out += ",on=";
  out += target_prefix(rule.target.kind);
  if (rule.target.kind != FaultTargetKind::kDomain) {
    out += ":";
    out += !rule.target.name.empty() ? rule.target.name : std::to_string(rule.target.index);
  }
  switch (rule.when) {
    case FaultWhen::kNow:
      break;
    case FaultWhen::kOps:
      out += ",ops=" + std::to_string(rule.ops);
      break;
    case FaultWhen::kMs:
      out += ",ms=" + std::to_string(rule.ms);
      break;
    case FaultWhen::kProb: {
      char buf[64];
      auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), rule.prob);  // shortest round trip
      out += ",prob=";
      out += ec == std::errc() ? std::string(buf, end) : std::string("?");
      break;
    }
  }
  if (rule.when == FaultWhen::kProb || rule.seed != 1) out += ",seed=" + std::to_string(rule.seed);
  out += ",count=" + std::to_string(rule.count);
  return out;
}

FaultTrigger::FaultTrigger(const FaultRule& rule)
    : when_(rule.when), ops_(rule.ops), prob_(rule.prob), count_(rule.count), state_(rule.seed) {}

double FaultTrigger::draw() {
  // splitmix64 (Steele, Lea, Flood 2014), top 53 bits as a double in [0, 1).
  state_ += 0x9E3779B97F4A7C15ull;
  uint64_t z = state_;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

bool FaultTrigger::on_operation() {
  ++operations_;
  bool hit = false;
  switch (when_) {
    case FaultWhen::kOps:
      hit = ops_ != 0 && operations_ % ops_ == 0;
      break;
    case FaultWhen::kProb:
      hit = draw() < prob_;  // one draw per operation, exhausted or not
      break;
    case FaultWhen::kNow:
    case FaultWhen::kMs:
      return false;
  }
  if (!hit || exhausted()) return false;
  ++fired_;
  return true;
}

bool FaultTrigger::fire_once() {
  if (exhausted()) return false;
  ++fired_;
  return true;
}

}  // namespace fabq::core
