// `fabq bench`: option parsing and the interleaved run.
#include "tools/bench/bench.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

#include "tools/commands.h"

#if FABQ_COUNT_ALLOCATIONS
#include "bench/alloc_counter.h"
#endif

namespace fabq::tools {
namespace bench {

int64_t heap_allocations_now() {
#if FABQ_COUNT_ALLOCATIONS
  return static_cast<int64_t>(fabq::bench::heap_allocations());
#else
  return -1;
#endif
}

}  // namespace bench

namespace {

using bench::Options;
using bench::ProviderSpec;
using bench::Sample;
using bench::Scenario;

void usage(FILE* out) {
  std::fprintf(out,
               "usage: fabq bench [options]\n"
               "\n"
               "Runs each scenario through the libfabric API on fabq and on libfabric's own\n"
               "providers, interleaved, and prints medians, min-max and each provider's\n"
               "ratio to fabq.\n"
               "\n"
               "options:\n"
               "  --providers LIST   comma-separated (default: all): ");
  for (const ProviderSpec& p : bench::known_providers()) std::fprintf(out, "%s ", p.name.c_str());
  std::fprintf(out,
               "\n"
               "  --scenarios LIST   comma-separated names or prefixes ending before or at a\n"
               "                     '/' or '-' (default: all): 'eq-wake' selects\n"
               "                     eq-wake/<wait object> and eq-wake-idle/..., 'eq' every EQ\n"
               "                     scenario, 'msg' (or 'msg-') every MSG scenario,\n"
               "                     'msg-pingpong' the ping-pong at every size, 'rdm'\n"
               "                     every RDM message scenario, 'rma' every RMA and\n"
               "                     atomic scenario and 'dgram' every datagram one\n"
               "  --reps N           repetitions per scenario and provider (default 7)\n"
               "  --gap-us N         writer's pause before each wake-up (default 5)\n"
               "  --quick            smaller samples and 2 repetitions (a smoke run)\n"
               "  --rma-threads      run the two sides of each RDM and RMA scenario as two\n"
               "                     threads of one process instead of two processes\n"
               "  --out DIR          also write bench.txt, .csv, .json and bench.svg to DIR\n"
               "  --list             list the chosen scenarios and the providers, then exit\n"
               "\n"
               "The MSG scenarios (msg-*) connect two FI_EP_MSG endpoints over TCP on\n"
               "127.0.0.1, one per thread; they run on fabq, tcp-core and sockets.\n"
               "The RDM scenarios (rdm-*) and the RMA scenarios (rma-*) pair two FI_EP_RDM\n"
               "endpoints, one per process (one per thread of one process with\n"
               "--rma-threads); in the RDM ones they exchange messages, in the RMA ones one\n"
               "writes, reads or adds to the other's memory region. They run on fabq, tcp\n"
               "(ofi_rxm over tcp), sockets and shm.\n");
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = s.find(',', start);
    const std::string item = s.substr(start, comma == std::string::npos ? comma : comma - start);
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// A selector picks a name it equals, or begins at a '/' or '-' boundary: 'eq-wake' picks
// eq-wake/fd and eq-wake-idle/fd, not eq-wakeful; 'msg-' (ending in one) picks msg-rate/8.
bool selects(const std::string& selector, const std::string& name) {
  if (name.size() <= selector.size() || name.compare(0, selector.size(), selector) != 0) {
    return name == selector;
  }
  const char last = selector.empty() ? '\0' : selector.back();
  const char next = name[selector.size()];
  return last == '/' || last == '-' || next == '/' || next == '-';
}

bool parse_count(const char* s, long min, long max, long* out) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < min || v > max) return false;
  *out = v;
  return true;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M UTC", &tm);
  return buf;
}

// Lets libfabric find libfabq-fi.so in this build tree unless the user points elsewhere.
void point_libfabric_at_fabq() {
  if (std::getenv("FI_PROVIDER_PATH") == nullptr) setenv("FI_PROVIDER_PATH", FABQ_PROV_DIR, 0);
  if (const char* only = std::getenv("FI_PROVIDER")) {
    std::fprintf(stderr,
                 "fabq bench: FI_PROVIDER=%s is set; providers it excludes will show as "
                 "unsupported\n",
                 only);
  }
}

}  // namespace

