// Data through the TCP transport (transport_harness.h): messages of 0 B to 1 MiB in several
// iovecs both ways, tags and remote data, tx_written, the kTransmit and kDelivery
// acknowledgements (now, or when the owner says), truncation to a placement's capacity,
// take_retry(); and back-pressure: a receiver that refuses placements stalls its connection,
// the sender's writes stop, nothing is lost and all arrives in order after resume().
#include <gtest/gtest.h>
#include <rdma/fabric.h>
#include <rdma/fi_eq.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstring>

#include <string>
#include <vector>

#include "transport_harness.h"
#include "xport/shm.h"

namespace fabq::xport::testing {
namespace {

INSTANTIATE_TEST_SUITE_P(, TransportTest, ::testing::Values(false, true), tcp_or_shm);

// =============================================================================================
// Data

// send_inline (transport.h): an inject-level message goes straight into the ring, and only there.
TEST_P(TransportTest, AnInlineSendIsWrittenAtOnceThroughSharedMemoryAndQueuedOtherwise) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  const std::string payload = pattern(kInjectSize, 7);
  const iovec iov[2] = {{const_cast<char*>(payload.data()), 10},
                        {const_cast<char*>(payload.data()) + 10, payload.size() - 10}};
  const InlineSend s{.iov = iov,
                     .iov_count = 2,
                     .len = payload.size(),
                     .tagged = true,
                     .tag = 0xabc,
                     .has_data = true,
                     .data = 0x1234};
  const InlineResult r = p.client->send_inline(s);
  if (!GetParam()) {
    EXPECT_EQ(r, InlineResult::kQueue) << "a socket has no ring to write into";
    return;
  }
  ASSERT_EQ(r, InlineResult::kSent);
  ASSERT_TRUE(pump([&] { return server_.received_count() == 1; }));
  const Received got = server_.received()[0];
  EXPECT_EQ(got.bytes, payload);
  EXPECT_TRUE(got.in.tagged);
  EXPECT_EQ(got.in.tag, 0xabcu);
  EXPECT_TRUE(got.in.has_data);
  EXPECT_EQ(got.in.data, 0x1234u);
  EXPECT_EQ(got.in.ack, AckWanted::kNone);
  EXPECT_EQ(client_.written_count(), 0u) << "nothing of the owner's was held or reported";
}

// A send queued because the ring was full stays ahead of an inline one, even once its reader
// has made room and its writer has not flushed yet.
TEST_P(TransportTest, AnInlineSendNeverOvertakesAQueuedSend) {
  if (!GetParam()) GTEST_SKIP() << "through shared memory only";
  ASSERT_NO_FATAL_FAILURE(second_transport());  // the client's progress is the test's to hold
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  Outbox out;
  // Four frames fill the ring exactly, so the fifth is queued with nothing of it written.
  constexpr size_t kFrame = shm::kRingBytes / 4;
  for (uint32_t i = 1; i <= 5; ++i) {
    ASSERT_NO_FATAL_FAILURE(
        send(client_, p.client.get(), out.make(pattern(kFrame - wire::kHeaderSize, i), i)));
  }
  tick_second_ = false;
  ASSERT_TRUE(pump([&] { return server_.received_count() >= 1; }));
  const std::string payload = "late";
  const iovec iov{const_cast<char*>(payload.data()), payload.size()};
  EXPECT_EQ(p.client->send_inline({.iov = &iov, .iov_count = 1, .len = payload.size()}),
            InlineResult::kQueue)
      << "the ring has room, but a send waits before this one";
  tick_second_ = true;
  ASSERT_TRUE(pump([&] { return server_.received_count() == 5; }));
}

TEST_P(TransportTest, MessagesOfEverySizeArriveIntactAndAreReportedWritten) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  Outbox out;
  std::vector<TxOp*> ops = {
      out.make("", 1),
      out.tagged(pattern(1, 2), 2, 0x1122334455667788),
      out.with_data(out.make(pattern(4096, 3), 3, 2), 0xdeadbeefcafef00d),
      out.with_data(out.tagged(pattern(1u << 20, 4), 4, 0xfeed, 4), 0x0102030405060708),
  };
  EXPECT_EQ(ops[3]->iov_count, 4u);
  for (TxOp* op : ops) ASSERT_NO_FATAL_FAILURE(send(client_, p.client.get(), op));
  ASSERT_TRUE(pump([&] { return server_.received_count() == 4 && client_.written_count() == 4; }))
      << server_.received_count() << " received, " << client_.written_count() << " written";
  const std::vector<Received> got = server_.received();
  for (size_t i = 0; i < ops.size(); ++i) {
    SCOPED_TRACE("message " + std::to_string(i));
    const Incoming& in = got[i].in;
    EXPECT_EQ(in.seq, ops[i]->seq);
    EXPECT_EQ(in.len, out.payload(i).size());
    EXPECT_EQ(in.tagged, ops[i]->tagged);
    EXPECT_EQ(in.tag, ops[i]->tagged ? ops[i]->tag : 0);
    EXPECT_EQ(in.has_data, ops[i]->has_data);
    EXPECT_EQ(in.data, ops[i]->has_data ? ops[i]->data : 0);
    // Through shared memory, a message from direct_msg_min bytes is copied by its receiver
    // from the sender's buffers, which stay the sender's until it says so.
    EXPECT_EQ(ops[i]->direct, GetParam() && in.len >= TransportConfig{}.direct_msg_min);
    EXPECT_EQ(in.ack, ops[i]->direct ? AckWanted::kReceived : AckWanted::kNone);
    EXPECT_EQ(in.from.sin_family, AF_UNSPEC) << "MSG messages carry no name";
    EXPECT_TRUE(got[i].bytes == out.payload(i)) << "payload of " << in.len << " bytes differs";
  }
  EXPECT_EQ(client_.written(), std::vector<const TxOp*>(ops.begin(), ops.end()));
  // The first message established the connection on the receiving side.
  EXPECT_EQ(asyncs(server_), std::vector<std::string>{"COMM_EST"});
  EXPECT_EQ(asyncs(client_), std::vector<std::string>{});
  // And the other way, on the same connection.
  Outbox back;
  ASSERT_NO_FATAL_FAILURE(send(server_, p.server.get(), back.make(pattern(70000, 5), 1, 3)));
  ASSERT_TRUE(pump([&] { return client_.received_count() == 1; }));
  EXPECT_TRUE(client_.received()[0].bytes == back.payload(0));
  EXPECT_EQ(server_.written_count(), 1u);
  // The 1 MiB message, and the answer: from direct_msg_idle_min bytes, a message that answers
  // the peer's on an idle connection is direct too (below).
  const size_t direct = GetParam() ? 2 : 0;
  EXPECT_TRUE(pump([&] { return client_.ack_count() + server_.ack_count() == direct; }));
  EXPECT_EQ(client_.ack_count() + server_.ack_count(), direct)
      << "kInject waits for no ack but a direct message's";
}

