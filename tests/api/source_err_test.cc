// FI_SOURCE_ERR on FI_EP_RDM endpoints (fi_getinfo(3), fi_cq(3)): "if the source address cannot
// be converted into a valid fi_addr_t value, fi_cq_readfrom will return -FI_EAVAIL, even if the
// data were received successfully. The completion will then be reported through fi_cq_readerr
// with error code -FI_EADDRNOTAVAIL"; "The err_data field will be set to the source address
// data ... This may be passed directly into an fi_av_insert call".
#include <rdma/fi_tagged.h>

#include <cstring>

#include "rdm_fixture.h"

namespace fabq::testing {
namespace {

class SourceErr : public Rdm {
 protected:
  SourceErr() : Rdm(FI_MSG | FI_TAGGED | FI_SOURCE | FI_SOURCE_ERR) {}

  void SetUp() override {
    Rdm::SetUp();
    if (HasFatalFailure()) return;
    c_ = open_ep();
    fid_av* other = open_av();
    stranger_ = open_ep(other);  // c's AV does not hold it
    ASSERT_EQ(fi_av_insert(other, &c_->name, 1, &c_in_other_, 0, nullptr), 1);
  }

  // The stranger sends `len` bytes of `text` to c, and its send completes.
  void stranger_sends(const char* text, size_t len) {
    ASSERT_EQ(fi_send(stranger_->ep, text, len, nullptr, c_in_other_, nullptr), 0);
    fi_cq_tagged_entry e{};
    ASSERT_EQ(wait_cq(stranger_->cq, &e), 1);
  }

