// xport/copy_choice.h: the receiver advises the way it measured faster per size class, and the
// sender follows the advice, explores while there is none and probes the other way now and then.
#include "xport/copy_choice.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace fabq::xport {
namespace {

constexpr size_t k64K = 64 * 1024;

TEST(CopyClass, SizesArePowerOfTwoClassesFrom16KiBWithTheSmallerInTheFirstAndTheLargerInTheLast) {
  EXPECT_EQ(copy_class(0), 0);
  EXPECT_EQ(copy_class(4096), 0);
  EXPECT_EQ(copy_class(16 * 1024), 0);
  EXPECT_EQ(copy_class(32 * 1024 - 1), 0);
  EXPECT_EQ(copy_class(32 * 1024), 1);
  EXPECT_EQ(copy_class(k64K), 2);
  EXPECT_EQ(copy_class(1 << 20), 6);
  EXPECT_EQ(copy_class((2 << 20) - 1), 6);
  EXPECT_EQ(copy_class(2 << 20), 7);
  EXPECT_EQ(copy_class(size_t{1} << 40), kCopyClasses - 1);
}

void record(CopyAdvisor* a, size_t len, CopyPath path, std::vector<uint64_t> ns) {
  for (const uint64_t n : ns) a->record(len, path, n);
}

TEST(CopyAdvisor, AdvisesNothingUntilItHasEnoughSamplesOfBothWays) {
  CopyAdvisor a;
  record(&a, k64K, CopyPath::kRing, {100, 100, 100, 100});
  record(&a, k64K, CopyPath::kDirect, {50, 50});
  EXPECT_FALSE(advice_known(a.advice(), 2));
  EXPECT_TRUE(a.record(k64K, CopyPath::kDirect, 50)) << "the third sample of the second way";
  EXPECT_TRUE(advice_known(a.advice(), 2));
  EXPECT_TRUE(advice_direct(a.advice(), 2));
  EXPECT_EQ(a.advice(), (uint64_t{1} << 2) | (uint64_t{1} << 18)) << "only that class";
}

TEST(CopyAdvisor, AdvisesTheWayWhoseSecondSmallestRecentSampleIsLess) {
  CopyAdvisor a;
  // One fast ring sample among slow ones decides nothing; nor does one slow direct one.
  record(&a, k64K, CopyPath::kRing, {9000, 1000, 9000});
  record(&a, k64K, CopyPath::kDirect, {4000, 4000, 90000});
  EXPECT_EQ(a.estimate(2, CopyPath::kRing), 9000u);
  EXPECT_EQ(a.estimate(2, CopyPath::kDirect), 4000u);
  EXPECT_TRUE(advice_direct(a.advice(), 2));
  // The oldest samples make room for new ones: four fast ring ones turn the advice.
  record(&a, k64K, CopyPath::kRing, {2000, 2000, 2000});
  EXPECT_EQ(a.estimate(2, CopyPath::kRing), 2000u);
  EXPECT_FALSE(advice_direct(a.advice(), 2));
  EXPECT_TRUE(advice_known(a.advice(), 2));
}

TEST(CopyAdvisor, TheAdvisedWayStaysUntilTheOtherIsFasterByASixteenth) {
  CopyAdvisor a;
  record(&a, k64K, CopyPath::kRing, {1000, 1000, 1000});
  record(&a, k64K, CopyPath::kDirect, {990, 990, 990});
  ASSERT_TRUE(advice_direct(a.advice(), 2));
  record(&a, k64K, CopyPath::kRing, {960, 960, 960, 960});  // 3 % faster: not enough
  EXPECT_TRUE(advice_direct(a.advice(), 2));
  record(&a, k64K, CopyPath::kRing, {900, 900, 900, 900});  // 10 %
  EXPECT_FALSE(advice_direct(a.advice(), 2));
}

TEST(CopyAdvisor, TheFirstDirectCopyIntoEachDestinationIsLeftOut) {
  // The RMA write benchmark's pattern: four slots of 4 MiB, the first copy into each cold.
  constexpr size_t k4M = 4 << 20;
  constexpr int c = 7;
  CopyAdvisor a;
  record(&a, k4M, CopyPath::kRing, {300'000, 300'000, 300'000});
  EXPECT_FALSE(a.record_direct(k4M, 0, 7'000'000));
  EXPECT_FALSE(a.record_direct(k4M, 1, 7'000'000));
  EXPECT_FALSE(a.record_direct(k4M, 2, 7'000'000));
  EXPECT_EQ(a.estimate(c, CopyPath::kDirect), 0u) << "three new destinations: no sample kept";
  EXPECT_FALSE(a.record_direct(k4M, 0, 220'000));
  EXPECT_FALSE(a.record_direct(k4M, 1, 220'000));
  EXPECT_FALSE(a.record_direct(k4M, 3, 7'000'000)) << "a fourth new one is left out too";
  EXPECT_TRUE(a.record_direct(k4M, 2, 220'000));
  EXPECT_TRUE(advice_direct(a.advice(), c)) << "what the slots cost when used again decides";
  EXPECT_EQ(a.estimate(c, CopyPath::kDirect), 220'000u);
}

TEST(CopyAdvisor, DirectCopiesThatKeepMeetingNewDestinationsCountAfterThreeInARow) {
  CopyAdvisor a;
  record(&a, k64K, CopyPath::kRing, {1000, 1000, 1000});
  uint64_t dest = 100;
  for (int i = 0; i < CopyAdvisor::kEnough; ++i) {
    EXPECT_FALSE(a.record_direct(k64K, dest++, 5000));
  }
  EXPECT_EQ(a.estimate(2, CopyPath::kDirect), 0u);
  a.record_direct(k64K, dest++, 5000);
  a.record_direct(k64K, dest++, 5000);
  a.record_direct(k64K, dest++, 5000);
  EXPECT_EQ(a.estimate(2, CopyPath::kDirect), 5000u) << "new destinations are the pattern";
  EXPECT_TRUE(advice_known(a.advice(), 2));
  EXPECT_FALSE(advice_direct(a.advice(), 2));
}

TEST(CopyAdvisor, ItRemembersTheLast16DestinationsOfDirectCopies) {
  CopyAdvisor a;
  record(&a, k64K, CopyPath::kRing, {1000, 1000, 1000});
  for (uint64_t d = 0; d < CopyAdvisor::kDestinations; ++d) {
    a.record_direct(k64K, d, 100);  // new: left out
    a.record_direct(k64K, d, 100);  // known now: counted
  }
  ASSERT_EQ(a.estimate(2, CopyPath::kDirect), 100u);
  // Three more push out destinations 0, 1 and 2; a known one after them ends the run of new.
  a.record_direct(k64K, 16, 100);
  a.record_direct(k64K, 17, 100);
  a.record_direct(k64K, 18, 100);
  a.record_direct(k64K, 18, 100);
  for (uint64_t d = 0; d < 3; ++d) a.record_direct(k64K, d, 90'000);
  EXPECT_EQ(a.estimate(2, CopyPath::kDirect), 100u) << "0, 1 and 2 were forgotten: new again";
  for (uint64_t d = 6; d < 9; ++d) a.record_direct(k64K, d, 90'000);
  EXPECT_EQ(a.estimate(2, CopyPath::kDirect), 90'000u) << "6, 7 and 8 are still remembered";
}

TEST(CopyAdvisor, ClassesAreAdvisedApart) {
  CopyAdvisor a;
  record(&a, 16 * 1024, CopyPath::kRing, {1000, 1000, 1000});
  record(&a, 16 * 1024, CopyPath::kDirect, {3000, 3000, 3000});
  record(&a, 1 << 20, CopyPath::kRing, {90000, 90000, 90000});
  record(&a, 1 << 20, CopyPath::kDirect, {60000, 60000, 60000});
  EXPECT_FALSE(advice_direct(a.advice(), 0));
  EXPECT_TRUE(advice_direct(a.advice(), 6));
  EXPECT_FALSE(advice_known(a.advice(), 2));
  char text[64];
  format_advice(a.advice(), text, sizeof text);
  EXPECT_STREQ(text, "16K:ring 1M:direct");
  format_advice(0, text, sizeof text);
  EXPECT_STREQ(text, "none");
  format_advice(uint64_t{1} << 7, text, sizeof text);
  EXPECT_STREQ(text, "2M+:ring");
}

TEST(CopyAdvisor, WantsEveryMessageOfAnUnknownClassOrOfTheWayNotAdvisedAndSomeOfTheOther) {
  CopyAdvisor a;
  for (int i = 0; i < 20; ++i) EXPECT_TRUE(a.wants(k64K, CopyPath::kRing));
  record(&a, k64K, CopyPath::kRing, {1000, 1000, 1000});
  record(&a, k64K, CopyPath::kDirect, {3000, 3000, 3000});
  ASSERT_FALSE(advice_direct(a.advice(), 2));
  int ring = 0;
  for (uint32_t i = 0; i < 10 * CopyAdvisor::kSampleEvery; ++i) {
    EXPECT_TRUE(a.wants(k64K, CopyPath::kDirect));
    ring += a.wants(k64K, CopyPath::kRing);
  }
  EXPECT_EQ(ring, 10);
}

TEST(CopyPlanner, WithoutAdviceItSendsThreeOfEachWayInTurn) {
  CopyPlanner p;
  std::string ways;
  for (int i = 0; i < 12; ++i) ways += p.choose(k64K, 0) == CopyPath::kRing ? 'r' : 'd';
  EXPECT_EQ(ways, "rrrdddrrrddd");
}

// The ways of n messages of len bytes under `advice`, one letter each.
std::string ways(CopyPlanner* p, size_t len, uint64_t advice, int n) {
  std::string w;
  for (int i = 0; i < n; ++i) w += p->choose(len, advice) == CopyPath::kRing ? 'r' : 'd';
  return w;
}

TEST(CopyPlanner, ItFollowsTheAdviceAndProbesTheOtherWayAfter16ThenTwiceAsManyUpTo256) {
  CopyPlanner p;
  const uint64_t ring = uint64_t{1} << 2;
  const std::string w = ways(&p, k64K, ring, 1000);
  std::vector<size_t> probes;
  for (size_t i = 0; i < w.size(); ++i) {
    if (w[i] == 'd' && (i == 0 || w[i - 1] != 'd')) probes.push_back(i);
  }
  // Each probe is three messages, the gap counted from the start of the one before.
  EXPECT_EQ(probes, (std::vector<size_t>{15, 47, 111, 239, 495, 751}));
  for (const size_t at : probes) EXPECT_EQ(w.substr(at, 4), "dddr") << at;
  EXPECT_EQ(static_cast<size_t>(std::count(w.begin(), w.end(), 'd')), 3 * probes.size());
}

TEST(CopyPlanner, DirectAdviceIsFollowedAndProbedWithTheRing) {
  CopyPlanner p;
  const uint64_t direct = (uint64_t{1} << 6) | (uint64_t{1} << 22);
  const std::string w = ways(&p, 1 << 20, direct, 20);
  EXPECT_EQ(w, "dddddddddddddddrrrdd");
  // Another class of the same advice word, known as nothing: explored.
  EXPECT_EQ(ways(&p, k64K, direct, 6), "rrrddd");
}

}  // namespace
}  // namespace fabq::xport
