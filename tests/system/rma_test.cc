// fi_rma(3) between two processes of one host (fi_fabq(7) RMA AND ATOMICS): "fi_write transfers
// data to the remote memory region", "fi_read transfers data from the remote memory region",
// whatever the size, through the shared-memory ring below FI_FABQ_SHM_DIRECT_MIN and by a
// direct copy between the two address spaces from there on (from FI_FABQ_SHM_SHARE_MIN on, the
// initiator's process may copy half of it while the target copies the other). Where the kernel does
// not let the target reach the initiator's memory, transfers go through the ring and still succeed;
// where it stops letting it after the connection began, that one operation fails with FI_EIO and
// FI_FABQ_RMA_COPY_FAILED (fi_fabq.h ONE-SIDED ERRORS) and the connection goes on.
//
// The process that becomes unreachable makes itself non-dumpable (prctl(2) PR_SET_DUMPABLE);
// the other drops CAP_SYS_PTRACE from its effective set, without which the kernel does not
// let it reach a non-dumpable process (ptrace(2) "Ptrace access mode checking").
#include <linux/capability.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_rma.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fabq/fi_fabq.h"
#include "support/peer.h"
#include "support/side.h"

namespace fabq::testing {
namespace {

constexpr uint64_t kKey = 0x5a;
constexpr size_t kGuard = 4096;
constexpr size_t kRegion = (4 << 20) + 64;
// Sizes on both sides of the default FI_FABQ_SHM_DIRECT_MIN (16 KiB) and FI_FABQ_SHM_SHARE_MIN
// (256 KiB), up to 4 MiB; one odd, so that the halves do not meet at a page boundary of both.
const std::vector<size_t> kSizes = {
    8, 4096, 16383, 16384, 65536, 262143, 262144, 1 << 20, (1 << 20) + 4097, 4 << 20};

Options rma_options() {
  Options o = rdm_options();
  o.caps |= FI_RMA;
  o.shm = Shm::kOn;
  return o;
}

// Clears CAP_SYS_PTRACE from this process's effective set (a no-op when it was not there).
bool drop_ptrace_capability() {
  __user_cap_header_struct head{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (syscall(SYS_capget, &head, data) != 0) return false;
  data[CAP_SYS_PTRACE / 32].effective &= ~(1u << (CAP_SYS_PTRACE % 32));
  return syscall(SYS_capset, &head, data) == 0;
}

// A target: a region of kRegion bytes between two guards of '#', reachable for reads and writes
// with key kKey at offsets from its first byte, announced over the link with the endpoint's
// name. It progresses until the parent says 'd', then sends its region's bytes back.
void serve_region(Link& link, bool reachable_only_when_dumpable) {
  if (reachable_only_when_dumpable) {
    ASSERT_TRUE(drop_ptrace_capability());
  }
  Side s(rma_options());
  ASSERT_TRUE(s.open());
  std::string mem(kGuard + kRegion + kGuard, '#');
  std::memset(mem.data() + kGuard, '.', kRegion);
  fid_mr* mr = nullptr;
  ASSERT_EQ(fi_mr_reg(s.domain(), mem.data() + kGuard, kRegion, FI_REMOTE_READ | FI_REMOTE_WRITE, 0,
                      kKey, 0, &mr, nullptr),
            0);
  ASSERT_TRUE(s.tell(link));
  ASSERT_TRUE(s.await(link, 'd', 20000));
  EXPECT_EQ(mem.substr(0, kGuard), std::string(kGuard, '#'));
  EXPECT_EQ(mem.substr(kGuard + kRegion), std::string(kGuard, '#'));
  ASSERT_TRUE(link.put(mem.data() + kGuard, kRegion));
  EXPECT_EQ(fi_close(&mr->fid), 0);
}

// Tells the target (serve_region) it is done, and receives its region's bytes.
bool region_of(Peer& target, std::string* region) {
  region->assign(kRegion, '\0');
  return target.link().signal('d') && target.link().get(region->data(), kRegion);
}

// fi_writemsg of src (in three pieces, one empty) to `off`, with `ctx`.
ssize_t write_in_pieces(Side& s, fi_addr_t to, const std::string& src, uint64_t off, void* ctx) {
  const size_t third = src.size() / 3;
  iovec iov[3] = {{const_cast<char*>(src.data()), third},
                  {nullptr, 0},
                  {const_cast<char*>(src.data()) + third, src.size() - third}};
  fi_rma_iov rma{off, src.size(), kKey};
  fi_msg_rma msg{};
  msg.msg_iov = iov;
  msg.iov_count = 3;
  msg.addr = to;
  msg.rma_iov = &rma;
  msg.rma_iov_count = 1;
  msg.context = ctx;
  return fi_writemsg(s.ep(), &msg, FI_COMPLETION);
}

// fi_readv of `len` bytes at `off` into two buffers, returned joined.
std::string read_in_pieces(Side& s, fi_addr_t from, size_t len, uint64_t off) {
  std::string a(len / 2, '\0'), b(len - len / 2, '\0');
  iovec iov[2] = {{a.data(), a.size()}, {b.data(), b.size()}};
  EXPECT_EQ(fi_readv(s.ep(), iov, nullptr, 2, from, off, kKey, &a), 0);
  const Completion c = s.next_for(&a, 20000);
  EXPECT_EQ(c.rc, 1) << cq_str(c);
  EXPECT_EQ(c.entry.flags, FI_RMA | FI_READ);
  return a + b;
}

// A test that makes this process non-dumpable leaves it so: each begins dumpable.
class RmaSystem : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(prctl(PR_SET_DUMPABLE, 1), 0); }
  void TearDown() override { prctl(PR_SET_DUMPABLE, 1); }
};

TEST_F(RmaSystem, WritesAndReadsOfEverySizeLandWholeInAnotherProcessAndComeBackWhole) {
  Peer target([](Link& link) { serve_region(link, /*reachable_only_when_dumpable=*/false); });
  Side s(rma_options());
  ASSERT_TRUE(s.open());
  const fi_addr_t to = s.learn(target.link());
  std::string expect(kRegion, '.');
  uint64_t off = 0;
  for (size_t i = 0; i < kSizes.size(); ++i) {
    const size_t n = kSizes[i];
    SCOPED_TRACE(n);
    off = (i * 977) % (kRegion - n + 1);
    const std::string src = pattern(n, static_cast<unsigned>(i + 1));
    ASSERT_EQ(write_in_pieces(s, to, src, off, &expect), 0);
    const Completion c = s.next_for(&expect, 20000);
    ASSERT_EQ(c.rc, 1) << cq_str(c);
    EXPECT_EQ(c.entry.flags, FI_RMA | FI_WRITE);
    expect.replace(off, n, src);
    EXPECT_EQ(read_in_pieces(s, to, n, off), src);
  }
  std::string region;
  ASSERT_TRUE(region_of(target, &region));
  EXPECT_TRUE(region == expect) << "the region holds exactly what was written";
  EXPECT_EQ(target.join(&s), 0);
}

TEST_F(RmaSystem, WhenTheTargetCannotReachTheInitiatorLargeTransfersGoThroughTheRingAndSucceed) {
  // The target cannot read this process's memory from the start: it never serves direct
  // requests, so none is sent (one would fail with FI_EIO).
  Peer target([](Link& link) { serve_region(link, /*reachable_only_when_dumpable=*/true); });
  ASSERT_EQ(prctl(PR_SET_DUMPABLE, 0), 0);
  Side s(rma_options());
  ASSERT_TRUE(s.open());
  const fi_addr_t to = s.learn(target.link());
  int ctx = 0;
  const std::string src = pattern(1 << 20, 7);
  ASSERT_EQ(write_in_pieces(s, to, src, 64, &ctx), 0);
  const Completion c = s.next_for(&ctx, 20000);
  ASSERT_EQ(c.rc, 1) << cq_str(c);
  EXPECT_EQ(read_in_pieces(s, to, src.size(), 64), src);
  std::string region;
  ASSERT_TRUE(region_of(target, &region));
  EXPECT_TRUE(region.compare(64, src.size(), src) == 0);
  EXPECT_EQ(target.join(&s), 0);
}

TEST_F(RmaSystem, AnInitiatorThatBecomesUnreachableFailsItsNextDirectTransferAloneWithCopyFailed) {
  setenv("FI_FABQ_SHM_ADAPT", "0", 1);  // the second write must be direct, as its size says
  Peer target([](Link& link) { serve_region(link, /*reachable_only_when_dumpable=*/true); });
  Side s(rma_options());
  ASSERT_TRUE(s.open());
  const fi_addr_t to = s.learn(target.link());
  int ctx = 0;
  // Reachable when the first write makes the connection: the target proves this process then.
  // (That write was queued before the connection was up, so it travels in its frame.)
  const std::string first = pattern(1 << 20, 1);
  ASSERT_EQ(write_in_pieces(s, to, first, 0, &ctx), 0);
  Completion c = s.next_for(&ctx, 20000);
  ASSERT_EQ(c.rc, 1) << cq_str(c);
  // Unreachable from now on: the next large write is direct, and the target's copy refused.
  ASSERT_EQ(prctl(PR_SET_DUMPABLE, 0), 0);
  const std::string second = pattern(1 << 20, 2);
  ASSERT_EQ(write_in_pieces(s, to, second, 0, &ctx), 0);
  c = s.next_for(&ctx, 20000);
  ASSERT_EQ(c.rc, -FI_EAVAIL) << cq_str(c);
  EXPECT_EQ(c.err.err, FI_EIO);
  EXPECT_EQ(c.err.prov_errno, FI_FABQ_RMA_COPY_FAILED);
  // The connection goes on: a small write travels in its frame.
  const std::string small = "after";
  ASSERT_EQ(write_in_pieces(s, to, small, 0, &ctx), 0);
  c = s.next_for(&ctx, 20000);
  ASSERT_EQ(c.rc, 1) << cq_str(c);
  std::string region;
  ASSERT_TRUE(region_of(target, &region));
  EXPECT_EQ(region.substr(0, small.size()), small);
  // The failed write may have changed part of the range (the initiator may have copied the
  // half the target offered it before the target's own half failed), but only with its data.
  size_t foreign = 0;
  for (size_t i = small.size(); i < first.size(); ++i) {
    foreign += region[i] != first[i] && region[i] != second[i];
  }
  EXPECT_EQ(foreign, 0u) << "bytes of neither write in the range";
  EXPECT_EQ(target.join(&s), 0);
}

}  // namespace
}  // namespace fabq::testing