  Ep* c_ = nullptr;
  Ep* stranger_ = nullptr;
  fi_addr_t c_in_other_ = FI_ADDR_UNSPEC;
};

TEST_F(SourceErr, AnUnknownSenderIsReportedThroughReaderrWithItsAddressAndTheData) {
  char buf[16] = {};
  ASSERT_EQ(fi_recv(c_->ep, buf, sizeof(buf), nullptr, FI_ADDR_UNSPEC, buf), 0);
  stranger_sends("hello", 6);
  fi_cq_tagged_entry e{};
  fi_addr_t src = 0;
  ASSERT_EQ(wait_cq(c_->cq, &e, nullptr, &src), -FI_EAVAIL) << "even though the data arrived";
  fi_cq_err_entry err{};  // err_data_size 0: the provider's buffer
  ASSERT_EQ(fi_cq_readerr(c_->cq, &err, 0), 1);
  EXPECT_EQ(err.err, FI_EADDRNOTAVAIL);
  EXPECT_EQ(err.op_context, buf);
  EXPECT_EQ(err.flags, FI_RECV | FI_MSG);
  EXPECT_EQ(err.len, 6u);
  EXPECT_EQ(err.olen, 0u);
  EXPECT_STREQ(buf, "hello");
  ASSERT_EQ(err.err_data_size, sizeof(sockaddr_in));
  ASSERT_NE(err.err_data, nullptr);
  EXPECT_EQ(std::memcmp(err.err_data, &stranger_->name, sizeof(sockaddr_in)), 0)
      << "in the domain's addr_format, FI_SOCKADDR_IN";
}

TEST_F(SourceErr, TheRawAddressInsertedInTheAvNamesTheSenderFromThenOn) {
  char buf[16] = {};
  ASSERT_EQ(fi_recv(c_->ep, buf, sizeof(buf), nullptr, FI_ADDR_UNSPEC, buf), 0);
  stranger_sends("one", 4);
  fi_cq_tagged_entry e{};
  fi_cq_err_entry err{};
  ASSERT_EQ(wait_cq(c_->cq, &e, &err), -FI_EAVAIL);
  ASSERT_EQ(err.err, FI_EADDRNOTAVAIL);
  sockaddr_in raw{};
  ASSERT_EQ(err.err_data_size, sizeof(raw));
  std::memcpy(&raw, err.err_data, sizeof(raw));
  fi_addr_t known = FI_ADDR_UNSPEC;
  ASSERT_EQ(fi_av_insert(av_, &raw, 1, &known, 0, nullptr), 1);
  ASSERT_EQ(fi_recv(c_->ep, buf, sizeof(buf), nullptr, FI_ADDR_UNSPEC, buf), 0);
  stranger_sends("two", 4);
  fi_addr_t src = FI_ADDR_UNSPEC;
  ASSERT_EQ(wait_cq(c_->cq, &e, nullptr, &src), 1);
  EXPECT_EQ(src, known);
  EXPECT_STREQ(buf, "two");
}

TEST_F(SourceErr, TheAddressIsCopiedIntoTheApplicationsErrDataBuffer) {
  char buf[16] = {};
  ASSERT_EQ(fi_recv(c_->ep, buf, sizeof(buf), nullptr, FI_ADDR_UNSPEC, buf), 0);
  stranger_sends("x", 2);
  fi_cq_tagged_entry e{};
  ASSERT_EQ(wait_cq(c_->cq, &e), -FI_EAVAIL);
  sockaddr_in mine[2] = {};
  fi_cq_err_entry err{};
  err.err_data = mine;
  err.err_data_size = sizeof(mine);
  ASSERT_EQ(fi_cq_readerr(c_->cq, &err, 0), 1);
  EXPECT_EQ(err.err_data, mine);
  EXPECT_EQ(err.err_data_size, sizeof(sockaddr_in)) << "the number of bytes copied";
  EXPECT_EQ(std::memcmp(&mine[0], &stranger_->name, sizeof(sockaddr_in)), 0);
}

TEST_F(SourceErr, ASenderTheAvHoldsCompletesNormally) {
  Ep* a = open_ep();
  char buf[16] = {};
  ASSERT_EQ(fi_recv(c_->ep, buf, sizeof(buf), nullptr, FI_ADDR_UNSPEC, buf), 0);
  ASSERT_EQ(fi_send(a->ep, "known", 6, nullptr, c_->addr, nullptr), 0);
  fi_cq_tagged_entry e{};
  fi_addr_t src = FI_ADDR_UNSPEC;
  ASSERT_EQ(wait_cq(c_->cq, &e, nullptr, &src), 1);
  EXPECT_EQ(src, a->addr);
}

TEST_F(SourceErr, APeekAtAnUnknownSendersMessageReportsItsAddressToo) {
  ASSERT_EQ(fi_tsend(stranger_->ep, "peek", 5, nullptr, c_in_other_, 9, nullptr), 0);
  fi_cq_tagged_entry e{};
  ASSERT_EQ(wait_cq(stranger_->cq, &e), 1);
  fi_msg_tagged m{};
  m.addr = FI_ADDR_UNSPEC;
  m.tag = 9;
  m.context = &m;
  fi_cq_err_entry err{};
  // The message may still be on its way: a peek that finds nothing is FI_ENOMSG, and is retried.
  for (int i = 0; i < 500; ++i) {
    ASSERT_EQ(fi_trecvmsg(c_->ep, &m, FI_PEEK), 0);
    ASSERT_EQ(wait_cq(c_->cq, &e, &err), -FI_EAVAIL);
    if (err.err != FI_ENOMSG) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(err.err, FI_EADDRNOTAVAIL);
  EXPECT_EQ(err.op_context, &m);
  EXPECT_EQ(err.len, 5u);
  EXPECT_EQ(err.tag, 9u);
  ASSERT_EQ(err.err_data_size, sizeof(sockaddr_in));
  EXPECT_EQ(std::memcmp(err.err_data, &stranger_->name, sizeof(sockaddr_in)), 0);
}

TEST_F(SourceErr, TruncationIsTheErrorAMessageTooLongFromAnUnknownSenderGets) {
  char small[2] = {};
  ASSERT_EQ(fi_recv(c_->ep, small, sizeof(small), nullptr, FI_ADDR_UNSPEC, small), 0);
  stranger_sends("too long", 9);
  fi_cq_tagged_entry e{};
  fi_cq_err_entry err{};
  ASSERT_EQ(wait_cq(c_->cq, &e, &err), -FI_EAVAIL);
  EXPECT_EQ(err.err, FI_ETRUNC);
  EXPECT_EQ(err.olen, 7u);
}

}  // namespace
}  // namespace fabq::testing
