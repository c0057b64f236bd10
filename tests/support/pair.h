// Test support: two endpoints of one process connected over 127.0.0.1 through the libfabric
// API: the server side listens (a passive endpoint on a port the system picks), the client
// side connects with fi_connect, the server takes the FI_CONNREQ and accepts, and both see
// FI_CONNECTED. Each side has its own EQ and CQs (side.h).
//
// By default both sides open their objects in one fabric and domain, the server's, as one
// application would: fabq's fault injection then counts their endpoints together (on=ep:0 is
// the client's, opened first; on=ep:1 the server's, opened at the accept). While one side
// waits, the other's EQ is read too, so that the one thread moves both.
//
// PairTest is the gtest fixture of the tests/api tests that need a connection: a Pair whose
// server listens from SetUp on.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "support/side.h"

namespace fabq::testing {

class Pair {
 public:
  explicit Pair(Options opts = {}, bool one_domain = true);
  Pair(const Pair&) = delete;
  Pair& operator=(const Pair&) = delete;

  Side server;
  Side client;

  // The server listening: its fabric, domain, EQ, CQs and passive endpoint.
  bool listen();
  // Where the server listens (fi_getname of its passive endpoint).
  const sockaddr_in& address() const { return address_; }
  // The client's endpoint (in its fabric and domain, or the server's), enabled, not connected.
  bool open_client();
  // Connects the client (opened now if it is not yet) with `connect_data`; the server accepts
  // with `accept_data`; both see FI_CONNECTED. What each side received goes to *got_connect
  // and *got_accept when given.
  bool connect(const std::string& connect_data = std::string(),
               const std::string& accept_data = std::string(), std::string* got_connect = nullptr,
               std::string* got_accept = nullptr);
  // Closes the client's objects, then the server's.
  void close();

 private:
  sockaddr_in address_{};
};

// What the tests/api tests connect with: fabq itself, FI_MSG | FI_TAGGED, one CQ of the
// provider's default size per side (FI_CQ_FORMAT_TAGGED), one domain.
Options api_pair_options();

class PairTest : public ::testing::Test {
 protected:
  explicit PairTest(Options opts = api_pair_options()) : pair_(opts) {}
  void SetUp() override { ASSERT_TRUE(pair_.listen()); }
  void TearDown() override { pair_.close(); }

  // The next event of `side`'s EQ by fi_eq_sread alone (its CQs stay unread) within
  // kTimeoutMs, its entry in *entry: the event, or -1 (a test failure) when none came or an
  // error entry did.
  int read_cm(Side& side, fi_eq_cm_entry* entry);

  fid_domain* domain() const { return pair_.server.domain(); }
  fid_pep* pep() const { return pair_.server.pep(); }
  const sockaddr_in& address() const { return pair_.address(); }
  fid_ep* server_ep() const { return pair_.server.ep(); }
  fid_ep* client_ep() const { return pair_.client.ep(); }
  fid_eq* server_eq() const { return pair_.server.eq(); }
  fid_eq* client_eq() const { return pair_.client.eq(); }
  fid_cq* server_cq() const { return pair_.server.rx_cq(); }
  fid_cq* client_cq() const { return pair_.client.rx_cq(); }

  Pair pair_;
};

}  // namespace fabq::testing
