// FI_MULTI_RECV (fi_msg(3), fi_cq(3), fi_endpoint(3) FI_OPT_MIN_MULTI_RECV): "a single buffer
// that will receive multiple incoming messages. Received messages will be packed into the
// receive buffer until the buffer has been consumed"; each completion's buf "points to the
// starting location where the receive data was placed"; the FI_MULTI_RECV flag says the buffer
// "has been consumed and was released"; it is released "when the available buffer space falls
// below the specified minimum", and its release is reported "even if other receive completions
// have been suppressed".
#include <rdma/fi_tagged.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "rdm_fixture.h"

namespace fabq::testing {
namespace {

class MultiRecv : public Rdm {
 protected:
  MultiRecv() : Rdm(FI_MSG | FI_TAGGED | FI_SOURCE | FI_MULTI_RECV) {}

  static ssize_t post_multi(Ep* e, void* buf, size_t len, void* context, uint64_t flags = 0) {
    iovec iov{buf, len};
    fi_msg m{.msg_iov = &iov, .iov_count = 1, .addr = FI_ADDR_UNSPEC, .context = context};
    return fi_recvmsg(e->ep, &m, flags | FI_MULTI_RECV);
  }
  static void set_min(Ep* e, size_t min) {
    ASSERT_EQ(fi_setopt(&e->ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, sizeof(min)), 0);
  }
  // Sends `len` bytes of `fill` from `from` to `to` and waits for the send's completion.
  static void send(Ep* from, const Ep* to, size_t len, char fill) {
    std::vector<char> out(len, fill);
    ASSERT_EQ(fi_send(from->ep, out.data(), len, nullptr, to->addr, nullptr), 0);
    fi_cq_tagged_entry e{};
    ASSERT_EQ(wait_cq(from->cq, &e), 1);
  }
  // The next receive completion of `e`, and the source it names.
  static fi_cq_tagged_entry next(Ep* e, fi_addr_t* src = nullptr) {
    fi_cq_tagged_entry c{};
    fi_addr_t from = FI_ADDR_NOTAVAIL;
    EXPECT_EQ(wait_cq(e->cq, &c, nullptr, &from), 1);
    if (src != nullptr) *src = from;
    return c;
  }
};

TEST_F(MultiRecv, MessagesArePackedIntoTheBufferAndTheLastBeforeTheMinimumReleasesIt) {
  Ep* a = open_ep();
  Ep* b = open_ep();
  set_min(b, 256);
  std::vector<char> buf(1024);
  int ctx = 0;
  ASSERT_EQ(post_multi(b, buf.data(), buf.size(), &ctx), 0);
  const size_t lens[] = {100, 100, 100, 500};
  size_t off = 0;
  for (size_t i = 0; i < 4; ++i) {
    send(a, b, lens[i], static_cast<char>('a' + i));
    fi_addr_t src = FI_ADDR_UNSPEC;
    const fi_cq_tagged_entry c = next(b, &src);
    EXPECT_EQ(c.op_context, &ctx);
    EXPECT_EQ(c.buf, buf.data() + off) << "message " << i;
    EXPECT_EQ(c.len, lens[i]);
    EXPECT_EQ(src, a->addr);
    EXPECT_EQ(buf[off], 'a' + static_cast<char>(i));
    off += lens[i];
    // 1024 - 800 = 224 left, below 256: the fourth releases the buffer.
    EXPECT_EQ(c.flags, FI_RECV | FI_MSG | (i == 3 ? FI_MULTI_RECV : 0)) << "message " << i;
  }
  EXPECT_FALSE(any_completion_within(b->cq, 20));
}

TEST_F(MultiRecv, MessagesBufferedBeforeThePostAreTakenByIt) {
  Ep* a = open_ep();
  Ep* b = open_ep();
  set_min(b, 64);
  for (char f : {'x', 'y', 'z'}) send(a, b, 40, f);
  std::vector<char> buf(150);
  ASSERT_EQ(post_multi(b, buf.data(), buf.size(), buf.data()), 0);
  for (int i = 0; i < 3; ++i) {
    const fi_cq_tagged_entry c = next(b);
    EXPECT_EQ(c.buf, buf.data() + 40 * i);
    EXPECT_EQ(c.len, 40u);
    // 150 - 80 = 70 left after the second, 30 after the third: below 64.
    EXPECT_EQ((c.flags & FI_MULTI_RECV) != 0, i == 2) << i;
  }
  EXPECT_EQ(std::string(buf.data(), 120),
            std::string(40, 'x') + std::string(40, 'y') + std::string(40, 'z'));
}

TEST_F(MultiRecv, AMessageLongerThanWhatRemainsIsTruncatedAndReleasesTheBuffer) {
  Ep* a = open_ep();
  Ep* b = open_ep();
  set_min(b, 1);
  std::vector<char> buf(256);
  ASSERT_EQ(post_multi(b, buf.data(), buf.size(), &buf), 0);
  send(a, b, 200, 'p');
  EXPECT_EQ(next(b).len, 200u);
  send(a, b, 100, 'q');
  fi_cq_tagged_entry c{};
  fi_cq_err_entry err{};
  ASSERT_EQ(wait_cq(b->cq, &c, &err), -FI_EAVAIL);
  EXPECT_EQ(err.err, FI_ETRUNC);
  EXPECT_EQ(err.len, 56u);
  EXPECT_EQ(err.olen, 44u);
  EXPECT_EQ(err.buf, buf.data() + 200);
  EXPECT_EQ(err.flags, FI_RECV | FI_MSG | FI_MULTI_RECV);
  EXPECT_EQ(buf[199], 'p') << "messages never overlap";
}

TEST_F(MultiRecv, MessagesFromSeveralSendersNeverOverlap) {
  Ep* a = open_ep();
  Ep* c = open_ep();
  Ep* b = open_ep();
  set_min(b, 1);
  constexpr int kEach = 40;
  constexpr size_t kLen = 64;
  std::vector<char> buf(2 * kEach * kLen);
  ASSERT_EQ(post_multi(b, buf.data(), buf.size(), &buf), 0);
  std::vector<std::vector<char>> outs;
  for (int i = 0; i < kEach; ++i) {
    for (Ep* from : {a, c}) {
      outs.emplace_back(kLen, static_cast<char>(from == a ? 'A' + i % 26 : 'a' + i % 26));
      ASSERT_EQ(fi_send(from->ep, outs.back().data(), kLen, nullptr, b->addr, nullptr), 0);
    }
  }
  std::vector<char*> starts;
  for (int i = 0; i < 2 * kEach; ++i) {
    const fi_cq_tagged_entry e = next(b);
    ASSERT_EQ(e.len, kLen);
    auto* start = static_cast<char*>(e.buf);
    ASSERT_GE(start, buf.data());
    ASSERT_LE(start + kLen, buf.data() + buf.size());
    EXPECT_EQ(std::count(start, start + kLen, start[0]), static_cast<long>(kLen))
        << "a message is whole where its completion says";
    EXPECT_EQ((e.flags & FI_MULTI_RECV) != 0, i == 2 * kEach - 1) << i;
    starts.push_back(start);
  }
  std::sort(starts.begin(), starts.end());
  for (size_t i = 1; i < starts.size(); ++i) EXPECT_GE(starts[i] - starts[i - 1], 64);
}

TEST_F(MultiRecv, TheMinimumDefaultsToSixteenKibAndAppliesToBuffersPostedAfterIt) {
  Ep* b = open_ep();
  size_t min = 0;
  size_t len = sizeof(min);
  ASSERT_EQ(fi_getopt(&b->ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, &len), 0);
  EXPECT_EQ(min, 16384u);
  EXPECT_EQ(len, sizeof(size_t));
  set_min(b, 300);
  ASSERT_EQ(fi_getopt(&b->ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, &len), 0);
  EXPECT_EQ(min, 300u);
  int small = 0;
  EXPECT_EQ(fi_setopt(&b->ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &small, sizeof(small)),
            -FI_EINVAL);
}

TEST_F(MultiRecv, CancelReleasesThePartlyUsedBuffer) {
  Ep* a = open_ep();
  Ep* b = open_ep();
  set_min(b, 16);
  std::vector<char> buf(512);
  int ctx = 0;
  ASSERT_EQ(post_multi(b, buf.data(), buf.size(), &ctx), 0);
  send(a, b, 100, 'c');
  EXPECT_EQ(next(b).flags, FI_RECV | FI_MSG);
  ASSERT_EQ(fi_cancel(&b->ep->fid, &ctx), 0);
  fi_cq_tagged_entry c{};
  fi_cq_err_entry err{};
  ASSERT_EQ(wait_cq(b->cq, &c, &err), -FI_EAVAIL);
  EXPECT_EQ(err.err, FI_ECANCELED);
  EXPECT_EQ(err.op_context, &ctx);
  EXPECT_NE(err.flags & FI_MULTI_RECV, 0u) << "the buffer is the application's again";
  EXPECT_EQ(fi_cancel(&b->ep->fid, &ctx), -FI_ENOENT);
}

TEST_F(MultiRecv, TheReleaseIsReportedEvenWhenCompletionsAreSuppressed) {
  Ep* a = open_ep();
  Ep* b = open_ep({.cq_flags = FI_SELECTIVE_COMPLETION});
  set_min(b, 100);
  std::vector<char> buf(300);
  ASSERT_EQ(post_multi(b, buf.data(), buf.size(), &buf), 0);  // without FI_COMPLETION
  send(a, b, 150, 's');
  EXPECT_FALSE(any_completion_within(b->cq, 50)) << "suppressed";
  send(a, b, 100, 't');
  const fi_cq_tagged_entry c = next(b);
  EXPECT_EQ(c.flags, FI_RECV | FI_MSG | FI_MULTI_RECV);
  EXPECT_EQ(c.buf, buf.data() + 150);
}

TEST_F(MultiRecv, RxOpFlagsMakeFiRecvPostMultiReceiveBuffers) {
  Ep* a = open_ep();
  Ep* b = open_ep({.rx_op_flags = FI_MULTI_RECV});
  set_min(b, 10);
  std::vector<char> buf(100);
  ASSERT_EQ(fi_recv(b->ep, buf.data(), buf.size(), nullptr, FI_ADDR_UNSPEC, &buf), 0);
  send(a, b, 30, '1');
  send(a, b, 30, '2');
  EXPECT_EQ(next(b).buf, buf.data());
  EXPECT_EQ(next(b).buf, buf.data() + 30) << "the same buffer took the second message";
  // Tagged receives are not multi-receive buffers: the flag is for fi_msg(3) receives.
  char tbuf[8];
  EXPECT_EQ(fi_trecv(b->ep, tbuf, sizeof(tbuf), nullptr, FI_ADDR_UNSPEC, 1, 0, tbuf), 0);
}

// An SRX's buffer takes the messages of every endpoint bound to it; each slice completes on
// the CQ of the endpoint its message came through.
TEST_F(MultiRecv, ASharedReceiveContextsBufferTakesEveryBoundEndpointsMessages) {
  Ep* a = open_ep();
  fid_ep* srx = open_srx();
  Ep* bound[2] = {open_ep({.srx = srx}), open_ep({.srx = srx})};
  size_t min = 50;
  ASSERT_EQ(fi_setopt(&srx->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, sizeof(min)), 0);
  send(a, bound[0], 100, 'x');  // buffered in the SRX before the buffer is posted
  std::vector<char> buf(350);
  iovec iov{buf.data(), buf.size()};
  fi_msg m{.msg_iov = &iov, .iov_count = 1, .addr = FI_ADDR_UNSPEC, .context = &buf};
  ASSERT_EQ(fi_recvmsg(srx, &m, FI_MULTI_RECV), 0);
  fi_cq_tagged_entry c = next(bound[0]);
  EXPECT_EQ(c.buf, buf.data());
  EXPECT_EQ(c.flags, FI_RECV | FI_MSG);
  send(a, bound[1], 100, 'y');
  c = next(bound[1]);
  EXPECT_EQ(c.buf, buf.data() + 100) << "on the CQ of the endpoint it came through";
  EXPECT_EQ(c.flags, FI_RECV | FI_MSG);
  send(a, bound[0], 120, 'z');  // 30 left: below 50
  c = next(bound[0]);
  EXPECT_EQ(c.buf, buf.data() + 200);
  EXPECT_EQ(c.flags, FI_RECV | FI_MSG | FI_MULTI_RECV);
  EXPECT_EQ(buf[0], 'x');
  EXPECT_EQ(buf[100], 'y');
  EXPECT_EQ(buf[200], 'z');
}

TEST_F(MultiRecv, TaggedOrScatteredMultiReceiveBuffersAreRefused) {
  Ep* b = open_ep();
  char one[16], two[16];
  iovec iov[2] = {{one, sizeof(one)}, {two, sizeof(two)}};
  fi_msg m{.msg_iov = iov, .iov_count = 2, .addr = FI_ADDR_UNSPEC, .context = nullptr};
  EXPECT_EQ(fi_recvmsg(b->ep, &m, FI_MULTI_RECV), -FI_EINVAL) << "one buffer";
  fi_msg_tagged t{.msg_iov = iov, .iov_count = 1, .addr = FI_ADDR_UNSPEC, .tag = 1};
  EXPECT_EQ(fi_trecvmsg(b->ep, &t, FI_MULTI_RECV), -FI_EBADFLAGS);
  EXPECT_FALSE(any_completion_within(b->cq, 20)) << "nothing was posted";
}

}  // namespace
}  // namespace fabq::testing
