// FI_MSG_PREFIX (fi_getinfo(3) mode, fi_msg(3) NOTES, fi_cq(3) len): an application that
// supports it gives msg_prefix_size bytes in front of every send and receive buffer; the buffer
// pointer points at the prefix, the lengths include it, the payload follows it, and a receive
// completion's len "also reflects the size of the prefix buffer".
#include <rdma/fi_tagged.h>

#include <cstring>
#include <tuple>
#include <vector>

#include "rdm_fixture.h"

namespace fabq::testing {
namespace {

int getinfo_mode(uint64_t mode, uint64_t caps, size_t rx_ctx_cnt, fi_info** out) {
  return getinfo_edited(
      [&](fi_info* h) {
        h->ep_attr->type = FI_EP_RDM;
        h->caps = caps;
        h->mode = mode;
        h->ep_attr->rx_ctx_cnt = rx_ctx_cnt;
      },
      out);
}

TEST(MsgPrefixGetinfo, AnApplicationThatSupportsPrefixModeGetsIt) {
  fi_info* info = nullptr;
  ASSERT_EQ(getinfo_mode(FI_MSG_PREFIX, FI_MSG | FI_TAGGED, 1, &info), 0);
  for (fi_info* i = info; i != nullptr; i = i->next) {
    EXPECT_NE(i->mode & FI_MSG_PREFIX, 0U);
    EXPECT_NE(i->tx_attr->mode & FI_MSG_PREFIX, 0U);
    EXPECT_NE(i->rx_attr->mode & FI_MSG_PREFIX, 0U);
    EXPECT_GT(i->ep_attr->msg_prefix_size, 0U);
    EXPECT_EQ(i->ep_attr->msg_prefix_size % 8, 0U) << "a multiple of 8 bytes";
  }
  fi_freeinfo(info);
}

TEST(MsgPrefixGetinfo, OthersAndMultiReceiveOrSharedReceiveUsersDoNot) {
  using Case = std::tuple<uint64_t, uint64_t, size_t>;
  for (auto [mode, caps, rx] : {Case{0, FI_MSG, 1}, Case{FI_MSG_PREFIX, FI_MSG | FI_MULTI_RECV, 1},
                                Case{FI_MSG_PREFIX, FI_MSG, FI_SHARED_CONTEXT}}) {
    fi_info* info = nullptr;
    ASSERT_EQ(getinfo_mode(mode, caps, rx, &info), 0);
    for (fi_info* i = info; i != nullptr; i = i->next) {
      EXPECT_EQ(i->mode & FI_MSG_PREFIX, 0U);
      EXPECT_EQ(i->ep_attr->msg_prefix_size, 0U);
    }
    fi_freeinfo(info);
  }
}

class MsgPrefix : public Rdm {
 protected:
  MsgPrefix() { mode_ = FI_MSG_PREFIX; }
  void SetUp() override {
    Rdm::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_NE(info_->mode & FI_MSG_PREFIX, 0U);
    prefix_ = info_->ep_attr->msg_prefix_size;
  }
  // A buffer of prefix_ + n bytes: the prefix filled with `fill`, then `payload` (n bytes).
  std::vector<char> framed(const char* payload, size_t n, char fill = 'P') const {
    std::vector<char> b(prefix_ + n, fill);
    std::memcpy(b.data() + prefix_, payload, n);
    return b;
  }
  size_t prefix_ = 0;
};

TEST_F(MsgPrefix, ThePayloadFollowsThePrefixAndLenCountsIt) {
  Ep* a = open_ep();
  Ep* b = open_ep();
  std::vector<char> in(prefix_ + 16, '\xEE');
  ASSERT_EQ(fi_recv(b->ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, in.data()), 0);
  std::vector<char> out = framed("hello", 6);
  ASSERT_EQ(fi_send(a->ep, out.data(), out.size(), nullptr, b->addr, nullptr), 0);
  fi_cq_tagged_entry e{};
  ASSERT_EQ(wait_cq(b->cq, &e), 1);
  EXPECT_EQ(e.len, prefix_ + 6) << "len includes the prefix";
  EXPECT_STREQ(in.data() + prefix_, "hello");
  EXPECT_EQ(in[prefix_ - 1], '\xEE') << "fabq writes nothing in the prefix";
}

TEST_F(MsgPrefix, TaggedMessagesAndTruncationCountThePrefixToo) {
  Ep* a = open_ep();
  Ep* b = open_ep();
  std::vector<char> in(prefix_ + 4, '\xEE');
  ASSERT_EQ(fi_trecv(b->ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, 3, 0, in.data()), 0);
  std::vector<char> out = framed("abcdef", 6);
  ASSERT_EQ(fi_tsend(a->ep, out.data(), out.size(), nullptr, b->addr, 3, nullptr), 0);
  fi_cq_tagged_entry e{};
  fi_cq_err_entry err{};
  ASSERT_EQ(wait_cq(b->cq, &e, &err), -FI_EAVAIL);
  EXPECT_EQ(err.err, FI_ETRUNC);
  EXPECT_EQ(err.len, prefix_ + 4);
  EXPECT_EQ(err.olen, 2U);
  EXPECT_EQ(std::memcmp(in.data() + prefix_, "abcd", 4), 0);
}

TEST_F(MsgPrefix, ABufferShorterThanThePrefixIsEinval) {
  Ep* a = open_ep();
  Ep* b = open_ep();
  std::vector<char> buf(prefix_);
  EXPECT_EQ(fi_send(a->ep, buf.data(), prefix_ - 1, nullptr, b->addr, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_recv(b->ep, buf.data(), prefix_ - 1, nullptr, FI_ADDR_UNSPEC, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_inject(a->ep, buf.data(), 0, b->addr), -FI_EINVAL);
  iovec split[2] = {{buf.data(), prefix_ / 2}, {buf.data() + prefix_ / 2, prefix_ / 2}};
  EXPECT_EQ(fi_sendv(a->ep, split, nullptr, 2, b->addr, nullptr), -FI_EINVAL)
      << "the prefix cannot be split between buffers";
  fi_msg multi{.msg_iov = split, .iov_count = 1, .addr = FI_ADDR_UNSPEC};
  EXPECT_EQ(fi_recvmsg(b->ep, &multi, FI_MULTI_RECV), -FI_EINVAL) << "no multi-receive with it";
}

// "the size of the prefix buffer is not counted toward any message limits, including inject".
TEST_F(MsgPrefix, ThePrefixDoesNotCountTowardInjectSize) {
  Ep* a = open_ep();
  Ep* b = open_ep();
  const size_t inject = info_->tx_attr->inject_size;
  std::vector<char> out(prefix_ + inject + 1, 'x');
  EXPECT_EQ(fi_inject(a->ep, out.data(), prefix_ + inject + 1, b->addr), -FI_EMSGSIZE);
  ASSERT_EQ(fi_inject(a->ep, out.data(), prefix_ + inject, b->addr), 0);
  std::vector<char> in(prefix_ + inject);
  ASSERT_EQ(fi_recv(b->ep, in.data(), in.size(), nullptr, FI_ADDR_UNSPEC, nullptr), 0);
  fi_cq_tagged_entry e{};
  ASSERT_EQ(wait_cq(b->cq, &e), 1);
  EXPECT_EQ(e.len, prefix_ + inject);
}

}  // namespace
}  // namespace fabq::testing
