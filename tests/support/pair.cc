#include "support/pair.h"

namespace fabq::testing {

namespace {

// FI_PEEK: the events stay for whoever waits for them.
void peek(const Side& side) {
  if (side.eq() == nullptr) return;
  uint32_t event;
  CmEvent ev;
  (void)fi_eq_read(side.eq(), &event, ev.bytes, sizeof(ev.bytes), FI_PEEK);
}

}  // namespace

Pair::Pair(Options opts, bool one_domain)
    : server(opts), client(opts, one_domain ? &server : nullptr) {
  server.while_waiting([this] { peek(client); });
  client.while_waiting([this] { peek(server); });
}

bool Pair::listen() {
  if (server.listen() == 0) return false;
  address_ = server.name(&server.pep()->fid);
  if (address_.sin_port == 0) {
    ADD_FAILURE() << "fi_getname on a listening passive endpoint gives its port";
    return false;
  }
  return true;
}

bool Pair::open_client() {
  if (server.pep() == nullptr) {
    ADD_FAILURE() << "the server does not listen";
    return false;
  }
  return client.open_active(ntohs(address_.sin_port));
}

bool Pair::connect(const std::string& connect_data, const std::string& accept_data,
                   std::string* got_connect, std::string* got_accept) {
  if (client.ep() == nullptr && !open_client()) return false;
  const int rc = client.connect(connect_data.data(), connect_data.size());
  if (rc != 0) {
    ADD_FAILURE() << "fi_connect: " << fi_strerror(-rc);
    return false;
  }
  fi_info* req = server.wait_connreq(got_connect);
  return req != nullptr && server.open_endpoint(req) &&
         server.accept(accept_data.data(), accept_data.size()) && client.wait_connected(got_accept);
}

void Pair::close() {
  client.close_all();
  server.close_all();
}

Options api_pair_options() {
  Options o;
  o.provider = "fabq";
  o.caps = FI_MSG | FI_TAGGED;
  o.cq_format = FI_CQ_FORMAT_TAGGED;
  o.cq_size = 0;
  o.one_cq = true;
  return o;
}

int PairTest::read_cm(Side& side, fi_eq_cm_entry* entry) {
  uint32_t event = 0;
  const ssize_t n = fi_eq_sread(side.eq(), &event, entry, sizeof(*entry), kTimeoutMs, 0);
  if (n < 0) {
    ADD_FAILURE() << "fi_eq_sread: " << fi_strerror(static_cast<int>(-n));
    return -1;
  }
  return static_cast<int>(event);
}

}  // namespace fabq::testing
