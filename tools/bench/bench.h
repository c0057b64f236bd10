// `fabq bench`: the same scenarios, through the public libfabric API, on fabq and on libfabric's
// own providers in one run, interleaved, with ratios to fabq.
//
// Layout: providers.cc opens a provider's fabric and domain by name; scenarios.cc holds the
// queue scenarios, each validating everything it reads; msg.cc (msg.h) the scenarios over
// FI_EP_MSG connections, msg_peer.cc (msg_peer.h) those connections; rma.cc (rma.h) the RMA
// and atomic scenarios over FI_EP_RDM endpoints, rma_side.cc (rma_side.h) their two sides,
// memory regions and operations and the process that plays their server side; isolate.cc runs
// one provider's scenarios in a child process; stats.cc reduces samples; report.cc prints the
// table and writes CSV, JSON and the gnuplot plot; bench.cc parses options and interleaves the
// providers.
#pragma once

#include <rdma/fabric.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace fabq::tools::bench {

// A provider under test, chosen by its short name on the command line.
struct ProviderSpec {
  std::string name;       // what the user types and the report shows: "fabq", "tcp", ...
  std::string prov_name;  // fi_info->fabric_attr->prov_name to pick
  int ep_type;            // fi_ep_type asked for in the hints
  std::string note;       // one line for the report: what this name stands for
};

// Every provider the tool knows, fabq first. Unknown names give nullptr.
const std::vector<ProviderSpec>& known_providers();
const ProviderSpec* find_provider(const std::string& name);

// An opened fabric and domain of one provider; closes both (domain first) on destruction.
class Provider {
 public:
  // Opens `spec` through fi_getinfo → fi_fabric → fi_domain. On failure returns nullptr and
  // puts the reason in *why.
  static std::unique_ptr<Provider> open(const ProviderSpec& spec, std::string* why);
  ~Provider();
  Provider(const Provider&) = delete;
  Provider& operator=(const Provider&) = delete;

  const ProviderSpec& spec() const { return spec_; }
  fid_fabric* fabric() const { return fabric_; }
  fid_domain* domain() const { return domain_; }
  const fi_info* info() const { return info_; }

 private:
  explicit Provider(const ProviderSpec& spec) : spec_(spec) {}
  ProviderSpec spec_;
  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
};

// Tunables shared by every scenario.
struct Options {
  uint64_t pairs = 200'000;       // write+read pairs per eq-pair sample
  uint64_t bursts = 1'000;        // bursts per eq-burst sample
  uint64_t burst = 256;           // events per burst
  uint64_t wakes = 1'000;         // timed wake-ups per wake sample
  int64_t gap_ns = 5'000;         // writer's pause between "reader is blocking" and the wake
  int64_t idle_gap_ns = 200'000;  // the same for the *-idle scenarios: the reader is asleep
  int timeout_ms = 2'000;         // a blocking call longer than this is a lost wake-up
  // MSG scenarios. Each sample moves at most msg_bytes per direction, which sets the counts
  // of the large sizes; a wait for one completion or CM event longer than timeout_ms fails.
  // Sized so one repetition of them all takes seconds: tcp-core 5 s, sockets 11 s on a
  // loaded two-core machine.
  uint64_t msg_round_trips = 1'000;  // timed round trips per msg-pingpong sample
  uint64_t msg_messages = 10'000;    // timed messages per msg-rate / msg-comp-rate sample
  uint64_t msg_bytes = 64ULL << 20;
  uint64_t msg_window = 64;  // sends in flight in msg-rate and msg-comp-rate (as fi_msg_bw)
  // RMA scenarios, sized the same way: each sample moves at most rma_bytes one way (the
  // ping-pong: each way); a wait for one completion or for the peer's bytes longer than
  // timeout_ms fails.
  uint64_t rma_round_trips = 1'000;  // timed round trips per rma-write-lat sample
  uint64_t rma_ops = 10'000;         // timed operations per bandwidth or atomic sample
  uint64_t rma_bytes = 64ULL << 20;
  uint64_t rma_window = 64;  // operations in flight (as fi_rma_bw's default window)
  // The two sides of an RMA scenario as two threads of one process instead of two processes
  // (rma_side.h): one-sided operations within a process, which a provider may carry out
  // otherwise.
  bool rma_threads = false;
};

