// `fabq bench`'s RDM message, RMA and atomic scenarios (rma.cc): two FI_EP_RDM endpoints of the
// provider under test, each with its own fabric and domain, in a process of its own (two
// threads of one process with Options::rma_threads), exchanging messages with fi_send,
// fi_inject and fi_recv as fabtests' fi_rdm_pingpong and fi_msg_bw -e rdm do, or one reaching
// the other's memory region with fi_write, fi_inject_write, fi_read, fi_atomic and
// fi_fetch_atomic, as fi_rma_pingpong, fi_rma_bw and fi_rdm_atomic do. The sides, their regions and
// how each mr_mode bit is met: rma_side.h. rma_scenarios() lists them; all_scenarios() puts them
// after the MSG scenarios.
#pragma once

#include <memory>
#include <vector>

#include "tools/bench/bench.h"

namespace fabq::tools::bench {

// The two-process scenarios in report order: rdm-pingpong/<size>, rdm-bw/<size>,
// rma-write-lat/<size>, rma-write-bw/<size>, rma-read-bw/<size>, rma-atomic/sum,
// rma-fetch-atomic/sum, and on FI_EP_DGRAM endpoints dgram-pingpong/<size> and
// dgram-rate/<size>.
const std::vector<Scenario>& rma_scenarios();

namespace rma {

struct Mailbox;  // rma_side.cc

// Whether `s` is one of rma_scenarios() (or a copy of one).
bool is_rma(const Scenario& s);

// The process that plays the server side of the RMA scenarios (rma_side.cc), for the
// provider's child process (isolate.cc), which plays the client side. What is measured is one
// side reaching another process's memory, which a provider may do otherwise than within one
// process (fabq copies with process_vm_readv/writev).
//
// It is forked by the constructor, which must come before anything of libfabric is touched in
// this process: a fork after libfabric is initialised (and providers' threads started, which
// may hold locks) would leave the server a libfabric it cannot safely call. It opens its own
// Provider and runs, each time this process's run_pair (rma_side.h) sends it one, the
// scenario `scenarios[i]`, until the destructor stops it; it dies with this process
// (PR_SET_PDEATHSIG). One object at a time per process; run_pair uses it while it lives.
class ServerProcess {
 public:
  // On failure (mmap, fork) the RMA scenarios that run fail with the reason. `parent_pipe`
  // is closed in the server process: only this one reports to the parent.
  ServerProcess(const ProviderSpec& spec, const std::vector<const Scenario*>& scenarios,
                const Options& o, int parent_pipe);
  // Tells the server process to quit, and kills it if it has not within a second.
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // The scenario this process runs next is scenarios[index]: run_pair sends it on.
  void next(size_t index);
  // The server process serves no more scenarios: it did not finish one in time (and was
  // killed) or it died. The RMA scenarios still to run need a new pair of processes.
  bool lost() const;

 private:
  struct Unmap {
    void operator()(Mailbox* box) const;
  };
  std::unique_ptr<Mailbox, Unmap> box_;  // shared with the server process
};

}  // namespace rma
}  // namespace fabq::tools::bench
