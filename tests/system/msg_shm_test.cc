// Same-host connections through shared memory (fi_fabq(7) SHARED MEMORY): the connecting side
// offers a segment in its kConnReq, the accepting side takes it in its kConnAccept, and from
// the end of the handshake on the frames of each direction travel in a ring of the segment,
// the socket carrying only doorbells and the end of the connection.
//
// Here the connecting side is a raw peer (raw_peer.h) that makes its segment with fabq's own
// library (src/xport/shm.h) and never writes a message to the socket: a message fabq receives
// came through the ring. Where a test corrupts the segment it maps it itself, from the layout
// shm.h documents. The rest checks what two fabq processes leave behind.
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>

#include <rdma/fi_domain.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "fabq/fi_fabq.h"
#include "raw_peer.h"
#include "xport/shm.h"

namespace fabq::testing {
namespace {

namespace shm = fabq::xport::shm;

std::string frame(Op op, const std::string& payload, uint32_t seq = 1) {
  return encode(Header{.op = op, .length = static_cast<uint32_t>(payload.size()), .seq = seq}) +
         payload;
}

bool ring_write(shm::Ring& ring, const std::string& bytes) {
  iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
  size_t written = 0;
  bool bell = false;
  return ring.write(&iov, 1, &written, &bell) == shm::Status::kOk && written == bytes.size();
}

// Reads n bytes from the ring within the timeout.
bool ring_read(shm::Ring& ring, size_t n, std::string* out, int timeout_ms = kTimeoutMs) {
  const auto t0 = Clock::now();
  while (out->size() < n) {
    const unsigned char* p = nullptr;
    size_t contiguous = 0, avail = 0;
    if (ring.peek(&p, &contiguous, &avail) != shm::Status::kOk) return false;
    const size_t take = std::min(contiguous, n - out->size());
    out->append(reinterpret_cast<const char*>(p), take);
    (void)ring.consume(take);
    if (take == 0) {
      if (ms_since(t0) > timeout_ms) return false;
      usleep(100);
    }
  }
  return true;
}

std::vector<std::string> segment_names_of(pid_t pid) {
  std::vector<std::string> out;
  const std::string prefix = "fabq-" + std::to_string(pid) + "-";
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) {
      if (std::string(e->d_name).rfind(prefix, 0) == 0) out.push_back(e->d_name);
    }
    closedir(d);
  }
  return out;
}

