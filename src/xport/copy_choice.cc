#include "xport/copy_choice.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <limits>

namespace fabq::xport {

void format_advice(uint64_t advice, char* out, size_t n) {
  if (n == 0) return;
  out[0] = '\0';
  size_t at = 0;
  for (int c = 0; c < kCopyClasses && at < n; ++c) {
    if (!advice_known(advice, c)) continue;
    const size_t kib = (kCopyClassMin << c) / 1024;
    const int w = kib >= 1024 ? std::snprintf(out + at, n - at, "%s%zuM%s:%s", at ? " " : "",
                                              kib / 1024, c == kCopyClasses - 1 ? "+" : "",
                                              advice_direct(advice, c) ? "direct" : "ring")
                              : std::snprintf(out + at, n - at, "%s%zuK:%s", at ? " " : "", kib,
                                              advice_direct(advice, c) ? "direct" : "ring");
    if (w < 0) break;
    at += static_cast<size_t>(w);
  }
  if (at == 0) std::snprintf(out, n, "none");
}

int copy_class(size_t len) {
  const int c = std::bit_width(len / kCopyClassMin) - 1;
  return std::clamp(c, 0, kCopyClasses - 1);
}

uint32_t CopyAdvisor::estimate(int c, CopyPath path) const {
  const Window& w = windows_[c][static_cast<int>(path)];
  if (w.count == 0) return 0;
  uint32_t least = std::numeric_limits<uint32_t>::max();
  uint32_t second = least;
  for (int i = 0; i < w.count; ++i) {
    if (w.ns[i] < least) {
      second = least;
      least = w.ns[i];
    } else if (w.ns[i] < second) {
      second = w.ns[i];
    }
  }
  return w.count > 1 ? second : least;
}

bool CopyAdvisor::wants(size_t len, CopyPath path) {
  const int c = copy_class(len);
  if (!advice_known(advice_, c) || advice_direct(advice_, c) != (path == CopyPath::kDirect)) {
    return true;
  }
  return ++untimed_[c] % kSampleEvery == 0;
}

bool CopyAdvisor::record(size_t len, CopyPath path, uint64_t ns) {
  const int c = copy_class(len);
  Window& w = windows_[c][static_cast<int>(path)];
  w.ns[w.next] =
      static_cast<uint32_t>(std::min<uint64_t>(ns, std::numeric_limits<uint32_t>::max()));
  w.next = static_cast<uint8_t>((w.next + 1) % kSamples);
  if (w.count < kSamples) ++w.count;
  if (windows_[c][0].count < kEnough || windows_[c][1].count < kEnough) return false;
  const uint64_t ring = estimate(c, CopyPath::kRing);
  const uint64_t direct = estimate(c, CopyPath::kDirect);
  bool go_direct = direct < ring;
  if (advice_known(advice_, c)) {
    // The way advised stays until the other is faster by a sixteenth: two ways that cost the
    // same do not take turns with every sample.
    go_direct = advice_direct(advice_, c) ? ring * 17 / 16 >= direct : direct * 17 / 16 < ring;
  }
  const uint64_t was = advice_;
  advice_ |= uint64_t{1} << c;
  const uint64_t bit = uint64_t{1} << (16 + c);
  advice_ = go_direct ? advice_ | bit : advice_ & ~bit;
  return advice_ != was;
}

bool CopyAdvisor::record_direct(size_t len, uint64_t dest, uint64_t ns) {
  const uint64_t* const first = destinations_;
  const uint64_t* const end = first + destinations_known_;
  if (std::find(first, end, dest) != end) {
    new_in_a_row_ = 0;
    return record(len, CopyPath::kDirect, ns);
  }
  destinations_[destination_next_] = dest;
  destination_next_ = static_cast<uint8_t>((destination_next_ + 1) % kDestinations);
  if (destinations_known_ < kDestinations) ++destinations_known_;
  if (new_in_a_row_ < kEnough) {
    ++new_in_a_row_;
    return false;
  }
  return record(len, CopyPath::kDirect, ns);
}

CopyPath CopyPlanner::next(size_t len, uint64_t advice) const {
  const int c = copy_class(len);
  const Turns& t = turns_[c];
  if (!advice_known(advice, c)) {
    // Three of each in turn.
    return (t.exploring / CopyAdvisor::kEnough) % 2 == 0 ? CopyPath::kRing : CopyPath::kDirect;
  }
  // A probe: its first message (the turn counted down to it) or one of the rest.
  const bool probe = t.probing != 0 || (t.period == 0 ? kProbeFirst : t.to_probe) == 1;
  return advice_direct(advice, c) != probe ? CopyPath::kDirect : CopyPath::kRing;
}

void CopyPlanner::take(size_t len, uint64_t advice) {
  const int c = copy_class(len);
  Turns& t = turns_[c];
  if (!advice_known(advice, c)) {
    ++t.exploring;
    return;
  }
  if (t.period == 0) {  // the first message since the class became known
    t.period = kProbeFirst;
    t.to_probe = kProbeFirst;
  }
  if (t.probing != 0) {
    --t.probing;
  } else if (t.to_probe == 1) {
    t.probing = kProbeRun - 1;
    t.period = std::min(t.period * 2, kProbePeriod);
    t.to_probe = t.period + 1;
  }
  --t.to_probe;  // counted from the start of the last probe
}

}  // namespace fabq::xport