TEST_P(TransportTest, TransmitAndDeliveryCompletionsAreAcknowledged) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  Outbox out;
  ASSERT_NO_FATAL_FAILURE(
      send(client_, p.client.get(), out.make("inject", 10, 1, TxLevel::kInject)));
  ASSERT_NO_FATAL_FAILURE(
      send(client_, p.client.get(), out.make("transmit", 11, 1, TxLevel::kTransmit)));
  ASSERT_NO_FATAL_FAILURE(
      send(client_, p.client.get(), out.make(pattern(100000, 1), 12, 3, TxLevel::kDelivery)));
  ASSERT_TRUE(pump([&] { return client_.ack_count() == 2 && server_.received_count() == 3; }));
  settle(milliseconds(30));
  const std::vector<AckRecord> acks = client_.acks();
  ASSERT_EQ(acks.size(), 2u);
  EXPECT_EQ(acks[0].conn, p.client.get());
  EXPECT_EQ(acks[0].seq, 11u);
  EXPECT_FALSE(acks[0].delivered);
  EXPECT_EQ(acks[1].conn, p.client.get());
  EXPECT_EQ(acks[1].seq, 12u);
  EXPECT_TRUE(acks[1].delivered);
  const std::vector<Received> got = server_.received();
  EXPECT_EQ(got[0].in.ack, AckWanted::kNone);
  EXPECT_EQ(got[1].in.ack, AckWanted::kReceived);
  EXPECT_EQ(got[2].in.ack, AckWanted::kDelivered);
  EXPECT_TRUE(got[2].bytes == out.payload(2));
  EXPECT_EQ(client_.written_count(), 3u);
  EXPECT_EQ(asyncs(client_), std::vector<std::string>{}) << "every ack named a send";
}

