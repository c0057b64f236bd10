// Shared-memory rings of same-host connections: the sweep of stale segment names (kept while a
// process holds them, whatever their pid and PID namespace, even from a sweep in a new PID
// namespace); a Segment's name, nonce and mapping as the two sides see them; a Ring's bytes (round
// trips, the wrap-around, a full ring, iovecs), its two doorbell flags, the checks of the indices a
// peer could corrupt; and two threads on the two sides of one segment, each sleeping on a doorbell
// when it must: a producer and a consumer moving 64 MiB, and a ping-pong of single bytes that
// provokes the flags' race.
#include "xport/shm.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <mutex>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/unique_fd.h"

namespace fabq::xport::shm {

// For readable failure messages (found by argument-dependent lookup).
static void PrintTo(Status s, std::ostream* os) {
  *os << (s == Status::kOk ? "kOk" : s == Status::kCorrupt ? "kCorrupt" : "Status(?)");
}

namespace {

using Bytes = std::vector<unsigned char>;

// n pseudo-random bytes: a byte lost, repeated or out of place shows.
Bytes pattern(size_t n, unsigned seed = 1) {
  std::mt19937 rng(seed);
  Bytes b(n);
  for (unsigned char& c : b) c = static_cast<unsigned char>(rng());
  return b;
}

// --- names ----------------------------------------------------------------------------------

// The file behind a segment's POSIX shm name "/fabq-<pid>-<n>" (shm.cc, name_of).
std::string shm_path(uint64_t id) {
  return "/dev/shm/fabq-" + std::to_string(id >> 32) + "-" + std::to_string(id & 0xffffffffu);
}

bool name_exists(uint64_t id) {
  struct stat st {};
  return ::stat(shm_path(id).c_str(), &st) == 0;
}

// An id of this process that Segment::create() will not hand out in a test (its counter starts
// at 1 and a test makes a handful).
uint64_t unused_id(uint32_t n = 0xfffffff0u) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(getpid())) << 32) | n;
}

// --- Ring helpers ---------------------------------------------------------------------------

size_t write_bytes(Ring& r, const Bytes& b, bool* bell = nullptr) {
  iovec iov{const_cast<unsigned char*>(b.data()), b.size()};
  size_t written = 0;
  bool rang = false;
  EXPECT_EQ(r.write(&iov, 1, &written, &rang), Status::kOk);
  if (bell != nullptr) *bell = rang;
  return written;
}

// Takes everything the ring holds, in the two pieces of a wrap-around if there are two, and
// returns it. *bell: whether a consume() said the producer was owed a doorbell.
Bytes read_all(Ring& r, bool* bell = nullptr) {
  Bytes out;
  bool rang = false;
  for (int piece = 0; piece < 2; ++piece) {
    const unsigned char* p = nullptr;
    size_t contiguous = 0;
    size_t avail = 0;
    EXPECT_EQ(r.peek(&p, &contiguous, &avail), Status::kOk);
    if (avail == 0) break;
    out.insert(out.end(), p, p + contiguous);
    if (r.consume(contiguous)) rang = true;
  }
  if (bell != nullptr) *bell = rang;
  return out;
}

// A ring over memory of the test's own, so that the test can also play a peer that writes
// whatever it likes into the control block. Producer and consumer use the same Ring: it keeps
// no state of its own but the two pointers.
class ShmRing : public testing::Test {
 protected:
  void fill() {
    const Bytes b(kRingBytes, 0x5a);
    ASSERT_EQ(write_bytes(ring_, b), kRingBytes);
    ASSERT_FALSE(ring_.writable());
  }

  RingControl ctl_{};
  Bytes data_ = Bytes(kRingBytes);
  Ring ring_{&ctl_, data_.data()};
};

// --- Segment: stale names -------------------------------------------------------------------

// A pid that ran and has ended: a child that exited, reaped. Nothing here answers to it, just
// as nothing here answers to the pid of a process of another PID namespace.
pid_t dead_pid() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  int status = 0;
  waitpid(pid, &status, 0);
  return pid;
}

