#include <rdma/fabric.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <map>
#include <sstream>
#include <thread>

#include "fabq/version.h"
#include "tools/bench/bench.h"
#include "tools/bench/msg.h"

namespace fabq::tools::bench {
namespace {

const char* state_name(Sample::State s) {
  switch (s) {
    case Sample::State::kOk:
      return "ok";
    case Sample::State::kUnsupported:
      return "unsupported";
    case Sample::State::kFailed:
      return "failed";
  }
  return "?";
}

const char* unit(Measure m) {
  switch (m) {
    case Measure::kNsPerEvent:
      return "ns/event";
    case Measure::kBandwidth:
      return "ns/op";
    default:
      return "ns";
  }
}

// Whether a scenario's figure is a latency with a p99 beside its p50.
bool has_p99(Measure m) {
  return m == Measure::kWakeNs || m == Measure::kLatencyNs;
}

std::string fmt(const char* f, auto... args) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), f, args...);
  return buf;
}

// The bytes each operation of a kBandwidth scenario moves; 0 for any other.
size_t op_bytes(const std::string& scenario) {
  for (const Scenario& s : all_scenarios()) {
    if (s.name == scenario) return s.measure == Measure::kBandwidth ? s.msg_size : 0;
  }
  return 0;
}

// A kBandwidth figure as bandwidth: bytes per ns are GB/s.
std::string bandwidth(size_t bytes, double ns_per_op) {
  if (bytes == 0 || ns_per_op <= 0) return "-";
  const double gbps = static_cast<double>(bytes) / ns_per_op;
  return gbps >= 1 ? fmt("%.2f GB/s", gbps) : fmt("%.1f MB/s", gbps * 1e3);
}

// RMA operations take 100 ns to tens of ms: in us, with three significant digits or more.
const char* us_format(double ns) {
  return ns < 10'000 ? "%.3f" : ns < 1'000'000 ? "%.1f" : "%.0f";
}

// Throughput in ns with one decimal; wake latencies in µs with two; message latencies in whole
// ns (they run from µs to ms, and the MSG targets compare them in ns); RMA operations in us
// (us_format).
std::string figure(Measure m, double ns) {
  switch (m) {
    case Measure::kNsPerEvent:
      return fmt("%.1f ns", ns);
    case Measure::kWakeNs:
      return fmt("%.2f us", ns / 1000);
    case Measure::kLatencyNs:
      return fmt("%.0f ns", ns);
    case Measure::kBandwidth:
      return fmt(us_format(ns), ns / 1e3) + " us";
  }
  return "?";
}

std::string figure_range(Measure m, double lo, double hi) {
  switch (m) {
    case Measure::kNsPerEvent:
      return fmt("%.1f-%.1f", lo, hi);
    case Measure::kWakeNs:
      return fmt("%.2f-%.2f", lo / 1e3, hi / 1e3);
    case Measure::kLatencyNs:
      return fmt("%.0f-%.0f", lo, hi);
    case Measure::kBandwidth:
      return fmt(us_format(hi), lo / 1e3) + "-" + fmt(us_format(hi), hi / 1e3);
  }
  return "?";
}

std::string read_first_line(const char* path, const char* prefix = nullptr) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (prefix == nullptr) return line;
    if (line.rfind(prefix, 0) == 0) {
      const size_t colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 2);
    }
  }
  return "unknown";
}

struct Machine {
  std::string cpu, kernel, libfabric, fabq, load;
  unsigned cores;
};

Machine describe_machine() {
  Machine m;
  m.cpu = read_first_line("/proc/cpuinfo", "model name");
  utsname u{};
  m.kernel = uname(&u) == 0 ? std::string(u.sysname) + " " + u.release + " " + u.machine : "?";
  const uint32_t v = fi_version();
  m.libfabric = fmt("%u.%u", FI_MAJOR(v), FI_MINOR(v));
  m.fabq = FABQ_VERSION_STRING;
  m.load = read_first_line("/proc/loadavg");
  m.cores = std::thread::hardware_concurrency();
  return m;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt("\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) {
    std::fprintf(stderr, "fabq bench: cannot write %s\n", path.c_str());
    return false;
  }
  return true;
}

