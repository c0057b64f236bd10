// fi_cq(3) through libfabric: open validation, formats, reads on an empty CQ, fi_cq_sread for
// every wait object, fi_cq_signal, FI_CQ_COND_THRESHOLD and fi_cq_strerror, as fabq's contract
// (fi_fabq(7)) states them.
//
// Completions cannot be produced through the API until endpoints exist, so the data path
// (entries, formats as read, error entries) is covered by tests/core; nothing here fakes one.
#include <array>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "fabq_fixture.h"
#include "signal_fixture.h"

namespace fabq::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Generous bound that separates "returned" from "hung" on a loaded 2-core machine.
constexpr auto kHang = std::chrono::seconds(5);

milliseconds since(Clock::time_point t0) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - t0);
}

fi_cq_attr cq_attr(enum fi_wait_obj wait = FI_WAIT_NONE,
                   enum fi_cq_format format = FI_CQ_FORMAT_CONTEXT, size_t size = 0) {
  fi_cq_attr attr{};
  attr.size = size;
  attr.format = format;
  attr.wait_obj = wait;
  attr.wait_cond = FI_CQ_COND_NONE;
  return attr;
}

std::string wait_name(enum fi_wait_obj w) {
  switch (w) {
    case FI_WAIT_NONE:
      return "None";
    case FI_WAIT_UNSPEC:
      return "Unspec";
    case FI_WAIT_SET:
      return "Set";
    case FI_WAIT_FD:
      return "Fd";
    case FI_WAIT_MUTEX_COND:
      return "MutexCond";
    case FI_WAIT_YIELD:
      return "Yield";
    case FI_WAIT_POLLFD:
      return "PollFd";
  }
  return "Unknown";
}

// Stores `value` in an enum field the way a C application can (a C enum object holds any int).
// In C++ a cast to an enum value outside its range is itself undefined, so the test never
// forms one.
template <class E>
void store_raw(E* field, int value) {
  static_assert(sizeof(E) == sizeof(int));
  std::memcpy(field, &value, sizeof(value));
}

// Room for a few entries of the largest format.
using EntryBuf = std::array<fi_cq_tagged_entry, 8>;

class Cq : public FabqTest {
 protected:
  void TearDown() override {
    if (cq_ != nullptr) {
      EXPECT_EQ(fi_close(&cq_->fid), 0);
    }
    FabqTest::TearDown();
  }
  void open(fi_cq_attr attr) {
    cq_ = open_cq(attr, &cq_);
    ASSERT_NE(cq_, nullptr);
  }
  // Expects fi_cq_open to fail with `want` and to leave the output pointer NULL. `attr` is
  // passed on as is (not copied: it may hold an enum value C allows and C++ cannot copy).
  void expect_open_fails(fi_cq_attr& attr, int want) {
    fid_cq* cq = reinterpret_cast<fid_cq*>(0x1);
    EXPECT_EQ(fi_cq_open(domain_, &attr, &cq, nullptr), want);
    EXPECT_EQ(cq, nullptr);
    if (cq != nullptr && cq != reinterpret_cast<fid_cq*>(0x1)) fi_close(&cq->fid);
  }

  fid_cq* cq_ = nullptr;
};

// --- open ---------------------------------------------------------------------------------

class CqFormat : public Cq, public ::testing::WithParamInterface<enum fi_cq_format> {};

TEST_P(CqFormat, IsAcceptedAndAnEmptyReadIsAgain) {
  open(cq_attr(FI_WAIT_NONE, GetParam()));
  EntryBuf buf{};
  EXPECT_EQ(fi_cq_read(cq_, buf.data(), 1), -FI_EAGAIN);
  EXPECT_EQ(fi_cq_read(cq_, buf.data(), buf.size()), -FI_EAGAIN);
}

