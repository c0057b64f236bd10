#include <algorithm>
#include <cmath>

#include "tools/bench/bench.h"

namespace fabq::tools::bench {

double quantile(std::vector<double>* v, double q) {
  if (v->empty()) return 0;
  size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v->size())));
  rank = std::clamp<size_t>(rank, 1, v->size()) - 1;
  std::nth_element(v->begin(), v->begin() + static_cast<std::ptrdiff_t>(rank), v->end());
  return (*v)[rank];
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::vector<Summary> summarize(const std::vector<const Scenario*>& scenarios,
                               const std::vector<const ProviderSpec*>& providers,
                               const std::vector<std::vector<std::vector<Sample>>>& samples) {
  std::vector<Summary> rows;
  for (size_t s = 0; s < scenarios.size(); ++s) {
    const size_t first = rows.size();
    for (size_t p = 0; p < providers.size(); ++p) {
      Summary r;
      r.scenario = scenarios[s]->name;
      r.provider = providers[p]->name;
      r.measure = scenarios[s]->measure;
      std::vector<double> values, p99s, cpus;
      for (const Sample& x : samples[s][p]) {
        if (x.state != Sample::State::kOk) {
          // A failure anywhere outweighs good repetitions: the figure cannot be trusted.
          if (r.state != Sample::State::kFailed) {
            r.state = x.state;
            r.why = x.why;
          }
          continue;
        }
        values.push_back(x.value);
        p99s.push_back(x.p99);
        if (x.reader_cpu >= 0) cpus.push_back(x.reader_cpu);
        r.allocs = std::max(r.allocs, x.allocs);
      }
      if (samples[s][p].empty()) {
        r.state = Sample::State::kUnsupported;
        if (r.why.empty()) r.why = "not run";
      }
      if (r.state == Sample::State::kOk) {
        r.reps = values.size();
        r.median = median(values);
        r.min = *std::min_element(values.begin(), values.end());
        r.max = *std::max_element(values.begin(), values.end());
        r.p99 = median(p99s);
        r.reader_cpu = cpus.empty() ? -1 : median(cpus);
      }
      rows.push_back(r);
    }
    const Summary* fabq = nullptr;
    for (size_t i = first; i < rows.size(); ++i) {
      if (rows[i].provider == "fabq" && rows[i].state == Sample::State::kOk) fabq = &rows[i];
    }
    for (size_t i = first; fabq != nullptr && i < rows.size(); ++i) {
      if (rows[i].state == Sample::State::kOk && fabq->median > 0) {
        rows[i].ratio = rows[i].median / fabq->median;
      }
    }
  }
  return rows;
}

}  // namespace fabq::tools::bench