const Summary* find(const std::vector<Summary>& rows, const std::string& scenario,
                    const std::string& provider) {
  for (const Summary& r : rows) {
    if (r.scenario == scenario && r.provider == provider) return &r;
  }
  return nullptr;
}

bool ok(const Summary* r) {
  return r != nullptr && r->state == Sample::State::kOk;
}

// The gnuplot data of one panel: a row per scenario, a column per provider (NaN: no figure).
std::string plot_data(const std::vector<Summary>& rows, const std::vector<std::string>& providers,
                      Measure m, bool p99) {
  std::string out = "scenario";
  for (const std::string& p : providers) out += " " + p;
  out += "\n";
  std::vector<std::string> scenarios;
  for (const Summary& r : rows) {
    if (r.measure == m && (scenarios.empty() || scenarios.back() != r.scenario)) {
      scenarios.push_back(r.scenario);
    }
  }
  for (const std::string& s : scenarios) {
    out += s;
    for (const std::string& p : providers) {
      const Summary* r = find(rows, s, p);
      double v = !ok(r) ? 0 : (p99 ? r->p99 : r->median) / (has_p99(m) ? 1e3 : 1);
      if (ok(r) && m == Measure::kBandwidth) v = static_cast<double>(op_bytes(s)) / r->median;
      out += ok(r) ? fmt(" %.4g", v) : " NaN";
    }
    out += "\n";
  }
  return out;
}

bool write_plot(const std::string& dir, const std::vector<Summary>& rows) {
  std::vector<std::string> providers;
  for (const Summary& r : rows) {
    bool seen = false;
    for (const std::string& p : providers) seen = seen || p == r.provider;
    if (!seen) providers.push_back(r.provider);
  }
  // File names relative to `dir`: gnuplot runs there, so the script works wherever it is.
  struct Panel {
    const char* file;
    Measure measure;
    bool p99;
    const char* title;
    const char* ylabel;
    const char* yrange;
  };
  static const Panel all_panels[] = {
      {"bench-throughput.dat", Measure::kNsPerEvent, false, "Throughput: time per event",
       "ns per event", "[1:*]"},
      {"bench-wake-p50.dat", Measure::kWakeNs, false, "Wake latency, p50", "microseconds",
       "[0.1:*]"},
      {"bench-wake-p99.dat", Measure::kWakeNs, true, "Wake latency, p99", "microseconds",
       "[0.1:*]"},
      {"bench-msg-latency.dat", Measure::kLatencyNs, false,
       "One-way latency, p50: MSG, RDM and RMA write ping-pongs", "microseconds", "[0.1:*]"},
      {"bench-rma-bandwidth.dat", Measure::kBandwidth, false,
       "Bandwidth: RDM messages and RMA (higher is better)", "GB/s", "[0.001:*]"},
  };
  // gnuplot stops at a histogram column without a valid point: a panel shows the providers
  // with a figure in it (fabq has none in the MSG panels until its transport lands), and
  // only the measures that have one get a panel. Each provider keeps its line type, so its
  // colour is the same in every panel.
  struct Shown {
    const Panel* panel;
    std::vector<size_t> columns;  // indexes into `providers`
  };
  std::vector<Shown> panels;
  for (const Panel& panel : all_panels) {
    Shown shown{&panel, {}};
    for (size_t p = 0; p < providers.size(); ++p) {
      for (const Summary& r : rows) {
        if (r.measure == panel.measure && r.provider == providers[p] && ok(&r)) {
          shown.columns.push_back(p);
          break;
        }
      }
    }
    if (shown.columns.empty()) continue;
    std::vector<std::string> names;
    for (const size_t p : shown.columns) names.push_back(providers[p]);
    if (!write_file(dir + "/" + panel.file, plot_data(rows, names, panel.measure, panel.p99))) {
      return false;
    }
    panels.push_back(std::move(shown));
  }
  if (panels.empty()) return true;
  std::string gp;
  gp += fmt("set terminal svg size 1400,%zu dynamic background rgb 'white' font 'sans,12'\n",
            500 * panels.size());
  gp += "set output 'bench.svg'\n";
  gp +=
      fmt("set multiplot layout %zu,1 title 'fabq bench: fabq against libfabric providers "
          "(medians, log scale, lower is better but for bandwidth)'\n",
          panels.size());
  gp += "set style data histograms\nset style histogram clustered gap 1\n";
  gp += "set style fill solid 0.85 border -1\nset boxwidth 0.9\nset logscale y\n";
  gp += "set grid ytics\nset key outside right top\nset xtics rotate by 30 right noenhanced\n";
  gp += "set key noenhanced\n";
  for (const Shown& shown : panels) {
    const Panel* panel = shown.panel;
    gp += std::string("set title '") + panel->title + "'\nset ylabel '" + panel->ylabel +
          "'\nset yrange " + panel->yrange + "\n";
    gp += "plot";
    for (size_t c = 0; c < shown.columns.size(); ++c) {
      gp += fmt("%s '%s' using %zu%s title columnheader(%zu) lt %zu", c == 0 ? "" : ",",
                panel->file, c + 2, c == 0 ? ":xtic(1)" : "", c + 2, shown.columns[c] + 1);
    }
    gp += "\n";
  }
  gp += "unset multiplot\n";
  const std::string script = dir + "/bench.gp";
  if (!write_file(script, gp)) return false;
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    std::fprintf(stderr, "fabq bench: gnuplot is not installed; no plot (script: %s)\n",
                 script.c_str());
    return true;
  }
  const std::string cmd = "cd '" + dir + "' && gnuplot bench.gp";
  if (std::system(cmd.c_str()) != 0) {
    std::fprintf(stderr, "fabq bench: gnuplot failed on %s\n", script.c_str());
    return false;
  }
  return true;
}