INSTANTIATE_TEST_SUITE_P(AllFormats, CqFormat,
                         ::testing::Values(FI_CQ_FORMAT_UNSPEC, FI_CQ_FORMAT_CONTEXT,
                                           FI_CQ_FORMAT_MSG, FI_CQ_FORMAT_DATA,
                                           FI_CQ_FORMAT_TAGGED),
                         [](const ::testing::TestParamInfo<enum fi_cq_format>& info) {
                           switch (info.param) {
                             case FI_CQ_FORMAT_UNSPEC:
                               return std::string("Unspec");
                             case FI_CQ_FORMAT_CONTEXT:
                               return std::string("Context");
                             case FI_CQ_FORMAT_MSG:
                               return std::string("Msg");
                             case FI_CQ_FORMAT_DATA:
                               return std::string("Data");
                             case FI_CQ_FORMAT_TAGGED:
                               return std::string("Tagged");
                           }
                           return std::string("Unknown");
                         });

// Values just past the last format are still within the enum's range (valid C++ values).
TEST_F(Cq, InvalidFormatIsInvalid) {
  for (int format : {static_cast<int>(FI_CQ_FORMAT_TAGGED) + 1, 7}) {
    fi_cq_attr attr = cq_attr(FI_WAIT_NONE, static_cast<enum fi_cq_format>(format));
    expect_open_fails(attr, -FI_EINVAL);
  }
}

// A C application can store any int in an enum field; fabq must reject it, not misbehave
// (the ASan+UBSan build checks that the provider never loads it as an enum).
TEST_F(Cq, OutOfRangeFormatIsInvalid) {
  for (int format : {99, -1, INT_MAX}) {
    fi_cq_attr attr = cq_attr();
    store_raw(&attr.format, format);
    expect_open_fails(attr, -FI_EINVAL);
  }
}

TEST_F(Cq, SizeZeroIsAccepted) {
  open(cq_attr(FI_WAIT_NONE, FI_CQ_FORMAT_CONTEXT, 0));
  EntryBuf buf{};
  EXPECT_EQ(fi_cq_read(cq_, buf.data(), 1), -FI_EAGAIN);
}

TEST_F(Cq, SmallAndMaxSizesAreAccepted) {
  for (size_t size : {size_t{1}, size_t{5}, size_t{1000}, size_t{65536}}) {
    fid_cq* cq = open_cq(cq_attr(FI_WAIT_NONE, FI_CQ_FORMAT_CONTEXT, size));
    ASSERT_NE(cq, nullptr) << size;
    EXPECT_EQ(fi_close(&cq->fid), 0);
  }
}

TEST_F(Cq, SizeAboveMaxIsInvalid) {
  for (size_t size : {size_t{65537}, size_t{1} << 26, size_t{1} << 40, SIZE_MAX}) {
    fi_cq_attr attr = cq_attr(FI_WAIT_NONE, FI_CQ_FORMAT_CONTEXT, size);
    expect_open_fails(attr, -FI_EINVAL);
  }
}

TEST_F(Cq, AffinityFlagIsAccepted) {
  fi_cq_attr attr = cq_attr();
  attr.flags = FI_AFFINITY;
  attr.signaling_vector = 1;
  open(attr);
}

TEST_F(Cq, FlagsOtherThanAffinityAreBadFlags) {
  for (uint64_t flags : std::initializer_list<uint64_t>{FI_WRITE, FI_READ, FI_PEEK, FI_REMOTE_WRITE,
                                                        FI_AFFINITY | FI_SEND, uint64_t{1} << 63}) {
    fi_cq_attr attr = cq_attr();
    attr.flags = flags;
    expect_open_fails(attr, -FI_EBADFLAGS);
  }
}

// fi_cq_wait_cond has two values, so every invalid one is outside the enum's C++ range: the
// test stores it as a C application would.
TEST_F(Cq, InvalidWaitCondIsInvalid) {
  for (int cond : {2, 99, -1}) {
    fi_cq_attr attr = cq_attr(FI_WAIT_UNSPEC);
    store_raw(&attr.wait_cond, cond);
    expect_open_fails(attr, -FI_EINVAL);
  }
}

TEST_F(Cq, InvalidWaitObjectIsInvalid) {
  fi_cq_attr attr = cq_attr(static_cast<enum fi_wait_obj>(7));
  expect_open_fails(attr, -FI_EINVAL);
}

TEST_F(Cq, OutOfRangeWaitObjectIsInvalid) {
  for (int wait : {99, -1}) {
    fi_cq_attr attr = cq_attr();
    store_raw(&attr.wait_obj, wait);
    expect_open_fails(attr, -FI_EINVAL);
  }
}

