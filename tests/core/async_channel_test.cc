// core::AsyncChannel: the FIFO behind a domain's asynchronous event channel.
#include "core/async_channel.h"

#include <gtest/gtest.h>
#include <poll.h>

#include <thread>

#include "fabq/fi_fabq.h"

namespace fabq::core {
namespace {

fid fake_fid[3];

AsyncEvent event_on(AsyncTracker* t, fid_t f, uint32_t type = FI_FABQ_EVENT_SM_CHANGE) {
  return {.type = type, .fid = f, .tracker = t};
}

bool readable(const AsyncChannel& ch) {
  pollfd p{ch.fd(), POLLIN, 0};
  return poll(&p, 1, 0) == 1;
}

TEST(AsyncChannel, GetReturnsEventsOldestFirstWithIncreasingSeq) {
  auto ch = AsyncChannel::create().value();
  AsyncTracker t;
  for (uint32_t type : {FI_FABQ_EVENT_PORT_ERR, FI_FABQ_EVENT_PORT_ACTIVE}) {
    ch->push(event_on(&t, &fake_fid[0], type));
  }
  auto a = ch->get(0);
  auto b = ch->get(0);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a.value().type, static_cast<uint32_t>(FI_FABQ_EVENT_PORT_ERR));
  EXPECT_EQ(b.value().type, static_cast<uint32_t>(FI_FABQ_EVENT_PORT_ACTIVE));
  EXPECT_LT(a.value().seq, b.value().seq);
  EXPECT_LE(a.value().time_ns, b.value().time_ns);
  EXPECT_EQ(ch->get(0).status(), Status(Code::kAgain));
}

TEST(AsyncChannel, TheTrackerCountsQueuedAndUnacknowledgedEvents) {
  auto ch = AsyncChannel::create().value();
  AsyncTracker t;
  ch->push(event_on(&t, &fake_fid[0]));
  EXPECT_EQ(t.queued, 1u);
  auto ev = ch->get(0).value();
  EXPECT_EQ(t.queued, 0u);
  EXPECT_EQ(t.unacked, 1u);
  EXPECT_EQ(ch->ack(ev.seq, &fake_fid[1]), Status(Code::kInval)) << "wrong object";
  EXPECT_TRUE(ch->ack(ev.seq, &fake_fid[0]).ok());
  EXPECT_EQ(t.unacked, 0u);
  EXPECT_EQ(ch->ack(ev.seq, &fake_fid[0]), Status(Code::kInval)) << "twice";
}

TEST(AsyncChannel, RetireIsBusyWhileUnacknowledgedAndPurgesUnreadEvents) {
  auto ch = AsyncChannel::create().value();
  AsyncTracker gone, stays;
  ch->push(event_on(&gone, &fake_fid[0]));
  ch->push(event_on(&stays, &fake_fid[1]));
  ch->push(event_on(&gone, &fake_fid[0]));
  auto first = ch->get(0).value();
  int closes = 0;
  auto close = [&] {
    ++closes;
    return OkStatus();
  };
  EXPECT_EQ(ch->retire(&gone, close), Status(Code::kBusy));
  EXPECT_EQ(closes, 0) << "not run while busy";
  ASSERT_TRUE(ch->ack(first.seq, first.fid).ok());
  EXPECT_TRUE(ch->retire(&gone, close).ok());
  EXPECT_EQ(closes, 1);
  EXPECT_EQ(ch->size(), 1u) << "only the other object's event is left";
  EXPECT_EQ(ch->get(0).value().fid, &fake_fid[1]);
}

TEST(AsyncChannel, AFailedCloseKeepsTheEvents) {
  auto ch = AsyncChannel::create().value();
  AsyncTracker t;
  ch->push(event_on(&t, &fake_fid[0]));
  EXPECT_EQ(ch->retire(&t, [] { return Status(Code::kBusy); }), Status(Code::kBusy));
  EXPECT_EQ(ch->size(), 1u);
}

TEST(AsyncChannel, TheFdIsReadableExactlyWhileTheChannelHoldsAnEvent) {
  auto ch = AsyncChannel::create().value();
  AsyncTracker t;
  EXPECT_FALSE(readable(*ch));
  ch->push(event_on(&t, &fake_fid[0]));
  ch->push(event_on(&t, &fake_fid[0]));
  EXPECT_TRUE(readable(*ch));
  (void)ch->get(0);
  EXPECT_TRUE(readable(*ch));
  (void)ch->get(0);
  EXPECT_FALSE(readable(*ch));
}

TEST(AsyncChannel, ABlockedGetWakesForAPushAndATimedGetTimesOut) {
  auto ch = AsyncChannel::create().value();
  AsyncTracker t;
  EXPECT_EQ(ch->get(20).status(), Status(Code::kAgain));
  Result<AsyncEvent> got = Code::kAgain;
  std::thread reader([&] { got = ch->get(-1); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ch->push(event_on(&t, &fake_fid[2]));
  reader.join();
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got.value().fid, &fake_fid[2]);
}

}  // namespace
}  // namespace fabq::core
