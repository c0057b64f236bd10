// `fabq bench`'s RMA and atomic scenarios (rma.cc): two FI_EP_RDM endpoints of the provider
// under test, each in a thread of its own with its own fabric and domain, one reaching the
// other's memory region with fi_write, fi_inject_write, fi_read, fi_atomic and
// fi_fetch_atomic, as fabtests' fi_rma_pingpong, fi_rma_bw and fi_rdm_atomic do. The sides,
// their regions and how each mr_mode bit is met: rma_side.h. rma_scenarios() lists them;
// all_scenarios() puts them after the MSG scenarios.
#pragma once

#include <vector>

#include "tools/bench/bench.h"

namespace fabq::tools::bench {

// The RMA scenarios in report order: rma-write-lat/<size>, rma-write-bw/<size>,
// rma-read-bw/<size>, rma-atomic/sum, rma-fetch-atomic/sum.
const std::vector<Scenario>& rma_scenarios();

}  // namespace fabq::tools::bench