// How a scenario's figure reads.
enum class Measure {
  kNsPerEvent,  // throughput: wall time per event, lower is better
  kWakeNs,      // latency from the wake call to the blocked reader's return: p50 (and p99)
  kLatencyNs,   // one-way message latency (round trip / 2): p50 (and p99) over the round trips
  kBandwidth,   // wall time per operation of Scenario::msg_size bytes, lower is better; the
                // report shows the bandwidth it makes beside it
};

// One run of a scenario on a provider.
struct Sample {
  enum class State { kOk, kUnsupported, kFailed };
  State state = State::kOk;
  std::string why;         // for kUnsupported / kFailed
  double value = 0;        // ns per event, or p50 latency in ns
  double p99 = 0;          // latency scenarios: p99 latency in ns
  double allocs = 0;       // heap allocations per event in the timed part (-1: not counted)
  double reader_cpu = -1;  // wake scenarios: the blocked reader's CPU time / wall time
};

struct Scenario {
  std::string name;     // "eq-pair/none", "eq-wake/unspec", ...
  std::string summary;  // one line for the report
  Measure measure;
  Sample (*run)(const Scenario&, const Provider&, const Options&);
  int wait_obj;         // enum fi_wait_obj the queue is opened with
  size_t msg_size = 0;  // MSG and RMA scenarios: bytes per message or operation
};

// Runs scenarios[i] for each i in `todo`, in that order, on `spec` in a child process, and
// stores each Sample in (*out)[i]. A scenario that gives no result within `hang_ms`, or whose
// process dies, is stored as kFailed with the reason; the rest continue in a new child.
void run_isolated(const ProviderSpec& spec, const std::vector<const Scenario*>& scenarios,
                  std::vector<size_t> todo, const Options& o, int hang_ms,
                  std::vector<Sample>* out);

// Every scenario, in report order: the queue scenarios, then the MSG ones, then the RMA ones.
const std::vector<Scenario>& all_scenarios();

// Heap allocations so far in this process, or -1 when the build does not count them.
int64_t heap_allocations_now();

// Reduction of one scenario × provider over the repetitions.
struct Summary {
  std::string scenario;
  std::string provider;
  Measure measure;
  Sample::State state = Sample::State::kOk;
  std::string why;
  size_t reps = 0;
  double median = 0, min = 0, max = 0;  // of Sample::value
  double p99 = 0;                       // median over repetitions of Sample::p99
  double allocs = -1;                   // largest over repetitions
  double reader_cpu = -1;               // median over repetitions
  double ratio = 0;  // median / fabq's median (> 1: fabq is faster); 0 if not comparable
};

double median(std::vector<double> v);
// The q-quantile (0..1) of `v` by nearest rank; `v` is reordered.
double quantile(std::vector<double>* v, double q);

// Summaries of `samples[s][p]` (scenario s, provider p, one Sample per repetition).
std::vector<Summary> summarize(const std::vector<const Scenario*>& scenarios,
                               const std::vector<const ProviderSpec*>& providers,
                               const std::vector<std::vector<std::vector<Sample>>>& samples);

struct RunInfo {
  std::string date;
  std::string command;
  int reps = 0;
  Options options;
};

// The terminal table (also written to <dir>/bench.txt).
std::string format_table(const std::vector<Summary>& rows, const RunInfo& run);
// The target lines: which of the performance targets this run meets.
std::string format_targets(const std::vector<Summary>& rows);
// Writes bench.txt, bench.csv, bench.json and, when gnuplot is installed, bench.svg into
// `dir`. Returns false (with a message on stderr) when a file cannot be written.
bool write_reports(const std::string& dir, const std::vector<Summary>& rows, const RunInfo& run,
                   const std::string& table);

}  // namespace fabq::tools::bench