TEST_P(TransportTest, DeliveryAcknowledgementWaitsUntilTheOwnerSaysDelivered) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  server_.set_deliver_now(false);  // buffered: delivered when the application takes it
  Outbox out;
  ASSERT_NO_FATAL_FAILURE(send(client_, p.client.get(), out.make("a", 20, 1, TxLevel::kDelivery)));
  ASSERT_NO_FATAL_FAILURE(send(client_, p.client.get(), out.make("b", 21, 1, TxLevel::kDelivery)));
  ASSERT_NO_FATAL_FAILURE(send(client_, p.client.get(), out.make("c", 22, 1, TxLevel::kTransmit)));
  ASSERT_TRUE(pump([&] { return server_.received_count() == 3 && client_.ack_count() == 1; }));
  settle(milliseconds(50));
  ASSERT_EQ(client_.ack_count(), 1u) << "a delivery ack before the owner said delivered";
  EXPECT_EQ(client_.acks()[0].seq, 22u) << "kTransmit does not wait for the delivery";
  EXPECT_FALSE(client_.acks()[0].delivered);
  p.server->ack_delivered(20);
  ASSERT_TRUE(pump([&] { return client_.ack_count() == 2; }));
  EXPECT_EQ(client_.acks()[1].seq, 20u);
  EXPECT_TRUE(client_.acks()[1].delivered);
  p.server->ack_delivered_later(21);
  ASSERT_TRUE(pump([&] { return client_.ack_count() == 3; }));
  EXPECT_EQ(client_.acks()[2].seq, 21u);
  EXPECT_TRUE(client_.acks()[2].delivered);
  settle(milliseconds(30));
  EXPECT_EQ(client_.ack_count(), 3u);
  EXPECT_EQ(asyncs(client_), std::vector<std::string>{});
}

TEST_P(TransportTest, TruncatedMessageFillsTheCapacityAndTheNextArrivesWhole) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  Outbox out;
  struct Case {
    size_t capacity;
    size_t len;
  };
  // Small messages go through the read buffer; large ones straight into the placement.
  const Case cases[] = {{100, 5000}, {20000, 300000}, {SIZE_MAX, 10}, {0, 64}, {SIZE_MAX, 4097}};
  for (size_t i = 0; i < std::size(cases); ++i) {
    SCOPED_TRACE("message " + std::to_string(i));
    server_.set_capacity(cases[i].capacity);
    ASSERT_NO_FATAL_FAILURE(
        send(client_, p.client.get(),
             out.make(pattern(cases[i].len, 100 + i), static_cast<uint32_t>(i), 3)));
    ASSERT_TRUE(pump([&] { return server_.received_count() == i + 1; }));
    const Received got = server_.received()[i];
    EXPECT_EQ(got.in.len, cases[i].len) << "the message's length, not what was kept";
    EXPECT_TRUE(got.bytes == out.payload(i).substr(0, cases[i].capacity))
        << got.bytes.size() << " bytes kept";
  }
  EXPECT_EQ(asyncs(server_), std::vector<std::string>{"COMM_EST"});
}