TEST_F(Cq, ContextIsRecorded) {
  int ctx = 0;
  fid_cq* cq = open_cq(cq_attr(), &ctx);
  ASSERT_NE(cq, nullptr);
  EXPECT_EQ(cq->fid.context, &ctx);
  EXPECT_EQ(cq->fid.fclass, static_cast<size_t>(FI_CLASS_CQ));
  EXPECT_EQ(fi_close(&cq->fid), 0);
}

// --- reads on an empty CQ -----------------------------------------------------------------

TEST_F(Cq, ReadOnEmptyCqIsAgainAndWritesNothing) {
  open(cq_attr(FI_WAIT_NONE, FI_CQ_FORMAT_TAGGED));
  std::array<unsigned char, sizeof(EntryBuf)> buf;
  buf.fill(0xC3);
  EXPECT_EQ(fi_cq_read(cq_, buf.data(), 4), -FI_EAGAIN);
  for (unsigned char c : buf) ASSERT_EQ(c, 0xC3);
}

TEST_F(Cq, ReaderrOnEmptyCqIsAgain) {
  open(cq_attr());
  fi_cq_err_entry err{};
  EXPECT_EQ(fi_cq_readerr(cq_, &err, 0), -FI_EAGAIN);
  EXPECT_EQ(fi_cq_readerr(cq_, &err, FI_PEEK), -FI_EAGAIN);
}

// fi_cq(3): a read of no entries drives progress; fabq then says what waits at the head.
TEST_F(Cq, ReadWithCountZeroOnAnEmptyCqIsAgain) {
  open(cq_attr());
  EntryBuf buf{};
  EXPECT_EQ(fi_cq_read(cq_, buf.data(), 0), -FI_EAGAIN);
  EXPECT_EQ(fi_cq_read(cq_, nullptr, 0), -FI_EAGAIN);
}

TEST_F(Cq, ReadWithNullBufferIsInvalid) {
  open(cq_attr());
  EXPECT_EQ(fi_cq_read(cq_, nullptr, 1), -FI_EINVAL);
}

TEST_F(Cq, ReadfromOnEmptyCqIsAgain) {
  open(cq_attr(FI_WAIT_NONE, FI_CQ_FORMAT_MSG));
  EntryBuf buf{};
  std::array<fi_addr_t, 8> src;
  src.fill(0x1234);
  EXPECT_EQ(fi_cq_readfrom(cq_, buf.data(), 4, src.data()), -FI_EAGAIN);
  EXPECT_EQ(fi_cq_readfrom(cq_, buf.data(), 4, nullptr), -FI_EAGAIN);
}

TEST_F(Cq, ReadfromWithNullBufferIsInvalidAndWithCountZeroReadsNothing) {
  open(cq_attr());
  EntryBuf buf{};
  fi_addr_t src = 0x1234;
  EXPECT_EQ(fi_cq_readfrom(cq_, buf.data(), 0, &src), -FI_EAGAIN);
  EXPECT_EQ(src, 0x1234u) << "nothing read, nothing written";
  EXPECT_EQ(fi_cq_readfrom(cq_, nullptr, 1, &src), -FI_EINVAL);
}

// --- sread --------------------------------------------------------------------------------

TEST_F(Cq, SreadOnWaitNoneIsNoSysPromptly) {
  open(cq_attr(FI_WAIT_NONE));
  EntryBuf buf{};
  const auto t0 = Clock::now();
  EXPECT_EQ(fi_cq_sread(cq_, buf.data(), 1, nullptr, 10000), -FI_ENOSYS);
  EXPECT_EQ(fi_cq_sreadfrom(cq_, buf.data(), 1, nullptr, nullptr, 10000), -FI_ENOSYS);
  EXPECT_LT(since(t0), kHang);
}