// Waits up to `ms` for the child `pid` to end, and reaps it. Its exit code; 128 + the signal
// if a signal ended it; -1 if it was still running at the deadline (it is then killed).
int reap(pid_t pid, int ms = 30'000) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  int status = 0;
  for (;;) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (r < 0) return -1;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// The size of a hand-made name unless a test says otherwise: not empty, as a segment's file is
// once its creator holds it.
constexpr off_t kHeldSize = 4096;

// Creates `dir`/`file` as a creator that has since died leaves it: sized, and held by nobody.
// Returns whether it could.
bool make_name(const std::string& file, const std::string& dir = "/dev/shm",
               off_t size = kHeldSize) {
  core::UniqueFd fd(
      ::open((dir + "/" + file).c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  return fd.valid() && ftruncate(fd.get(), size) == 0;
}

bool file_exists(const std::string& file, const std::string& dir = "/dev/shm") {
  struct stat st {};
  return ::lstat((dir + "/" + file).c_str(), &st) == 0;
}

// Another process that holds a file as a segment's creator holds its name (flock LOCK_SH),
// until it is killed, as a creator may be. Its pid plays no part: it may stand for a creator of
// any PID namespace.
class Holder {
 public:
  explicit Holder(const std::string& path) {
    int ready[2];
    if (pipe2(ready, O_CLOEXEC) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      alarm(60);  // it never outlives a test that lost track of it
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      const char ok = fd >= 0 && flock(fd, LOCK_SH) == 0 ? 'y' : 'n';
      [[maybe_unused]] ssize_t n = ::write(ready[1], &ok, 1);
      for (;;) pause();
    }
    ::close(ready[1]);
    char c = 'n';
    pollfd pfd{ready[0], POLLIN, 0};
    ok_ = pid_ > 0 && poll(&pfd, 1, 10'000) == 1 && ::read(ready[0], &c, 1) == 1 && c == 'y';
    ::close(ready[0]);
  }
  Holder(const Holder&) = delete;
  Holder& operator=(const Holder&) = delete;
  ~Holder() { kill(); }

  bool ok() const { return ok_; }
  pid_t pid() const { return pid_; }
  // Kills the holder and reaps it: its lock ends with it. True if it ran until then.
  bool kill() {
    if (pid_ <= 0) return false;
    const pid_t pid = std::exchange(pid_, -1);
    ::kill(pid, SIGKILL);
    return reap(pid) == 128 + SIGKILL;
  }

 private:
  pid_t pid_ = -1;
  bool ok_ = false;
};

// Sweeps of a directory of the test's own: another process's first create() sweeps /dev/shm
// and would take a test's stale name from under it.
class ShmSweep : public testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/fabq-sweep-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (dir_.empty()) return;
    if (DIR* d = opendir(dir_.c_str())) {
      while (const dirent* e = readdir(d)) {
        if (unlinkat(dirfd(d), e->d_name, 0) != 0) unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR);
      }
      closedir(d);
    }
    ::rmdir(dir_.c_str());
  }

  std::string path(const std::string& file) const { return dir_ + "/" + file; }
  bool make(const std::string& file, off_t size = kHeldSize) const {
    return make_name(file, dir_, size);
  }
  bool exists(const std::string& file) const { return file_exists(file, dir_); }
  size_t sweep() const { return Segment::sweep_stale(dir_.c_str()); }

  std::string dir_;
};

TEST_F(ShmSweep, RemovesTheNamesOfCreatorsThatNoLongerRunAndNothingElse) {
  const pid_t dead = dead_pid();
  ASSERT_GT(dead, 0);
  const std::string d = std::to_string(dead);
  const std::string stale = "fabq-" + d + "-4000000001";
  const std::vector<std::string> kept = {
      "fabq-" + d + "-4000000003x",   // not a fabq name: a suffix
      "fabq-0" + d + "-4000000004",   // not as fabq writes a pid
      "fabq-" + d + "-4000000005-6",  // not a fabq name: three numbers
      "fabq-" + d + "-04000000006",   // not as fabq writes a counter
      "fabq-" + d + "-4294967296",    // a counter above 32 bits
      "fabq-4294967295-4000000008",   // not a pid (Linux pids are below 2^22)
      "fabq--4000000009",             // no pid
  };
  ASSERT_TRUE(make(stale));
  for (const std::string& k : kept) ASSERT_TRUE(make(k)) << k;
  // Fabq names of what no creator makes: a FIFO (which must not block the sweep), a directory,
  // a symbolic link to a stale segment's file.
  const std::string fifo = "fabq-" + d + "-4000000010";
  const std::string directory = "fabq-" + d + "-4000000011";
  const std::string link = "fabq-" + d + "-4000000012";
  ASSERT_EQ(mkfifo(path(fifo).c_str(), 0600), 0);
  ASSERT_EQ(mkdir(path(directory).c_str(), 0700), 0);
  ASSERT_TRUE(make("target"));
  ASSERT_EQ(symlink(path("target").c_str(), path(link).c_str()), 0);

  EXPECT_EQ(sweep(), 1u);
  EXPECT_FALSE(exists(stale)) << "the creator " << dead << " has ended";
  for (const std::string& k : kept) EXPECT_TRUE(exists(k)) << k;
  for (const std::string& k : {fifo, directory, link}) EXPECT_TRUE(exists(k)) << k;
}

TEST_F(ShmSweep, KeepsANameWhosePidIsNobodyHereWhileItsCreatorStillHoldsIt) {
  // A creator of another PID namespace that shares /dev/shm: its pid is nobody's here (kill()
  // would say ESRCH), yet it runs and holds its name.
  const std::string name = "fabq-" + std::to_string(dead_pid()) + "-1";
  ASSERT_TRUE(make(name));
  Holder creator(path(name));
  ASSERT_TRUE(creator.ok());
  EXPECT_EQ(sweep(), 0u);
  EXPECT_TRUE(exists(name));
  EXPECT_TRUE(creator.kill()) << "the creator ran throughout";
}

TEST_F(ShmSweep, RemovesANameOnceTheProcessHoldingItHasEnded) {
  // Made, then held, then named after its holder: the lock is the file's, not the name's.
  ASSERT_TRUE(make("new"));
  Holder creator(path("new"));
  ASSERT_TRUE(creator.ok());
  const std::string name = "fabq-" + std::to_string(creator.pid()) + "-2";
  ASSERT_EQ(::rename(path("new").c_str(), path(name).c_str()), 0);
  ASSERT_EQ(sweep(), 0u);
  ASSERT_TRUE(exists(name));
  ASSERT_TRUE(creator.kill());  // as a creator killed between its offer and the answer
  EXPECT_EQ(sweep(), 1u);
  EXPECT_FALSE(exists(name));
}

TEST_F(ShmSweep, RemovesANameNobodyHoldsEvenIfALiveProcessHasItsPid) {
  // The creator ended and its pid went to another process (this one; and pid 1 always runs):
  // a live pid does not keep a name that nobody holds.
  const std::string reused = "fabq-" + std::to_string(getpid()) + "-3";
  const std::string init = "fabq-1-3";
  ASSERT_TRUE(make(reused));
  ASSERT_TRUE(make(init));
  EXPECT_EQ(sweep(), 2u);
  EXPECT_FALSE(exists(reused));
  EXPECT_FALSE(exists(init));
}

TEST_F(ShmSweep, KeepsAnEmptyNameNobodyHoldsForItsCreatorMayNotHaveLockedItYet) {
  // A creator makes the name, then locks it, then gives it its size: an empty file nobody
  // holds may be one in between. Its pid proves nothing either way.
  const std::string name = "fabq-" + std::to_string(dead_pid()) + "-4";
  ASSERT_TRUE(make(name, 0));
  EXPECT_EQ(sweep(), 0u);
  EXPECT_TRUE(exists(name));
}

TEST(ShmSegment, CreateSweepsStaleNamesTheFirstTimeInAProcess) {
  // In a child of its own, so that its create() is that process's first.
  const std::string stale = "fabq-" + std::to_string(dead_pid()) + "-4000000007";
  ASSERT_TRUE(make_name(stale));
  const pid_t child = fork();
  if (child == 0) {
    bool made = false;
    {
      const Segment s = Segment::create();  // unlinks its own name again when destroyed
      made = s.valid();
    }
    _exit(made ? 0 : 1);
  }
  EXPECT_EQ(reap(child), 0);
  EXPECT_FALSE(file_exists(stale));
  ::unlink(("/dev/shm/" + stale).c_str());
}

TEST(ShmSegment, ALiveCreatorsSegmentSurvivesASweepByAnotherProcess) {
  const Segment s = Segment::create();
  ASSERT_TRUE(s.valid());
  const pid_t sweeper = fork();
  if (sweeper == 0) {
    Segment::sweep_stale();
    _exit(0);
  }
  ASSERT_EQ(reap(sweeper), 0);
  EXPECT_TRUE(name_exists(s.id())) << shm_path(s.id());
  EXPECT_TRUE(Segment::open(s.id(), s.nonce()).valid());
}

// What kill(pid, 0) could not judge, for real: a sweep from a new PID namespace, in which this
// process's pid is nobody's, of the /dev/shm both share.
TEST(ShmSegment, ASweepFromAnotherPidNamespaceKeepsTheSegmentOfALiveCreator) {
  const Segment s = Segment::create();
  ASSERT_TRUE(s.valid());
  const pid_t creator = getpid();
  int refusal[2];
  ASSERT_EQ(pipe2(refusal, O_CLOEXEC), 0);
  constexpr int kRefused = 77;
  // A child makes the namespace: unshare(CLONE_NEWPID) puts only the caller's later children
  // into it, and this process must go on forking in its own. The child's first child is pid 1
  // of the new namespace, and sweeps.
  const pid_t outer = fork();
  if (outer == 0) {
    alarm(60);
    if (unshare(CLONE_NEWPID) != 0) {
      const int e = errno;
      [[maybe_unused]] ssize_t n = ::write(refusal[1], &e, sizeof(e));
      _exit(kRefused);
    }
    const pid_t inner = fork();
    if (inner < 0) _exit(2);
    if (inner == 0) {
      alarm(60);
      if (getpid() != 1) _exit(3);
      if (::kill(creator, 0) == 0 || errno != ESRCH) _exit(4);
      Segment::sweep_stale();
      _exit(0);
    }
    int status = 0;
    if (waitpid(inner, &status, 0) != inner || !WIFEXITED(status)) _exit(5);
    _exit(WEXITSTATUS(status));
  }
  ASSERT_GT(outer, 0);
  ::close(refusal[1]);
  const int rc = reap(outer);
  int e = 0;
  const bool refused = rc == kRefused && ::read(refusal[0], &e, sizeof(e)) == sizeof(e);
  ::close(refusal[0]);
  if (refused) {
    GTEST_SKIP() << "unshare(CLONE_NEWPID) refused (it needs CAP_SYS_ADMIN, as root has): "
                 << std::strerror(e);
  }
  ASSERT_NE(rc, 3) << "the sweeper is not the first process of a new PID namespace";
  ASSERT_NE(rc, 4) << "the creator's pid is somebody's in the new namespace: nothing is proven";
  ASSERT_EQ(rc, 0) << "the sweeper failed";
  EXPECT_TRUE(name_exists(s.id())) << shm_path(s.id());
  EXPECT_TRUE(Segment::open(s.id(), s.nonce()).valid());
}

// --- Segment: create, open, unlink ----------------------------------------------------------

TEST(ShmSegment, ADefaultSegmentIsInvalid) {
  EXPECT_FALSE(Segment().valid());
}

TEST(ShmSegment, CreateGivesAValidSegmentWithANonzeroNonceAndAPrivateName) {
  const Segment s = Segment::create();
  ASSERT_TRUE(s.valid());
  EXPECT_NE(s.nonce(), 0u);
  EXPECT_EQ(s.id() >> 32, static_cast<uint32_t>(getpid())) << "the id names the creator";
  struct stat st {};
  ASSERT_EQ(::stat(shm_path(s.id()).c_str(), &st), 0) << shm_path(s.id());
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_uid, geteuid());
  EXPECT_TRUE(s.tx(true).valid());
  EXPECT_TRUE(s.rx(true).valid());
}