// A second view of `seg`'s memory, mapped while its name still exists; unmapped with the
// returned guard.
struct View {
  void* base = MAP_FAILED;
  static constexpr size_t kSize = 4096 + 2 * shm::kRingBytes;
  explicit View(const shm::Segment& seg) {
    const std::string name = "/dev/shm/fabq-" + std::to_string(seg.id() >> 32) + "-" +
                             std::to_string(seg.id() & 0xffffffffu);
    const int fd = open(name.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) return;
    base = mmap(nullptr, kSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
  }
  ~View() {
    if (base != MAP_FAILED) munmap(base, kSize);
  }
  bool valid() const { return base != MAP_FAILED; }
  template <class T>
  std::atomic<T>& at(size_t offset) const {
    return *reinterpret_cast<std::atomic<T>*>(static_cast<unsigned char*>(base) + offset);
  }
};

// The raw peer's side of a shared-memory connection: its segment, a second view of it, and
// the offer that names it.
struct RawShm {
  shm::Segment seg = shm::Segment::create();
  View view{seg};
  RawConnection::ShmOffer offer{seg.id(), seg.nonce()};
  bool valid() const { return seg.valid() && view.valid(); }
};

// The accepting side: fabq's passive endpoint accepts the raw peer and posts one receive.
struct Accepted {
  Side s;
  std::array<char, 64> buf{};
  fi_context2 ctx;
};

void accept_raw(Accepted& a, Peer& raw, const std::string& want_data) {
  const uint16_t port = a.s.listen();
  ASSERT_NE(port, 0);
  ASSERT_TRUE(raw.link().put_u64(port));
  std::string data;
  fi_info* info = a.s.wait_connreq(&data);
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(data, want_data);
  ASSERT_TRUE(a.s.open_endpoint(info));
  ASSERT_EQ(a.s.recv(a.buf.data(), a.buf.size(), &a.ctx), 0);
  ASSERT_TRUE(a.s.accept());
}

TEST(MsgShm, AnOfferedSegmentIsTakenAndMessagesTravelThroughItsRingsBothWays) {
  SKIP_UNLESS_FABQ();
  Peer raw([](Link& link) {
    RawConnection conn;
    if (!conn.dial(link)) return;
    shm::Segment seg = shm::Segment::create();
    ASSERT_TRUE(seg.valid());
    const RawConnection::ShmOffer offer{seg.id(), seg.nonce()};
    uint32_t flags = 0;
    if (!conn.handshake("shm?", &offer, &flags)) return;
    ASSERT_NE(flags & kShmAccept, 0u) << "fabq declined a segment of its own host";
    shm::Ring tx = seg.tx(/*connecting=*/true);
    shm::Ring rx = seg.rx(/*connecting=*/true);
    // Only into the ring; the doorbell wakes a sleeping progress thread, if any.
    ASSERT_TRUE(ring_write(tx, frame(kMsg, "hello")));
    ASSERT_TRUE(conn.doorbell());
    std::string reply;
    ASSERT_TRUE(ring_read(rx, kHeaderSize + 7, &reply)) << "no reply in the ring";
    const auto* h = reinterpret_cast<const unsigned char*>(reply.data());
    EXPECT_EQ(get_le(h, 2), kMagic);
    EXPECT_EQ(h[3], kMsg);
    EXPECT_EQ(get_le(h + 8, 4), 7u);
    EXPECT_EQ(reply.substr(kHeaderSize), "welcome");
    link.signal('d');
  });
  Accepted a;
  accept_raw(a, raw, "shm?");
  const Completion r = a.s.next_rx();
  ASSERT_EQ(r.rc, 1) << cq_str(r);
  EXPECT_EQ(std::string(a.buf.data(), r.entry.len), "hello");
  const std::string welcome = "welcome";
  fi_context2 sctx;
  ASSERT_EQ(a.s.send(welcome.data(), welcome.size(), &sctx), 0);
  EXPECT_EQ(a.s.next_tx().rc, 1);
  ASSERT_TRUE(a.s.await(raw.link(), 'd'));
  EXPECT_EQ(raw.join(&a.s), 0);
}

TEST(MsgShm, AnOfferWithTheWrongNonceIsDeclinedAndTheConnectionStaysOnTheSocket) {
  SKIP_UNLESS_FABQ();
  Peer raw([](Link& link) {
    RawConnection conn;
    if (!conn.dial(link)) return;
    shm::Segment seg = shm::Segment::create();
    ASSERT_TRUE(seg.valid());
    const RawConnection::ShmOffer offer{seg.id(), seg.nonce() + 1};
    uint32_t flags = ~0u;
    if (!conn.handshake("nonce", &offer, &flags)) return;
    EXPECT_EQ(flags & kShmAccept, 0u) << "fabq took a segment whose nonce was not the offer's";
    ASSERT_TRUE(conn.send_all(frame(kMsg, "hello")));
    link.signal('d');
    link.wait('x');
  });
  Accepted a;
  accept_raw(a, raw, "nonce");
  const Completion r = a.s.next_rx();
  ASSERT_EQ(r.rc, 1) << cq_str(r);
  EXPECT_EQ(std::string(a.buf.data(), r.entry.len), "hello");
  ASSERT_TRUE(a.s.await(raw.link(), 'd'));
  raw.link().signal('x');
  EXPECT_EQ(raw.join(&a.s), 0);
}

// The peer is not trusted with the indices of the rings it shares.
struct Corruption {
  const char* name;
  int ring;        // 0: the raw peer's frames (fabq reads), 1: fabq's frames (fabq writes)
  size_t offset;   // within the ring's control block: 0 tail, 64 head
  uint64_t value;  // stored there
};
void PrintTo(const Corruption& c, std::ostream* os) {
  *os << c.name;
}

class CorruptedRing : public ::testing::TestWithParam<Corruption> {};

TEST_P(CorruptedRing, FailsOnlyThatConnectionWithReqErr) {
  SKIP_UNLESS_FABQ();
  const Corruption c = GetParam();
  Peer raw([&c](Link& link) {
    RawConnection conn;
    if (!conn.dial(link)) return;
    const RawShm mine;
    ASSERT_TRUE(mine.valid());
    const View& view = mine.view;
    uint32_t flags = 0;
    if (!conn.handshake("bad!", &mine.offer, &flags)) return;
    ASSERT_NE(flags & kShmAccept, 0u);
    if (!link.wait('g')) return;
    view.at<uint64_t>(64 + 256 * c.ring + c.offset).store(c.value, std::memory_order_release);
    ASSERT_TRUE(conn.doorbell());
    link.signal('c');
    EXPECT_TRUE(conn.closed_by_peer()) << "fabq kept a connection whose ring was corrupted";
    link.signal('x');
  });
  Accepted a;
  accept_raw(a, raw, "bad!");
  fid_ep* const bad = a.s.ep();
  raw.link().signal('g');
  ASSERT_TRUE(a.s.await(raw.link(), 'c'));
  // fabq finds out about its own ring when it next reads the head: when a write needs more
  // room than it last saw. A message larger than the ring needs it at once.
  const std::vector<char> big(c.ring == 1 ? shm::kRingBytes + 4096 : 0, 'x');
  fi_context2 sctx;
  if (c.ring == 1) {
    ASSERT_EQ(a.s.send(big.data(), big.size(), &sctx), 0);
  }
  uint32_t event = 0;
  CmEvent ev;
  CmError err;
  ASSERT_EQ(a.s.read_event(&event, &ev, kTimeoutMs, &err), -FI_EAVAIL) << "event " << event;
  EXPECT_EQ(err.entry.fid, &bad->fid);
  EXPECT_EQ(err.entry.err, FI_EREMOTEIO);
  EXPECT_EQ(err.entry.prov_errno, static_cast<int>(FI_FABQ_EVENT_EP_REQ_ERR));
  const Completion rc = a.s.next_rx();
  ASSERT_EQ(rc.rc, -FI_EAVAIL) << cq_str(rc);
  EXPECT_EQ(rc.err.err, FI_EIO);
  ASSERT_TRUE(a.s.await(raw.link(), 'x'));
  EXPECT_EQ(raw.join(&a.s), 0);
}

INSTANTIATE_TEST_SUITE_P(
    MsgShm, CorruptedRing,
    ::testing::Values(Corruption{"TailMoreThanARingAheadOfTheHead", 0, 0, 2 * shm::kRingBytes + 1},
                      Corruption{"TailBehindTheHead", 0, 0, ~uint64_t{0}},
                      Corruption{"HeadPastTheTailOfFabqsRing", 1, 64, 12345}),
    [](const ::testing::TestParamInfo<Corruption>& p) { return std::string(p.param.name); });

// Direct requests (shm.h): fabq copies between a peer's buffers and its regions only for a peer
// whose pid and mapping it proved, and only as the request's entries say. The raw peer here is
// a process of its own; fabq's side is this one, with a region of kRegion bytes of '.' (key
// kKey, offsets) between guards.
constexpr uint64_t kKey = 0x77;
constexpr size_t kRegion = 64 * 1024;
// Header offsets of shm.h: each side's pid, mapping address and "serves direct requests".
constexpr size_t kPidOf[2] = {24, 32};
constexpr size_t kBaseOf[2] = {40, 48};
constexpr size_t kServesOf[2] = {56, 60};

struct RmaTarget {
  explicit RmaTarget(size_t region_bytes = kRegion)
      : s([] {
          Options o;
          o.caps = FI_MSG | FI_RMA;
          return o;
        }()),
        bytes(region_bytes) {}
  ~RmaTarget() {
    if (mr != nullptr) fi_close(&mr->fid);
  }
  // Listens, takes the raw peer's request (after `before_accept`), registers the region and
  // accepts.
  void accept(Peer& raw, const std::function<void()>& before_accept = nullptr) {
    const uint16_t port = s.listen();
    ASSERT_NE(port, 0);
    ASSERT_TRUE(raw.link().put_u64(port));
    fi_info* info = s.wait_connreq();
    ASSERT_NE(info, nullptr);
    if (before_accept) before_accept();
    ASSERT_TRUE(s.open_endpoint(info));
    std::memset(mem.data(), '#', mem.size());
    std::memset(region(), '.', bytes);
    ASSERT_EQ(fi_mr_reg(s.domain(), region(), bytes, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, kKey, 0,
                        &mr, nullptr),
              0);
    ASSERT_TRUE(s.accept());
  }
  char* region() { return mem.data() + 4096; }
  bool guards_intact() const {
    return std::all_of(mem.begin(), mem.begin() + 4096, [](char c) { return c == '#'; }) &&
           std::all_of(mem.end() - 4096, mem.end(), [](char c) { return c == '#'; });
  }
  Side s;
  size_t bytes;
  std::string mem = std::string(4096 + bytes + 4096, '#');
  fid_mr* mr = nullptr;
};

std::string direct_entry(const void* addr, uint64_t len) {
  std::string e;
  put_le(e, reinterpret_cast<uintptr_t>(addr), 8);
  put_le(e, len, 8);
  return e;
}

// Reads one frame's header (and payload) from the ring.
bool ring_frame(shm::Ring& ring, Header* h, std::string* payload) {
  std::string head;
  if (!ring_read(ring, kHeaderSize, &head)) return false;
  const auto* p = reinterpret_cast<const unsigned char*>(head.data());
  h->op = p[3];
  h->flags = static_cast<uint32_t>(get_le(p + 4, 4));
  h->length = static_cast<uint32_t>(get_le(p + 8, 4));
  h->seq = static_cast<uint32_t>(get_le(p + 12, 4));
  h->data = get_le(p + 24, 8);
  payload->clear();
  return ring_read(ring, h->length, payload);
}

// Writes frame `h` (its length set from `payload`) and payload into the ring, then rings.
bool post(shm::Ring& tx, RawConnection& conn, Header h, const std::string& payload) {
  h.length = static_cast<uint32_t>(payload.size());
  return ring_write(tx, encode(h) + payload) && conn.doorbell();
}

// The next EQ event of `s` is the error entry of its endpoint failed by a protocol violation.
void expect_req_err(Side& s) {
  fid_ep* const ep = s.ep();
  uint32_t event = 0;
  CmEvent ev;
  CmError err;
  ASSERT_EQ(s.read_event(&event, &ev, kTimeoutMs, &err), -FI_EAVAIL) << "event " << event;
  EXPECT_EQ(err.entry.fid, &ep->fid);
  EXPECT_EQ(err.entry.prov_errno, static_cast<int>(FI_FABQ_EVENT_EP_REQ_ERR));
}

TEST(MsgShm, APeerThatNamesFabqsOwnMappingIsNotServedAndItsDirectRequestFailsTheConnection) {
  SKIP_UNLESS_FABQ();
  Peer raw([](Link& link) {
    RawConnection conn;
    if (!conn.dial(link)) return;
    const RawShm mine;
    ASSERT_TRUE(mine.valid());
    const View& view = mine.view;
    uint32_t flags = 0;
    // Once fabq has mapped the segment and written its pid and address, claim them as this
    // side's: proving them would prove nothing.
    const bool shook = conn.handshake("forged", &mine.offer, &flags, [&] {
      if (!link.wait('m')) return;
      view.at<uint64_t>(kPidOf[0]).store(view.at<uint64_t>(kPidOf[1]).load());
      view.at<uint64_t>(kBaseOf[0]).store(view.at<uint64_t>(kBaseOf[1]).load());
      link.signal('f');
    });
    if (!shook) return;
    ASSERT_NE(flags & kShmAccept, 0u);
    EXPECT_EQ(view.at<uint32_t>(kServesOf[1]).load(), 0u) << "fabq serves a peer it did not prove";
    // A direct write that would copy from fabq's own memory into its region.
    std::string entries =
        direct_entry(reinterpret_cast<void*>(view.at<uint64_t>(kBaseOf[1]).load()), 4096);
    shm::Ring tx = mine.seg.tx(/*connecting=*/true);
    ASSERT_TRUE(
        post(tx, conn, Header{.op = kWrite, .flags = kDirect, .seq = 1, .tag = kKey}, entries));
    EXPECT_TRUE(conn.closed_by_peer()) << "fabq kept a connection that sent a forbidden request";
    link.signal('x');
  });
  RmaTarget t;
  ASSERT_NO_FATAL_FAILURE(t.accept(raw, [&] {
    ASSERT_TRUE(raw.link().signal('m'));
    ASSERT_TRUE(raw.link().wait('f'));
  }));
  ASSERT_NO_FATAL_FAILURE(expect_req_err(t.s));
  EXPECT_EQ(std::count(t.region(), t.region() + kRegion, '.'), static_cast<long>(kRegion))
      << "the region was written";
  EXPECT_TRUE(t.guards_intact());
  ASSERT_TRUE(t.s.await(raw.link(), 'x'));
  EXPECT_EQ(raw.join(&t.s), 0);
}

TEST(MsgShm, AProvedPeersDirectWriteAndReadAreServedAndEntriesThatLieFailTheConnection) {
  SKIP_UNLESS_FABQ();
  Peer raw([](Link& link) {
    RawConnection conn;
    if (!conn.dial(link)) return;
    const RawShm mine;
    ASSERT_TRUE(mine.valid());
    const View& view = mine.view;
    uint32_t flags = 0;
    if (!conn.handshake("direct", &mine.offer, &flags)) return;
    ASSERT_NE(flags & kShmAccept, 0u);
    EXPECT_EQ(view.at<uint32_t>(kServesOf[1]).load(), 1u) << "fabq did not prove its peer";
    shm::Ring tx = mine.seg.tx(/*connecting=*/true);
    shm::Ring rx = mine.seg.rx(/*connecting=*/true);
    // 20 KiB from two buffers of this process to offset 100 of the region.
    const std::string a(12 * 1024, 'a'), b(8 * 1024, 'b');
    std::string entries = direct_entry(a.data(), a.size()) + direct_entry(b.data(), b.size());
    ASSERT_TRUE(post(tx, conn,
                     Header{.op = kWrite, .flags = kDirect, .seq = 1, .tag = kKey, .data = 100},
                     entries));
    Header h;
    std::string payload;
    ASSERT_TRUE(ring_frame(rx, &h, &payload));
    EXPECT_EQ(h.op, kRmaAck);
    EXPECT_EQ(h.seq, 1u);
    EXPECT_EQ(h.data, 0u) << "status";
    // Read those 20 KiB back into one buffer of this process.
    std::string back(a.size() + b.size(), '\0');
    std::string read_req;
    put_le(read_req, back.size(), 8);
    read_req += direct_entry(back.data(), back.size());
    ASSERT_TRUE(post(tx, conn,
                     Header{.op = kReadReq, .flags = kDirect, .seq = 2, .tag = kKey, .data = 100},
                     read_req));
    ASSERT_TRUE(ring_frame(rx, &h, &payload));
    EXPECT_EQ(h.op, kReadResp);
    EXPECT_EQ(h.flags, kDirect);
    EXPECT_EQ(h.data, 0u) << "status";
    EXPECT_EQ(payload, "") << "the bytes were copied, not sent";
    EXPECT_EQ(back, a + b);
    // A read whose entries hold less than its length.
    std::string lie;
    put_le(lie, 4096, 8);
    lie += direct_entry(back.data(), 100);
    ASSERT_TRUE(
        post(tx, conn, Header{.op = kReadReq, .flags = kDirect, .seq = 3, .tag = kKey}, lie));
    EXPECT_TRUE(conn.closed_by_peer()) << "fabq kept a connection whose request lied";
    link.signal('x');
  });
  RmaTarget t;
  ASSERT_NO_FATAL_FAILURE(t.accept(raw));
  ASSERT_TRUE(t.s.await(raw.link(), 'x'));
  ASSERT_NO_FATAL_FAILURE(expect_req_err(t.s));
  EXPECT_EQ(std::string(t.region() + 100, 20 * 1024),
            std::string(12 * 1024, 'a') + std::string(8 * 1024, 'b'));
  EXPECT_EQ(std::count(t.region(), t.region() + kRegion, '.'),
            static_cast<long>(kRegion - 20 * 1024));
  EXPECT_TRUE(t.guards_intact());
  EXPECT_EQ(raw.join(&t.s), 0);
}

TEST(MsgShm, AProvedPeersDirectMessageIsCopiedIntoTheReceiveAndOneFromUnmappedMemoryFails) {
  SKIP_UNLESS_FABQ();
  Peer raw([](Link& link) {
    RawConnection conn;
    if (!conn.dial(link)) return;
    const RawShm mine;
    ASSERT_TRUE(mine.valid());
    uint32_t flags = 0;
    if (!conn.handshake("direct", &mine.offer, &flags)) return;
    ASSERT_NE(flags & kShmAccept, 0u);
    shm::Ring tx = mine.seg.tx(/*connecting=*/true);
    shm::Ring rx = mine.seg.rx(/*connecting=*/true);
    // A 20 KiB message from two buffers of this process, with CQ data.
    const std::string a(12 * 1024, 'a'), b(8 * 1024, 'b');
    ASSERT_TRUE(post(
        tx, conn,
        Header{
            .op = kMsg, .flags = kDirect | kWantReceived | kRemoteData, .seq = 1, .data = 0xda7a},
        direct_entry(a.data(), a.size()) + direct_entry(b.data(), b.size())));
    Header h;
    std::string payload;
    ASSERT_TRUE(ring_frame(rx, &h, &payload));
    EXPECT_EQ(h.op, kAckReceived) << "acknowledged once copied";
    EXPECT_EQ(h.seq, 1u);
    ASSERT_TRUE(link.wait('r'));  // the message was received whole
    // One whose buffer this process does not map.
    ASSERT_TRUE(post(tx, conn, Header{.op = kMsg, .flags = kDirect, .seq = 2},
                     direct_entry(reinterpret_cast<void*>(uintptr_t{4096}), 20000)));
    EXPECT_TRUE(conn.closed_by_peer()) << "fabq kept a connection whose message it cannot copy";
    link.signal('x');
  });
  RmaTarget t;
  ASSERT_NO_FATAL_FAILURE(t.accept(raw));
  std::string in(32 * 1024, '\0');
  ASSERT_EQ(t.s.recv(in.data(), in.size(), &in), 0);
  const Completion c = t.s.next_for(&in);
  ASSERT_EQ(c.rc, 1) << cq_str(c);
  EXPECT_EQ(c.entry.len, 20u * 1024);
  EXPECT_EQ(c.entry.flags, FI_RECV | FI_MSG | FI_REMOTE_CQ_DATA);
  EXPECT_EQ(c.entry.data, 0xda7au);
  EXPECT_EQ(in.substr(0, 20 * 1024), std::string(12 * 1024, 'a') + std::string(8 * 1024, 'b'));
  ASSERT_TRUE(raw.link().signal('r'));
  ASSERT_TRUE(t.s.await(raw.link(), 'x'));
  ASSERT_NO_FATAL_FAILURE(expect_req_err(t.s));
  EXPECT_EQ(raw.join(&t.s), 0);
}

// Sharing a copy (shm.h): fabq as the target offers a peer that wrote the segment's nonce into
// fabq's memory (its reach cell) the second part of a large direct write, in its share slot
// (the accepting side's, at 640: word, then the request's seq). The word is generation << 3 |
// state (1 offered, 2 taken back, 3 claimed, 4 done, 5 failed).
constexpr size_t kShareWord = 640;
// Above the default share minimum (256 KiB), and long enough that fabq's half takes a while.
constexpr size_t kShareLen = (2u << 20) + 12345;

// n bytes that say which write and which position they are.
std::string pattern(size_t n, int write) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>('0' + (i * 7 + write) % 64);
  return s;
}

