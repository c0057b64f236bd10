// Step 4 of `fabq demo`, fabq's own: faults injected through its extension (fi_fabq.h), and
// what the application sees of them.
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "fabq/fi_fabq.h"
#include "tools/demo_conn.h"

namespace fabq::tools::demo {
namespace {

constexpr char kFaultTarget[] = "server";  // the server endpoint's set_name() name

// "0", or "0x1005 (FI_FABQ_EVENT_EP_FATAL)": fabq gives an event kind as prov_errno when an
// event caused the error.
std::string prov_errno_name(const fi_fabq_async_ops* ops, int prov_errno) {
  const auto kind = static_cast<uint32_t>(prov_errno);
  if (kind < FI_FABQ_EVENT_FIRST || kind > FI_FABQ_EVENT_LAST) return std::to_string(prov_errno);
  char text[96];
  std::snprintf(text, sizeof(text), "%#x (%s)", kind, ops->event_type_str(kind));
  return text;
}

// Reads one error completion of `op` (fi_cq_read, which answers -FI_EAVAIL while an error
// entry heads the queue, then fi_cq_readerr) and checks its err and prov_errno.
[[nodiscard]] bool expect_cq_error(Conn& c, const fi_fabq_async_ops* ops, const Op& op,
                                   int want_err, int want_prov) {
  const Side& s = c.side;
  fi_cq_tagged_entry e{};
  const ssize_t rc = s.wait([&](int) {
    const ssize_t r = fi_cq_read(c.obj.cq, &e, 1);
    if (r == -FI_EAGAIN) usleep(1000);
    return r;
  });
  if (rc != -FI_EAVAIL) {
    if (rc == 1) print_completion(c, e);
    return rc == 1 ? s.unexpected("fi_cq_read gave a completion, not -FI_EAVAIL")
                   : s.fail("fi_cq_read (waiting for the error completion of " + op.what + ")", rc);
  }
  s.say("fi_cq_read -> -FI_EAVAIL: an error completion heads the CQ");
  fi_cq_err_entry err{};
  const ssize_t r = fi_cq_readerr(c.obj.cq, &err, 0);
  if (r != 1) return s.fail("fi_cq_readerr", r);
  char text[128] = "";
  fi_cq_strerror(c.obj.cq, err.prov_errno, err.err_data, text, sizeof(text));
  s.say("fi_cq_readerr -> %s, flags %s, err %s, prov_errno %s", c.name_of(err.op_context).c_str(),
        cq_flags(err.flags).c_str(), describe(err.err, "").c_str(),
        prov_errno_name(ops, err.prov_errno).c_str());
  s.say("  fi_cq_strerror(prov_errno) -> \"%s\"", text);
  if (err.op_context != &op.ctx || err.err != want_err || err.prov_errno != want_prov) {
    return s.unexpected("expected the error completion of %s with err %s, prov_errno %d",
                        op.what.c_str(), errno_name(want_err).c_str(), want_prov);
  }
  return true;
}

[[nodiscard]] bool post_fault_receive(Conn& c, Op& op, const char* why) {
  op.what = "fi_recv #" + std::to_string(++c.receives_posted);
  const ssize_t rc = fi_recv(c.obj.ep, op.buf, sizeof(op.buf), nullptr, 0, &op.ctx);
  if (rc != 0) return c.side.fail(op.what, rc);
  c.side.say("%s -> 0: posted; %s", op.what.c_str(), why);
  return true;
}

}  // namespace

[[nodiscard]] bool inject_faults(Conn& c) {
  const Side& s = c.side;
  fi_fabq_async_ops* ops = nullptr;
  int rc = fi_open_ops(&c.obj.domain->fid, FI_FABQ_ASYNC_OPS, 0, reinterpret_cast<void**>(&ops),
                       nullptr);
  if (rc != 0) return s.fail("fi_open_ops(domain, FI_FABQ_ASYNC_OPS)", rc);
  // A named target finds this endpoint whatever else the domain holds; on=ep:0 would count.
  if ((rc = ops->set_name(&c.obj.ep->fid, kFaultTarget)) != 0) return s.fail("set_name", rc);
  s.say("fi_open_ops(domain, \"%s\") -> 0; set_name(endpoint, \"%s\") -> 0", FI_FABQ_ASYNC_OPS,
        kFaultTarget);

  // A receive completes in error: the application learns it from the CQ.
  const std::string receive_rule = std::string("error=FI_EIO,on=ep:") + kFaultTarget;
  if ((rc = ops->inject(c.obj.domain, receive_rule.c_str())) != 0) {
    return s.fail("inject(\"" + receive_rule + "\")", rc);
  }
  s.say("inject(\"%s\") -> 0: the next receive posted on the endpoint fails", receive_rule.c_str());
  if (!post_fault_receive(c, c.fault_rx[0], "the rule fails it")) return false;
  if (!expect_cq_error(c, ops, c.fault_rx[0], FI_EIO, 0)) return false;

  // The endpoint fails: an error entry on its EQ, an event on the domain's asynchronous
  // channel, its posted receives completed in error, later posts refused.
  if (!post_fault_receive(c, c.fault_rx[1], "waiting for data when the endpoint fails")) {
    return false;
  }
  const std::string fatal_rule = std::string("event=ep_fatal,on=ep:") + kFaultTarget;
  if ((rc = ops->inject(c.obj.domain, fatal_rule.c_str())) != 0) {
    return s.fail("inject(\"" + fatal_rule + "\")", rc);
  }
  s.say("inject(\"%s\") -> 0: the endpoint fails now", fatal_rule.c_str());
  CmEvent ev;
  const ssize_t got = s.wait(
      [&](int ms) { return fi_eq_sread(c.obj.eq, &ev.event, ev.raw, sizeof(ev.raw), ms, 0); });
  if (got != -FI_EAVAIL) {
    return got >= 0 ? s.unexpected("fi_eq_sread gave %s, not -FI_EAVAIL", event_name(ev.event))
                    : s.fail("fi_eq_sread (waiting for the error entry)", got);
  }
  s.say("fi_eq_sread -> -FI_EAVAIL: an error entry heads the EQ");
  fi_eq_err_entry err{};
  const ssize_t r = fi_eq_readerr(c.obj.eq, &err, 0);
  if (r < 0) return s.fail("fi_eq_readerr", r);
  char text[160] = "";
  fi_eq_strerror(c.obj.eq, err.prov_errno, err.err_data, text, sizeof(text));
  s.say("fi_eq_readerr -> fid = %s, err %s, prov_errno %s", c.name_of_fid(err.fid).c_str(),
        describe(err.err, "").c_str(), prov_errno_name(ops, err.prov_errno).c_str());
  s.say("  fi_eq_strerror(prov_errno) -> \"%s\"", text);
  if (err.fid != &c.obj.ep->fid || err.err != FI_EIO || err.prov_errno != FI_FABQ_EVENT_EP_FATAL) {
    return s.unexpected("expected the server endpoint, FI_EIO, FI_FABQ_EVENT_EP_FATAL");
  }

  // The channel holds the same failure as an event, after whatever came before it (fabq
  // raises FI_FABQ_EVENT_COMM_EST when a connection carries its first packet). Every event
  // read is acknowledged: until then the endpoint could not be closed.
  for (int seen = 0;; ++seen) {
    if (seen == 16) return s.unexpected("no FI_FABQ_EVENT_EP_FATAL among 16 events");
    fi_fabq_async_event ae{};
    rc = static_cast<int>(s.wait([&](int ms) { return ops->get_event(c.obj.domain, &ae, ms); }));
    if (rc != 0) return s.fail("get_event (waiting for FI_FABQ_EVENT_EP_FATAL)", rc);
    const int acked = ops->ack_event(c.obj.domain, &ae);
    s.say("get_event -> %s on %s (seq %llu); ack_event -> %d", ops->event_type_str(ae.type),
          c.name_of_fid(ae.fid).c_str(), (unsigned long long)ae.seq, acked);
    if (acked != 0) return s.fail("ack_event", acked);
    if (ae.type != FI_FABQ_EVENT_EP_FATAL) continue;
    if (ae.fid != &c.obj.ep->fid) return s.unexpected("the event names another object");
    break;
  }

  if (!expect_cq_error(c, ops, c.fault_rx[1], FI_EIO, FI_FABQ_EVENT_EP_FATAL)) return false;
  Op& refused = c.fault_rx[2];
  refused.what = "fi_recv";
  const ssize_t post =
      fi_recv(c.obj.ep, refused.buf, sizeof(refused.buf), nullptr, 0, &refused.ctx);
  s.say("fi_recv -> %s: a failed endpoint takes nothing more until it is closed",
        describe(post, "").c_str());
  if (post != -FI_EOPBADSTATE) return s.unexpected("fi_recv was not refused with -FI_EOPBADSTATE");
  return true;
}

}  // namespace fabq::tools::demo