TEST(ShmSegment, TwoCreatedSegmentsHaveDifferentIdsAndNonces) {
  const Segment a = Segment::create();
  const Segment b = Segment::create();
  ASSERT_TRUE(a.valid());
  ASSERT_TRUE(b.valid());
  EXPECT_NE(a.id(), b.id());
  EXPECT_NE(a.nonce(), b.nonce());
}

TEST(ShmSegment, AFreshSegmentHasBothRingsEmptyAndWritable) {
  const Segment s = Segment::create();
  ASSERT_TRUE(s.valid());
  for (const bool connecting : {true, false}) {
    Ring rx = s.rx(connecting);
    EXPECT_FALSE(rx.readable()) << "connecting " << connecting;
    EXPECT_TRUE(rx.writable()) << "connecting " << connecting;
    const unsigned char* p = nullptr;
    size_t contiguous = 1;
    size_t avail = 1;
    EXPECT_EQ(rx.peek(&p, &contiguous, &avail), Status::kOk);
    EXPECT_EQ(avail, 0u);
    EXPECT_EQ(contiguous, 0u);
  }
}

TEST(ShmSegment, OpenWithIdAndNonceMapsTheSameMemoryInBothDirections) {
  const Segment creator = Segment::create();
  ASSERT_TRUE(creator.valid());
  const Segment acceptor = Segment::open(creator.id(), creator.nonce());
  ASSERT_TRUE(acceptor.valid());
  EXPECT_EQ(acceptor.id(), creator.id());
  EXPECT_EQ(acceptor.nonce(), creator.nonce());

  // Connecting side to accepting side.
  Ring c_tx = creator.tx(true);
  Ring a_rx = acceptor.rx(false);
  const Bytes there = pattern(1000, 1);
  ASSERT_EQ(write_bytes(c_tx, there), there.size());
  EXPECT_TRUE(a_rx.readable());
  EXPECT_FALSE(creator.rx(true).readable()) << "the other direction is another ring";
  EXPECT_EQ(read_all(a_rx), there);

  // Accepting side to connecting side.
  Ring a_tx = acceptor.tx(false);
  Ring c_rx = creator.rx(true);
  const Bytes back = pattern(777, 2);
  ASSERT_EQ(write_bytes(a_tx, back), back.size());
  EXPECT_TRUE(c_rx.readable());
  EXPECT_FALSE(a_rx.readable());
  EXPECT_EQ(read_all(c_rx), back);

  // The control blocks are shared too: a consumer's request for a doorbell reaches the
  // producer on the other side.
  EXPECT_FALSE(a_rx.arm_consumer());
  bool bell = false;
  ASSERT_EQ(write_bytes(c_tx, Bytes{1, 2, 3}, &bell), 3u);
  EXPECT_TRUE(bell);
}

TEST(ShmSegment, OpenWithAWrongNonceIsInvalidAndLeavesTheNameForTheRightOne) {
  const Segment creator = Segment::create();
  ASSERT_TRUE(creator.valid());
  EXPECT_FALSE(Segment::open(creator.id(), creator.nonce() ^ 1).valid());
  EXPECT_FALSE(Segment::open(creator.id(), ~creator.nonce()).valid());
  EXPECT_FALSE(Segment::open(creator.id(), 0).valid());
  EXPECT_TRUE(name_exists(creator.id())) << "a failed open does not take the name away";
  EXPECT_TRUE(Segment::open(creator.id(), creator.nonce()).valid());
}