// A provider's figures for one family of scenarios: `prefix` (e.g. "msg-pingpong/") and a size.
struct Series {
  const char* prefix;
  const char* provider;
};

// One target over the sizes that this run has of `mine` and `rival`: met when their figures meet
// `meets` at every one of them; n/a when no size has both.
template <typename Line>
void size_target(const std::vector<Summary>& rows, Series mine, Series rival,
                 std::initializer_list<size_t> sizes, const std::string& title,
                 const char* figures_are, bool (*meets)(double mine, double rival), Line line) {
  int run = 0, compared = 0, good = 0;
  std::string figures, missing;
  for (const size_t size : sizes) {
    const std::string name = msg_size_name(size);
    const Summary* f = find(rows, mine.prefix + name, mine.provider);
    const Summary* t = find(rows, rival.prefix + name, rival.provider);
    if (f == nullptr && t == nullptr) continue;  // not chosen in this run
    ++run;
    if (!ok(f) || !ok(t)) {
      const Series& which = !ok(f) ? mine : rival;
      const Summary* bad = !ok(f) ? f : t;
      if (missing.empty()) {
        missing = "; no figure from " + std::string(which.provider) + " for " + which.prefix +
                  name + (bad != nullptr && !bad->why.empty() ? " (" + bad->why + ")" : "");
      }
      continue;
    }
    ++compared;
    if (meets(f->median, t->median)) ++good;
    figures += fmt("%s %s %.0f/%.0f", compared == 1 ? "" : ",", msg_size_label(size).c_str(),
                   f->median, t->median);
  }
  if (run == 0) return;
  line(compared > 0, compared > 0 && good == run,
       title + (compared > 0 ? " (" + std::string(figures_are) + "):" + figures : "") + missing);
}

}  // namespace