TEST_F(Cq, SreadOnWaitSetIsNoSysPromptly) {
  fi_wait_attr wattr{};
  wattr.wait_obj = FI_WAIT_UNSPEC;
  fid_wait* ws = nullptr;
  ASSERT_EQ(fi_wait_open(fabric_, &wattr, &ws), 0);
  ASSERT_NE(ws, nullptr);
  fi_cq_attr attr = cq_attr(FI_WAIT_SET);
  attr.wait_set = ws;
  fid_cq* cq = open_cq(attr);
  if (cq != nullptr) {
    EntryBuf buf{};
    const auto t0 = Clock::now();
    EXPECT_EQ(fi_cq_sread(cq, buf.data(), 1, nullptr, 10000), -FI_ENOSYS);
    EXPECT_LT(since(t0), kHang);
    enum fi_wait_obj kind = FI_WAIT_NONE;
    EXPECT_EQ(fi_control(&cq->fid, FI_GETWAITOBJ, &kind), 0);
    EXPECT_EQ(kind, FI_WAIT_SET);
    EXPECT_EQ(fi_close(&cq->fid), 0);  // the CQ goes before its wait set
  }
  EXPECT_EQ(fi_close(&ws->fid), 0);
}

TEST_F(Cq, SignalOnWaitNoneIsNoSys) {
  open(cq_attr(FI_WAIT_NONE));
  EXPECT_EQ(fi_cq_signal(cq_), -FI_ENOSYS);
}

TEST_F(Cq, GetWaitOnWaitNoneIsNoSys) {
  open(cq_attr(FI_WAIT_NONE));
  int fd = -1;
  EXPECT_EQ(fi_control(&cq_->fid, FI_GETWAIT, &fd), -FI_ENOSYS);
  enum fi_wait_obj kind = FI_WAIT_SET;
  ASSERT_EQ(fi_control(&cq_->fid, FI_GETWAITOBJ, &kind), 0);
  EXPECT_EQ(kind, FI_WAIT_NONE);
}

class CqWait : public Cq, public ::testing::WithParamInterface<enum fi_wait_obj> {};

TEST_P(CqWait, GetWaitObjReturnsTheWaitKind) {
  open(cq_attr(GetParam()));
  enum fi_wait_obj kind = FI_WAIT_SET;
  ASSERT_EQ(fi_control(&cq_->fid, FI_GETWAITOBJ, &kind), 0);
  EXPECT_EQ(kind, GetParam());
}

TEST_P(CqWait, SreadTimeoutZeroIsAgain) {
  open(cq_attr(GetParam()));
  EntryBuf buf{};
  const auto t0 = Clock::now();
  EXPECT_EQ(fi_cq_sread(cq_, buf.data(), 1, nullptr, 0), -FI_EAGAIN);
  EXPECT_EQ(fi_cq_sreadfrom(cq_, buf.data(), 1, nullptr, nullptr, 0), -FI_EAGAIN);
  EXPECT_LT(since(t0), kHang);
}

TEST_P(CqWait, SreadTimeoutFiftyMsIsAgainAfterTheTimeout) {
  open(cq_attr(GetParam()));
  EntryBuf buf{};
  const auto t0 = Clock::now();
  EXPECT_EQ(fi_cq_sread(cq_, buf.data(), 1, nullptr, 50), -FI_EAGAIN);
  const auto elapsed = since(t0);
  EXPECT_GE(elapsed, milliseconds(50));
  EXPECT_LT(elapsed, kHang);
}

TEST_P(CqWait, SreadfromTimeoutFiftyMsIsAgainAfterTheTimeout) {
  open(cq_attr(GetParam(), FI_CQ_FORMAT_MSG));
  EntryBuf buf{};
  std::array<fi_addr_t, 8> src{};
  const auto t0 = Clock::now();
  EXPECT_EQ(fi_cq_sreadfrom(cq_, buf.data(), 2, src.data(), nullptr, 50), -FI_EAGAIN);
  const auto elapsed = since(t0);
  EXPECT_GE(elapsed, milliseconds(50));
  EXPECT_LT(elapsed, kHang);
}

