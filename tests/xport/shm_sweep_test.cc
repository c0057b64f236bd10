// The stale names of shared-memory segments: the sweep removes a name once no process holds it,
// and keeps it while one does, whatever its pid and PID namespace, even when the sweep runs in a
// new PID namespace; a process's first create() sweeps.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/unique_fd.h"

#include "shm_util.h"

namespace fabq::xport::shm {
namespace {

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

}  // namespace
}  // namespace fabq::xport::shm
