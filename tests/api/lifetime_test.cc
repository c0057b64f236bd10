// Object lifetimes (fi_fabric(3), fi_domain(3): "all objects associated with the opened domain
// must be released prior to calling fi_close, otherwise the call will return -FI_EBUSY") and
// the op tables fabq hands out: every slot points somewhere, unsupported operations answer
// -FI_ENOSYS (src/prov/noop.h), fid->context and fid->fclass are what the open said.
#include <netinet/in.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_rma.h>

#include "fabq_fixture.h"

namespace fabq::testing {
namespace {

class Lifetime : public FabqTest {
 protected:
  // Closes the fixture's domain now (for tests about the fabric alone).
  void close_domain() {
    ASSERT_EQ(fi_close(&domain_->fid), 0);
    domain_ = nullptr;
  }

  fid_wait* open_wait(enum fi_wait_obj obj = FI_WAIT_UNSPEC) {
    fi_wait_attr attr{};
    attr.wait_obj = obj;
    fid_wait* w = nullptr;
    const int rc = fi_wait_open(fabric_, &attr, &w);
    EXPECT_EQ(rc, 0) << fi_strerror(-rc);
    return w;
  }

  fid_poll* open_poll() {
    fi_poll_attr attr{};
    fid_poll* p = nullptr;
    const int rc = fi_poll_open(domain_, &attr, &p);
    EXPECT_EQ(rc, 0) << fi_strerror(-rc);
    return p;
  }