// fi_cq(3): a blocking read may be interrupted by a signal; fabq's fi_cq_sread then returns
// -FI_EAGAIN, with every wait object, FI_WAIT_YIELD too.
TEST_P(CqWait, SreadInterruptedByAPosixSignalReturnsAgain) {
  open(cq_attr(GetParam()));
  SignalHandled handled;
  ASSERT_TRUE(handled.ok());
  const int before = g_handled_signals.load();
  const Interrupted r = interrupt_with_signals(
      [&] {
        EntryBuf buf{};
        return fi_cq_sread(cq_, buf.data(), 1, nullptr, 60'000);
      },
      [&] { fi_cq_signal(cq_); });
  EXPECT_TRUE(r.returned) << "no signal ended fi_cq_sread (" << r.signals_sent << " sent)";
  EXPECT_EQ(r.rc, -FI_EAGAIN);
  EXPECT_GT(g_handled_signals.load(), before);
  EXPECT_LT(r.after_first, kHang);
}

// fi_cq_signal wakes every thread blocked in fi_cq_sread; each returns -FI_EAGAIN.
TEST_P(CqWait, SignalWakesEveryBlockedReader) {
  open(cq_attr(GetParam()));
  constexpr int kThreads = 4;
  std::atomic<int> entering{0};
  std::array<ssize_t, kThreads> rc{};
  std::array<milliseconds, kThreads> took{};
  std::vector<std::thread> readers;
  for (int i = 0; i < kThreads; ++i) {
    readers.emplace_back([&, i] {
      EntryBuf buf{};
      entering.fetch_add(1);
      const auto t0 = Clock::now();
      rc[i] = fi_cq_sread(cq_, buf.data(), 1, nullptr, 10000);
      took[i] = since(t0);
    });
  }
  // Give every reader time to block. A reader that arrived after the signal had been answered
  // would wait its full timeout: late arrival can make this fail, never pass wrongly.
  const auto start = Clock::now();
  while (entering.load() < kThreads && since(start) < kHang) {
    std::this_thread::sleep_for(milliseconds(1));
  }
  std::this_thread::sleep_for(milliseconds(300));
  const auto signalled = Clock::now();
  EXPECT_EQ(fi_cq_signal(cq_), 0);
  for (auto& t : readers) t.join();
  EXPECT_LT(since(signalled), kHang);
  for (int i = 0; i < kThreads; ++i) {
    EXPECT_EQ(rc[i], -FI_EAGAIN) << "reader " << i;
    EXPECT_LT(took[i], kHang) << "reader " << i << " was not woken by the signal";
  }
}

// A signal while nobody waits makes the next sread return at once; the one after waits.
TEST_P(CqWait, SignalWithNobodyWaitingEndsTheNextSreadOnly) {
  open(cq_attr(GetParam()));
  EXPECT_EQ(fi_cq_signal(cq_), 0);
  EntryBuf buf{};
  auto t0 = Clock::now();
  EXPECT_EQ(fi_cq_sread(cq_, buf.data(), 1, nullptr, 10000), -FI_EAGAIN);
  EXPECT_LT(since(t0), kHang) << "the pending signal did not end the sread";
  t0 = Clock::now();
  EXPECT_EQ(fi_cq_sread(cq_, buf.data(), 1, nullptr, 100), -FI_EAGAIN);
  const auto elapsed = since(t0);
  EXPECT_GE(elapsed, milliseconds(100)) << "the signal was answered twice";
  EXPECT_LT(elapsed, kHang);
}

TEST_P(CqWait, ThresholdIsAcceptedAndSreadTimesOutOnAnEmptyCq) {
  fi_cq_attr attr = cq_attr(GetParam());
  attr.wait_cond = FI_CQ_COND_THRESHOLD;
  open(attr);
  EntryBuf buf{};
  const auto t0 = Clock::now();
  EXPECT_EQ(fi_cq_sread(cq_, buf.data(), 4, reinterpret_cast<void*>(uintptr_t{3}), 50), -FI_EAGAIN);
  const auto elapsed = since(t0);
  EXPECT_GE(elapsed, milliseconds(50));
  EXPECT_LT(elapsed, kHang);
}

TEST_P(CqWait, ThresholdSreadIsWokenBySignal) {
  fi_cq_attr attr = cq_attr(GetParam());
  attr.wait_cond = FI_CQ_COND_THRESHOLD;
  open(attr);
  std::atomic<bool> entered{false};
  ssize_t rc = 0;
  milliseconds took{};
  std::thread reader([&] {
    EntryBuf buf{};
    entered.store(true);
    const auto t0 = Clock::now();
    rc = fi_cq_sread(cq_, buf.data(), 4, reinterpret_cast<void*>(uintptr_t{3}), 10000);
    took = since(t0);
  });
  while (!entered.load()) std::this_thread::sleep_for(milliseconds(1));
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_EQ(fi_cq_signal(cq_), 0);
  reader.join();
  EXPECT_EQ(rc, -FI_EAGAIN);
  EXPECT_LT(took, kHang);
}

INSTANTIATE_TEST_SUITE_P(AllWaitObjects, CqWait,
                         ::testing::Values(FI_WAIT_UNSPEC, FI_WAIT_FD, FI_WAIT_POLLFD,
                                           FI_WAIT_MUTEX_COND, FI_WAIT_YIELD),
                         [](const ::testing::TestParamInfo<enum fi_wait_obj>& info) {
                           return wait_name(info.param);
                         });

TEST_F(Cq, ThresholdOnWaitNoneIsAccepted) {
  fi_cq_attr attr = cq_attr(FI_WAIT_NONE);
  attr.wait_cond = FI_CQ_COND_THRESHOLD;
  open(attr);
  EntryBuf buf{};
  EXPECT_EQ(fi_cq_read(cq_, buf.data(), 1), -FI_EAGAIN);
}

// --- strerror -----------------------------------------------------------------------------

constexpr unsigned char kCanary = 0x5A;

TEST_F(Cq, StrerrorNeverWritesBeyondLenAndAlwaysTerminates) {
  open(cq_attr());
  for (int prov_errno : {0, int{FI_EOVERRUN}, int{FI_ETRUNC}, 123456, -7}) {
    for (size_t len : {size_t{1}, size_t{5}, size_t{64}}) {
      std::array<char, 128> buf;
      buf.fill(static_cast<char>(kCanary));
      const char* s = fi_cq_strerror(cq_, prov_errno, nullptr, buf.data(), len);
      ASSERT_NE(s, nullptr) << prov_errno << " len " << len;
      EXPECT_EQ(s, buf.data()) << "the text goes into the caller's buffer";
      EXPECT_LT(strnlen(buf.data(), len), len) << "not terminated within len: " << prov_errno;
      for (size_t i = len; i < buf.size(); ++i) {
        ASSERT_EQ(static_cast<unsigned char>(buf[i]), kCanary)
            << "wrote byte " << i << " with len " << len << " prov_errno " << prov_errno;
      }
    }
  }
}

TEST_F(Cq, StrerrorWithLenZeroWritesNothing) {
  open(cq_attr());
  std::array<char, 16> buf;
  buf.fill(static_cast<char>(kCanary));
  EXPECT_NE(fi_cq_strerror(cq_, FI_EOVERRUN, nullptr, buf.data(), 0), nullptr);
  for (char c : buf) ASSERT_EQ(static_cast<unsigned char>(c), kCanary);
}

TEST_F(Cq, StrerrorWithNullBufferReturnsAString) {
  open(cq_attr());
  for (int prov_errno : {0, int{FI_EOVERRUN}, 123456}) {
    const char* s = fi_cq_strerror(cq_, prov_errno, nullptr, nullptr, 0);
    ASSERT_NE(s, nullptr) << prov_errno;
    EXPECT_GT(std::strlen(s), 0u);
    EXPECT_NE(fi_cq_strerror(cq_, prov_errno, nullptr, nullptr, 64), nullptr);
  }
  const char* s = fi_cq_strerror(cq_, FI_EOVERRUN, nullptr, nullptr, 0);
  ASSERT_NE(s, nullptr);
  EXPECT_NE(std::string(s).find("overrun"), std::string::npos) << s;
}

TEST_F(Cq, StrerrorOfOverrunMentionsOverrun) {
  open(cq_attr());
  std::array<char, 64> buf{};
  const char* s = fi_cq_strerror(cq_, FI_EOVERRUN, nullptr, buf.data(), buf.size());
  ASSERT_NE(s, nullptr);
  EXPECT_NE(std::string(s).find("overrun"), std::string::npos) << s;
}

}  // namespace
}  // namespace fabq::testing