int run_bench(int argc, char** argv) {
  Options options;
  int reps = 7;
  std::vector<std::string> provider_names, scenario_names;
  std::string out_dir;
  bool quick = false, list = false;
  std::string command = "fabq bench";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    command += " " + arg;
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) return nullptr;
      command += std::string(" ") + argv[i + 1];
      return argv[++i];
    };
    long n = 0;
    const char* v = nullptr;
    if (arg == "-h" || arg == "--help") {
      usage(stdout);
      return 0;
    } else if (arg == "--list") {
      list = true;
    } else if (arg == "--quick") {
      quick = true;
    } else if (arg == "--rma-threads") {
      options.rma_threads = true;
    } else if (arg == "--providers" && (v = value()) != nullptr) {
      provider_names = split(v);
    } else if (arg == "--scenarios" && (v = value()) != nullptr) {
      scenario_names = split(v);
    } else if (arg == "--reps" && (v = value()) != nullptr && parse_count(v, 1, 1000, &n)) {
      reps = static_cast<int>(n);
    } else if (arg == "--gap-us" && (v = value()) != nullptr && parse_count(v, 0, 100000, &n)) {
      options.gap_ns = n * 1000;
    } else if (arg == "--out" && (v = value()) != nullptr) {
      out_dir = v;
    } else {
      std::fprintf(stderr, "fabq bench: bad option or value: %s\n", arg.c_str());
      usage(stderr);
      return 2;
    }
  }
  if (quick) {
    options.pairs = 20'000;
    options.bursts = 100;
    options.wakes = 100;
    options.idle_gap_ns = 150'000;
    options.msg_round_trips = 200;
    options.msg_messages = 2'000;
    options.msg_bytes = 4ULL << 20;
    options.rma_round_trips = 200;
    options.rma_ops = 2'000;
    options.rma_bytes = 4ULL << 20;
    reps = std::min(reps, 2);
  }

  std::vector<const ProviderSpec*> providers;
  if (provider_names.empty()) {
    for (const ProviderSpec& p : bench::known_providers()) providers.push_back(&p);
  }
  for (const std::string& name : provider_names) {
    const ProviderSpec* p = bench::find_provider(name);
    if (p == nullptr) {
      std::fprintf(stderr, "fabq bench: unknown provider '%s' (see --list)\n", name.c_str());
      return 2;
    }
    providers.push_back(p);
  }
  std::vector<const Scenario*> scenarios;
  for (const Scenario& s : bench::all_scenarios()) {
    bool chosen = scenario_names.empty();
    for (const std::string& sel : scenario_names) chosen = chosen || selects(sel, s.name);
    if (chosen) scenarios.push_back(&s);
  }
  for (const std::string& sel : scenario_names) {
    bool any = false;
    for (const Scenario& s : bench::all_scenarios()) any = any || selects(sel, s.name);
    if (!any) {
      std::fprintf(stderr, "fabq bench: no scenario matches '%s' (see --list)\n", sel.c_str());
      return 2;
    }
  }
  if (list) {
    std::printf("scenarios:\n");
    for (const Scenario* s : scenarios) {
      std::printf("  %-22s %s\n", s->name.c_str(), s->summary.c_str());
    }
    std::printf("providers:\n");
    for (const ProviderSpec& p : bench::known_providers()) {
      std::printf("  %-22s %s\n", p.name.c_str(), p.note.c_str());
    }
    return 0;
  }

  point_libfabric_at_fabq();
  // samples[s][p]: one Sample per repetition. Providers take turns within each repetition,
  // each in a process of its own, starting one further each time, so the slow drifts of a
  // shared machine spread over all of them.
  constexpr int kHangMs = 30'000;
  std::vector<std::vector<std::vector<Sample>>> samples(
      scenarios.size(), std::vector<std::vector<Sample>>(providers.size()));
  for (int rep = 0; rep < reps; ++rep) {
    std::fprintf(stderr, "fabq bench: repetition %d of %d\n", rep + 1, reps);
    for (size_t k = 0; k < providers.size(); ++k) {
      const size_t p = (k + static_cast<size_t>(rep)) % providers.size();
      // Once unsupported or failed, the provider sits out the scenario's later repetitions.
      std::vector<size_t> todo;
      for (size_t s = 0; s < scenarios.size(); ++s) {
        const std::vector<Sample>& mine = samples[s][p];
        if (mine.empty() || mine.back().state == Sample::State::kOk) todo.push_back(s);
      }
      std::vector<Sample> got(scenarios.size());
      bench::run_isolated(*providers[p], scenarios, todo, options, kHangMs, &got);
      for (const size_t s : todo) samples[s][p].push_back(got[s]);
    }
  }

  const bench::RunInfo run{utc_now(), command, reps, options};
  const std::vector<bench::Summary> rows = bench::summarize(scenarios, providers, samples);
  const std::string table = bench::format_table(rows, run) + bench::format_targets(rows);
  std::fputs(table.c_str(), stdout);
  if (bench::heap_allocations_now() < 0) {
    std::printf("(heap allocations are not counted in this build)\n");
  }
  if (!out_dir.empty() && !bench::write_reports(out_dir, rows, run, table)) return 1;

  // fabq must run every chosen scenario; anchors that cannot are reported, not fatal.
  int status = 0;
  for (const bench::Summary& r : rows) {
    if (r.provider == "fabq" && r.state != Sample::State::kOk) {
      std::fprintf(stderr, "fabq bench: fabq did not pass %s: %s\n", r.scenario.c_str(),
                   r.why.c_str());
      status = 1;
    }
  }
  return status;
}

}  // namespace fabq::tools