TEST_P(TransportTest, AConnectionRefusedForAFullCqWaitsForResumeWithoutAskingAgain) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  server_.set_accepting(false);
  server_.set_take_retry(true);  // only a full completion queue stands in the way
  Outbox out;
  ASSERT_NO_FATAL_FAILURE(send(client_, p.client.get(), out.make("retry me", 1)));
  ASSERT_TRUE(pump([&] { return server_.refused_places() >= 1; }));
  // The owner resumes it once its CQ has room: asking every round would make the progress
  // thread spin meanwhile.
  settle(milliseconds(100));
  EXPECT_EQ(server_.refused_places(), 1u) << "place() asked again without resume()";
  EXPECT_EQ(server_.received_count(), 0u);
  server_.set_accepting(true);
  p.server->resume();
  ASSERT_TRUE(pump([&] { return server_.received_count() == 1; }));
  EXPECT_EQ(server_.received()[0].bytes, "retry me");
}

// =============================================================================================
// Back-pressure

TEST_P(TransportTest, RefusedPlaceStallsTheConnectionUntilResumeAndNothingIsLost) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  server_.set_accepting(false);  // no receive posted
  // Messages whose bytes fill what lies between the two sides: 32 MiB, far beyond what the
  // kernel buffers on loopback and the ring's room; through shared memory, below
  // direct_msg_min (a direct message leaves its bytes with the sender).
  const size_t kSize = GetParam() ? TransportConfig{}.direct_msg_min - 1 : 256 * 1024;
  constexpr uint32_t kMax = 128;
  Outbox out;
  uint32_t submitted = 0;
  size_t last_written = 0;
  auto last_change = Clock::now();
  int rounds_since_change = 0;
  const auto end = Clock::now() + kTimeout;
  // Sends go out one after the other, each once the one before is written, until one is not
  // written for 100 ms and 200 progress rounds: the receiver's buffers and the sender's are
  // full.
  for (;;) {
    const size_t w = client_.written_count();
    if (w != last_written) {
      last_written = w;
      last_change = Clock::now();
      rounds_since_change = 0;
    }
    if (w == submitted) {
      ASSERT_LT(submitted, kMax) << "never stalled: " << submitted << " sends written";
      ++submitted;
      ASSERT_NO_FATAL_FAILURE(
          send(client_, p.client.get(), out.make(pattern(kSize, submitted), submitted, 2)));
      last_change = Clock::now();
      rounds_since_change = 0;
    } else if (rounds_since_change >= 200 && Clock::now() - last_change > milliseconds(100)) {
      break;
    }
    ASSERT_LT(Clock::now(), end) << "tx_written kept advancing";
    t_->progress();
    ++rounds_since_change;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  ASSERT_LT(client_.written_count(), submitted);
  // Stalled: nothing moves, and place() is not asked again without resume().
  const size_t refused = server_.refused_places();
  EXPECT_GE(refused, 1u);
  const size_t written = client_.written_count();
  settle(milliseconds(100));
  EXPECT_EQ(client_.written_count(), written);
  EXPECT_EQ(server_.received_count(), 0u);
  EXPECT_EQ(server_.refused_places(), refused);
  EXPECT_GE(server_.retries_asked(), 1u);
  // Room at last: everything arrives, in order, intact.
  server_.set_accepting(true);
  p.server->resume();
  ASSERT_TRUE(pump([&] {
    return server_.received_count() == submitted && client_.written_count() == submitted;
  })) << server_.received_count()
      << " of " << submitted << " received";
  const std::vector<Received> got = server_.received();
  for (uint32_t i = 0; i < submitted; ++i) {
    ASSERT_EQ(got[i].in.seq, i + 1);
    ASSERT_TRUE(got[i].bytes == out.payload(i)) << "message " << i + 1 << " damaged";
  }
  EXPECT_EQ(asyncs(server_), std::vector<std::string>{"COMM_EST"});
  EXPECT_EQ(server_.unplaced(), 0u);
}

// =============================================================================================
// Direct messages: through shared memory, from direct_msg_min bytes, the receiver copies a message
// from the sender's buffers (wire.h kDirect), which stay the application's until it says so.

