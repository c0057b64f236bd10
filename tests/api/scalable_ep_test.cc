// Scalable endpoints (fi_endpoint(3) fi_scalable_ep, fi_tx_context, fi_rx_context) and named
// receive contexts (fi_getinfo(3) FI_NAMED_RX_CTX, fi_av(3) rx_ctx_bits and fi_rx_addr): "a
// scalable endpoint ... may be used to create multiple transmit and receive contexts", and
// "FI_NAMED_RX_CTX ... allow[s] an initiator to target (or name) a specific receive context as
// part of a data transfer operation".
#include <rdma/fi_endpoint.h>
#include <rdma/fi_rma.h>

#include <cstring>
#include <string>

#include "rdm_fixture.h"

namespace fabq::testing {
namespace {

constexpr int kRxBits = 2;  // up to 4 receive contexts named

int getinfo_contexts(uint64_t caps, size_t tx, size_t rx, fi_info** out) {
  return getinfo_edited(
      [&](fi_info* h) {
        h->caps = caps;
        h->ep_attr->tx_ctx_cnt = tx;
        h->ep_attr->rx_ctx_cnt = rx;
      },
      out);
}

TEST(ScalableGetinfo, SeveralContextsAreOfferedForRdmOnlyWithTheCountsAsked) {
  fi_info* info = nullptr;
  ASSERT_EQ(getinfo_contexts(FI_MSG | FI_NAMED_RX_CTX, 4, 3, &info), 0);
  for (fi_info* i = info; i != nullptr; i = i->next) {
    EXPECT_EQ(i->ep_attr->type, FI_EP_RDM) << "scalable endpoints are RDM";
    EXPECT_EQ(i->ep_attr->tx_ctx_cnt, 4U);
    EXPECT_EQ(i->ep_attr->rx_ctx_cnt, 3U);
    EXPECT_GE(i->domain_attr->max_ep_tx_ctx, 4U);
    EXPECT_GE(i->domain_attr->max_ep_rx_ctx, 3U);
    EXPECT_NE(i->caps & FI_NAMED_RX_CTX, 0U);
    EXPECT_NE(i->tx_attr->caps & FI_NAMED_RX_CTX, 0U) << "the initiator names the context";
    EXPECT_EQ(i->rx_attr->caps & FI_NAMED_RX_CTX, 0U) << "a primary transmit capability";
    EXPECT_EQ(i->domain_attr->mr_mode & FI_MR_ENDPOINT, 0)
        << "a scalable endpoint's regions serve all its contexts";
  }
  fi_freeinfo(info);
  EXPECT_EQ(getinfo_edited(
                [](fi_info* h) {
                  h->ep_attr->type = FI_EP_MSG;
                  h->ep_attr->rx_ctx_cnt = 2;
                },
                &info),
            -FI_ENODATA)
      << "a MSG endpoint has one context of each";
  EXPECT_EQ(getinfo_contexts(FI_MSG, 1000, 1, &info), -FI_ENODATA) << "above max_ep_tx_ctx";
}

TEST(ScalableGetinfo, NamedReceiveContextsAreNotADefaultCapability) {
  fi_info* info = nullptr;
  ASSERT_EQ(getinfo_edited([](fi_info* h) { h->ep_attr->type = FI_EP_RDM; }, &info), 0);
  EXPECT_EQ(info->caps & FI_NAMED_RX_CTX, 0U);
  fi_freeinfo(info);
}

// One scalable endpoint: its contexts, each with a CQ of its own.
struct ScalableEp {
  fid_ep* sep = nullptr;
  std::vector<fid_ep*> tx, rx;
  std::vector<fid_cq*> tx_cq, rx_cq;
  fi_addr_t addr = FI_ADDR_UNSPEC;  // in the fixture's named AV
};

class Scalable : public Rdm {
 protected:
  Scalable() : Rdm(FI_MSG | FI_TAGGED | FI_SOURCE | FI_RMA | FI_NAMED_RX_CTX) {}