  static fi_eq_attr writable_eq(size_t size = 0) {
    fi_eq_attr attr{};
    attr.size = size;
    attr.flags = FI_WRITE;
    return attr;
  }
};

template <class T>
T* sentinel() {
  return reinterpret_cast<T*>(uintptr_t{0x1});
}

// ----------------------------------------------------------------------------------------------
// A closed object's fid is poisoned before its memory is given back: until that memory is
// reused, a second fi_close (the most common use of a closed fid) is -FI_EINVAL, not a double
// free. The application's own read of the freed fid (fi_close is an inline call through
// fid->ops) is what AddressSanitizer and ThreadSanitizer report, so these run in the build
// without them.

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define FABQ_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define FABQ_SANITIZED 1
#endif
#endif

#ifdef FABQ_SANITIZED
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

#define SKIP_WHEN_SANITIZED()                                                              \
  do {                                                                                     \
    if (kSanitized) GTEST_SKIP() << "the test reads a freed fid, which sanitizers report"; \
  } while (0)

TEST_F(Lifetime, ClosingAQueueOrCounterTwiceIsEinvalTheSecondTime) {
  SKIP_WHEN_SANITIZED();
  fid_eq* eq = open_eq({});
  fid_cq* cq = open_cq({});
  fid_cntr* cntr = open_cntr({});
  fid_wait* wait = open_wait();
  fid_poll* poll = open_poll();
  for (fid* f : {&eq->fid, &cq->fid, &cntr->fid, &wait->fid, &poll->fid}) {
    ASSERT_EQ(fi_close(f), 0);
    EXPECT_EQ(fi_close(f), -FI_EINVAL);
  }
}

TEST_F(Lifetime, ClosingAnEndpointOrPassiveEndpointTwiceIsEinvalTheSecondTime) {
  SKIP_WHEN_SANITIZED();
  fid_ep* ep = nullptr;
  ASSERT_EQ(fi_endpoint(domain_, info_, &ep, nullptr), 0);
  fid_pep* pep = nullptr;
  ASSERT_EQ(fi_passive_ep(fabric_, info_, &pep, nullptr), 0);
  fi_rx_attr rx{};
  fid_ep* srx = nullptr;
  ASSERT_EQ(fi_srx_context(domain_, &rx, &srx, nullptr), 0);
  for (fid* f : {&ep->fid, &pep->fid, &srx->fid}) {
    ASSERT_EQ(fi_close(f), 0);
    EXPECT_EQ(fi_close(f), -FI_EINVAL);
  }
}

TEST_F(Lifetime, ClosingADomainAndAFabricTwiceIsEinvalTheSecondTime) {
  SKIP_WHEN_SANITIZED();
  ASSERT_EQ(fi_close(&domain_->fid), 0);
  EXPECT_EQ(fi_close(&domain_->fid), -FI_EINVAL);
  domain_ = nullptr;
  ASSERT_EQ(fi_close(&fabric_->fid), 0);
  EXPECT_EQ(fi_close(&fabric_->fid), -FI_EINVAL);
  fabric_ = nullptr;
}

// ----------------------------------------------------------------------------------------------
// fi_close of a parent with open children: -FI_EBUSY, and nothing changes.

TEST_F(Lifetime, FabricCloseWithOpenDomainIsBusy) {
  EXPECT_EQ(fi_close(&fabric_->fid), -FI_EBUSY);
  // The fabric and the domain still work.
  fid_eq* eq = open_eq({});
  ASSERT_NE(eq, nullptr);
  EXPECT_EQ(fi_close(&eq->fid), 0);
  fid_cq* cq = open_cq({});
  ASSERT_NE(cq, nullptr);
  EXPECT_EQ(fi_close(&cq->fid), 0);
  EXPECT_EQ(fi_close(&fabric_->fid), -FI_EBUSY);
  close_domain();
  EXPECT_EQ(fi_close(&fabric_->fid), 0);
  fabric_ = nullptr;
}

TEST_F(Lifetime, FabricCloseWithOpenEqIsBusy) {
  close_domain();
  fid_eq* eq = open_eq({});
  ASSERT_NE(eq, nullptr);
  EXPECT_EQ(fi_close(&fabric_->fid), -FI_EBUSY);
  EXPECT_EQ(fi_close(&fabric_->fid), -FI_EBUSY) << "a failed close changes nothing";
  EXPECT_EQ(fi_close(&eq->fid), 0);
  EXPECT_EQ(fi_close(&fabric_->fid), 0);
  fabric_ = nullptr;
}

TEST_F(Lifetime, FabricCloseWithOpenWaitSetIsBusy) {
  close_domain();
  fid_wait* w = open_wait();
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(fi_close(&fabric_->fid), -FI_EBUSY);
  EXPECT_EQ(fi_wait(w, 0), -FI_EAGAIN) << "the wait set still works";
  EXPECT_EQ(fi_close(&w->fid), 0);
  EXPECT_EQ(fi_close(&fabric_->fid), 0);
  fabric_ = nullptr;
}

TEST_F(Lifetime, DomainCloseWithOpenCqIsBusy) {
  fid_cq* cq = open_cq({});
  ASSERT_NE(cq, nullptr);
  EXPECT_EQ(fi_close(&domain_->fid), -FI_EBUSY);
  fi_cq_entry e[1];
  EXPECT_EQ(fi_cq_read(cq, e, 1), -FI_EAGAIN) << "the CQ still works";
  EXPECT_EQ(fi_close(&cq->fid), 0);
  close_domain();
}

TEST_F(Lifetime, DomainCloseWithOpenCounterIsBusy) {
  fi_cntr_attr attr{};
  attr.events = FI_CNTR_EVENTS_COMP;
  fid_cntr* c = open_cntr(attr);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(fi_close(&domain_->fid), -FI_EBUSY);
  EXPECT_EQ(fi_cntr_add(c, 3), 0);
  EXPECT_EQ(fi_cntr_read(c), 3u) << "the counter still works";
  EXPECT_EQ(fi_close(&c->fid), 0);
  close_domain();
}

TEST_F(Lifetime, DomainCloseWithOpenPollSetIsBusy) {
  fid_poll* p = open_poll();
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(fi_close(&domain_->fid), -FI_EBUSY);
  void* ctx[1];
  EXPECT_EQ(fi_poll(p, ctx, 1), 0) << "the poll set still works";
  EXPECT_EQ(fi_close(&p->fid), 0);
  close_domain();
}

TEST_F(Lifetime, DomainCloseWithOpenAvIsBusy) {
  fi_av_attr attr{};
  attr.type = FI_AV_TABLE;
  fid_av* av = nullptr;
  ASSERT_EQ(fi_av_open(domain_, &attr, &av, nullptr), 0);
  EXPECT_EQ(fi_close(&domain_->fid), -FI_EBUSY);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  EXPECT_EQ(fi_av_insert(av, &sa, 1, nullptr, 0, nullptr), 1) << "the AV still works";
  EXPECT_EQ(fi_close(&av->fid), 0);
  close_domain();
}

TEST_F(Lifetime, DomainCloseAfterItsChildrenAreClosedSucceedsAndFreesTheirSlots) {
  fi_cntr_attr cattr{};
  cattr.events = FI_CNTR_EVENTS_COMP;
  for (int round = 0; round < 3; ++round) {
    fid_cq* cq = open_cq({});
    fid_cntr* c = open_cntr(cattr);
    fid_poll* p = open_poll();
    ASSERT_NE(cq, nullptr);
    ASSERT_NE(c, nullptr);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(fi_close(&p->fid), 0);
    EXPECT_EQ(fi_close(&c->fid), 0);
    EXPECT_EQ(fi_close(&cq->fid), 0);
  }
  close_domain();
}

TEST_F(Lifetime, WaitSetCloseWithMembersIsBusy) {
  fid_wait* w = open_wait();
  ASSERT_NE(w, nullptr);
  fi_eq_attr attr{};
  attr.wait_obj = FI_WAIT_SET;
  attr.wait_set = w;
  fid_eq* eq = open_eq(attr);
  ASSERT_NE(eq, nullptr);
  EXPECT_EQ(fi_close(&w->fid), -FI_EBUSY);
  EXPECT_EQ(fi_close(&eq->fid), 0);
  EXPECT_EQ(fi_close(&w->fid), 0);
}

TEST_F(Lifetime, CqInAPollSetCannotBeClosedUntilThePollSetIsClosed) {
  fid_poll* p = open_poll();
  fid_cq* cq = open_cq({});
  ASSERT_NE(p, nullptr);
  ASSERT_NE(cq, nullptr);
  ASSERT_EQ(fi_poll_add(p, &cq->fid, 0), 0);
  EXPECT_EQ(fi_close(&cq->fid), -FI_EBUSY);
  EXPECT_EQ(fi_close(&p->fid), 0) << "closing the poll set releases its members";
  EXPECT_EQ(fi_close(&cq->fid), 0);
}

TEST_F(Lifetime, CounterInAPollSetCannotBeClosedUntilItIsDeleted) {
  fid_poll* p = open_poll();
  fi_cntr_attr attr{};
  attr.events = FI_CNTR_EVENTS_COMP;
  fid_cntr* c = open_cntr(attr);
  ASSERT_NE(p, nullptr);
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(fi_poll_add(p, &c->fid, 0), 0);
  EXPECT_EQ(fi_close(&c->fid), -FI_EBUSY);
  EXPECT_EQ(fi_poll_del(p, &c->fid, 0), 0);
  EXPECT_EQ(fi_close(&c->fid), 0);
  EXPECT_EQ(fi_close(&p->fid), 0);
}

// ----------------------------------------------------------------------------------------------
// fi_domain_bind: one EQ per domain; the EQ outlives the domain.

TEST_F(Lifetime, EqBoundToDomainCannotBeClosedUntilTheDomainIsClosed) {
  fid_eq* eq = open_eq({});
  ASSERT_NE(eq, nullptr);
  ASSERT_EQ(fi_domain_bind(domain_, &eq->fid, 0), 0);
  EXPECT_EQ(fi_close(&eq->fid), -FI_EBUSY);
  EXPECT_EQ(fi_close(&eq->fid), -FI_EBUSY);
  close_domain();
  EXPECT_EQ(fi_close(&eq->fid), 0);
}

TEST_F(Lifetime, EqBoundWithRegMrCannotBeClosedUntilTheDomainIsClosed) {
  fid_eq* eq = open_eq({});
  ASSERT_NE(eq, nullptr);
  ASSERT_EQ(fi_domain_bind(domain_, &eq->fid, FI_REG_MR), 0);
  EXPECT_EQ(fi_close(&eq->fid), -FI_EBUSY);
  close_domain();
  EXPECT_EQ(fi_close(&eq->fid), 0);
}

TEST_F(Lifetime, DomainBindOfASecondEqIsBusy) {
  fid_eq* a = open_eq({});
  fid_eq* b = open_eq({});
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(fi_domain_bind(domain_, &a->fid, 0), 0);
  EXPECT_EQ(fi_domain_bind(domain_, &b->fid, 0), -FI_EBUSY);
  EXPECT_EQ(fi_domain_bind(domain_, &a->fid, 0), -FI_EBUSY) << "binding the same EQ again";
  EXPECT_EQ(fi_close(&b->fid), 0) << "the refused EQ is not held";
  close_domain();
  EXPECT_EQ(fi_close(&a->fid), 0);
}

TEST_F(Lifetime, DomainBindOfANonEqFidIsInvalid) {
  fid_cq* cq = open_cq({});
  ASSERT_NE(cq, nullptr);
  fi_cntr_attr cattr{};
  cattr.events = FI_CNTR_EVENTS_COMP;
  fid_cntr* c = open_cntr(cattr);
  ASSERT_NE(c, nullptr);
  fid_wait* w = open_wait();
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(fi_domain_bind(domain_, &cq->fid, 0), -FI_EINVAL);
  EXPECT_EQ(fi_domain_bind(domain_, &c->fid, 0), -FI_EINVAL);
  EXPECT_EQ(fi_domain_bind(domain_, &w->fid, 0), -FI_EINVAL);
  EXPECT_EQ(fi_domain_bind(domain_, &fabric_->fid, 0), -FI_EINVAL);
  EXPECT_EQ(fi_domain_bind(domain_, &domain_->fid, 0), -FI_EINVAL);
  EXPECT_EQ(fi_close(&w->fid), 0);
  EXPECT_EQ(fi_close(&c->fid), 0);
  EXPECT_EQ(fi_close(&cq->fid), 0);
  // Nothing was bound: an EQ binds now.
  fid_eq* eq = open_eq({});
  ASSERT_NE(eq, nullptr);
  EXPECT_EQ(fi_domain_bind(domain_, &eq->fid, 0), 0);
  close_domain();
  EXPECT_EQ(fi_close(&eq->fid), 0);
}

TEST_F(Lifetime, DomainBindWithFlagsOtherThanRegMrIsBadFlags) {
  fid_eq* eq = open_eq({});
  ASSERT_NE(eq, nullptr);
  for (uint64_t flags : {FI_SEND, FI_RECV, FI_WRITE, FI_REG_MR | FI_SEND, 1ULL << 63}) {
    EXPECT_EQ(fi_domain_bind(domain_, &eq->fid, flags), -FI_EBADFLAGS) << std::hex << flags;
  }
  EXPECT_EQ(fi_close(&eq->fid), 0) << "a refused bind does not hold the EQ";
  eq = open_eq({});
  ASSERT_NE(eq, nullptr);
  EXPECT_EQ(fi_domain_bind(domain_, &eq->fid, FI_REG_MR), 0);
  close_domain();
  EXPECT_EQ(fi_close(&eq->fid), 0);
}

// ----------------------------------------------------------------------------------------------
// Closing a queue with entries frees them (ASan's leak checker watches).

TEST_F(Lifetime, ClosingAnEqWithPendingEventsFreesThem) {
  fid_eq* eq = open_eq(writable_eq(16));
  ASSERT_NE(eq, nullptr);
  for (int i = 0; i < 10; ++i) {
    fi_eq_entry e{};
    e.context = reinterpret_cast<void*>(uintptr_t(i + 1));
    e.data = static_cast<uint64_t>(i);
    EXPECT_EQ(fi_eq_write(eq, FI_NOTIFY, &e, sizeof(e), 0), static_cast<ssize_t>(sizeof(e)));
  }
  EXPECT_EQ(fi_close(&eq->fid), 0);
}

TEST_F(Lifetime, ClosingAnOverrunEqFreesItsEvents) {
  fid_eq* eq = open_eq(writable_eq(4));
  ASSERT_NE(eq, nullptr);
  fi_eq_entry e{};
  ssize_t rc = 0;
  for (int i = 0; i < 64 && rc >= 0; ++i) rc = fi_eq_write(eq, FI_NOTIFY, &e, sizeof(e), 0);
  EXPECT_EQ(rc, -FI_EOVERRUN);
  EXPECT_EQ(fi_close(&eq->fid), 0);
}

TEST_F(Lifetime, ClosingAPartlyReadEqFreesTheRest) {
  fid_eq* eq = open_eq(writable_eq(8));
  ASSERT_NE(eq, nullptr);
  fi_eq_entry e{};
  for (int i = 0; i < 6; ++i) {
    ASSERT_EQ(fi_eq_write(eq, FI_NOTIFY, &e, sizeof(e), 0), static_cast<ssize_t>(sizeof(e)));
  }
  uint32_t event = 0;
  fi_eq_entry out{};
  EXPECT_EQ(fi_eq_read(eq, &event, &out, sizeof(out), 0), static_cast<ssize_t>(sizeof(out)));
  EXPECT_EQ(fi_eq_read(eq, &event, &out, sizeof(out), FI_PEEK), static_cast<ssize_t>(sizeof(out)));
  EXPECT_EQ(fi_close(&eq->fid), 0);
}

TEST_F(Lifetime, ClosingASignalledCqFreesIt) {
  // No public call puts a completion into a CQ before endpoints exist; a pending signal is
  // the state a CQ can hold here.
  fi_cq_attr attr{};
  attr.wait_obj = FI_WAIT_UNSPEC;
  fid_cq* cq = open_cq(attr);
  ASSERT_NE(cq, nullptr);
  EXPECT_EQ(fi_cq_signal(cq), 0);
  EXPECT_EQ(fi_close(&cq->fid), 0);
}

// ----------------------------------------------------------------------------------------------
// A failed open leaves the output pointer NULL.

TEST_F(Lifetime, FailedEqOpenLeavesOutputNull) {
  fi_eq_attr attr{};
  attr.flags = FI_SEND;
  fid_eq* eq = sentinel<fid_eq>();
  EXPECT_EQ(fi_eq_open(fabric_, &attr, &eq, nullptr), -FI_EBADFLAGS);
  EXPECT_EQ(eq, nullptr);
  attr = {};
  attr.wait_obj = FI_WAIT_SET;  // without a wait set
  eq = sentinel<fid_eq>();
  EXPECT_EQ(fi_eq_open(fabric_, &attr, &eq, nullptr), -FI_EINVAL);
  EXPECT_EQ(eq, nullptr);
}

TEST_F(Lifetime, FailedCqOpenLeavesOutputNull) {
  fi_cq_attr attr{};
  attr.flags = FI_SEND;
  fid_cq* cq = sentinel<fid_cq>();
  EXPECT_EQ(fi_cq_open(domain_, &attr, &cq, nullptr), -FI_EBADFLAGS);
  EXPECT_EQ(cq, nullptr);
  attr = {};
  attr.format = static_cast<fi_cq_format>(FI_CQ_FORMAT_TAGGED + 1);
  cq = sentinel<fid_cq>();
  EXPECT_EQ(fi_cq_open(domain_, &attr, &cq, nullptr), -FI_EINVAL);
  EXPECT_EQ(cq, nullptr);
}

TEST_F(Lifetime, FailedCntrOpenLeavesOutputNull) {
  fi_cntr_attr attr{};
  attr.events = static_cast<fi_cntr_events>(FI_CNTR_EVENTS_COMP + 1);
  fid_cntr* c = sentinel<fid_cntr>();
  EXPECT_EQ(fi_cntr_open(domain_, &attr, &c, nullptr), -FI_EINVAL);
  EXPECT_EQ(c, nullptr);
  attr = {};
  attr.events = FI_CNTR_EVENTS_COMP;
  attr.flags = FI_SEND;
  c = sentinel<fid_cntr>();
  EXPECT_EQ(fi_cntr_open(domain_, &attr, &c, nullptr), -FI_EBADFLAGS);
  EXPECT_EQ(c, nullptr);
}

TEST_F(Lifetime, FailedWaitOpenLeavesOutputNull) {
  fi_wait_attr attr{};
  attr.wait_obj = FI_WAIT_NONE;
  fid_wait* w = sentinel<fid_wait>();
  EXPECT_EQ(fi_wait_open(fabric_, &attr, &w), -FI_EINVAL);
  EXPECT_EQ(w, nullptr);
  attr = {};
  attr.wait_obj = FI_WAIT_UNSPEC;
  attr.flags = FI_SEND;
  w = sentinel<fid_wait>();
  EXPECT_EQ(fi_wait_open(fabric_, &attr, &w), -FI_EBADFLAGS);
  EXPECT_EQ(w, nullptr);
}

// A C application may store any int in an enum field; fabq (C++) must reject such values
// without undefined behaviour (UBSan's -fsanitize=enum watches the loads).
template <class E>
void store_raw(E* field, int value) {
  static_assert(sizeof(E) == sizeof(int));
  memcpy(static_cast<void*>(field), &value, sizeof(value));
}

TEST_F(Lifetime, OutOfRangeCqFormatFromCIsRejected) {
  fi_cq_attr attr{};
  store_raw(&attr.format, 1000);
  fid_cq* cq = sentinel<fid_cq>();
  EXPECT_EQ(fi_cq_open(domain_, &attr, &cq, nullptr), -FI_EINVAL);
  EXPECT_EQ(cq, nullptr);
}

TEST_F(Lifetime, OutOfRangeCntrEventsFromCAreRejected) {
  fi_cntr_attr attr{};
  store_raw(&attr.events, 1000);
  fid_cntr* c = sentinel<fid_cntr>();
  EXPECT_EQ(fi_cntr_open(domain_, &attr, &c, nullptr), -FI_EINVAL);
  EXPECT_EQ(c, nullptr);
}

TEST_F(Lifetime, OutOfRangeEqWaitObjFromCIsRejected) {
  fi_eq_attr attr{};
  store_raw(&attr.wait_obj, 1000);
  fid_eq* eq = sentinel<fid_eq>();
  EXPECT_EQ(fi_eq_open(fabric_, &attr, &eq, nullptr), -FI_EINVAL);
  EXPECT_EQ(eq, nullptr);
}

TEST_F(Lifetime, OutOfRangeWaitSetWaitObjFromCIsRejected) {
  fi_wait_attr attr{};
  store_raw(&attr.wait_obj, 1000);
  fid_wait* w = sentinel<fid_wait>();
  EXPECT_EQ(fi_wait_open(fabric_, &attr, &w), -FI_EINVAL);
  EXPECT_EQ(w, nullptr);
}

TEST_F(Lifetime, FailedPollOpenLeavesOutputNull) {
  fi_poll_attr attr{};
  attr.flags = FI_SEND;
  fid_poll* p = sentinel<fid_poll>();
  EXPECT_EQ(fi_poll_open(domain_, &attr, &p), -FI_EBADFLAGS);
  EXPECT_EQ(p, nullptr);
}

TEST_F(Lifetime, DomainOpenOfAnUnknownInterfaceFailsAndLeavesOutputNull) {
  fi_info* bad = fi_dupinfo(info_);
  ASSERT_NE(bad, nullptr);
  free(bad->domain_attr->name);
  bad->domain_attr->name = strdup("nosuchif");
  fid_domain* d = sentinel<fid_domain>();
  const int rc = fi_domain(fabric_, bad, &d, nullptr);
  EXPECT_LT(rc, 0);
  EXPECT_EQ(d, nullptr);
  if (rc == 0 && d != nullptr && d != sentinel<fid_domain>()) fi_close(&d->fid);
  fi_freeinfo(bad);
}

TEST_F(Lifetime, Domain2WithFlagsIsBadFlagsAndLeavesOutputNull) {
  fid_domain* d = sentinel<fid_domain>();
  EXPECT_EQ(fi_domain2(fabric_, info_, &d, FI_PEER, nullptr), -FI_EBADFLAGS);
  EXPECT_EQ(d, nullptr);
}

TEST_F(Lifetime, Domain2WithoutFlagsOpensADomain) {
  fid_domain* d = nullptr;
  int ctx = 0;
  ASSERT_EQ(fi_domain2(fabric_, info_, &d, 0, &ctx), 0);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->fid.context, &ctx);
  EXPECT_EQ(d->fid.fclass, static_cast<size_t>(FI_CLASS_DOMAIN));
  EXPECT_EQ(fi_close(&d->fid), 0);
}

// ----------------------------------------------------------------------------------------------
// Every op-table slot points somewhere (libfabric's inline wrappers call without checking).

void expect_fi_ops_complete(const fid* f, const char* what) {
  ASSERT_NE(f->ops, nullptr) << what;
  EXPECT_GE(f->ops->size, sizeof(fi_ops)) << what;
  EXPECT_NE(f->ops->close, nullptr) << what;
  EXPECT_NE(f->ops->bind, nullptr) << what;
  EXPECT_NE(f->ops->control, nullptr) << what;
  EXPECT_NE(f->ops->ops_open, nullptr) << what;
  EXPECT_NE(f->ops->tostr, nullptr) << what;
  EXPECT_NE(f->ops->ops_set, nullptr) << what;
}

TEST_F(Lifetime, FabricOpTablesHaveEverySlot) {
  expect_fi_ops_complete(&fabric_->fid, "fabric");
  ASSERT_NE(fabric_->ops, nullptr);
  EXPECT_GE(fabric_->ops->size, sizeof(fi_ops_fabric));
  EXPECT_NE(fabric_->ops->domain, nullptr);
  EXPECT_NE(fabric_->ops->passive_ep, nullptr);
  EXPECT_NE(fabric_->ops->eq_open, nullptr);
  EXPECT_NE(fabric_->ops->wait_open, nullptr);
  EXPECT_NE(fabric_->ops->trywait, nullptr);
  EXPECT_NE(fabric_->ops->domain2, nullptr);
}

TEST_F(Lifetime, DomainOpTablesHaveEverySlot) {
  expect_fi_ops_complete(&domain_->fid, "domain");
  ASSERT_NE(domain_->ops, nullptr);
  EXPECT_GE(domain_->ops->size, sizeof(fi_ops_domain));
  EXPECT_NE(domain_->ops->av_open, nullptr);
  EXPECT_NE(domain_->ops->cq_open, nullptr);
  EXPECT_NE(domain_->ops->endpoint, nullptr);
  EXPECT_NE(domain_->ops->scalable_ep, nullptr);
  EXPECT_NE(domain_->ops->cntr_open, nullptr);
  EXPECT_NE(domain_->ops->poll_open, nullptr);
  EXPECT_NE(domain_->ops->stx_ctx, nullptr);
  EXPECT_NE(domain_->ops->srx_ctx, nullptr);
  EXPECT_NE(domain_->ops->query_atomic, nullptr);
  EXPECT_NE(domain_->ops->query_collective, nullptr);
  EXPECT_NE(domain_->ops->endpoint2, nullptr);
  ASSERT_NE(domain_->mr, nullptr);
  EXPECT_GE(domain_->mr->size, sizeof(fi_ops_mr));
  EXPECT_NE(domain_->mr->reg, nullptr);
  EXPECT_NE(domain_->mr->regv, nullptr);
  EXPECT_NE(domain_->mr->regattr, nullptr);
}

TEST_F(Lifetime, EqOpTablesHaveEverySlot) {
  fid_eq* eq = open_eq({});
  ASSERT_NE(eq, nullptr);
  expect_fi_ops_complete(&eq->fid, "eq");
  ASSERT_NE(eq->ops, nullptr);
  EXPECT_GE(eq->ops->size, sizeof(fi_ops_eq));
  EXPECT_NE(eq->ops->read, nullptr);
  EXPECT_NE(eq->ops->readerr, nullptr);
  EXPECT_NE(eq->ops->write, nullptr);
  EXPECT_NE(eq->ops->sread, nullptr);
  EXPECT_NE(eq->ops->strerror, nullptr);
  EXPECT_EQ(fi_close(&eq->fid), 0);
}

TEST_F(Lifetime, CqOpTablesHaveEverySlot) {
  fid_cq* cq = open_cq({});
  ASSERT_NE(cq, nullptr);
  expect_fi_ops_complete(&cq->fid, "cq");
  ASSERT_NE(cq->ops, nullptr);
  EXPECT_GE(cq->ops->size, sizeof(fi_ops_cq));
  EXPECT_NE(cq->ops->read, nullptr);
  EXPECT_NE(cq->ops->readfrom, nullptr);
  EXPECT_NE(cq->ops->readerr, nullptr);
  EXPECT_NE(cq->ops->sread, nullptr);
  EXPECT_NE(cq->ops->sreadfrom, nullptr);
  EXPECT_NE(cq->ops->signal, nullptr);
  EXPECT_NE(cq->ops->strerror, nullptr);
  EXPECT_EQ(fi_close(&cq->fid), 0);
}

TEST_F(Lifetime, CounterOpTablesHaveEverySlot) {
  fi_cntr_attr attr{};
  attr.events = FI_CNTR_EVENTS_COMP;
  fid_cntr* c = open_cntr(attr);
  ASSERT_NE(c, nullptr);
  expect_fi_ops_complete(&c->fid, "cntr");
  ASSERT_NE(c->ops, nullptr);
  EXPECT_GE(c->ops->size, sizeof(fi_ops_cntr));
  EXPECT_NE(c->ops->read, nullptr);
  EXPECT_NE(c->ops->readerr, nullptr);
  EXPECT_NE(c->ops->add, nullptr);
  EXPECT_NE(c->ops->set, nullptr);
  EXPECT_NE(c->ops->wait, nullptr);
  EXPECT_NE(c->ops->adderr, nullptr);
  EXPECT_NE(c->ops->seterr, nullptr);
  EXPECT_EQ(fi_close(&c->fid), 0);
}

TEST_F(Lifetime, WaitSetOpTablesHaveEverySlot) {
  fid_wait* w = open_wait();
  ASSERT_NE(w, nullptr);
  expect_fi_ops_complete(&w->fid, "wait set");
  ASSERT_NE(w->ops, nullptr);
  EXPECT_GE(w->ops->size, sizeof(fi_ops_wait));
  EXPECT_NE(w->ops->wait, nullptr);
  EXPECT_EQ(fi_close(&w->fid), 0);
}

TEST_F(Lifetime, PollSetOpTablesHaveEverySlot) {
  fid_poll* p = open_poll();
  ASSERT_NE(p, nullptr);
  expect_fi_ops_complete(&p->fid, "poll set");
  ASSERT_NE(p->ops, nullptr);
  EXPECT_GE(p->ops->size, sizeof(fi_ops_poll));
  EXPECT_NE(p->ops->poll, nullptr);
  EXPECT_NE(p->ops->poll_add, nullptr);
  EXPECT_NE(p->ops->poll_del, nullptr);
  EXPECT_EQ(fi_close(&p->fid), 0);
}

// ----------------------------------------------------------------------------------------------
// Operations that come with the transport: -FI_ENOSYS until then.

TEST_F(Lifetime, AnOpenEndpointKeepsItsDomainAndWhatItIsBoundTo) {
  fid_ep* ep = nullptr;
  ASSERT_EQ(fi_endpoint(domain_, info_, &ep, nullptr), 0);
  fid_cq* cq = open_cq({.size = 8});
  fid_eq* eq = open_eq({.size = 8});
  ASSERT_EQ(fi_ep_bind(ep, &cq->fid, FI_RECV), 0);
  ASSERT_EQ(fi_ep_bind(ep, &eq->fid, 0), 0);
  EXPECT_EQ(fi_close(&domain_->fid), -FI_EBUSY);
  EXPECT_EQ(fi_close(&cq->fid), -FI_EBUSY);
  EXPECT_EQ(fi_close(&eq->fid), -FI_EBUSY);
  EXPECT_EQ(fi_close(&ep->fid), 0);
  EXPECT_EQ(fi_close(&cq->fid), 0);
  EXPECT_EQ(fi_close(&eq->fid), 0);
  fid_ep* ep2 = nullptr;
  EXPECT_EQ(fi_endpoint2(domain_, info_, &ep2, 1, nullptr), -FI_EBADFLAGS);
  EXPECT_EQ(ep2, nullptr);
  ASSERT_EQ(fi_endpoint2(domain_, info_, &ep2, 0, nullptr), 0);
  EXPECT_EQ(fi_close(&ep2->fid), 0);
}

TEST_F(Lifetime, PassiveEndpointHoldsItsFabricAndItsEq) {
  fid_pep* pep = nullptr;
  ASSERT_EQ(fi_passive_ep(fabric_, info_, &pep, nullptr), 0);
  EXPECT_EQ(fi_listen(pep), -FI_ENOEQ) << "fi_listen needs a bound EQ";
  fi_eq_attr attr{};
  attr.wait_obj = FI_WAIT_UNSPEC;
  fid_eq* eq = nullptr;
  ASSERT_EQ(fi_eq_open(fabric_, &attr, &eq, nullptr), 0);
  ASSERT_EQ(fi_pep_bind(pep, &eq->fid, 0), 0);
  EXPECT_EQ(fi_close(&eq->fid), -FI_EBUSY) << "bound to the passive endpoint";
  EXPECT_EQ(fi_close(&pep->fid), 0);
  EXPECT_EQ(fi_close(&eq->fid), 0);
}

// Regions exist (tests/api/mr_test.cc); binding them is for RMA, which fabq does not have yet.
TEST_F(Lifetime, AMemoryRegionBindsCountersNotCqsAndClosesOnce) {
  char buf[64] = {};
  fid_mr* mr = nullptr;
  ASSERT_EQ(fi_mr_reg(domain_, buf, sizeof(buf), FI_SEND | FI_RECV, 0, 0, 0, &mr, nullptr), 0);
  fid_cq* cq = open_cq({.size = 4});
  EXPECT_EQ(fi_mr_bind(mr, &cq->fid, 0), -FI_EINVAL);
  EXPECT_EQ(fi_close(&mr->fid), 0);
  EXPECT_EQ(fi_close(&cq->fid), 0);
}

TEST_F(Lifetime, AnSrxContextIsHeldByTheEndpointsBoundToIt) {
  fi_rx_attr attr{};
  fid_ep* srx = nullptr;
  ASSERT_EQ(fi_srx_context(domain_, &attr, &srx, nullptr), 0);
  fid_ep* ep = nullptr;
  ASSERT_EQ(fi_endpoint(domain_, info_, &ep, nullptr), 0);
  ASSERT_EQ(fi_ep_bind(ep, &srx->fid, 0), 0);
  EXPECT_EQ(fi_close(&srx->fid), -FI_EBUSY);
  EXPECT_EQ(fi_close(&domain_->fid), -FI_EBUSY);
  EXPECT_EQ(fi_close(&ep->fid), 0);
  EXPECT_EQ(fi_close(&srx->fid), 0);
}

TEST_F(Lifetime, StxContextStaysWhileAnEndpointIsBoundToIt) {
  fi_tx_attr attr{};
  fid_stx* stx = nullptr;
  ASSERT_EQ(fi_stx_context(domain_, &attr, &stx, nullptr), 0);
  fid_ep* ep = nullptr;
  ASSERT_EQ(fi_endpoint(domain_, info_, &ep, nullptr), 0);
  ASSERT_EQ(fi_ep_bind(ep, &stx->fid, 0), 0);
  EXPECT_EQ(fi_ep_bind(ep, &stx->fid, 0), -FI_EBUSY) << "one STX per endpoint";
  EXPECT_EQ(fi_close(&stx->fid), -FI_EBUSY);
  EXPECT_EQ(fi_close(&domain_->fid), -FI_EBUSY);
  EXPECT_EQ(fi_close(&ep->fid), 0);
  EXPECT_EQ(fi_close(&stx->fid), 0);
}

// Scalable endpoints are RDM (scalable_ep_test.cc has the rest).
TEST_F(Lifetime, ScalableEndpointOfAnotherTypeIsInvalidAndAnRdmOneCloses) {
  fi_info* info = fi_dupinfo(info_);
  info->ep_attr->type = FI_EP_MSG;
  fid_ep* sep = reinterpret_cast<fid_ep*>(0x1);
  EXPECT_EQ(fi_scalable_ep(domain_, info, &sep, nullptr), -FI_EINVAL);
  EXPECT_EQ(sep, nullptr);
  info->ep_attr->type = FI_EP_RDM;
  ASSERT_EQ(fi_scalable_ep(domain_, info, &sep, nullptr), 0);
  fi_freeinfo(info);
  EXPECT_EQ(fi_close(&sep->fid), 0);
}

TEST_F(Lifetime, OpenOpsOfAnUnknownInterfaceIsNotSupported) {
  void* ops = nullptr;
  EXPECT_EQ(fi_open_ops(&fabric_->fid, "fabq_nosuch", 0, &ops, nullptr), -FI_ENOSYS);
  EXPECT_EQ(fi_open_ops(&domain_->fid, "fabq_nosuch", 0, &ops, nullptr), -FI_ENOSYS);
}

// ----------------------------------------------------------------------------------------------
// fid->context and fid->fclass.

TEST_F(Lifetime, ContextsPassedAtOpenAreStoredInFidContext) {
  EXPECT_EQ(fabric_->fid.context, nullptr) << "the fixture passed NULL";
  EXPECT_EQ(domain_->fid.context, nullptr);

  int fabric_ctx = 0, domain_ctx = 0, eq_ctx = 0, cq_ctx = 0, cntr_ctx = 0;
  fid_fabric* fabric = nullptr;
  ASSERT_EQ(fi_fabric(info_->fabric_attr, &fabric, &fabric_ctx), 0);
  EXPECT_EQ(fabric->fid.context, &fabric_ctx);
  fid_domain* domain = nullptr;
  ASSERT_EQ(fi_domain(fabric, info_, &domain, &domain_ctx), 0);
  EXPECT_EQ(domain->fid.context, &domain_ctx);

  fi_eq_attr eq_attr{};
  fid_eq* eq = nullptr;
  ASSERT_EQ(fi_eq_open(fabric, &eq_attr, &eq, &eq_ctx), 0);
  EXPECT_EQ(eq->fid.context, &eq_ctx);
  fi_cq_attr cq_attr{};
  fid_cq* cq = nullptr;
  ASSERT_EQ(fi_cq_open(domain, &cq_attr, &cq, &cq_ctx), 0);
  EXPECT_EQ(cq->fid.context, &cq_ctx);
  fi_cntr_attr cntr_attr{};
  cntr_attr.events = FI_CNTR_EVENTS_COMP;
  fid_cntr* c = nullptr;
  ASSERT_EQ(fi_cntr_open(domain, &cntr_attr, &c, &cntr_ctx), 0);
  EXPECT_EQ(c->fid.context, &cntr_ctx);

  EXPECT_EQ(fi_close(&c->fid), 0);
  EXPECT_EQ(fi_close(&cq->fid), 0);
  EXPECT_EQ(fi_close(&eq->fid), 0);
  EXPECT_EQ(fi_close(&domain->fid), 0);
  EXPECT_EQ(fi_close(&fabric->fid), 0);
}

TEST_F(Lifetime, FidClassNamesTheObjectClass) {
  EXPECT_EQ(fabric_->fid.fclass, static_cast<size_t>(FI_CLASS_FABRIC));
  EXPECT_EQ(domain_->fid.fclass, static_cast<size_t>(FI_CLASS_DOMAIN));
  fid_eq* eq = open_eq({});
  fid_cq* cq = open_cq({});
  fi_cntr_attr cattr{};
  cattr.events = FI_CNTR_EVENTS_COMP;
  fid_cntr* c = open_cntr(cattr);
  fid_wait* w = open_wait();
  fid_poll* p = open_poll();
  ASSERT_NE(eq, nullptr);
  ASSERT_NE(cq, nullptr);
  ASSERT_NE(c, nullptr);
  ASSERT_NE(w, nullptr);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(eq->fid.fclass, static_cast<size_t>(FI_CLASS_EQ));
  EXPECT_EQ(cq->fid.fclass, static_cast<size_t>(FI_CLASS_CQ));
  EXPECT_EQ(c->fid.fclass, static_cast<size_t>(FI_CLASS_CNTR));
  EXPECT_EQ(w->fid.fclass, static_cast<size_t>(FI_CLASS_WAIT));
  EXPECT_EQ(p->fid.fclass, static_cast<size_t>(FI_CLASS_POLL));
  EXPECT_EQ(fi_close(&p->fid), 0);
  EXPECT_EQ(fi_close(&w->fid), 0);
  EXPECT_EQ(fi_close(&c->fid), 0);
  EXPECT_EQ(fi_close(&cq->fid), 0);
  EXPECT_EQ(fi_close(&eq->fid), 0);
}

TEST_F(Lifetime, FabricOpenOfAnUnknownFabricFailsAndLeavesOutputNull) {
  fi_fabric_attr attr = *info_->fabric_attr;
  attr.name = const_cast<char*>("203.0.113.0/24");
  fid_fabric* f = sentinel<fid_fabric>();
  const int rc = fi_fabric(&attr, &f, nullptr);
  EXPECT_LT(rc, 0);
  EXPECT_EQ(f, nullptr);
  if (rc == 0 && f != nullptr && f != sentinel<fid_fabric>()) fi_close(&f->fid);
}

}  // namespace
}  // namespace fabq::testing