TEST_P(TransportTest, ADirectMessageIsTheSendersUntilItsReceiverHasCopiedIt) {
  if (!GetParam()) GTEST_SKIP() << "through shared memory only";
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  server_.set_accepting(false);  // no receive yet: the message waits in the ring
  Outbox out;
  TxOp* op = out.make(pattern(300000, 7), 1, 3);  // the default level: kInject
  ASSERT_NO_FATAL_FAILURE(send(client_, p.client.get(), op));
  ASSERT_TRUE(pump([&] { return client_.written_count() == 1 && server_.refused_places() >= 1; }));
  EXPECT_TRUE(op->direct);
  settle(milliseconds(30));
  EXPECT_EQ(client_.ack_count(), 0u) << "acknowledged before its receiver copied it";
  server_.set_accepting(true);
  p.server->resume();
  ASSERT_TRUE(pump([&] { return server_.received_count() == 1 && client_.ack_count() == 1; }));
  EXPECT_TRUE(server_.received()[0].bytes == out.payload(0));
  EXPECT_EQ(server_.received()[0].in.len, 300000u);
  EXPECT_FALSE(client_.acks()[0].delivered) << "received: kInject asks no more";
  EXPECT_EQ(asyncs(server_), std::vector<std::string>{"COMM_EST"});
}

// Between direct_msg_idle_min and direct_msg_min bytes, a message is direct only when it answers
// the peer on a connection with nothing else on its way; one that follows this side's own last
// message (a stream) goes through the ring, where the two processes copy at once.
TEST_P(TransportTest, AnAnswerOnAnIdleConnectionIsDirectFromTheIdleMinimumAndAStreamIsNot) {
  if (!GetParam()) GTEST_SKIP() << "through shared memory only";
  const size_t kIdle = TransportConfig{}.direct_msg_idle_min;
  ASSERT_GT(kIdle, 0u);
  ASSERT_LT(kIdle, TransportConfig{}.direct_msg_min);
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  Outbox out, back;
  // The first message of the connection answers nothing: through the ring.
  TxOp* first = out.make(pattern(kIdle, 1), 1);
  ASSERT_NO_FATAL_FAILURE(send(client_, p.client.get(), first));
  ASSERT_TRUE(pump([&] { return server_.received_count() == 1; }));
  EXPECT_FALSE(first->direct) << "it answers no message of the peer's";
  // The answer: direct. One byte less would not be.
  TxOp* answer = back.make(pattern(kIdle, 2), 1);
  ASSERT_NO_FATAL_FAILURE(send(server_, p.server.get(), answer));
  EXPECT_TRUE(answer->direct);
  // Sent right after it, without a message from the peer in between: through the ring.
  TxOp* follow = back.make(pattern(kIdle, 3), 2);
  ASSERT_NO_FATAL_FAILURE(send(server_, p.server.get(), follow));
  EXPECT_FALSE(follow->direct) << "a second message in a row is a stream";
  ASSERT_TRUE(pump([&] { return client_.received_count() == 2 && server_.ack_count() == 1; }));
  EXPECT_TRUE(client_.received()[0].bytes == back.payload(0));
  EXPECT_TRUE(client_.received()[1].bytes == back.payload(1));
  // The client answers with one byte less than the minimum: through the ring.
  TxOp* small = out.make(pattern(kIdle - 1, 4), 2);
  ASSERT_NO_FATAL_FAILURE(send(client_, p.client.get(), small));
  EXPECT_FALSE(small->direct);
  ASSERT_TRUE(pump([&] { return server_.received_count() == 2; }));
  EXPECT_TRUE(server_.received()[1].bytes == out.payload(1));
}