  void SetUp() override {
    Rdm::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    fi_av_attr attr{};
    attr.type = FI_AV_TABLE;
    attr.rx_ctx_bits = kRxBits;
    ASSERT_EQ(fi_av_open(domain_, &attr, &named_av_, nullptr), 0);
    avs_.push_back(named_av_);
  }
  void TearDown() override {
    for (ScalableEp* s : seps_) close(s);
    Rdm::TearDown();
  }
  static void close(ScalableEp* s) {
    for (auto* list : {&s->tx, &s->rx}) {
      for (fid_ep* c : *list) EXPECT_EQ(fi_close(&c->fid), 0);
    }
    for (auto* list : {&s->tx_cq, &s->rx_cq}) {
      for (fid_cq* c : *list) EXPECT_EQ(fi_close(&c->fid), 0);
    }
    if (s->sep != nullptr) {
      EXPECT_EQ(fi_close(&s->sep->fid), 0);
    }
    delete s;
  }
  fid_cq* open_cq() {
    fi_cq_attr attr{};
    attr.format = FI_CQ_FORMAT_TAGGED;
    attr.wait_obj = FI_WAIT_UNSPEC;
    fid_cq* cq = nullptr;
    EXPECT_EQ(fi_cq_open(domain_, &attr, &cq, nullptr), 0);
    return cq;
  }
  // A scalable endpoint of `tx` and `rx` contexts, bound to the named AV, enabled, and its
  // name inserted there.
  ScalableEp* open_sep(size_t tx, size_t rx) {
    auto* s = new ScalableEp;
    seps_.push_back(s);
    fi_info* info = fi_dupinfo(info_);
    info->ep_attr->tx_ctx_cnt = tx;
    info->ep_attr->rx_ctx_cnt = rx;
    EXPECT_EQ(fi_scalable_ep(domain_, info, &s->sep, nullptr), 0);
    fi_freeinfo(info);
    if (s->sep == nullptr) return s;
    EXPECT_EQ(fi_scalable_ep_bind(s->sep, &named_av_->fid, 0), 0);
    for (size_t i = 0; i < tx; ++i) {
      fid_ep* c = nullptr;
      EXPECT_EQ(fi_tx_context(s->sep, static_cast<int>(i), nullptr, &c, nullptr), 0);
      if (c == nullptr) continue;
      s->tx.push_back(c);
      s->tx_cq.push_back(open_cq());
      EXPECT_EQ(fi_ep_bind(c, &s->tx_cq.back()->fid, FI_TRANSMIT), 0);
      EXPECT_EQ(fi_enable(c), 0);
    }
    for (size_t i = 0; i < rx; ++i) {
      fid_ep* c = nullptr;
      EXPECT_EQ(fi_rx_context(s->sep, static_cast<int>(i), nullptr, &c, nullptr), 0);
      if (c == nullptr) continue;
      s->rx.push_back(c);
      s->rx_cq.push_back(open_cq());
      EXPECT_EQ(fi_ep_bind(c, &s->rx_cq.back()->fid, FI_RECV), 0);
      EXPECT_EQ(fi_enable(c), 0);
    }
    EXPECT_EQ(fi_enable(s->sep), 0);
    sockaddr_in name{};
    size_t len = sizeof(name);
    EXPECT_EQ(fi_getname(&s->sep->fid, &name, &len), 0);
    EXPECT_EQ(fi_av_insert(named_av_, &name, 1, &s->addr, 0, nullptr), 1);
    return s;
  }
  static fi_addr_t rx_addr(const ScalableEp* s, int i) { return fi_rx_addr(s->addr, i, kRxBits); }

