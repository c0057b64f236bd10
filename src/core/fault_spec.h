// fabq core: fault rules, the grammar of FI_FABQ_FAULTS and inject() (include/fabq/fi_fabq.h,
// FAULT INJECTION), and the per-object state that decides when a rule fires.
//
// A spec is rules separated by ';'; a rule is comma-separated key=value pairs:
//   what  (exactly one)  event=<kind>        a kind of async_event.h, by short name in any case,
//                                            with or without the FI_FABQ_EVENT_ prefix
//                        error=<err>[:<prov>] err: a fabric errno name (FI_EIO, EIO, any case)
//                                            or a positive number; prov: any int (default 0)
//                        net=<fault>         reject | timeout | drop | corrupt (NetFault), any
//                                            case; on=ep only
//   on=<target>          domain (default) | ep:<i> | cq:<i> | srx:<i> (i >= 0) |
//                        ep:<name> | cq:<name> | srx:<name> (name: [A-Za-z_][A-Za-z0-9_.-]{0,62});
//                        the object kind in any case
//   when (at most one)   ops=<n> (n >= 1) | ms=<t> (t >= 1) | prob=<p> (0 < p <= 1);
//                        none: at once (kNow)
//   seed=<s>             the generator seed for prob= (default 1; accepted with any when)
//   count=<c>            how many times the rule may fire (default 1; 0: no limit)
// Checks: an event's object kind must match the target (endpoint kinds on=ep, CQ kinds on=cq,
// SRX kinds on=srx, port and device kinds on=domain); error= needs on=ep, on=cq or on=domain
// (a memory registration fails); unknown and
// duplicate keys, values with trailing junk, negative or out-of-range numbers are errors.
// Whitespace around rules, keys and values is ignored, and so are empty rules.
//
// Firing (FaultTrigger): kOps fires on operations n, 2n, 3n, ... of the target; kProb draws
// once per operation from a splitmix64 generator seeded with `seed` and fires when the draw
// (uniform in [0, 1)) is below p; kNow and kMs fire by time, which the caller reports with
// fire_once(). Every firing counts against `count`; once it is reached the trigger is
// exhausted and never fires again. The same rule and the same sequence of operations always
// fire at the same operations.
//
// Threads: parse_fault_spec() and format_fault_rule() are pure (any thread). FaultTrigger is
// not thread safe: the caller serializes the calls on one trigger. No exceptions escape other
// than std::bad_alloc from the strings and vectors they build.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fabq::core {

enum class FaultTargetKind { kDomain, kEndpoint, kCq, kSrx };

// The object a rule applies to: the index-th object of `kind` opened in the domain (from 0),
// or the one named `name` with set_name(). For kDomain neither is set (index -1, name empty).
struct FaultTarget {
  FaultTargetKind kind = FaultTargetKind::kDomain;
  int64_t index = -1;
  std::string name;
};

enum class FaultWhat { kEvent, kError, kNet };

// What net= does to an endpoint's connection when the rule fires (the transport applies it).
enum class NetFault : uint8_t {
  kNone,
  kReject,   // its next fi_connect is refused (FI_ECONNREFUSED), as a peer's fi_reject would
  kTimeout,  // its next fi_connect gets no answer and times out (FI_ETIMEDOUT)
  kDrop,     // the next message it sends is lost on the way
  kCorrupt,  // the next message it sends arrives with a damaged header
};
const char* net_fault_name(NetFault f);
enum class FaultWhen { kNow, kOps, kMs, kProb };

struct FaultRule {
  FaultWhat what = FaultWhat::kEvent;
  uint32_t event = 0;              // FI_FABQ_EVENT_* for kEvent
  int err = 0;                     // positive fabric errno for kError
  int prov_errno = 0;              // for kError
  NetFault net = NetFault::kNone;  // for kNet
  FaultTarget target;
  FaultWhen when = FaultWhen::kNow;
  uint64_t ops = 0;  // kOps: fires on every ops-th operation (>= 1)
  uint64_t ms = 0;   // kMs: the delay and the period (>= 1)
  double prob = 0;   // kProb: 0 < p <= 1
  uint64_t seed = 1;
  uint64_t count = 1;  // 0: unlimited
};

// Parses `spec`. On error returns false, leaves *rules unchanged and sets *error (when not
// null) to a one-line message naming the offending rule (numbered from 1 among the
// non-empty rules) and why, e.g.
//   rule 2 'event=cq_err,on=ep:0': cq_err is a CQ event, not an endpoint event
// On success *rules is replaced by the rules in spec order and *error is left unchanged.
bool parse_fault_spec(std::string_view spec, std::vector<FaultRule>* rules, std::string* error);

// One line that parse_fault_spec() reads back as the same rule, e.g.
// "event=ep_fatal,on=ep:0,ops=3,count=1" or "error=FI_EIO:7,on=cq:0,prob=0.01,seed=9,count=0".
// on= and count= are always written; seed= with prob= or when it is not the default.
std::string format_fault_rule(const FaultRule& rule);

// The firing state of one rule on one object.
class FaultTrigger {
 public:
  explicit FaultTrigger(const FaultRule& rule);

  // Counts one operation of the target; true if the rule fires on it (kOps: on every ops-th
  // operation; kProb: draw < prob). Never true for kNow/kMs or once exhausted. Each firing
  // counts against `count`.
  bool on_operation();
  // For kNow / kMs rules, which fire by time, not by operation: records one firing; false
  // (and nothing recorded) if exhausted. Works the same for any `when`.
  bool fire_once();
  bool exhausted() const { return count_ != 0 && fired_ >= count_; }
  // Operations counted by on_operation().
  uint64_t operations() const { return operations_; }
  // Firings so far.
  uint64_t fired() const { return fired_; }

 private:
  double draw();

  FaultWhen when_;
  uint64_t ops_;
  double prob_;
  uint64_t count_;
  uint64_t state_;  // splitmix64
  uint64_t operations_ = 0;
  uint64_t fired_ = 0;
};

}  // namespace fabq::core