// While the peer has not read all this side wrote, an answer is not alone on its way.
TEST_P(TransportTest, AnAnswerWhileThePeerHasNotReadAllThisSideWroteGoesThroughTheRing) {
  if (!GetParam()) GTEST_SKIP() << "through shared memory only";
  ASSERT_NO_FATAL_FAILURE(second_transport());  // the client's progress is the test's to hold
  const size_t kIdle = TransportConfig{}.direct_msg_idle_min;
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  Outbox out, back;
  ASSERT_NO_FATAL_FAILURE(send(client_, p.client.get(), out.make("ping", 1)));
  ASSERT_TRUE(pump([&] { return server_.received_count() == 1; }));
  tick_second_ = false;  // the client reads nothing from here on
  TxOp* unread = back.make("unread", 1);
  ASSERT_NO_FATAL_FAILURE(send(server_, p.server.get(), unread));
  EXPECT_FALSE(unread->direct);
  // The server hears from the client again, while its own last frame is still in the ring.
  ASSERT_NO_FATAL_FAILURE(send(client_, p.client.get(), out.make("again", 2)));
  ASSERT_TRUE(pump([&] { return server_.received_count() == 2; }));
  TxOp* answer = back.make(pattern(kIdle, 5), 2);
  ASSERT_NO_FATAL_FAILURE(send(server_, p.server.get(), answer));
  EXPECT_FALSE(answer->direct) << "the peer has not read what this side wrote before";
  tick_second_ = true;
  ASSERT_TRUE(pump([&] { return client_.received_count() == 2; }));
  EXPECT_TRUE(client_.received()[1].bytes == back.payload(1));
}

// direct_msg_idle_min 0: below direct_msg_min every message goes through the ring.
class NoIdleDirectTest : public TransportTest {
  void configure(TransportConfig* c) override { c->direct_msg_idle_min = 0; }
};
INSTANTIATE_TEST_SUITE_P(, NoIdleDirectTest, ::testing::Values(true), tcp_or_shm);

TEST_P(NoIdleDirectTest, AnAnswerGoesThroughTheRingBelowTheDirectMinimum) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  Outbox out, back;
  ASSERT_NO_FATAL_FAILURE(send(client_, p.client.get(), out.make("ping", 1)));
  ASSERT_TRUE(pump([&] { return server_.received_count() == 1; }));
  TxOp* answer = back.make(pattern(TransportConfig{}.direct_msg_min - 1, 2), 1);
  ASSERT_NO_FATAL_FAILURE(send(server_, p.server.get(), answer));
  EXPECT_FALSE(answer->direct);
  ASSERT_TRUE(pump([&] { return client_.received_count() == 1; }));
  EXPECT_TRUE(client_.received()[0].bytes == back.payload(0));
}

// The copy choice on (xport/copy_choice.h): an answer that may go either way goes the way its
// receiver measured faster.
class CopyChoiceTest : public TransportTest {
  void configure(TransportConfig* c) override { c->adapt_copies = true; }
};
INSTANTIATE_TEST_SUITE_P(, CopyChoiceTest, ::testing::Values(true), tcp_or_shm);

// The advice for 64 KiB that the receiver whose peer is `sender` logged last: 'd' direct, 'r'
// the ring, '?' none.
char advice_for_64k(const sockaddr_in& sender) {
  const std::string from =
      "copy advice for sends from 127.0.0.1:" + std::to_string(ntohs(sender.sin_port)) + ": ";
  char last = '?';
  for (const std::string& l : logged()) {
    if (l.rfind(from, 0) != 0) continue;
    const size_t at = l.find("64K:", from.size());
    if (at != std::string::npos) last = l.compare(at + 4, 6, "direct") == 0 ? 'd' : 'r';
  }
  return last;
}

