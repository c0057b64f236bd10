// fi_tagged(3) on connected FI_EP_MSG endpoints between two processes on 127.0.0.1: tag
// matching with ignore masks, tags out of order, unexpected messages, FI_PEEK, FI_CLAIM and
// FI_DISCARD, and the completions (FI_TAGGED, the tag in FI_CQ_FORMAT_TAGGED entries). The
// parent process is the passive side and receives; the peer connects and sends.
//
// fabq's spec promises FI_TAGGED on FI_EP_MSG. For another provider without it (libfabric
// 1.17's tcp) the tests skip; develop them with FABQ_TEST_PROVIDER=sockets.
#include <array>
#include <cstring>
#include <map>
#include <string>

#include "support/peer.h"
#include "support/side.h"

namespace fabq::testing {
namespace {

const Options kTagged{.caps = FI_TAGGED, .cq_format = FI_CQ_FORMAT_TAGGED};

// Whether the provider has an FI_EP_MSG entry with FI_TAGGED, asked in a child process: the
// test process forks its peers before it loads libfabric.
bool provider_has_tagged_msg() {
  bool found = false;
  {
    Peer probe([](Link& link) {
      fi_info* info = nullptr;
      const int rc = Side(kTagged).getinfo("127.0.0.1", "0", FI_SOURCE, &info);
      fi_freeinfo(info);
      link.put_u64(rc == 0 ? 1 : 0);
    });
    uint64_t v = 0;
    found = probe.link().get_u64(&v) && v == 1;
    EXPECT_EQ(probe.join(), 0);
  }
  return found;
}

#define SKIP_UNLESS_TAGGED()                                                    \
  do {                                                                          \
    if (!provider_is_fabq() && !provider_has_tagged_msg()) {                    \
      GTEST_SKIP() << provider() << " has no FI_TAGGED on FI_EP_MSG endpoints"; \
    }                                                                           \
  } while (0)

uint64_t op_flags(uint64_t flags) {
  return flags & (FI_SEND | FI_RECV | FI_MSG | FI_TAGGED | FI_REMOTE_CQ_DATA);
}

// msg must stay until the send completes.
ssize_t tsend(Side& c, const std::string& msg, uint64_t tag, fi_context2* ctx) {
  return c.retry(
      [&] { return fi_tsend(c.ep(), msg.data(), msg.size(), nullptr, FI_ADDR_UNSPEC, tag, ctx); });
}
ssize_t trecv(Side& s, char* buf, size_t len, uint64_t tag, uint64_t ignore, fi_context2* ctx) {
  return s.retry(
      [&] { return fi_trecv(s.ep(), buf, len, nullptr, FI_ADDR_UNSPEC, tag, ignore, ctx); });
}
// fi_trecvmsg with `flags`: FI_PEEK, FI_CLAIM, FI_DISCARD and their combinations.
ssize_t trecvmsg(Side& s, char* buf, size_t len, uint64_t tag, fi_context2* ctx, uint64_t flags) {
  iovec iov{buf, len};
  fi_msg_tagged m{.msg_iov = buf != nullptr ? &iov : nullptr,
                  .iov_count = buf != nullptr ? 1u : 0u,
                  .addr = FI_ADDR_UNSPEC,
                  .tag = tag,
                  .ignore = 0,
                  .context = ctx};
  return s.retry([&] { return fi_trecvmsg(s.ep(), &m, flags | FI_COMPLETION); });
}

// Peeks (with extra flags) until the peer's message has arrived: a peek that finds nothing
// completes with FI_ENOMSG, and the message may still be on its way.
Completion peek_until_found(Side& s, uint64_t tag, fi_context2* ctx, uint64_t extra = 0) {
  const auto t0 = Clock::now();
  for (;;) {
    Completion c;
    c.rc = trecvmsg(s, nullptr, 0, tag, ctx, FI_PEEK | extra);
    if (c.rc != 0) {
      ADD_FAILURE() << "fi_trecvmsg(FI_PEEK): " << fi_strerror(static_cast<int>(-c.rc));
      return c;
    }
    c = s.next_rx();
    if (c.rc != -FI_EAVAIL || c.err.err != FI_ENOMSG || ms_since(t0) > kTimeoutMs) return c;
    usleep(2000);
  }
}

void expect_tagged_send(const Completion& c, fi_context2* ctx) {
  ASSERT_EQ(c.rc, 1) << cq_str(c);
  EXPECT_EQ(c.entry.op_context, ctx);
  EXPECT_EQ(op_flags(c.entry.flags), FI_TAGGED | FI_SEND);
}
void expect_tagged_recv(const Completion& c, fi_context2* ctx, uint64_t tag, size_t len) {
  ASSERT_EQ(c.rc, 1) << cq_str(c);
  EXPECT_EQ(c.entry.op_context, ctx);
  EXPECT_EQ(op_flags(c.entry.flags), FI_TAGGED | FI_RECV);
  EXPECT_EQ(c.entry.tag, tag);
  EXPECT_EQ(c.entry.len, len);
}

// ---------------------------------------------------------------------------------------------

TEST(MsgTagged, TaggedCompletionsAreFlaggedTaggedAndCarryTheTag) {
  SKIP_UNLESS_TAGGED();
  const std::string msg = pattern(30, 1);
  Peer client([&](Link& link) {
    Side c(kTagged);
    if (!c.dial(link) || !c.await(link, 'r')) return;
    fi_context2 ctx;
    ASSERT_EQ(tsend(c, msg, 0x55, &ctx), 0);
    expect_tagged_send(c.next_tx(), &ctx);
  });
  Side s(kTagged);
  ASSERT_TRUE(s.serve(client.link()));
  std::array<char, 64> buf{};
  fi_context2 ctx;
  ASSERT_EQ(trecv(s, buf.data(), buf.size(), 0x55, 0, &ctx), 0);
  client.link().signal('r');
  expect_tagged_recv(s.next_rx(), &ctx, 0x55, msg.size());
  EXPECT_EQ(std::string(buf.data(), msg.size()), msg);
  EXPECT_EQ(client.join(&s), 0);
}

TEST(MsgTagged, EachReceiveTakesTheMessageWithItsTagWhateverTheOrderSent) {
  SKIP_UNLESS_TAGGED();
  Peer client([](Link& link) {
    Side c(kTagged);
    if (!c.dial(link) || !c.await(link, 'r')) return;
    const std::string msgs[3] = {"three", "one", "two"};
    fi_context2 ctx[3];
    ASSERT_EQ(tsend(c, msgs[0], 3, &ctx[0]), 0);
    ASSERT_EQ(tsend(c, msgs[1], 1, &ctx[1]), 0);
    ASSERT_EQ(tsend(c, msgs[2], 2, &ctx[2]), 0);
    for (int i = 0; i < 3; ++i) ASSERT_EQ(c.next_tx().rc, 1);
  });
  Side s(kTagged);
  ASSERT_TRUE(s.serve(client.link()));
  std::array<std::array<char, 16>, 4> bufs{};
  fi_context2 ctx[4];
  for (uint64_t tag = 1; tag <= 3; ++tag) {
    ASSERT_EQ(trecv(s, bufs[tag].data(), bufs[tag].size(), tag, 0, &ctx[tag]), 0);
  }
  client.link().signal('r');
  const char* want[4] = {nullptr, "one", "two", "three"};
  for (int n = 0; n < 3; ++n) {
    const Completion c = s.next_rx();
    ASSERT_EQ(c.rc, 1) << cq_str(c);
    const size_t tag = static_cast<fi_context2*>(c.entry.op_context) - ctx;
    ASSERT_TRUE(tag >= 1 && tag <= 3);
    expect_tagged_recv(c, &ctx[tag], tag, std::strlen(want[tag]));
    EXPECT_STREQ(bufs[tag].data(), want[tag]) << "the receive for tag " << tag;
  }
  EXPECT_EQ(client.join(&s), 0);
}

TEST(MsgTagged, IgnoreMaskBitsMatchAnyValueAndTheCompletionHasTheSendersTag) {
  SKIP_UNLESS_TAGGED();
  Peer client([](Link& link) {
    Side c(kTagged);
    if (!c.dial(link) || !c.await(link, 'r')) return;
    const std::string exact = "exact", masked = "masked";
    fi_context2 ctx[2];
    // 0x13ab is outside 0x12xx: only the exact receive may take it.
    ASSERT_EQ(tsend(c, exact, 0x13ab, &ctx[0]), 0);
    ASSERT_EQ(tsend(c, masked, 0x12cd, &ctx[1]), 0);
    for (int i = 0; i < 2; ++i) ASSERT_EQ(c.next_tx().rc, 1);
  });
  Side s(kTagged);
  ASSERT_TRUE(s.serve(client.link()));
  std::array<char, 16> masked{}, exact{};
  fi_context2 ctx_masked, ctx_exact;
  ASSERT_EQ(trecv(s, masked.data(), masked.size(), 0x1200, 0x00ff, &ctx_masked), 0);
  ASSERT_EQ(trecv(s, exact.data(), exact.size(), 0x13ab, 0, &ctx_exact), 0);
  client.link().signal('r');
  for (int n = 0; n < 2; ++n) {
    const Completion c = s.next_rx();
    ASSERT_EQ(c.rc, 1) << cq_str(c);
    if (c.entry.op_context == &ctx_masked) {
      expect_tagged_recv(c, &ctx_masked, 0x12cd, 6);
      EXPECT_STREQ(masked.data(), "masked");
    } else {
      expect_tagged_recv(c, &ctx_exact, 0x13ab, 5);
      EXPECT_STREQ(exact.data(), "exact");
    }
  }
  EXPECT_EQ(client.join(&s), 0);
}

TEST(MsgTagged, MessageSentBeforeItsReceiveIsPostedWaitsForIt) {
  SKIP_UNLESS_TAGGED();
  Peer client([](Link& link) {
    Side c(kTagged);
    if (!c.dial(link)) return;
    const std::string early = "early";
    fi_context2 ctx;
    ASSERT_EQ(tsend(c, early, 9, &ctx), 0);
    link.signal('s');
    expect_tagged_send(c.next_tx(), &ctx);
    c.await(link, 'd');
  });
  Side s(kTagged);
  ASSERT_TRUE(s.serve(client.link()));
  ASSERT_TRUE(s.await(client.link(), 's'));
  usleep(20000);
  std::array<char, 16> buf{};
  fi_context2 ctx;
  ASSERT_EQ(trecv(s, buf.data(), buf.size(), 9, 0, &ctx), 0);
  expect_tagged_recv(s.next_rx(), &ctx, 9, 5);
  EXPECT_STREQ(buf.data(), "early");
  client.link().signal('d');
  EXPECT_EQ(client.join(&s), 0);
}

TEST(MsgTagged, PeekFindsAnArrivedMessageReportsItsLengthAndTagAndLeavesIt) {
  SKIP_UNLESS_TAGGED();
  const std::string msg = pattern(40, 2);
  Peer client([&](Link& link) {
    Side c(kTagged);
    if (!c.dial(link)) return;
    fi_context2 ctx;
    ASSERT_EQ(tsend(c, msg, 7, &ctx), 0);
    expect_tagged_send(c.next_tx(), &ctx);
    c.await(link, 'd');
  });
  Side s(kTagged);
  ASSERT_TRUE(s.serve(client.link()));
  fi_context2 peek_ctx;
  const Completion p = peek_until_found(s, 7, &peek_ctx);
  expect_tagged_recv(p, &peek_ctx, 7, msg.size());
  // The peek took nothing: a receive gets the message.
  std::array<char, 64> buf{};
  fi_context2 ctx;
  ASSERT_EQ(trecv(s, buf.data(), buf.size(), 7, 0, &ctx), 0);
  expect_tagged_recv(s.next_rx(), &ctx, 7, msg.size());
  EXPECT_EQ(std::string(buf.data(), msg.size()), msg);
  client.link().signal('d');
  EXPECT_EQ(client.join(&s), 0);
}

TEST(MsgTagged, PeekWithoutAMatchingMessageCompletesWithEnomsg) {
  SKIP_UNLESS_TAGGED();
  Peer client([](Link& link) {
    Side c(kTagged);
    if (!c.dial(link)) return;
    c.await(link, 'd');
  });
  Side s(kTagged);
  ASSERT_TRUE(s.serve(client.link()));
  fi_context2 ctx;
  ASSERT_EQ(trecvmsg(s, nullptr, 0, 99, &ctx, FI_PEEK), 0);
  const Completion c = s.next_rx();
  ASSERT_EQ(c.rc, -FI_EAVAIL) << cq_str(c);
  EXPECT_EQ(c.err.err, FI_ENOMSG);
  EXPECT_EQ(c.err.op_context, &ctx);
  client.link().signal('d');
  EXPECT_EQ(client.join(&s), 0);
}

TEST(MsgTagged, PeekWithClaimReservesTheMessageForTheClaimingReceive) {
  SKIP_UNLESS_TAGGED();
  Peer client([](Link& link) {
    Side c(kTagged);
    if (!c.dial(link)) return;
    const std::string first = "first", second = "second";
    fi_context2 ctx[2];
    ASSERT_EQ(tsend(c, first, 5, &ctx[0]), 0);
    if (!c.await(link, 'c')) return;  // the server claimed "first"
    ASSERT_EQ(tsend(c, second, 5, &ctx[1]), 0);
    for (int i = 0; i < 2; ++i) ASSERT_EQ(c.next_tx().rc, 1);
    c.await(link, 'd');
  });
  Side s(kTagged);
  ASSERT_TRUE(s.serve(client.link()));
  fi_context2 claim_ctx;
  expect_tagged_recv(peek_until_found(s, 5, &claim_ctx, FI_CLAIM), &claim_ctx, 5, 5);
  client.link().signal('c');
  // A plain receive for the same tag skips the claimed message and takes the next one.
  std::array<char, 16> plain{}, claimed{};
  fi_context2 ctx;
  ASSERT_EQ(trecv(s, plain.data(), plain.size(), 5, 0, &ctx), 0);
  expect_tagged_recv(s.next_rx(), &ctx, 5, 6);
  EXPECT_STREQ(plain.data(), "second");
  // The claimed one comes with FI_CLAIM and the peek's context.
  ASSERT_EQ(trecvmsg(s, claimed.data(), claimed.size(), 5, &claim_ctx, FI_CLAIM), 0);
  expect_tagged_recv(s.next_rx(), &claim_ctx, 5, 5);
  EXPECT_STREQ(claimed.data(), "first");
  client.link().signal('d');
  EXPECT_EQ(client.join(&s), 0);
}

TEST(MsgTagged, ClaimWithDiscardDropsTheClaimedMessage) {
  SKIP_UNLESS_TAGGED();
  Peer client([](Link& link) {
    Side c(kTagged);
    if (!c.dial(link)) return;
    const std::string drop = "drop", keep = "keep";
    fi_context2 ctx[2];
    ASSERT_EQ(tsend(c, drop, 6, &ctx[0]), 0);
    ASSERT_EQ(tsend(c, keep, 6, &ctx[1]), 0);
    for (int i = 0; i < 2; ++i) ASSERT_EQ(c.next_tx().rc, 1);
    c.await(link, 'd');
  });
  Side s(kTagged);
  ASSERT_TRUE(s.serve(client.link()));
  fi_context2 claim_ctx;
  expect_tagged_recv(peek_until_found(s, 6, &claim_ctx, FI_CLAIM), &claim_ctx, 6, 4);
  ASSERT_EQ(trecvmsg(s, nullptr, 0, 6, &claim_ctx, FI_CLAIM | FI_DISCARD), 0);
  const Completion d = s.next_rx();
  ASSERT_EQ(d.rc, 1) << cq_str(d);
  EXPECT_EQ(d.entry.op_context, &claim_ctx);
  // "drop" is gone: the next receive for the tag gets "keep".
  std::array<char, 16> buf{};
  fi_context2 ctx;
  ASSERT_EQ(trecv(s, buf.data(), buf.size(), 6, 0, &ctx), 0);
  expect_tagged_recv(s.next_rx(), &ctx, 6, 4);
  EXPECT_STREQ(buf.data(), "keep");
  client.link().signal('d');
  EXPECT_EQ(client.join(&s), 0);
}

}  // namespace
}  // namespace fabq::testing
