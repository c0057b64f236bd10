// libFuzzer target for the grammar of FI_FABQ_FAULTS and of the ops API's inject() (core/
// fault_spec.h): any bytes as a spec. The parser never traps, reads nothing past the input, and
// either refuses the spec with a message and the rules untouched, or gives rules that keep the
// grammar's bounds and that format_fault_rule() writes as one line parse_fault_spec() reads back
// as the same rule. Any broken invariant traps.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "core/fault_spec.h"

namespace fabq::core {
namespace {

void check(bool ok, const char* why) {
  if (!ok) {
    std::fprintf(stderr, "fault_spec_fuzz: %s\n", why);
    __builtin_trap();
  }
}

bool same(const FaultRule& a, const FaultRule& b) {
  return a.what == b.what && a.event == b.event && a.err == b.err && a.prov_errno == b.prov_errno &&
         a.net == b.net && a.target.kind == b.target.kind && a.target.index == b.target.index &&
         a.target.name == b.target.name && a.when == b.when && a.ops == b.ops && a.ms == b.ms &&
         a.prob == b.prob && a.seed == b.seed && a.count == b.count;
}

// The bounds fault_spec.h gives each field of a rule it accepted.
void check_bounds(const FaultRule& r) {
  check(r.what != FaultWhat::kError || r.err > 0, "error= with an errno that is not positive");
  check(r.what != FaultWhat::kNet ||
            (r.net != NetFault::kNone && r.target.kind == FaultTargetKind::kEndpoint),
        "net= without a fault, or not on an endpoint");
  check(r.when != FaultWhen::kOps || r.ops >= 1, "ops= below 1");
  check(r.when != FaultWhen::kMs || r.ms >= 1, "ms= below 1");
  check(r.when != FaultWhen::kProb || (r.prob > 0 && r.prob <= 1), "prob= outside (0, 1]");
  check(
      r.target.kind != FaultTargetKind::kDomain || (r.target.index == -1 && r.target.name.empty()),
      "a domain target with an index or a name");
  check(r.target.name.size() <= 63, "a name longer than the grammar allows");
  check(r.target.name.empty() || r.target.index == -1, "a target with both an index and a name");
}

void run(const uint8_t* data, size_t size) {
  const std::string_view spec(reinterpret_cast<const char*>(data), size);
  std::vector<FaultRule> rules(1);
  rules[0].seed = 0x5eed;  // a marker: a refused spec leaves the rules alone
  std::string error;
  if (!parse_fault_spec(spec, &rules, &error)) {
    check(rules.size() == 1 && rules[0].seed == 0x5eed, "a refused spec changed the rules");
    check(!error.empty() && error.find('\n') == std::string::npos,
          "a refusal without a one-line message");
    return;
  }
  check(error.empty(), "an accepted spec set an error");
  for (const FaultRule& r : rules) {
    check_bounds(r);
    const std::string line = format_fault_rule(r);
    std::vector<FaultRule> again;
    std::string why;
    check(parse_fault_spec(line, &again, &why), "a formatted rule does not parse");
    check(again.size() == 1 && same(again[0], r), "a formatted rule reads back as another");
  }
}

}  // namespace
}  // namespace fabq::core

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fabq::core::run(data, size);
  return 0;
}