  fid_av* named_av_ = nullptr;
  std::vector<ScalableEp*> seps_;
};

TEST_F(Scalable, EachMessageReachesTheReceiveContextItNamesAndNoOther) {
  ScalableEp* a = open_sep(2, 1);
  ScalableEp* b = open_sep(1, 3);
  char got[3][16] = {};
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(fi_recv(b->rx[i], got[i], sizeof(got[i]), nullptr, FI_ADDR_UNSPEC, got[i]), 0);
  }
  // From both transmit contexts, to receive contexts 2 and 0, in that order.
  char one[] = "to context 2", two[] = "to context 0";
  ASSERT_EQ(fi_send(a->tx[0], one, sizeof(one), nullptr, rx_addr(b, 2), one), 0);
  ASSERT_EQ(fi_send(a->tx[1], two, sizeof(two), nullptr, rx_addr(b, 0), two), 0);
  for (int t = 0; t < 2; ++t) {
    fi_cq_tagged_entry e{};
    ASSERT_EQ(wait_cq(a->tx_cq[t], &e), 1) << "the send of transmit context " << t;
    EXPECT_EQ(e.op_context, t == 0 ? one : two) << "on its own context's CQ";
    EXPECT_NE(e.flags & FI_SEND, 0U);
  }
  for (int i : {2, 0}) {
    fi_cq_tagged_entry e{};
    fi_addr_t src = FI_ADDR_UNSPEC;
    ASSERT_EQ(wait_cq(b->rx_cq[i], &e, nullptr, &src), 1) << "receive context " << i;
    EXPECT_EQ(e.op_context, got[i]);
    EXPECT_STREQ(got[i], i == 2 ? one : two);
    EXPECT_EQ(src, a->addr) << "FI_SOURCE: the sender's scalable endpoint, no context bits";
  }
  EXPECT_FALSE(any_completion_within(b->rx_cq[1], 100)) << "context 1 was not named";
}

TEST_F(Scalable, AnAddressWithoutContextBitsReachesReceiveContextZero) {
  ScalableEp* b = open_sep(1, 2);
  Ep* plain = open_ep(named_av_);
  char got[16] = {};
  ASSERT_EQ(fi_recv(b->rx[0], got, sizeof(got), nullptr, FI_ADDR_UNSPEC, got), 0);
  char text[] = "plain";
  ASSERT_EQ(fi_send(plain->ep, text, sizeof(text), nullptr, b->addr, text), 0);
  fi_cq_tagged_entry e{};
  ASSERT_EQ(wait_cq(b->rx_cq[0], &e), 1);
  EXPECT_STREQ(got, "plain");
  ASSERT_EQ(wait_cq(plain->cq, &e), 1);
}

TEST_F(Scalable, AReceiveContextAnswersThroughATransmitContextOfItsOwn) {
  ScalableEp* a = open_sep(1, 1);
  Ep* plain = open_ep(named_av_);
  char got[16] = {};
  ASSERT_EQ(fi_recv(a->rx[0], got, sizeof(got), nullptr, FI_ADDR_UNSPEC, got), 0);
  char back[16] = {};
  ASSERT_EQ(fi_recv(plain->ep, back, sizeof(back), nullptr, FI_ADDR_UNSPEC, back), 0);
  // The plain endpoint hears from the transmit context first; its answer must still reach the
  // receive context, not the transmit context's connection.
  char ping[] = "ping", pong[] = "pong";
  ASSERT_EQ(fi_send(a->tx[0], ping, sizeof(ping), nullptr, plain->addr, ping), 0);
  fi_cq_tagged_entry e{};
  fi_addr_t src = FI_ADDR_UNSPEC;
  ASSERT_EQ(wait_cq(plain->cq, &e, nullptr, &src), 1);
  EXPECT_STREQ(back, "ping");
  EXPECT_EQ(src, a->addr);
  ASSERT_EQ(fi_send(plain->ep, pong, sizeof(pong), nullptr, src, pong), 0);
  ASSERT_EQ(wait_cq(a->rx_cq[0], &e), 1);
  EXPECT_STREQ(got, "pong");
}

TEST_F(Scalable, TaggedMessagesAndRmaGoThroughContextsToo) {
  ScalableEp* a = open_sep(1, 1);
  ScalableEp* b = open_sep(1, 2);
  uint64_t tagged = 0;
  ASSERT_EQ(fi_trecv(b->rx[1], &tagged, sizeof(tagged), nullptr, FI_ADDR_UNSPEC, 0x77, 0, &tagged),
            0);
  uint64_t value = 0x1234;
  ASSERT_EQ(fi_tsend(a->tx[0], &value, sizeof(value), nullptr, rx_addr(b, 1), 0x77, &value), 0);
  fi_cq_tagged_entry e{};
  ASSERT_EQ(wait_cq(b->rx_cq[1], &e), 1);
  EXPECT_EQ(e.tag, 0x77U);
  EXPECT_EQ(tagged, 0x1234U);
  ASSERT_EQ(wait_cq(a->tx_cq[0], &e), 1);

  // A write into b's region through its receive context 1; the domain's regions serve it.
  char region[32] = {};
  fid_mr* mr = nullptr;
  ASSERT_EQ(fi_mr_reg(domain_, region, sizeof(region), FI_REMOTE_WRITE, 0, 7, 0, &mr, nullptr), 0);
  const uint64_t key = fi_mr_key(mr);
  const uint64_t at =
      (info_->domain_attr->mr_mode & FI_MR_VIRT_ADDR) != 0 ? reinterpret_cast<uint64_t>(region) : 0;
  char text[] = "written";
  ASSERT_EQ(fi_write(a->tx[0], text, sizeof(text), nullptr, rx_addr(b, 1), at, key, text), 0);
  ASSERT_EQ(wait_cq(a->tx_cq[0], &e), 1);
  EXPECT_EQ(e.op_context, text);
  EXPECT_STREQ(region, "written");
  EXPECT_EQ(fi_close(&mr->fid), 0);
}

TEST_F(Scalable, SendingToAReceiveContextThatIsNotOpenFailsTheSend) {
  ScalableEp* a = open_sep(1, 1);
  ScalableEp* b = open_sep(1, 1);  // only context 0
  char text[] = "nobody";
  ASSERT_EQ(fi_send(a->tx[0], text, sizeof(text), nullptr, rx_addr(b, 3), text), 0);
  fi_cq_tagged_entry e{};
  fi_cq_err_entry err{};
  ASSERT_EQ(wait_cq(a->tx_cq[0], &e, &err), -FI_EAVAIL);
  EXPECT_EQ(err.err, FI_ECONNREFUSED);
  EXPECT_EQ(err.op_context, text);
}

TEST_F(Scalable, AClosedReceiveContextGetsNothingMoreAndItsPeersSendsFail) {
  ScalableEp* a = open_sep(1, 1);
  ScalableEp* b = open_sep(1, 2);
  char got[16] = {};
  ASSERT_EQ(fi_recv(b->rx[1], got, sizeof(got), nullptr, FI_ADDR_UNSPEC, got), 0);
  char first[] = "first";
  ASSERT_EQ(fi_send(a->tx[0], first, sizeof(first), nullptr, rx_addr(b, 1), first), 0);
  fi_cq_tagged_entry e{};
  ASSERT_EQ(wait_cq(b->rx_cq[1], &e), 1);
  ASSERT_EQ(wait_cq(a->tx_cq[0], &e), 1);
  ASSERT_EQ(fi_close(&b->rx[1]->fid), 0);
  b->rx.pop_back();
  // The connection to it closed with it. A send that must be delivered fails, aborted on that
  // connection if the sender has not seen it close yet; the next one connects anew, and is
  // refused.
  char second[] = "second";
  fi_cq_err_entry err{};
  for (const int want : {FI_ECONNABORTED, FI_ECONNREFUSED}) {
    iovec iov{second, sizeof(second)};
    fi_msg msg{};
    msg.msg_iov = &iov;
    msg.iov_count = 1;
    msg.addr = rx_addr(b, 1);
    msg.context = second;
    ASSERT_EQ(fi_sendmsg(a->tx[0], &msg, FI_DELIVERY_COMPLETE | FI_COMPLETION), 0);
    ASSERT_EQ(wait_cq(a->tx_cq[0], &e, &err), -FI_EAVAIL) << "never delivered";
    if (want == FI_ECONNABORTED && err.err == FI_ECONNREFUSED) break;  // it had seen the close
    EXPECT_EQ(err.err, want);
  }
  EXPECT_EQ(err.err, FI_ECONNREFUSED);
  EXPECT_FALSE(any_completion_within(b->rx_cq[0], 50)) << "nor delivered to another context";
}

TEST_F(Scalable, ContextsDoOnlyTheirOwnHalfAndTheEndpointNeither) {
  ScalableEp* a = open_sep(1, 1);
  char buf[8] = {};
  EXPECT_EQ(fi_recv(a->tx[0], buf, sizeof(buf), nullptr, FI_ADDR_UNSPEC, buf), -FI_ENOSYS)
      << "a transmit context receives nothing";
  EXPECT_EQ(fi_trecv(a->tx[0], buf, sizeof(buf), nullptr, FI_ADDR_UNSPEC, 0, 0, buf), -FI_ENOSYS);
  EXPECT_EQ(fi_send(a->rx[0], buf, sizeof(buf), nullptr, a->addr, buf), -FI_ENOSYS)
      << "a receive context sends nothing";
  EXPECT_EQ(fi_inject(a->rx[0], buf, sizeof(buf), a->addr), -FI_ENOSYS);
  EXPECT_EQ(fi_send(a->sep, buf, sizeof(buf), nullptr, a->addr, buf), -FI_ENOSYS)
      << "the scalable endpoint itself moves no data";
  EXPECT_EQ(fi_recv(a->sep, buf, sizeof(buf), nullptr, FI_ADDR_UNSPEC, buf), -FI_ENOSYS);
  EXPECT_EQ(fi_write(a->sep, buf, sizeof(buf), nullptr, a->addr, 0, 0, buf), -FI_ENOSYS);
  sockaddr_in sep_name{}, ctx_name{};
  size_t len = sizeof(sep_name);
  ASSERT_EQ(fi_getname(&a->sep->fid, &sep_name, &len), 0);
  for (fid_ep* c : {a->tx[0], a->rx[0]}) {
    len = sizeof(ctx_name);
    ASSERT_EQ(fi_getname(&c->fid, &ctx_name, &len), 0);
    EXPECT_EQ(ctx_name.sin_port, sep_name.sin_port) << "a context has its endpoint's name";
  }
  EXPECT_EQ(a->tx[0]->fid.fclass, static_cast<size_t>(FI_CLASS_TX_CTX));
  EXPECT_EQ(a->rx[0]->fid.fclass, static_cast<size_t>(FI_CLASS_RX_CTX));
  EXPECT_EQ(a->sep->fid.fclass, static_cast<size_t>(FI_CLASS_SEP));
}

TEST_F(Scalable, ContextIndexesAreCheckedAndTheEndpointClosesAfterItsContexts) {
  fi_info* info = fi_dupinfo(info_);
  info->ep_attr->tx_ctx_cnt = 2;
  info->ep_attr->rx_ctx_cnt = 2;
  fid_ep* sep = nullptr;
  ASSERT_EQ(fi_scalable_ep(domain_, info, &sep, nullptr), 0);
  fid_ep* plain = nullptr;
  EXPECT_EQ(fi_endpoint(domain_, info, &plain, nullptr), -FI_EINVAL)
      << "two contexts of a kind are a scalable endpoint's";
  fi_freeinfo(info);
  fid_ep* c = reinterpret_cast<fid_ep*>(0x1);
  EXPECT_EQ(fi_tx_context(sep, 2, nullptr, &c, nullptr), -FI_EINVAL) << "index out of range";
  EXPECT_EQ(c, nullptr);
  EXPECT_EQ(fi_rx_context(sep, -1, nullptr, &c, nullptr), -FI_EINVAL);
  fid_ep* tx = nullptr;
  ASSERT_EQ(fi_tx_context(sep, 1, nullptr, &tx, nullptr), 0);
  EXPECT_EQ(fi_tx_context(sep, 1, nullptr, &c, nullptr), -FI_EINVAL) << "already open";
  EXPECT_EQ(fi_enable(sep), -FI_ENOAV) << "no AV bound";
  EXPECT_EQ(fi_close(&sep->fid), -FI_EBUSY) << "a context is open";
  EXPECT_EQ(fi_close(&tx->fid), 0);
  EXPECT_EQ(fi_close(&sep->fid), 0);
}

TEST_F(Scalable, ATransmitContextSendsOnlyOnceItsEndpointIsEnabledAndHasAName) {
  Ep* b = open_ep(named_av_);
  fi_info* info = fi_dupinfo(info_);
  fid_ep* sep = nullptr;
  ASSERT_EQ(fi_scalable_ep(domain_, info, &sep, nullptr), 0);
  fi_freeinfo(info);
  ASSERT_EQ(fi_scalable_ep_bind(sep, &named_av_->fid, 0), 0);
  fid_ep* tx = nullptr;
  ASSERT_EQ(fi_tx_context(sep, 0, nullptr, &tx, nullptr), 0);
  fid_cq* cq = open_cq();
  ASSERT_EQ(fi_ep_bind(tx, &cq->fid, FI_TRANSMIT), 0);
  ASSERT_EQ(fi_enable(tx), 0) << "with the scalable endpoint's AV";
  char text[] = "early";
  EXPECT_EQ(fi_send(tx, text, sizeof(text), nullptr, b->addr, text), -FI_EOPBADSTATE)
      << "its name is the scalable endpoint's listener's, which fi_enable opens";
  ASSERT_EQ(fi_enable(sep), 0);
  char got[8] = {};
  ASSERT_EQ(fi_recv(b->ep, got, sizeof(got), nullptr, FI_ADDR_UNSPEC, got), 0);
  ASSERT_EQ(fi_send(tx, text, sizeof(text), nullptr, b->addr, text), 0);
  fi_cq_tagged_entry e{};
  ASSERT_EQ(wait_cq(b->cq, &e), 1);
  EXPECT_STREQ(got, "early");
  ASSERT_EQ(wait_cq(cq, &e), 1);
  EXPECT_EQ(fi_close(&tx->fid), 0);
  EXPECT_EQ(fi_close(&cq->fid), 0);
  EXPECT_EQ(fi_close(&sep->fid), 0);
}

TEST_F(Scalable, AvRxCtxBitsNameEveryContextOfAnEntryAndLeaveBitsForEntries) {
  fi_av_attr attr{};
  attr.type = FI_AV_TABLE;
  attr.rx_ctx_bits = 64;
  fid_av* av = reinterpret_cast<fid_av*>(0x1);
  EXPECT_EQ(fi_av_open(domain_, &attr, &av, nullptr), -FI_EINVAL) << "no bits left for entries";
  EXPECT_EQ(av, nullptr);
  // fi_rx_addr(addr, i, 2) for every i: the low bits name the entry, the top two the context.
  ScalableEp* b = open_sep(1, 4);
  char got[4][16] = {};
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(fi_recv(b->rx[i], got[i], sizeof(got[i]), nullptr, FI_ADDR_UNSPEC, got[i]), 0);
  }
  Ep* plain = open_ep(named_av_);
  for (int i = 3; i >= 0; --i) {
    char text[16];
    std::snprintf(text, sizeof(text), "ctx %d", i);
    ASSERT_EQ(fi_inject(plain->ep, text, sizeof(text), rx_addr(b, i)), 0);
  }
  for (int i = 0; i < 4; ++i) {
    fi_cq_tagged_entry e{};
    ASSERT_EQ(wait_cq(b->rx_cq[i], &e), 1) << "context " << i;
    EXPECT_EQ(std::string(got[i]), "ctx " + std::to_string(i));
  }
}

}  // namespace
}  // namespace fabq::testing