std::string format_table(const std::vector<Summary>& rows, const RunInfo& run) {
  const Machine m = describe_machine();
  std::ostringstream out;
  out << "fabq bench " << m.fabq << " on libfabric " << m.libfabric << ", " << run.date << "\n";
  out << "machine: " << m.cpu << ", " << m.cores << " cores, " << m.kernel << ", load " << m.load
      << "\n";
  out << fmt(
      "%d repetitions, providers interleaved; figure = median (min-max); "
      "wake gap %.1f us (idle %.0f us); x fabq > 1: fabq is faster\n",
      run.reps, run.options.gap_ns / 1e3, run.options.idle_gap_ns / 1e3);
  std::string current;
  for (const Summary& r : rows) {
    if (r.scenario != current) {
      current = r.scenario;
      const std::string summary = [&] {
        for (const Scenario& s : all_scenarios()) {
          if (s.name == r.scenario) return s.summary;
        }
        return std::string();
      }();
      out << "\n" << r.scenario << ": " << summary << "\n";
      if (r.measure == Measure::kNsPerEvent) {
        out << fmt("  %-9s %-28s %10s %8s\n", "provider", "ns per event", "allocs/ev", "x fabq");
      } else if (r.measure == Measure::kLatencyNs) {
        out << fmt("  %-9s %-28s %10s %10s %8s\n", "provider", "one-way p50", "p99", "allocs/msg",
                   "x fabq");
      } else if (r.measure == Measure::kBandwidth) {
        out << fmt("  %-9s %-28s %11s %10s %8s\n", "provider", "time per op", "bandwidth",
                   "allocs/op", "x fabq");
      } else {
        out << fmt("  %-9s %-28s %10s %10s %10s %8s\n", "provider", "p50 wake", "p99", "reader cpu",
                   "allocs/ev", "x fabq");
      }
    }
    if (r.state != Sample::State::kOk) {
      out << fmt("  %-9s %s: ", r.provider.c_str(),
                 r.state == Sample::State::kFailed ? "FAILED" : "unsupported")
          << r.why << "\n";
      continue;
    }
    const std::string fig =
        figure(r.measure, r.median) + " (" + figure_range(r.measure, r.min, r.max) + ")";
    const std::string allocs = r.allocs < 0 ? "n/a" : fmt("%.2f", r.allocs);
    const std::string ratio = r.ratio > 0 ? fmt("%.2f", r.ratio) : "-";
    if (r.measure == Measure::kNsPerEvent) {
      out << fmt("  %-9s %-28s %10s %8s\n", r.provider.c_str(), fig.c_str(), allocs.c_str(),
                 ratio.c_str());
    } else if (r.measure == Measure::kLatencyNs) {
      out << fmt("  %-9s %-28s %10s %10s %8s\n", r.provider.c_str(), fig.c_str(),
                 figure(r.measure, r.p99).c_str(), allocs.c_str(), ratio.c_str());
    } else if (r.measure == Measure::kBandwidth) {
      out << fmt("  %-9s %-28s %11s %10s %8s\n", r.provider.c_str(), fig.c_str(),
                 bandwidth(op_bytes(r.scenario), r.median).c_str(), allocs.c_str(), ratio.c_str());
    } else {
      const std::string cpu = r.reader_cpu < 0 ? "-" : fmt("%.0f%%", r.reader_cpu * 100);
      out << fmt("  %-9s %-28s %10s %10s %10s %8s\n", r.provider.c_str(), fig.c_str(),
                 figure(r.measure, r.p99).c_str(), cpu.c_str(), allocs.c_str(), ratio.c_str());
    }
  }
  return out.str();
}