TEST(ShmSegment, OpenOfAnIdNobodyCreatedIsInvalid) {
  const uint64_t id = unused_id();
  ASSERT_FALSE(name_exists(id));
  EXPECT_FALSE(Segment::open(id, 12345).valid());
  const Segment s = Segment::create();
  ASSERT_TRUE(s.valid());
  EXPECT_FALSE(Segment::open(s.id() + 1, s.nonce()).valid()) << "the next id is nobody's yet";
}

// A shm object of the segment's name pattern made by hand: the accepting side must not map
// whatever happens to carry the name. Held as a creator holds its name, so that another
// process's sweep leaves it alone while the test runs.
class HandMadeObject {
 public:
  HandMadeObject(uint64_t id, off_t size)
      : name_("/fabq-" + std::to_string(id >> 32) + "-" + std::to_string(id & 0xffffffffu)),
        fd_(shm_open(name_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) {
    ok_ = fd_.valid() && flock(fd_.get(), LOCK_SH) == 0 && ftruncate(fd_.get(), size) == 0;
  }
  ~HandMadeObject() {
    if (fd_.valid()) shm_unlink(name_.c_str());
  }
  bool ok() const { return ok_; }

 private:
  std::string name_;
  core::UniqueFd fd_;
  bool ok_ = false;
};

TEST(ShmSegment, CreateTakesTheNextNameWhenAProcessOfAnotherPidNamespaceHasIt) {
  // The next two names of this process's counter, made first by somebody else: a process of
  // another PID namespace whose pid has the same number.
  const Segment first = Segment::create();
  ASSERT_TRUE(first.valid());
  const HandMadeObject taken(first.id() + 1, 4096);
  const HandMadeObject also_taken(first.id() + 2, 4096);
  ASSERT_TRUE(taken.ok());
  ASSERT_TRUE(also_taken.ok());
  const Segment s = Segment::create();
  ASSERT_TRUE(s.valid()) << "shared memory given up over a taken name";
  EXPECT_EQ(s.id(), first.id() + 3);
  EXPECT_TRUE(Segment::open(s.id(), s.nonce()).valid());
}

TEST(ShmSegment, OpenRefusesAnObjectOfTheWrongSize) {
  const uint64_t id = unused_id(0xfffffff1u);
  const HandMadeObject obj(id, 4096);
  ASSERT_TRUE(obj.ok());
  EXPECT_FALSE(Segment::open(id, 1).valid());
}

TEST(ShmSegment, OpenRefusesAnObjectOfTheRightSizeWithoutTheSegmentHeader) {
  off_t size = 0;
  {
    const Segment real = Segment::create();
    ASSERT_TRUE(real.valid());
    struct stat st {};
    ASSERT_EQ(::stat(shm_path(real.id()).c_str(), &st), 0);
    size = st.st_size;
  }
  const uint64_t id = unused_id(0xfffffff2u);
  const HandMadeObject obj(id, size);  // all zeros: no magic, nonce 0
  ASSERT_TRUE(obj.ok());
  EXPECT_FALSE(Segment::open(id, 1).valid());
  EXPECT_TRUE(name_exists(id));
}

TEST(ShmSegment, OpenRemovesTheNameSoASecondOpenFails) {
  const Segment creator = Segment::create();
  ASSERT_TRUE(creator.valid());
  ASSERT_TRUE(name_exists(creator.id()));
  const Segment first = Segment::open(creator.id(), creator.nonce());
  ASSERT_TRUE(first.valid());
  EXPECT_FALSE(name_exists(creator.id())) << shm_path(creator.id());
  EXPECT_FALSE(Segment::open(creator.id(), creator.nonce()).valid());
}

TEST(ShmSegment, UnlinkOnTheCreatorRemovesTheNameAndKeepsTheMapping) {
  Segment creator = Segment::create();
  ASSERT_TRUE(creator.valid());
  creator.unlink();
  EXPECT_FALSE(name_exists(creator.id())) << shm_path(creator.id());
  EXPECT_FALSE(Segment::open(creator.id(), creator.nonce()).valid());
  EXPECT_TRUE(creator.valid());
  Ring tx = creator.tx(true);
  ASSERT_EQ(write_bytes(tx, Bytes{7, 8, 9}), 3u);
  EXPECT_TRUE(tx.readable());
  creator.unlink();  // a second time does nothing
  EXPECT_TRUE(creator.valid());
}

TEST(ShmSegment, DestroyingACreatedButNeverOpenedSegmentRemovesItsName) {
  uint64_t id = 0;
  {
    const Segment s = Segment::create();
    ASSERT_TRUE(s.valid());
    id = s.id();
    ASSERT_TRUE(name_exists(id)) << shm_path(id);
  }
  EXPECT_FALSE(name_exists(id)) << shm_path(id);
}

TEST(ShmSegment, DestroyingTheAcceptingSideLeavesTheCreatorsMappingWhole) {
  const Segment creator = Segment::create();
  ASSERT_TRUE(creator.valid());
  {
    const Segment acceptor = Segment::open(creator.id(), creator.nonce());
    ASSERT_TRUE(acceptor.valid());
    Ring a_tx = acceptor.tx(false);
    ASSERT_EQ(write_bytes(a_tx, Bytes{4, 5, 6}), 3u);
  }
  Ring c_rx = creator.rx(true);
  EXPECT_EQ(read_all(c_rx), (Bytes{4, 5, 6}));
}

TEST(ShmSegment, AMovedSegmentTakesItsNameAlongAndTheSourceBecomesInvalid) {
  Segment a = Segment::create();
  ASSERT_TRUE(a.valid());
  const uint64_t id = a.id();
  const uint64_t nonce = a.nonce();
  {
    Segment b(std::move(a));
    EXPECT_FALSE(a.valid());  // the moved-from state is what is checked
    ASSERT_TRUE(b.valid());
    EXPECT_EQ(b.id(), id);
    EXPECT_EQ(b.nonce(), nonce);
    a = Segment();  // destroying or replacing the moved-from segment leaves the name
    EXPECT_TRUE(name_exists(id));
  }
  EXPECT_FALSE(name_exists(id)) << "the new owner unlinked it";
}

TEST(ShmSegment, MoveAssignmentOverACreatedSegmentRemovesTheOldName) {
  Segment a = Segment::create();
  Segment b = Segment::create();
  ASSERT_TRUE(a.valid());
  ASSERT_TRUE(b.valid());
  const uint64_t old_id = a.id();
  const uint64_t new_id = b.id();
  a = std::move(b);
  EXPECT_FALSE(name_exists(old_id));
  EXPECT_TRUE(name_exists(new_id));
  EXPECT_EQ(a.id(), new_id);
  EXPECT_TRUE(a.valid());
}

// --- Ring: bytes ----------------------------------------------------------------------------

TEST_F(ShmRing, AnEmptyRingIsWritableAndHasNothingToRead) {
  EXPECT_FALSE(ring_.readable());
  EXPECT_TRUE(ring_.writable());
  EXPECT_EQ(read_all(ring_), Bytes{});
}

TEST_F(ShmRing, WriteThenPeekAndConsumeGivesTheBytesBack) {
  const Bytes msg = pattern(1000);
  bool bell = true;
  ASSERT_EQ(write_bytes(ring_, msg, &bell), msg.size());
  EXPECT_FALSE(bell);
  EXPECT_TRUE(ring_.readable());

  const unsigned char* p = nullptr;
  size_t contiguous = 0;
  size_t avail = 0;
  ASSERT_EQ(ring_.peek(&p, &contiguous, &avail), Status::kOk);
  EXPECT_EQ(avail, msg.size());
  EXPECT_EQ(contiguous, msg.size());
  ASSERT_EQ(p, data_.data());
  EXPECT_EQ(Bytes(p, p + contiguous), msg);

  // A partial consume leaves the rest where it was.
  EXPECT_FALSE(ring_.consume(400));
  ASSERT_EQ(ring_.peek(&p, &contiguous, &avail), Status::kOk);
  EXPECT_EQ(avail, 600u);
  EXPECT_EQ(contiguous, 600u);
  EXPECT_EQ(Bytes(p, p + contiguous), Bytes(msg.begin() + 400, msg.end()));
  EXPECT_FALSE(ring_.consume(600));
  EXPECT_FALSE(ring_.readable());
  EXPECT_EQ(ctl_.tail.load(), 1000u);
  EXPECT_EQ(ctl_.head.load(), 1000u);
}

TEST_F(ShmRing, BytesWrittenAcrossTheEndComeOutIntactAndInOrder) {
  // Both indices 100 bytes before the end of the ring.
  ASSERT_EQ(write_bytes(ring_, Bytes(kRingBytes - 100, 0xee)), kRingBytes - 100);
  ASSERT_EQ(read_all(ring_).size(), kRingBytes - 100);

  const Bytes msg = pattern(300);
  ASSERT_EQ(write_bytes(ring_, msg), msg.size());
  const unsigned char* p = nullptr;
  size_t contiguous = 0;
  size_t avail = 0;
  ASSERT_EQ(ring_.peek(&p, &contiguous, &avail), Status::kOk);
  EXPECT_EQ(avail, 300u);
  ASSERT_EQ(contiguous, 100u) << "only the bytes up to the end are contiguous";
  EXPECT_EQ(p, data_.data() + kRingBytes - 100);
  Bytes got(p, p + contiguous);
  EXPECT_FALSE(ring_.consume(contiguous));

  // The rest starts at the ring's beginning.
  ASSERT_EQ(ring_.peek(&p, &contiguous, &avail), Status::kOk);
  EXPECT_EQ(avail, 200u);
  EXPECT_EQ(contiguous, 200u);
  EXPECT_EQ(p, data_.data());
  got.insert(got.end(), p, p + contiguous);
  EXPECT_FALSE(ring_.consume(contiguous));
  EXPECT_EQ(got, msg);
  EXPECT_FALSE(ring_.readable());
}

TEST_F(ShmRing, ManyRoundsOfOddSizesWrapAroundManyTimesWithoutLosingAByte) {
  // 7919 is prime: the wrap-around falls at every offset within a write.
  const Bytes msg = pattern(7919);
  for (int round = 0; round < 200; ++round) {
    ASSERT_EQ(write_bytes(ring_, msg), msg.size()) << "round " << round;
    ASSERT_EQ(read_all(ring_), msg) << "round " << round;
  }
  EXPECT_EQ(ctl_.tail.load(), 200u * msg.size());
}

TEST_F(ShmRing, IndicesThatPassTwoToTheSixtyFourKeepWorking) {
  // Indices count bytes ever moved; let them wrap the uint64_t in the middle of a write.
  ctl_.tail.store(UINT64_MAX - 10);
  ctl_.head.store(UINT64_MAX - 10);
  const Bytes msg = pattern(100);
  ASSERT_EQ(write_bytes(ring_, msg), msg.size());
  EXPECT_EQ(ctl_.tail.load(), 89u);
  EXPECT_TRUE(ring_.writable());
  EXPECT_EQ(read_all(ring_), msg);
  EXPECT_EQ(ctl_.head.load(), 89u);
}

TEST_F(ShmRing, AFullRingAcceptsNothingAndAPartialWriteWritesExactlyTheRoomLeft) {
  ASSERT_EQ(write_bytes(ring_, Bytes(kRingBytes - 10, 1)), kRingBytes - 10);
  EXPECT_TRUE(ring_.writable());
  const Bytes msg = pattern(100);
  EXPECT_EQ(write_bytes(ring_, msg), 10u);
  EXPECT_FALSE(ring_.writable());
  EXPECT_EQ(ctl_.tail.load(), kRingBytes);
  EXPECT_EQ(write_bytes(ring_, msg), 0u);
  EXPECT_EQ(ctl_.tail.load(), kRingBytes) << "a write of nothing leaves the tail";

  // The bytes in the ring are the first 10 of msg, not more, not later ones.
  EXPECT_EQ(Bytes(data_.end() - 10, data_.end()), Bytes(msg.begin(), msg.begin() + 10));
  const Bytes all = read_all(ring_);
  ASSERT_EQ(all.size(), kRingBytes);
  EXPECT_EQ(Bytes(all.end() - 10, all.end()), Bytes(msg.begin(), msg.begin() + 10));

  // Room again: the next write starts right after them.
  ASSERT_EQ(write_bytes(ring_, Bytes(msg.begin() + 10, msg.end())), 90u);
  EXPECT_EQ(read_all(ring_), Bytes(msg.begin() + 10, msg.end()));
}

TEST_F(ShmRing, SeveralIovecEntriesAreWrittenInOrder) {
  const std::string parts[] = {"abc", "", "defgh", "i", "jklmnop"};
  iovec iov[std::size(parts)];
  std::string all;
  for (size_t i = 0; i < std::size(parts); ++i) {
    iov[i] = {const_cast<char*>(parts[i].data()), parts[i].size()};
    all += parts[i];
  }
  size_t written = 0;
  bool bell = true;
  ASSERT_EQ(ring_.write(iov, static_cast<int>(std::size(iov)), &written, &bell), Status::kOk);
  EXPECT_EQ(written, all.size());
  EXPECT_FALSE(bell);
  const Bytes got = read_all(ring_);
  EXPECT_EQ(std::string(got.begin(), got.end()), all);
}

TEST_F(ShmRing, IovecThatDoesNotFitIsCutInsideTheEntryWhereTheRoomEnds) {
  ASSERT_EQ(write_bytes(ring_, Bytes(kRingBytes - 6, 0)), kRingBytes - 6);
  ASSERT_EQ(read_all(ring_).size(), kRingBytes - 6);  // the indices are 6 before the end
  ASSERT_EQ(write_bytes(ring_, Bytes(kRingBytes - 8, 0)), kRingBytes - 8);  // 8 bytes of room
  std::string a = "0123", b = "456789", c = "xyz";
  iovec iov[] = {{a.data(), a.size()}, {b.data(), b.size()}, {c.data(), c.size()}};
  size_t written = 0;
  bool bell = false;
  ASSERT_EQ(ring_.write(iov, 3, &written, &bell), Status::kOk);
  EXPECT_EQ(written, 8u);
  const Bytes got = read_all(ring_);
  ASSERT_EQ(got.size(), kRingBytes);
  EXPECT_EQ(std::string(got.end() - 8, got.end()), "01234567");
}

// --- Ring: doorbells ------------------------------------------------------------------------

TEST_F(ShmRing, WriteRingsNoBellForAConsumerThatNeverArmed) {
  bool bell = true;
  ASSERT_EQ(write_bytes(ring_, Bytes{1}, &bell), 1u);
  EXPECT_FALSE(bell);
}

TEST_F(ShmRing, WriteRingsTheBellOnceForAConsumerThatArmedOnAnEmptyRing) {
  EXPECT_FALSE(ring_.arm_consumer()) << "nothing to read: the consumer may sleep";
  bool bell = false;
  ASSERT_EQ(write_bytes(ring_, Bytes{1, 2}, &bell), 2u);
  EXPECT_TRUE(bell);
  ASSERT_EQ(write_bytes(ring_, Bytes{3}, &bell), 1u);
  EXPECT_FALSE(bell) << "the first bell cleared the request";
}

TEST_F(ShmRing, WriteOfNothingRingsNoBellAndKeepsTheRequest) {
  EXPECT_FALSE(ring_.arm_consumer());
  bool bell = true;
  ASSERT_EQ(write_bytes(ring_, Bytes{}, &bell), 0u);
  EXPECT_FALSE(bell);
  ASSERT_EQ(write_bytes(ring_, Bytes{1}, &bell), 1u);
  EXPECT_TRUE(bell) << "the sleeping consumer still gets its bell";
}

TEST_F(ShmRing, AFullRingAcceptsNothingAndRingsNoBellEvenForAnArmedConsumer) {
  ASSERT_NO_FATAL_FAILURE(fill());
  ctl_.consumer_asleep.store(1);  // as if the consumer had armed before the ring filled
  bool bell = true;
  EXPECT_EQ(write_bytes(ring_, Bytes{1}, &bell), 0u);
  EXPECT_FALSE(bell);
  EXPECT_EQ(ctl_.consumer_asleep.load(), 1u);
}

TEST_F(ShmRing, ArmConsumerReturnsTrueWhenBytesAreAlreadyThere) {
  ASSERT_EQ(write_bytes(ring_, Bytes{1}), 1u);
  EXPECT_TRUE(ring_.arm_consumer());
  EXPECT_EQ(read_all(ring_), Bytes{1});
  EXPECT_FALSE(ring_.arm_consumer()) << "empty again";
}

TEST_F(ShmRing, ConsumeRingsNoBellForAProducerThatNeverArmed) {
  ASSERT_NO_FATAL_FAILURE(fill());
  bool bell = true;
  EXPECT_EQ(read_all(ring_, &bell).size(), kRingBytes);
  EXPECT_FALSE(bell);
}

TEST_F(ShmRing, ConsumeRingsTheBellOnceForAProducerThatArmedOnAFullRing) {
  ASSERT_NO_FATAL_FAILURE(fill());
  EXPECT_FALSE(ring_.arm_producer()) << "no room: the producer may sleep";
  EXPECT_FALSE(ring_.consume(0)) << "freeing nothing is no reason to wake it";
  EXPECT_TRUE(ring_.consume(1));
  EXPECT_FALSE(ring_.consume(1)) << "the first bell cleared the request";
  EXPECT_TRUE(ring_.writable());
}

TEST_F(ShmRing, ArmProducerReturnsTrueWhenThereIsRoomAndLeavesNoRequest) {
  EXPECT_TRUE(ring_.arm_producer());
  ASSERT_EQ(write_bytes(ring_, Bytes(kRingBytes - 1, 0)), kRingBytes - 1);
  EXPECT_TRUE(ring_.arm_producer()) << "one byte of room is room";
  ASSERT_EQ(write_bytes(ring_, Bytes{0}), 1u);
  ASSERT_FALSE(ring_.writable());
  // The producer never said it sleeps, so freeing room owes it nothing.
  EXPECT_FALSE(ring_.consume(1));
  EXPECT_EQ(ctl_.producer_blocked.load(), 0u);
}

TEST_F(ShmRing, ArmProducerThatFindsRoomAfterAConsumeNeedsNoBell) {
  ASSERT_NO_FATAL_FAILURE(fill());
  ASSERT_FALSE(ring_.arm_producer());
  ASSERT_TRUE(ring_.consume(10));
  EXPECT_TRUE(ring_.arm_producer());
  EXPECT_EQ(write_bytes(ring_, Bytes(20, 0)), 10u);
  EXPECT_FALSE(ring_.consume(10));
}

// --- Ring: indices a peer corrupted ---------------------------------------------------------

TEST_F(ShmRing, TailMoreThanARingAheadOfTheHeadIsCorrupt) {
  ctl_.head.store(1000);
  ctl_.tail.store(1000 + kRingBytes + 1);
  const unsigned char* p = nullptr;
  size_t contiguous = 0;
  size_t avail = 0;
  EXPECT_EQ(ring_.peek(&p, &contiguous, &avail), Status::kCorrupt);
  size_t written = 1;
  bool bell = true;
  const Bytes b{1};
  iovec iov{const_cast<unsigned char*>(b.data()), b.size()};
  EXPECT_EQ(ring_.write(&iov, 1, &written, &bell), Status::kCorrupt);
  EXPECT_EQ(written, 0u);
  EXPECT_FALSE(bell);
  EXPECT_TRUE(ring_.arm_consumer()) << "a bogus tail counts as bytes: reading it fails";
}

TEST_F(ShmRing, TailExactlyARingAheadOfTheHeadIsAFullRingNotCorruption) {
  ctl_.head.store(1000);
  ctl_.tail.store(1000 + kRingBytes);
  const unsigned char* p = nullptr;
  size_t contiguous = 0;
  size_t avail = 0;
  ASSERT_EQ(ring_.peek(&p, &contiguous, &avail), Status::kOk);
  EXPECT_EQ(avail, kRingBytes);
  EXPECT_EQ(contiguous, kRingBytes - 1000);
  EXPECT_EQ(write_bytes(ring_, Bytes{1}), 0u);
}

TEST_F(ShmRing, HeadPastTheTailIsCorruptAndTheWriteStoresNothing) {
  ctl_.tail.store(4);
  ctl_.head.store(5);
  const Bytes b = pattern(16);
  iovec iov{const_cast<unsigned char*>(b.data()), b.size()};
  size_t written = 1;
  bool bell = true;
  EXPECT_EQ(ring_.write(&iov, 1, &written, &bell), Status::kCorrupt);
  EXPECT_EQ(written, 0u);
  EXPECT_FALSE(bell);
  EXPECT_EQ(ctl_.tail.load(), 4u);
  EXPECT_EQ(data_, Bytes(kRingBytes)) << "not a byte copied";
  const unsigned char* p = nullptr;
  size_t contiguous = 0;
  size_t avail = 0;
  EXPECT_EQ(ring_.peek(&p, &contiguous, &avail), Status::kCorrupt);
}

TEST(ShmSegment, IndicesAPeerCorruptedInALiveSegmentAreCaught) {
  // The same checks through a real mapping: the peer's writes come through the shared
  // control block. Here the test plays the peer by giving the consumer more than a ring.
  const Segment creator = Segment::create();
  ASSERT_TRUE(creator.valid());
  const Segment acceptor = Segment::open(creator.id(), creator.nonce());
  ASSERT_TRUE(acceptor.valid());
  Ring tx = creator.tx(true);
  Ring rx = acceptor.rx(false);
  ASSERT_EQ(write_bytes(tx, Bytes(kRingBytes, 0)), kRingBytes);
  ASSERT_EQ(read_all(rx).size(), kRingBytes);
  // The consumer gives back more than it was given: its head passes the tail.
  EXPECT_FALSE(rx.consume(1));
  size_t written = 1;
  bool bell = true;
  const Bytes b{1};
  iovec iov{const_cast<unsigned char*>(b.data()), b.size()};
  EXPECT_EQ(tx.write(&iov, 1, &written, &bell), Status::kCorrupt);
  EXPECT_EQ(written, 0u);
}

// --- two threads ----------------------------------------------------------------------------

// One direction of a connection, the way conn_shm.cc drives it: the producer writes chunks of
// random size and, when the ring is full, arms and sleeps on its doorbell; the consumer takes
// random amounts and, when the ring is empty, arms and sleeps on its own. Each doorbell is an
// eventfd. A lost wake-up leaves a side asleep: its wait times out and the test fails.
class Doorbell {
 public:
  Doorbell() : fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}
  bool valid() const { return fd_.valid(); }
  void ring() {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(fd_.get(), &one, sizeof(one));
  }
  // False if nobody rang within `ms`.
  bool wait(int ms) {
    pollfd pfd{fd_.get(), POLLIN, 0};
    if (poll(&pfd, 1, ms) != 1) return false;
    uint64_t v;
    [[maybe_unused]] ssize_t n = ::read(fd_.get(), &v, sizeof(v));
    return true;
  }

