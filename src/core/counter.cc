#include "core/counter.h"

namespace fabq::core {

Result<std::unique_ptr<Counter>> Counter::create(const CounterConfig& config) {
  std::unique_ptr<WaitObject> own;
  if (config.wait == WaitKind::kSet) {
    if (config.wait_set == nullptr) return Code::kInval;
  } else if (config.wait != WaitKind::kNone) {
    auto w = WaitObject::create(config.wait);
    if (!w.ok()) return w.status();
    own = std::move(w.value());
  }
  std::unique_ptr<Counter> c(new Counter(config, std::move(own)));
  if (config.wait == WaitKind::kSet) config.wait_set->add(c.get());
  return c;
}

Counter::Counter(const CounterConfig& config, std::unique_ptr<WaitObject> own_wait)
    : wait_kind_(config.wait),
      spin_ns_(config.spin_ns),
      wait_set_(config.wait == WaitKind::kSet ? config.wait_set : nullptr),
      own_wait_(std::move(own_wait)),
      own_gate_(own_wait_.get()),
      gate_(wait_set_ != nullptr ? wait_set_->gate() : &own_gate_) {}

Counter::~Counter() {
  if (wait_set_ != nullptr) wait_set_->remove(this);
}

void Counter::updated(uint64_t new_value) {
  updates_.fetch_add(1, std::memory_order_seq_cst);
  // Sleepers announce the threshold they need as their wake_at: wake them only when the new
  // value reaches it.
  gate_->notify(new_value);
}

// Called after the value it reports has been stored. A poller that takes the mark (acquire)
// and then reads the counter sees that value; were the mark set first, a poll in between would
// take it and read the old value, and the change would never be reported.
void Counter::mark_for_poll() {
  polled_.store(true, std::memory_order_release);
}

// fi_poll(3) measures changes from the last fi_poll, fi_cntr_set or fi_cntr_add: the mark is
// cleared before the new value is stored, so that a completion that races with the call keeps
// its report unless it came entirely before it.
void Counter::add(uint64_t n) {
  polled_.store(false, std::memory_order_relaxed);
  updated(value_.fetch_add(n, std::memory_order_seq_cst) + n);
}

void Counter::set(uint64_t v) {
  polled_.store(false, std::memory_order_relaxed);
  value_.store(v, std::memory_order_seq_cst);
  updated(v);
}

void Counter::complete(uint64_t n) {
  const uint64_t v = value_.fetch_add(n, std::memory_order_seq_cst) + n;
  mark_for_poll();
  updated(v);
}

// Only fi_poll, fi_cntr_set and fi_cntr_add clear the mark: a change of the error value, even
// by the application, is reported.
void Counter::add_error(uint64_t n) {
  errors_.fetch_add(n, std::memory_order_seq_cst);
  mark_for_poll();
  updates_.fetch_add(1, std::memory_order_seq_cst);
  gate_->notify_all();
}

void Counter::complete_error(uint64_t n) {
  add_error(n);
}

void Counter::set_error(uint64_t v) {
  errors_.store(v, std::memory_order_seq_cst);
  mark_for_poll();
  updates_.fetch_add(1, std::memory_order_seq_cst);
  gate_->notify_all();
}

Status Counter::wait(uint64_t threshold, int timeout_ms) {
  if (wait_kind_ == WaitKind::kNone || wait_kind_ == WaitKind::kSet) return Code::kNoSys;
  const uint64_t errors_at_start = errors();
  const Deadline deadline = Deadline::from_timeout_ms(timeout_ms);
  for (;;) {
    if (value() >= threshold) return OkStatus();
    if (errors() != errors_at_start) return Code::kAvail;
    if (deadline.expired()) return Code::kTimedOut;
    const Status s = wait_until(*gate_, threshold, deadline, spin_ns_, [&] {
      return value() >= threshold || errors() != errors_at_start;
    });
    if (s.code() == Code::kIntr) return Code::kAgain;
    if (!s.ok() && s.code() != Code::kAgain) return s;
    // ok: re-check; kAgain: the deadline passed, re-check once and report the timeout.
  }
}

Status Counter::try_wait() {
  if (gate_->object() == nullptr) return Code::kNoSys;
  gate_->arm_external();
  return OkStatus();
}

}  // namespace fabq::core