std::string format_targets(const std::vector<Summary>& rows) {
  std::ostringstream out;
  out << "\ntargets:\n";
  auto line = [&](bool known, bool met, const std::string& text) {
    out << "  [" << (!known ? "n/a" : met ? "met" : "NOT met") << "] " << text << "\n";
  };
  // EQ write+read: at most 12 ns a pair and at least 5x the tcp provider's throughput.
  {
    const Summary* f = find(rows, "eq-pair/none", "fabq");
    const Summary* t = find(rows, "eq-pair/none", "tcp");
    if (!ok(t)) t = find(rows, "eq-pair/none", "tcp-core");
    line(ok(f), ok(f) && f->median <= 12.0,
         ok(f) ? fmt("EQ write+read pair <= 12 ns: fabq %.1f ns", f->median)
               : "EQ write+read pair <= 12 ns: fabq has no figure");
    line(ok(f) && ok(t), ok(f) && ok(t) && t->ratio >= 5.0,
         ok(f) && ok(t) ? fmt("EQ write+read >= 5x tcp's throughput: %.2fx (%s %.1f ns)", t->ratio,
                              t->provider.c_str(), t->median)
                        : "EQ write+read >= 5x tcp's throughput: no tcp figure");
  }
  // UNSPEC wake p50 at or below the best anchor's.
  for (const char* s : {"eq-wake/unspec", "cq-wake/unspec", "cntr-wake/unspec"}) {
    const Summary* f = find(rows, s, "fabq");
    const Summary* best = nullptr;
    for (const Summary& r : rows) {
      if (r.scenario == s && r.provider != "fabq" && ok(&r) &&
          (best == nullptr || r.median < best->median)) {
        best = &r;
      }
    }
    if (!ok(f)) continue;
    line(best != nullptr, best != nullptr && f->median <= best->median,
         best != nullptr ? fmt("%s p50 <= best anchor's: fabq %.2f us, %s %.2f us", s,
                               f->median / 1e3, best->provider.c_str(), best->median / 1e3)
                         : fmt("%s p50 <= best anchor's: no anchor figure", s));
  }
  // FD wake p50 at or below 10 us.
  for (const char* s :
       {"eq-wake/fd", "eq-wake-idle/fd", "eq-fd-wake/fd", "eq-fd-wake-idle/fd", "cq-wake/fd"}) {
    const Summary* f = find(rows, s, "fabq");
    if (!ok(f)) continue;
    line(true, f->median <= 10'000, fmt("%s p50 <= 10 us: fabq %.2f us", s, f->median / 1e3));
  }
  // MSG: fabq against tcp-core, libfabric's own TCP MSG provider.
  size_target(
      rows, {"msg-pingpong/", "fabq"}, {"msg-pingpong/", "tcp-core"},
      {8, 64, 256, 1 << 10, 4 << 10},
      "MSG ping-pong latency at most half of tcp-core's for 8 B-4 KiB",
      "one-way p50 ns, fabq/tcp-core", [](double f, double t) { return f <= t / 2; }, line);
  size_target(
      rows, {"msg-rate/", "fabq"}, {"msg-rate/", "tcp-core"}, {8, 64, 4 << 10, 64 << 10, 1 << 20},
      "MSG message rate above tcp-core's", "ns per message, fabq/tcp-core",
      [](double f, double t) { return f < t; }, line);
  // RDM between two processes of one host: fabq against libfabric's shm provider.
  size_target(
      rows, {"rdm-pingpong/", "fabq"}, {"rdm-pingpong/", "shm"}, {8, 64, 4 << 10, 64 << 10},
      "RDM ping-pong latency at or below shm's for 8 B, 64 B, 4 KiB, 64 KiB",
      "one-way p50 ns, fabq/shm", [](double f, double t) { return f <= t; }, line);
  size_target(
      rows, {"rdm-bw/", "fabq"}, {"rdm-bw/", "shm"}, {1 << 20},
      "RDM 1 MiB bandwidth at or above shm's", "ns per message, fabq/shm",
      [](double f, double t) { return f <= t; }, line);
  // fabq's RDM ping-pong against its own MSG one: RDM adds nothing that costs time.
  size_target(
      rows, {"rdm-pingpong/", "fabq"}, {"msg-pingpong/", "fabq"},
      {8, 64, 256, 1 << 10, 4 << 10, 64 << 10, 1 << 20},
      "RDM ping-pong latency within 10 % of MSG's at every size", "one-way p50 ns, fabq rdm/msg",
      [](double r, double m) { return r <= 1.10 * m && m <= 1.10 * r; }, line);
  // No heap allocation per event in the steady state.
  {
    int counted = 0, clean = 0;
    std::string worst;
    for (const Summary& r : rows) {
      if (r.provider != "fabq" || !ok(&r) || r.allocs < 0) continue;
      ++counted;
      if (r.allocs == 0) {
        ++clean;
      } else if (worst.empty()) {
        worst = fmt(" (%s: %.3f)", r.scenario.c_str(), r.allocs);
      }
    }
    line(counted > 0, counted > 0 && clean == counted,
         fmt("0 heap allocations per event: fabq %d of %d scenarios", clean, counted) + worst);
  }
  return out.str();
}

bool write_reports(const std::string& dir, const std::vector<Summary>& rows, const RunInfo& run,
                   const std::string& table) {
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    std::fprintf(stderr, "fabq bench: cannot create %s: %s\n", dir.c_str(), std::strerror(errno));
    return false;
  }
  const Machine m = describe_machine();
  std::string csv =
      "scenario,provider,state,unit,reps,median,min,max,p99,reader_cpu,allocs_per_event,"
      "ratio_to_fabq,why\n";
  for (const Summary& r : rows) {
    const bool good = r.state == Sample::State::kOk;
    csv += csv_field(r.scenario) + "," + r.provider + "," + state_name(r.state) + "," +
           unit(r.measure) + "," + std::to_string(r.reps) + "," +
           (good ? fmt("%.3f,%.3f,%.3f", r.median, r.min, r.max) : ",,") + "," +
           (good && has_p99(r.measure) ? fmt("%.3f", r.p99) : "") + "," +
           (good && r.reader_cpu >= 0 ? fmt("%.3f", r.reader_cpu) : "") + "," +
           (good && r.allocs >= 0 ? fmt("%.4f", r.allocs) : "") + "," +
           (r.ratio > 0 ? fmt("%.3f", r.ratio) : "") + "," + csv_field(r.why) + "\n";
  }
  std::string json = "{\n  \"machine\": {";
  json += "\"cpu\": " + json_string(m.cpu) + ", \"cores\": " + std::to_string(m.cores) +
          ", \"kernel\": " + json_string(m.kernel) + ", \"load\": " + json_string(m.load) +
          ", \"libfabric\": " + json_string(m.libfabric) + ", \"fabq\": " + json_string(m.fabq) +
          "},\n";
  json += "  \"run\": {\"date\": " + json_string(run.date) +
          ", \"command\": " + json_string(run.command) + ", \"reps\": " + std::to_string(run.reps) +
          fmt(", \"gap_ns\": %lld, \"idle_gap_ns\": %lld, \"pairs\": %llu, \"wakes\": %llu},\n",
              static_cast<long long>(run.options.gap_ns),
              static_cast<long long>(run.options.idle_gap_ns),
              static_cast<unsigned long long>(run.options.pairs),
              static_cast<unsigned long long>(run.options.wakes));
  json += "  \"results\": [\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Summary& r = rows[i];
    json += "    {\"scenario\": " + json_string(r.scenario) +
            ", \"provider\": " + json_string(r.provider) + ", \"state\": \"" + state_name(r.state) +
            "\", \"unit\": \"" + unit(r.measure) + "\"";
    if (r.state == Sample::State::kOk) {
      json += fmt(", \"reps\": %zu, \"median\": %.3f, \"min\": %.3f, \"max\": %.3f", r.reps,
                  r.median, r.min, r.max);
      if (has_p99(r.measure)) json += fmt(", \"p99\": %.3f", r.p99);
      if (r.measure == Measure::kBandwidth && r.median > 0) {
        json += fmt(", \"bytes_per_op\": %zu, \"gb_per_s\": %.4f", op_bytes(r.scenario),
                    static_cast<double>(op_bytes(r.scenario)) / r.median);
      }
      if (r.reader_cpu >= 0) json += fmt(", \"reader_cpu\": %.3f", r.reader_cpu);
      if (r.allocs >= 0) json += fmt(", \"allocs_per_event\": %.4f", r.allocs);
      if (r.ratio > 0) json += fmt(", \"ratio_to_fabq\": %.3f", r.ratio);
    } else {
      json += ", \"why\": " + json_string(r.why);
    }
    json += i + 1 < rows.size() ? "},\n" : "}\n";
  }
  json += "  ]\n}\n";
  return write_file(dir + "/bench.txt", table) && write_file(dir + "/bench.csv", csv) &&
         write_file(dir + "/bench.json", json) && write_plot(dir, rows);
}

}  // namespace fabq::tools::bench