 private:
  core::UniqueFd fd_;
};

// What the two threads of a test share to stop at the first failure: its reason, and the
// doorbells to ring so that neither side stays asleep.
class FirstFailure {
 public:
  FirstFailure(Doorbell& a, Doorbell& b) : bells_{&a, &b} {}
  void operator()(const std::string& why) {
    {
      std::lock_guard lock(mu_);
      if (failure_.empty()) failure_ = why;
    }
    stop_.store(true);
    for (Doorbell* d : bells_) d->ring();
  }
  bool stopped() const { return stop_.load(); }
  std::string reason() {
    std::lock_guard lock(mu_);
    return failure_;
  }

 private:
  Doorbell* bells_[2];
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::string failure_;
};

TEST(ShmConcurrent, ProducerAndConsumerThreadsMove64MiBIntactSleepingOnDoorbells) {
  constexpr uint64_t kTotal = uint64_t{64} << 20;
  constexpr int kWaitMs = 5'000;  // far beyond any legitimate sleep: a lost wake-up
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  // The stream is this pattern repeated; its length is no divisor of the ring's.
  const Bytes pat = pattern((size_t{1} << 20) + 3, 42);
  auto expected = [&](uint64_t pos) { return pat.data() + pos % pat.size(); };
  auto left_in_pat = [&](uint64_t pos) { return pat.size() - pos % pat.size(); };

  const Segment creator = Segment::create();
  ASSERT_TRUE(creator.valid());
  const Segment acceptor = Segment::open(creator.id(), creator.nonce());
  ASSERT_TRUE(acceptor.valid());
  Doorbell producer_bell;
  Doorbell consumer_bell;
  ASSERT_TRUE(producer_bell.valid());
  ASSERT_TRUE(consumer_bell.valid());

  FirstFailure fail(producer_bell, consumer_bell);
  auto late = [&] { return std::chrono::steady_clock::now() > deadline; };
  std::atomic<uint64_t> producer_sleeps{0};
  std::atomic<uint64_t> consumer_sleeps{0};

  std::thread producer([&] {
    Ring ring = creator.tx(true);
    std::mt19937 rng(7);
    std::uniform_int_distribution<size_t> size(1, 64 * 1024);
    uint64_t pos = 0;
    while (pos < kTotal && !fail.stopped()) {
      if (late()) return fail("producer: past the deadline at byte " + std::to_string(pos));
      // Up to two iovec entries: the chunk may run past the end of the pattern.
      const size_t len = static_cast<size_t>(std::min<uint64_t>(size(rng), kTotal - pos));
      iovec iov[2];
      int cnt = 1;
      const size_t first = std::min(len, left_in_pat(pos));
      iov[0] = {const_cast<unsigned char*>(expected(pos)), first};
      if (first < len) {
        iov[1] = {const_cast<unsigned char*>(pat.data()), len - first};
        cnt = 2;
      }
      size_t written = 0;
      bool bell = false;
      if (ring.write(iov, cnt, &written, &bell) != Status::kOk) {
        return fail("producer: write() says the ring is corrupt");
      }
      if (bell) consumer_bell.ring();
      pos += written;
      if (written > 0) continue;
      if (ring.arm_producer()) continue;
      producer_sleeps.fetch_add(1);
      if (!producer_bell.wait(kWaitMs)) {
        return fail("producer: lost wake-up, asleep on a full ring at byte " + std::to_string(pos));
      }
    }
  });

  std::thread consumer([&] {
    Ring ring = acceptor.rx(false);
    std::mt19937 rng(11);
    std::uniform_int_distribution<size_t> size(1, 96 * 1024);
    uint64_t pos = 0;
    while (pos < kTotal && !fail.stopped()) {
      if (late()) return fail("consumer: past the deadline at byte " + std::to_string(pos));
      const unsigned char* p = nullptr;
      size_t contiguous = 0;
      size_t avail = 0;
      if (ring.peek(&p, &contiguous, &avail) != Status::kOk) {
        return fail("consumer: peek() says the ring is corrupt");
      }
      if (avail == 0) {
        if (ring.arm_consumer()) continue;
        consumer_sleeps.fetch_add(1);
        if (!consumer_bell.wait(kWaitMs)) {
          return fail("consumer: lost wake-up, asleep on an empty ring at byte " +
                      std::to_string(pos));
        }
        continue;
      }
      if (avail > kRingBytes || contiguous > avail || pos + avail > kTotal) {
        return fail("consumer: peek() reports " + std::to_string(avail) + " bytes at byte " +
                    std::to_string(pos));
      }
      const size_t n = std::min(contiguous, size(rng));
      for (size_t done = 0; done < n;) {
        const size_t c = std::min(n - done, left_in_pat(pos + done));
        if (std::memcmp(p + done, expected(pos + done), c) != 0) {
          return fail("consumer: wrong bytes within [" + std::to_string(pos + done) + ", " +
                      std::to_string(pos + done + c) + ")");
        }
        done += c;
      }
      pos += n;
      if (ring.consume(n)) producer_bell.ring();
    }
    if (pos == kTotal && ring.readable()) fail("consumer: bytes beyond the end of the stream");
  });

  producer.join();
  consumer.join();
  EXPECT_EQ(fail.reason(), "");
  RecordProperty("producer_sleeps", std::to_string(producer_sleeps.load()));
  RecordProperty("consumer_sleeps", std::to_string(consumer_sleeps.load()));
}