// The fake owner places every message into a buffer of its own, so each direct copy meets a new
// destination: the receiver leaves out the first three (CopyAdvisor::record_direct()) and
// advises after the second turn of three direct answers.
TEST_P(CopyChoiceTest, AnswersOfAClassGoThreeByTheRingThenThreeDirectThenAsTheirReceiverAdvises) {
  constexpr size_t kLen = 64 * 1024;
  constexpr int kRounds = 18;
  constexpr size_t kExplored = 12;  // answers before the advice: rrrddd twice
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  // Each side's address as the other's connection knows it.
  const sockaddr_in client_at = name_of(*p.client);
  const sockaddr_in server_at = peer_of(*p.client);
  Outbox out, back;
  // The first message answers nothing: the ring, without a turn of the choice.
  TxOp* first = out.make(pattern(kLen, 0), 1);
  ASSERT_NO_FATAL_FAILURE(send(client_, p.client.get(), first));
  ASSERT_TRUE(pump([&] { return server_.received_count() == 1; }));
  EXPECT_FALSE(first->direct);
  std::string server_ways, client_ways;
  // `from` answers with `bytes` numbered `seq` through `conn`, taking the way its peer advised
  // (logged by the peer, about `from_at`) once it has explored; `to` then holds
  // `received` messages, the last of them that answer.
  const auto answer = [&](FakeOwner& from, Connection* conn, Outbox& box,
                          const sockaddr_in& from_at, std::string* ways, FakeOwner& to,
                          std::string bytes, uint32_t seq, size_t received) {
    const char advised = advice_for_64k(from_at);
    TxOp* op = box.make(bytes, seq);
    ASSERT_NO_FATAL_FAILURE(send(from, conn, op));
    *ways += op->direct ? 'd' : 'r';
    if (ways->size() > kExplored) {
      EXPECT_EQ(ways->back(), advised) << "answer " << ways->size();
    }
    ASSERT_TRUE(pump([&] { return to.received_count() == received; }));
    EXPECT_TRUE(to.received()[received - 1].bytes == bytes) << received;
  };
  for (int i = 0; i < kRounds; ++i) {
    const auto n = static_cast<unsigned>(i);
    ASSERT_NO_FATAL_FAILURE(answer(server_, p.server.get(), back, server_at, &server_ways, client_,
                                   pattern(kLen, 2 * n + 1), n + 1, n + 1));
    ASSERT_NO_FATAL_FAILURE(answer(client_, p.client.get(), out, client_at, &client_ways, server_,
                                   pattern(kLen, 2 * n + 2), n + 2, n + 2));
  }
  EXPECT_EQ(server_ways.substr(0, kExplored), "rrrdddrrrddd");
  EXPECT_EQ(client_ways.substr(0, kExplored), "rrrdddrrrddd");
  // Three samples of each way are enough for an advice, and each side has logged one.
  EXPECT_NE(advice_for_64k(server_at), '?');
  EXPECT_NE(advice_for_64k(client_at), '?');
  // A direct send is done when its receiver says it copied it.
  const auto direct = [](const std::string& w) {
    return static_cast<size_t>(std::count(w.begin(), w.end(), 'd'));
  };
  EXPECT_TRUE(pump([&] {
    return server_.ack_count() == direct(server_ways) && client_.ack_count() == direct(client_ways);
  }));
}

TEST_P(TransportTest, ADirectMessageWhoseBuffersCannotBeReadFailsOnlyItsConnection) {
  if (!GetParam()) GTEST_SKIP() << "through shared memory only";
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  server_.set_accepting(false);
  constexpr size_t kLen = 300000;
  void* buf = mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(buf, MAP_FAILED);
  std::memset(buf, 0x5a, kLen);
  TxOp op;
  op.cq_flags = FI_SEND | FI_MSG;
  op.seq = 1;
  op.len = kLen;
  op.iov[0] = {buf, kLen};
  op.iov_count = 1;
  ASSERT_NO_FATAL_FAILURE(send(client_, p.client.get(), &op));
  ASSERT_TRUE(pump([&] { return client_.written_count() == 1 && server_.refused_places() >= 1; }));
  ASSERT_TRUE(op.direct);
  // What an application that broke the contract does. (Not munmap: the receiver's next
  // allocation of that size could be given the same addresses.)
  ASSERT_EQ(mprotect(buf, kLen, PROT_NONE), 0);
  server_.set_accepting(true);
  p.server->resume();
  // The receiver cannot copy it: it gives the receive back and fails the connection, and the
  // sender's send ends with it.
  ASSERT_TRUE(pump([&] {
    const std::vector<std::string> a = asyncs(server_);
    return std::find(a.begin(), a.end(), "EP_REQ_ERR") != a.end() && !client_.aborts().empty();
  })) << ::testing::PrintToString(asyncs(server_));
  EXPECT_EQ(server_.received_count(), 0u);
  EXPECT_EQ(server_.unplaced(), 1u);
  EXPECT_EQ(client_.ack_count(), 0u);
  EXPECT_EQ(munmap(buf, kLen), 0);
}

}  // namespace
}  // namespace fabq::xport::testing
