#include "tools/demo_conn.h"

#include <rdma/fi_tagged.h>

#include <algorithm>
#include <cstring>

namespace fabq::tools::demo {

constexpr uint32_t kApiVersion = FI_VERSION(1, 17);

[[nodiscard]] bool get_info(Conn& c, const char* provider, const std::string& service,
                            bool source) {
  const Side& s = c.side;
  std::string untagged;  // why the FI_TAGGED question failed, said if the FI_MSG one works
  for (const uint64_t caps : {FI_MSG | FI_TAGGED, FI_MSG}) {
    fi_info* hints = fi_allocinfo();
    if (hints == nullptr) return s.fail("fi_allocinfo", -FI_ENOMEM);
    hints->ep_attr->type = FI_EP_MSG;
    hints->caps = caps;
    // The demo passes an fi_context2 with every operation and registers no memory.
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->addr_format = FI_SOCKADDR_IN;
    hints->fabric_attr->prov_name = strdup(provider);
    const int rc =
        fi_getinfo(kApiVersion, kNode, service.c_str(), source ? FI_SOURCE : 0, hints, &c.obj.info);
    fi_freeinfo(hints);
    const std::string call = "fi_getinfo(" + std::string(kNode) + ", \"" + service + "\"" +
                             (source ? ", FI_SOURCE" : "") + ", FI_EP_MSG, " + cq_flags(caps) + ")";
    if (rc == -FI_ENODATA && caps != FI_MSG) {
      untagged = call + " -> " + describe(rc, "");
      continue;
    }
    if (rc != 0) return s.fail(call, rc);
    if (!untagged.empty()) {
      s.say(
          "%s: %s has no tagged messages on FI_EP_MSG endpoints; asking for FI_MSG alone, "
          "step 3 leaves fi_tsend out",
          untagged.c_str(), provider);
    }
    c.tagged = (caps & FI_TAGGED) != 0;
    const fi_info* i = c.obj.info;
    s.say("%s -> provider %s, fabric %s, domain %s", call.c_str(), i->fabric_attr->prov_name,
          i->fabric_attr->name, i->domain_attr->name);
    s.say("  %s address %s; inject_size %zu, max_msg_size %zu, cq_data_size %zu, %s progress",
          source ? "source" : "destination",
          source ? address(i->src_addr, i->src_addrlen).c_str()
                 : address(i->dest_addr, i->dest_addrlen).c_str(),
          i->tx_attr->inject_size, i->ep_attr->max_msg_size, i->domain_attr->cq_data_size,
          progress_name(i->domain_attr->data_progress));
    if (i->domain_attr->cq_data_size < sizeof(uint32_t)) {
      return s.unexpected("%s carries %zu bytes of remote CQ data; fi_senddata needs 4", provider,
                          i->domain_attr->cq_data_size);
    }
    return true;
  }
  return false;  // not reached: the FI_MSG round returns
}

[[nodiscard]] bool open_eq(Conn& c) {
  fi_eq_attr attr{.wait_obj = FI_WAIT_UNSPEC};
  const int rc = fi_eq_open(c.obj.fabric, &attr, &c.obj.eq, nullptr);
  return rc == 0 || c.side.fail("fi_eq_open", rc);
}

[[nodiscard]] bool open_cq(Conn& c) {
  fi_cq_attr attr{.format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_UNSPEC};
  const int rc = fi_cq_open(c.obj.domain, &attr, &c.obj.cq, nullptr);
  return rc == 0 || c.side.fail("fi_cq_open", rc);
}

[[nodiscard]] bool open_endpoint(Conn& c, fi_info* info) {
  const Side& s = c.side;
  int rc = fi_endpoint(c.obj.domain, info, &c.obj.ep, nullptr);
  if (rc != 0) return s.fail("fi_endpoint", rc);
  if ((rc = fi_ep_bind(c.obj.ep, &c.obj.eq->fid, 0)) != 0) return s.fail("fi_ep_bind(EQ)", rc);
  if ((rc = fi_ep_bind(c.obj.ep, &c.obj.cq->fid, FI_TRANSMIT | FI_RECV)) != 0) {
    return s.fail("fi_ep_bind(CQ)", rc);
  }
  if ((rc = fi_enable(c.obj.ep)) != 0) return s.fail("fi_enable", rc);
  return true;
}

[[nodiscard]] bool post_receives(Conn& c) {
  std::string list;
  for (size_t i = 0; i < kExchangeCount; ++i) {
    const Exchange& x = kExchanges[i];
    if (x.via == Via::kTsend && !c.tagged) continue;
    Op& op = c.rx[i];
    ssize_t rc;
    if (x.via == Via::kTsend) {
      char what[48];
      std::snprintf(what, sizeof(what), "fi_trecv (tag %#llx)", (unsigned long long)c.peer_tag());
      op.what = what;
      rc = fi_trecv(c.obj.ep, op.buf, sizeof(op.buf), nullptr, 0, c.peer_tag(), 0, &op.ctx);
    } else {
      op.what = "fi_recv #" + std::to_string(++c.receives_posted);
      rc = fi_recv(c.obj.ep, op.buf, sizeof(op.buf), nullptr, 0, &op.ctx);
    }
    if (rc != 0) return c.side.fail(op.what, rc);
    list += (list.empty() ? "" : ", ") + op.what;
  }
  c.side.say("posted %s, one for each message the %s will send", list.c_str(),
             c.client ? "server" : "client");
  return true;
}

void print_completion(const Conn& c, const fi_cq_tagged_entry& e) {
  std::string line = "completion " + cq_flags(e.flags) + ": " + c.name_of(e.op_context);
  if (e.flags & FI_RECV) {
    char more[96];
    std::snprintf(more, sizeof(more), ", len %zu", e.len);
    line += more;
    if (e.flags & FI_TAGGED) {
      std::snprintf(more, sizeof(more), ", tag %#llx", (unsigned long long)e.tag);
      line += more;
    }
    if (e.flags & FI_REMOTE_CQ_DATA) {
      std::snprintf(more, sizeof(more), ", data %#llx", (unsigned long long)e.data);
      line += more;
    }
    if (const Op* op = c.find(e.op_context)) {
      line += ", \"" + printable(op->buf, std::min(e.len, sizeof(op->buf))) + "\"";
    }
  } else if (e.flags & FI_SEND) {
    line += " done, its buffer is the application's again";
  }
  c.side.say("%s", line.c_str());
}

namespace {

// Reads the CQ's error entry and says what it holds; returns false: in steps 1-3 and 5 an
// error completion is a failure.
[[nodiscard]] bool report_cq_error(const Conn& c, const std::string& what) {
  fi_cq_err_entry err{};
  const ssize_t rc = fi_cq_readerr(c.obj.cq, &err, 0);
  if (rc != 1) return c.side.fail(what + ": fi_cq_readerr", rc);
  char text[128] = "";
  fi_cq_strerror(c.obj.cq, err.prov_errno, err.err_data, text, sizeof(text));
  return c.side.unexpected("%s: error completion of %s: err %s, prov_errno %d (%s)", what.c_str(),
                           c.name_of(err.op_context).c_str(), describe(err.err, "").c_str(),
                           err.prov_errno, text);
}

// Waits for the completion of `op`, printing every completion as it is read. The other side
// may answer before this side's own send has completed, so completions of other operations
// can come first: they are kept in `early` until waited for.
[[nodiscard]] bool wait_completion(Conn& c, const Op& op, fi_cq_tagged_entry* out) {
  for (auto it = c.early.begin(); it != c.early.end(); ++it) {
    if (it->op_context == &op.ctx) {
      *out = *it;
      c.early.erase(it);
      return true;
    }
  }
  const std::string what = "waiting for the completion of " + op.what;
  for (;;) {
    fi_cq_tagged_entry e{};
    const ssize_t rc =
        c.side.wait([&](int ms) { return fi_cq_sread(c.obj.cq, &e, 1, nullptr, ms); });
    if (rc == -FI_EAVAIL) return report_cq_error(c, what);
    if (rc != 1) return c.side.fail(what, rc);
    print_completion(c, e);
    if (e.op_context == &op.ctx) {
      *out = e;
      return true;
    }
    c.early.push_back(e);
  }
}

// Sends this side's message of exchange i and waits for its completion.
[[nodiscard]] bool send_message(Conn& c, size_t i) {
  const Exchange& x = kExchanges[i];
  const Side& s = c.side;
  Op& op = c.tx[i];
  const char* text = c.my_text(x);
  const size_t len = std::strlen(text);
  std::memcpy(op.buf, text, len);
  switch (x.via) {
    case Via::kSend:
      op.what = "fi_send";
      s.say("fi_send \"%s\" (%zu bytes)", text, len);
      break;
    case Via::kTsend:
      op.what = "fi_tsend";
      s.say("fi_tsend \"%s\" (%zu bytes), tag %#llx", text, len, (unsigned long long)c.my_tag());
      break;
    case Via::kSenddata:
      op.what = "fi_senddata";
      s.say("fi_senddata \"%s\" (%zu bytes), remote CQ data %#llx", text, len,
            (unsigned long long)c.my_data());
      break;
  }
  // A full transmit queue answers -FI_EAGAIN; try again shortly (it does not happen with one
  // message in flight, but an application must allow for it).
  const ssize_t rc = s.wait([&](int) {
    ssize_t r = -FI_EINVAL;
    switch (x.via) {
      case Via::kSend:
        r = fi_send(c.obj.ep, op.buf, len, nullptr, 0, &op.ctx);
        break;
      case Via::kTsend:
        r = fi_tsend(c.obj.ep, op.buf, len, nullptr, 0, c.my_tag(), &op.ctx);
        break;
      case Via::kSenddata:
        r = fi_senddata(c.obj.ep, op.buf, len, nullptr, c.my_data(), 0, &op.ctx);
        break;
    }
    if (r == -FI_EAGAIN) usleep(1000);
    return r;
  });
  if (rc != 0) return s.fail(op.what, rc);
  fi_cq_tagged_entry e;
  if (!wait_completion(c, op, &e)) return false;
  const uint64_t want = FI_SEND | (x.via == Via::kTsend ? FI_TAGGED : FI_MSG);
  if ((e.flags & want) != want) {
    return s.unexpected("%s completed with flags %s; fi_cq(3) says %s", op.what.c_str(),
                        cq_flags(e.flags).c_str(), cq_flags(want).c_str());
  }
  return true;
}

// Waits for the other side's message of exchange i and checks it arrived as it was sent.
[[nodiscard]] bool receive_message(Conn& c, size_t i) {
  const Exchange& x = kExchanges[i];
  const Side& s = c.side;
  const Op& op = c.rx[i];
  fi_cq_tagged_entry e;
  if (!wait_completion(c, op, &e)) return false;
  const uint64_t want = FI_RECV | (x.via == Via::kTsend ? FI_TAGGED : FI_MSG) |
                        (x.via == Via::kSenddata ? FI_REMOTE_CQ_DATA : 0);
  // FI_REMOTE_CQ_DATA must be there for fi_senddata, and only for it.
  if ((e.flags & (want | FI_REMOTE_CQ_DATA)) != want) {
    return s.unexpected("%s completed with flags %s; expected %s", op.what.c_str(),
                        cq_flags(e.flags).c_str(), cq_flags(want).c_str());
  }
  const char* text = c.peer_text(x);
  if (e.len != std::strlen(text) || std::memcmp(op.buf, text, e.len) != 0) {
    return s.unexpected("%s received %zu bytes, not the %zu bytes of \"%s\"", op.what.c_str(),
                        e.len, std::strlen(text), text);
  }
  if (x.via == Via::kTsend && e.tag != c.peer_tag()) {
    return s.unexpected("%s completed with tag %#llx, sent with %#llx", op.what.c_str(),
                        (unsigned long long)e.tag, (unsigned long long)c.peer_tag());
  }
  if (x.via == Via::kSenddata && e.data != c.peer_data()) {
    return s.unexpected("%s completed with data %#llx, sent with %#llx", op.what.c_str(),
                        (unsigned long long)e.data, (unsigned long long)c.peer_data());
  }
  return true;
}

}  // namespace

[[nodiscard]] bool exchange_messages(Conn& c) {
  for (size_t i = 0; i < kExchangeCount; ++i) {
    if (kExchanges[i].via == Via::kTsend && !c.tagged) continue;
    const bool ok = c.client ? send_message(c, i) && receive_message(c, i)
                             : receive_message(c, i) && send_message(c, i);
    if (!ok) return false;
  }
  return true;
}

[[nodiscard]] bool wait_cm_event(Conn& c, uint32_t want, CmEvent* ev) {
  const Side& s = c.side;
  const std::string what = std::string("waiting for ") + event_name(want);
  const ssize_t rc = s.wait([&](int ms) -> ssize_t {
    if (c.obj.cq != nullptr) {
      fi_cq_tagged_entry e{};
      const ssize_t r = fi_cq_read(c.obj.cq, &e, 1);
      if (r == 1) {
        print_completion(c, e);
        c.early.push_back(e);
      } else if (r != -FI_EAGAIN) {
        return kCqTrouble;
      }
    }
    return fi_eq_sread(c.obj.eq, &ev->event, ev->raw, sizeof(ev->raw), ms, 0);
  });
  if (rc == kCqTrouble) {
    fi_cq_tagged_entry e{};
    const ssize_t r = fi_cq_read(c.obj.cq, &e, 1);
    return r == -FI_EAVAIL ? report_cq_error(c, what) : s.fail(what + ": fi_cq_read", r);
  }
  if (rc == -FI_EAVAIL) {
    fi_eq_err_entry err{};
    const ssize_t r = fi_eq_readerr(c.obj.eq, &err, 0);
    if (r < 0) return s.fail(what + ": fi_eq_readerr", r);
    char text[128] = "";
    fi_eq_strerror(c.obj.eq, err.prov_errno, err.err_data, text, sizeof(text));
    return s.unexpected("%s: an error entry on %s: err %s, prov_errno %d (%s)", what.c_str(),
                        c.name_of_fid(err.fid).c_str(), describe(err.err, "").c_str(),
                        err.prov_errno, text);
  }
  if (rc < 0) return s.fail(what, rc);
  if (static_cast<size_t>(rc) < sizeof(fi_eq_cm_entry)) {
    return s.unexpected("%s: fi_eq_sread returned %zd bytes, less than an fi_eq_cm_entry",
                        what.c_str(), rc);
  }
  if (ev->event != want) {
    if (ev->event == FI_CONNREQ && ev->entry()->info != nullptr) {
      fi_freeinfo(ev->entry()->info);
    }
    return s.unexpected("%s: the EQ gave %s on %s", what.c_str(), event_name(ev->event),
                        c.name_of_fid(ev->entry()->fid).c_str());
  }
  ev->data_len = static_cast<size_t>(rc) - sizeof(fi_eq_cm_entry);
  return true;
}

}  // namespace fabq::tools::demo