// The race the doorbell flags exist for, provoked as often as a short test can: two sides
// ping-pong one byte at a time, and before arming each spins a random while, so that its arm
// often lands just as the other side writes. A side that armed, found its ring empty and then
// waits in vain for its doorbell has lost a wake-up.
TEST(ShmConcurrent, PingPongOfSingleBytesLosesNoWakeUp) {
  constexpr int kRounds = 20'000;
  constexpr int kWaitMs = 5'000;  // far beyond any legitimate sleep: a lost wake-up
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  const Segment creator = Segment::create();
  ASSERT_TRUE(creator.valid());
  const Segment acceptor = Segment::open(creator.id(), creator.nonce());
  ASSERT_TRUE(acceptor.valid());
  Doorbell bells[2];
  ASSERT_TRUE(bells[0].valid());
  ASSERT_TRUE(bells[1].valid());

  FirstFailure fail(bells[0], bells[1]);

  // Side 0 (the connecting side) sends byte `round` and waits for it to come back; side 1
  // waits for it and sends it back.
  auto side = [&](int me) {
    const Segment& seg = me == 0 ? creator : acceptor;
    Ring tx = seg.tx(me == 0);
    Ring rx = seg.rx(me == 0);
    Doorbell& mine = bells[me];
    Doorbell& peers = bells[1 - me];
    std::mt19937 rng(static_cast<unsigned>(100 + me));
    std::uniform_int_distribution<int> spins(0, 200);
    const std::string who = "side " + std::to_string(me);
    auto send = [&](int round) {
      const unsigned char b = static_cast<unsigned char>(round);
      iovec iov{const_cast<unsigned char*>(&b), 1};
      size_t written = 0;
      bool bell = false;
      if (tx.write(&iov, 1, &written, &bell) != Status::kOk || written != 1) {
        fail(who + ": write failed in round " + std::to_string(round));
        return false;
      }
      if (bell) peers.ring();
      return true;
    };
    // Spins a random while, then arms and sleeps, until the byte of `round` is there.
    auto receive = [&](int round) {
      for (int spun = 0, limit = spins(rng); !fail.stopped(); ++spun) {
        if (std::chrono::steady_clock::now() > deadline) {
          fail(who + ": past the deadline in round " + std::to_string(round));
          return false;
        }
        const unsigned char* p = nullptr;
        size_t contiguous = 0;
        size_t avail = 0;
        if (rx.peek(&p, &contiguous, &avail) != Status::kOk) {
          fail(who + ": peek() says the ring is corrupt");
          return false;
        }
        if (avail > 0) {
          if (avail != 1 || *p != static_cast<unsigned char>(round)) {
            fail(who + ": wrong byte in round " + std::to_string(round));
            return false;
          }
          if (rx.consume(1)) peers.ring();
          return true;
        }
        if (spun < limit) continue;
        if (rx.arm_consumer()) continue;
        if (!mine.wait(kWaitMs)) {
          fail(who + ": lost wake-up in round " + std::to_string(round));
          return false;
        }
      }
      return false;
    };
    for (int round = 0; round < kRounds; ++round) {
      if (me == 0 && !(send(round) && receive(round))) return;
      if (me == 1 && !(receive(round) && send(round))) return;
    }
  };
  std::thread a(side, 0);
  std::thread b(side, 1);
  a.join();
  b.join();
  EXPECT_EQ(fail.reason(), "");
}

}  // namespace
}  // namespace fabq::xport::shm
