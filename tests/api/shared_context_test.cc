// Shared transmit and receive contexts (fi_endpoint(3) fi_stx_context, fi_srx_context;
// fi_getinfo(3) FI_SHARED_CONTEXT): "a shared transmit context ... allows multiple endpoints to
// share ... a single transmit queue"; getinfo honours tx_ctx_cnt and rx_ctx_cnt =
// FI_SHARED_CONTEXT as it honours every hint.
#include <rdma/fi_endpoint.h>

#include <cstring>
#include <string>

#include "rdm_fixture.h"

namespace fabq::testing {
namespace {

int getinfo_shared(fi_ep_type type, size_t tx_ctx_cnt, size_t rx_ctx_cnt, fi_info** out) {
  return getinfo_edited(
      [&](fi_info* h) {
        h->ep_attr->type = type;
        h->ep_attr->tx_ctx_cnt = tx_ctx_cnt;
        h->ep_attr->rx_ctx_cnt = rx_ctx_cnt;
      },
      out);
}

TEST(SharedContextGetinfo, SharedTransmitAndReceiveContextsAreOfferedForMsgAndRdm) {
  for (fi_ep_type type : {FI_EP_MSG, FI_EP_RDM}) {
    for (auto [tx, rx] :
         {std::pair{FI_SHARED_CONTEXT, size_t{1}}, std::pair{size_t{1}, FI_SHARED_CONTEXT},
          std::pair{FI_SHARED_CONTEXT, FI_SHARED_CONTEXT}}) {
      fi_info* info = nullptr;
      ASSERT_EQ(getinfo_shared(type, tx, rx, &info), 0) << "type " << type;
      for (fi_info* i = info; i != nullptr; i = i->next) {
        EXPECT_EQ(i->ep_attr->type, type);
        EXPECT_EQ(i->ep_attr->tx_ctx_cnt, tx);
        EXPECT_EQ(i->ep_attr->rx_ctx_cnt, rx);
        EXPECT_EQ(i->domain_attr->max_ep_stx_ctx, 1U);
        EXPECT_EQ(i->domain_attr->max_ep_srx_ctx, 1U);
      }
      fi_freeinfo(info);
    }
  }
}

TEST(SharedContextGetinfo, MoreThanOneContextPerEndpointIsOfferedForRdmOnly) {
  fi_info* info = nullptr;
  EXPECT_EQ(getinfo_shared(FI_EP_MSG, 2, 1, &info), -FI_ENODATA);
  EXPECT_EQ(getinfo_shared(FI_EP_MSG, 1, 2, &info), -FI_ENODATA);
  EXPECT_EQ(info, nullptr);
  // Scalable endpoints (scalable_ep_test.cc).
  ASSERT_EQ(getinfo_shared(FI_EP_RDM, 2, FI_SHARED_CONTEXT, &info), 0);
  EXPECT_EQ(info->ep_attr->tx_ctx_cnt, 2U);
  EXPECT_EQ(info->ep_attr->rx_ctx_cnt, FI_SHARED_CONTEXT);
  fi_freeinfo(info);
}

class SharedTx : public Rdm {
 protected:
  // fi_tx_size_left (deprecated in the headers, so through the ops table).
  static ssize_t tx_left(const Ep* e) { return e->ep->ops->tx_size_left(e->ep); }
  // Posts a delivery-complete send of `text` from `from` to `to`: what fi_sendmsg returned.
  // Nothing completes before a queue of the fabric is read (manual progress), so the send keeps
  // its slot until then.
  static ssize_t post(const Ep* from, const Ep* to, const char* text) {
    return send_delivery_complete(from, to->addr, const_cast<char*>(text), std::strlen(text) + 1);
  }
  // Reads `ep`'s CQ until `n` completions came (receives or sends), each within kWaitMs.
  static void complete(const Ep* ep, int n) {
    for (int i = 0; i < n; ++i) {
      fi_cq_tagged_entry e{};
      ASSERT_EQ(wait_cq(ep->cq, &e), 1) << "completion " << i;
    }
  }
};

TEST_F(SharedTx, EndpointsBoundToOneStxShareItsSlots) {
  fid_stx* stx = open_stx(2);
  Ep* a1 = open_ep({.stx = stx});
  Ep* a2 = open_ep({.stx = stx});
  Ep* b = open_ep();
  EXPECT_EQ(tx_left(a1), 2);
  ASSERT_EQ(post(a1, b, "one"), 0);
  EXPECT_EQ(tx_left(a2), 1);
  ASSERT_EQ(post(a2, b, "two"), 0);
  EXPECT_EQ(post(a1, b, "three"), -FI_EAGAIN) << "both slots of the STX are taken";
  EXPECT_EQ(post(a2, b, "three"), -FI_EAGAIN);
  EXPECT_EQ(tx_left(a1), 0);
  EXPECT_GT(tx_left(b), 0) << "b is not bound to the STX";

  char in[2][16] = {};
  ASSERT_EQ(fi_recv(b->ep, in[0], sizeof(in[0]), nullptr, FI_ADDR_UNSPEC, in[0]), 0);
  ASSERT_EQ(fi_recv(b->ep, in[1], sizeof(in[1]), nullptr, FI_ADDR_UNSPEC, in[1]), 0);
  complete(b, 2);
  complete(a1, 1);
  complete(a2, 1);
  EXPECT_EQ(tx_left(a1), 2) << "each send gave its slot back";
  ASSERT_EQ(post(a1, b, "three"), 0);
  EXPECT_EQ(std::string(in[0]) + " " + in[1], "one two");
}

TEST_F(SharedTx, SendsOfAClosedEndpointGiveTheirSlotsBack) {
  fid_stx* stx = open_stx(2);
  Ep* a1 = open_ep({.stx = stx});
  Ep* a2 = open_ep({.stx = stx});
  Ep* b = open_ep();
  ASSERT_EQ(post(a1, b, "one"), 0);
  ASSERT_EQ(post(a1, b, "two"), 0);
  EXPECT_EQ(post(a2, b, "three"), -FI_EAGAIN);
  ASSERT_EQ(fi_close(&a1->ep->fid), 0);
  a1->ep = nullptr;
  EXPECT_EQ(tx_left(a2), 2);
  EXPECT_EQ(post(a2, b, "three"), 0);
}

TEST_F(SharedTx, AFailedPostHoldsNoSlot) {
  fid_stx* stx = open_stx(1);
  Ep* a = open_ep({.stx = stx});
  Ep* b = open_ep();
  EXPECT_EQ(send_delivery_complete(a, b->addr + 100, const_cast<char*>("x"), 2), -FI_EINVAL)
      << "an fi_addr_t the AV does not hold";
  EXPECT_EQ(tx_left(a), 1);
  EXPECT_EQ(post(a, b, "x"), 0);
}

TEST_F(SharedTx, StxContextChecksItsAttributes) {
  fid_stx* stx = nullptr;
  EXPECT_EQ(fi_stx_context(domain_, nullptr, &stx, nullptr), -FI_EINVAL);
  fi_tx_attr big{};
  big.size = 1025;
  EXPECT_EQ(fi_stx_context(domain_, &big, &stx, nullptr), -FI_EINVAL);
  fi_tx_attr recv{};
  recv.caps = FI_RECV;
  EXPECT_EQ(fi_stx_context(domain_, &recv, &stx, nullptr), -FI_EINVAL);
  EXPECT_EQ(stx, nullptr);
  fi_tx_attr def{};
  ASSERT_EQ(fi_stx_context(domain_, &def, &stx, nullptr), 0);
  EXPECT_EQ(fi_close(&stx->fid), 0);
}

TEST_F(SharedTx, AnStxOfAnotherDomainIsEinval) {
  fid_domain* other = nullptr;
  ASSERT_EQ(fi_domain(fabric_, info_, &other, nullptr), 0);
  fi_tx_attr attr{};
  fid_stx* stx = nullptr;
  ASSERT_EQ(fi_stx_context(other, &attr, &stx, nullptr), 0);
  fid_ep* ep = nullptr;
  ASSERT_EQ(fi_endpoint(domain_, info_, &ep, nullptr), 0);
  EXPECT_EQ(fi_ep_bind(ep, &stx->fid, 0), -FI_EINVAL);
  EXPECT_EQ(fi_ep_bind(ep, &stx->fid, 1), -FI_EINVAL);
  EXPECT_EQ(fi_close(&ep->fid), 0);
  EXPECT_EQ(fi_close(&stx->fid), 0);
  EXPECT_EQ(fi_close(&other->fid), 0);
}

}  // namespace
}  // namespace fabq::testing