// fabq's offers so far (the generation in its share slot's word).
uint64_t offers_made(const View& v) {
  return v.at<uint64_t>(kShareWord).load(std::memory_order_acquire) >> 3;
}

// The raw peer watches the offers fabq makes after `before` while it serves `count` requests,
// and claims the first one it sees in time; false if fabq settled them all first. *gen: the
// claimed offer's generation bits.
bool claim_offer(const View& v, uint64_t before, int count, uint64_t* gen) {
  std::atomic<uint64_t>& word = v.at<uint64_t>(kShareWord);
  const auto t0 = Clock::now();
  while (ms_since(t0) < kTimeoutMs) {
    uint64_t w = word.load(std::memory_order_acquire);
    if ((w >> 3) > before && (w & 7) == 1 &&
        word.compare_exchange_strong(w, (w & ~uint64_t{7}) | 3)) {
      *gen = w & ~uint64_t{7};
      return true;
    }
    if ((w >> 3) >= before + static_cast<uint64_t>(count) && (w & 7) != 1) return false;
  }
  return false;
}

TEST(MsgShm, OnlyAPeerThatWroteFabqsMemoryIsOfferedPartsAndItsClaimsAreCoveredOrWaitedFor) {
  SKIP_UNLESS_FABQ();
  constexpr size_t kSecond = kShareLen + 65536;  // where each write goes in the region
  constexpr size_t kThird = 2 * kSecond;
  Peer raw([&](Link& link) {
    RawConnection conn;
    if (!conn.dial(link)) return;
    const RawShm mine;
    ASSERT_TRUE(mine.valid());
    const View& view = mine.view;
    uint32_t flags = 0;
    if (!conn.handshake("share", &mine.offer, &flags)) return;
    ASSERT_NE(flags & kShmAccept, 0u);
    ASSERT_EQ(view.at<uint32_t>(kServesOf[1]).load(), 1u) << "fabq did not prove its peer";
    // This side says it can reach fabq's memory, without showing it.
    view.at<uint32_t>(kServesOf[0]).store(1, std::memory_order_release);
    shm::Ring tx = mine.seg.tx(/*connecting=*/true);
    shm::Ring rx = mine.seg.rx(/*connecting=*/true);
    uint32_t seq = 0;
    auto write = [&](const std::string& bytes, uint64_t at) {
      return post(tx, conn,
                  Header{.op = kWrite, .flags = kDirect, .seq = ++seq, .tag = kKey, .data = at},
                  direct_entry(bytes.data(), bytes.size()));
    };
    auto acked_as = [&](uint32_t answered) {
      Header h;
      std::string payload;
      return ring_frame(rx, &h, &payload) && h.op == kRmaAck && h.seq == answered && h.data == 0;
    };
    // 0. Saying so is not enough: fabq offers nothing, and copies every write whole.
    const std::string first = pattern(kShareLen, 1);
    for (int i = 0; i < 4; ++i) {
      ASSERT_TRUE(write(first, 0));
      ASSERT_TRUE(acked_as(seq));
    }
    EXPECT_EQ(offers_made(view), 0u) << "an offer to a peer that never wrote fabq's memory";
    // Now it shows it: the nonce into fabq's reach cell, with process_vm_writev().
    const uint64_t fabq_pid = view.at<uint64_t>(kPidOf[1]).load();
    ASSERT_TRUE(mine.seg.reach_peer(/*connecting=*/true, static_cast<int>(fabq_pid)));
    // 1. An offer left alone: fabq takes it back and copies the whole write.
    ASSERT_TRUE(write(first, 0));
    ASSERT_TRUE(acked_as(seq));
    // Whether this side sees an offer before fabq takes it back is the scheduler's business:
    // it sends bursts of kBurst writes until it claimed one, at most kBursts of them.
    constexpr int kBurst = 16;
    constexpr int kBursts = 100;
    // 2. An offer claimed and then failed: fabq copies the part itself.
    const std::string second = pattern(kShareLen, 2);
    bool failed_one = false;
    for (int burst = 0; burst < kBursts && !failed_one; ++burst) {
      const uint32_t from = seq + 1;
      const uint64_t before = offers_made(view);
      for (int i = 0; i < kBurst; ++i) {
        ASSERT_TRUE(write(second, kSecond));
      }
      uint64_t gen = 0;
      if (claim_offer(view, before, kBurst, &gen)) {
        view.at<uint64_t>(kShareWord).store(gen | 5, std::memory_order_release);
        failed_one = true;
      }
      for (uint32_t answered = from; answered <= seq; ++answered) {
        Header h;
        std::string payload;
        ASSERT_TRUE(ring_frame(rx, &h, &payload));
        EXPECT_EQ(h.op, kRmaAck);
        EXPECT_EQ(h.seq, answered);
        EXPECT_EQ(h.data, 0u) << "status";
      }
    }
    EXPECT_TRUE(failed_one) << "fabq took back every offer before this side could claim one";
    // 3. An offer claimed and finished late, after longer than any time limit would allow:
    // fabq waits (this side might be writing into its memory all along), and answers.
    const std::string third = pattern(kShareLen, 3);
    bool slow = false;
    for (int burst = 0; burst < kBursts && !slow; ++burst) {
      const uint32_t from = seq + 1;
      const uint64_t before = offers_made(view);
      for (int i = 0; i < kBurst; ++i) {
        ASSERT_TRUE(write(third, kThird));
      }
      uint64_t gen = 0;
      if (claim_offer(view, before, kBurst, &gen)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1500));
        // "Done" without copying: the part keeps the region's own bytes.
        view.at<uint64_t>(kShareWord).store(gen | 4, std::memory_order_release);
        slow = true;
      }
      for (uint32_t answered = from; answered <= seq; ++answered) {
        ASSERT_TRUE(acked_as(answered));
      }
    }
    ASSERT_TRUE(slow);
    // 4. An offer claimed by a peer that then ends: fabq stops waiting and cuts it off.
    bool claimed = false;
    for (int burst = 0; burst < kBursts && !claimed; ++burst) {
      const uint32_t from = seq + 1;
      const uint64_t before = offers_made(view);
      for (int i = 0; i < kBurst; ++i) {
        ASSERT_TRUE(write(third, kThird));
      }
      uint64_t gen = 0;
      claimed = claim_offer(view, before, kBurst, &gen);
      for (uint32_t answered = from; !claimed && answered <= seq; ++answered) {
        ASSERT_TRUE(acked_as(answered));
      }
    }
    ASSERT_TRUE(claimed);
    conn.close_now();
    link.signal('x');
    // fabq may still be copying its own part of that write from `third`: it stays alive until
    // fabq has failed the connection.
    EXPECT_TRUE(link.wait('y'));
  });
  RmaTarget t(kThird + kShareLen + 65536);
  ASSERT_NO_FATAL_FAILURE(t.accept(raw));
  ASSERT_TRUE(t.s.await(raw.link(), 'x'));
  ASSERT_NO_FATAL_FAILURE(expect_req_err(t.s));
  ASSERT_TRUE(raw.link().signal('y'));
  EXPECT_EQ(std::string(t.region(), kShareLen), pattern(kShareLen, 1));
  EXPECT_EQ(std::string(t.region() + kSecond, kShareLen), pattern(kShareLen, 2));
  // The third writes' range holds their bytes, or (a part given away) the region's own.
  const std::string third = pattern(kShareLen, 3);
  for (size_t i = 0; i < kShareLen; ++i) {
    const char c = t.region()[kThird + i];
    if (c != third[i] && c != '.') {
      ADD_FAILURE() << "byte " << i << " of the third write's range";
      break;
    }
  }
  EXPECT_EQ(std::count(t.region() + kShareLen, t.region() + kSecond, '.'),
            static_cast<long>(kSecond - kShareLen));
  EXPECT_EQ(std::count(t.region() + kThird + kShareLen, t.region() + t.bytes, '.'),
            static_cast<long>(t.bytes - kThird - kShareLen));
  EXPECT_TRUE(t.guards_intact());
  EXPECT_EQ(raw.join(&t.s), 0);
}

// Two fabq processes: the segment's name is gone once they are connected (the accepting side
// unlinks it as soon as it maps it), so nothing is left in /dev/shm, whoever dies later.
TEST(MsgShm, ConnectedFabqProcessesLeaveNoSegmentNameBehind) {
  Peer client([](Link& link) {
    Side c;
    if (!c.dial(link)) return;
    std::array<char, 16> buf{};
    fi_context2 ctx;
    ASSERT_EQ(c.recv(buf.data(), buf.size(), &ctx), 0);
    link.signal('r');
    const Completion r = c.next_rx();
    ASSERT_EQ(r.rc, 1) << cq_str(r);
    EXPECT_EQ(std::string(buf.data(), r.entry.len), "ping");
    EXPECT_TRUE(segment_names_of(getpid()).empty());
    link.signal('d');
    c.await(link, 'x');
  });
  Side s;
  ASSERT_TRUE(s.serve(client.link()));
  ASSERT_TRUE(s.await(client.link(), 'r'));
  fi_context2 sctx;
  ASSERT_EQ(s.send("ping", 4, &sctx), 0);
  EXPECT_EQ(s.next_tx().rc, 1);
  ASSERT_TRUE(s.await(client.link(), 'd'));
  EXPECT_TRUE(segment_names_of(getpid()).empty());
  EXPECT_TRUE(segment_names_of(client.pid()).empty());
  client.link().signal('x');
  EXPECT_EQ(client.join(&s), 0);
}

}  // namespace
}  // namespace fabq::testing
