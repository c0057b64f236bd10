// `fabq bench`'s two-process scenarios (rma.cc): one side of a pair of FI_EP_RDM endpoints of
// the provider under test, with its memory regions, its operations (RMA, atomics, or messages)
// and the checks of their completions.
//
// Each side opens its own fabric, domain, AV, CQ and endpoint (it is a process of its own
// unless Options::rma_threads), registers a target region the other side reaches
// (FI_REMOTE_READ | FI_REMOTE_WRITE) and, when the provider's mr_mode has FI_MR_LOCAL, its
// local buffers too. It then publishes a Card (its endpoint's name, the target region's
// address and key) through the Link and inserts the other side's name into its AV. The
// domain's mr_mode decides everything a portable application has to: FI_MR_VIRT_ADDR (the
// peer addresses the region by its virtual address, else by offset), FI_MR_PROV_KEY (the key
// is fi_mr_key's, else the one requested), FI_MR_ENDPOINT (each region is bound to the
// endpoint with fi_mr_bind and enabled with fi_mr_enable), FI_MR_LOCAL (every local buffer
// passes its region's fi_mr_desc) and FI_MR_ALLOCATED (every buffer is allocated memory,
// which it is anyway).
//
// Operations carry a struct fi_context2 each (FI_CONTEXT and FI_CONTEXT2 modes), one per slot
// of a window; the CQ must give back every slot's context once per operation, with the
// flags of its kind (FI_RMA or FI_ATOMIC with FI_WRITE or FI_READ; a fetching atomic with
// either) and nothing else, and no completion at all that no operation asked for.
#pragma once

#include <rdma/fi_atomic.h>
#include <rdma/fi_rma.h>

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "tools/bench/msg_peer.h"

namespace fabq::tools::bench::rma {

using msg::FidPtr;
using msg::fmt;
using msg::InfoPtr;
using msg::now_ns;

// What a side tells the other: its endpoint's name and how to reach its target region. Plain
// bytes, so that it can sit in memory two processes share.
struct Card {
  static constexpr size_t kNameMax = 256;  // above every fi_getname of the providers compared
  uint8_t name[kNameMax] = {};             // fi_getname
  size_t name_len = 0;
  uint64_t addr = 0;  // the region's address in the peer's calls: its own, or 0
  uint64_t key = 0;
};

// What the two sides share: on the stack of the process with --rma-threads, else in memory the
// two processes map (run_pair). So nothing in it may point anywhere, and its atomics must be
// lock-free (they are then address-free, as another process needs). card[i] is side i's,
// written before ready[i] is set (release) and read after it is seen (acquire); words are
// written by one side before a barrier and read by the other after it; the rest is atomic.
struct Link {
  static constexpr size_t kWords = 1024;
  explicit Link(const Options& opt) : timeout_ms(opt.timeout_ms) {}
  const int timeout_ms;
  Card card[2];
  std::atomic<bool> ready[2] = {false, false};
  std::atomic<bool> stop{false};  // a side failed: the other gives up its waits
  std::atomic<int> arrived{0};    // barrier arrivals so far, both sides together
  std::atomic<int> failures{0};   // failures so far: tells which side failed first
  // Operations completed so far by side i, written by that side alone. A side that only
  // serves the other's operations (which complete on the other side's CQ) waits as long as
  // their sum moves: its timeout counts from the last completion on either side. Each on a
  // line of its own, away from what the sides poll: a counter both sides wrote would cross
  // cores with every completion, inside the round trip the ping-pongs time.
  struct alignas(64) Completions {
    std::atomic<uint64_t> n{0};
  };
  Completions completions[2];
  // What a scenario's sides tell each other (Side::words); on lines of their own, away from
  // the atomics both sides poll.
  alignas(64) uint64_t words[kWords] = {};
};
static_assert(std::atomic<bool>::is_always_lock_free && std::atomic<int>::is_always_lock_free &&
              std::atomic<uint64_t>::is_always_lock_free);

// The kinds of operations; each completes with its own flags.
enum class Op : uint8_t { kWrite, kRead, kAtomic, kFetchAtomic, kSend, kRecv };

// What a side asks for.
struct Needs {
  bool atomics = false;     // FI_ATOMIC (FI_UINT64 FI_SUM, fetching or not) instead of FI_RMA
  bool messages = false;    // FI_MSG (fi_send, fi_recv) instead of FI_RMA
  bool dgram = false;       // messages on FI_EP_DGRAM endpoints instead of FI_EP_RDM
  size_t target_bytes = 0;  // its region the peer reaches; 0: none
  size_t local_bytes = 0;   // the sources and sinks of its own operations; 0: none
  size_t window = 1;        // operations in flight at most (fewer when the tx queue is smaller)
  size_t op_bytes = 0;      // bytes per operation, within the endpoint's max_msg_size
};

// One side of the pair. Used by one thread only; closes its objects (regions, endpoint, CQ, AV,
// domain, fabric) on destruction.
class Side {
 public:
  // Called for each operation that completed (flags and context checked) before its slot is
  // free again: `slot` and the tag it was posted with. False fails the side (after fail()).
  using DoneFn = std::function<bool(size_t slot, uint64_t tag)>;

  Side(int index, Link* link, const ProviderSpec& spec)
      : index_(index),
        role_(index == 0 ? "server" : "client"),
        link_(link),
        spec_(spec),
        timeout_ns_(link->timeout_ms * 1'000'000LL) {}
  ~Side();
  Side(const Side&) = delete;
  Side& operator=(const Side&) = delete;

  // Opens everything, registers the regions and exchanges cards with the other side.
  bool start(const Needs& needs);
  // After the scenario: every operation completed and the other side done too; then a second
  // barrier that leaves the CQ alone, so that no side closes while the other still needs it.
  bool finish() { return drain() && barrier(true) && barrier(false); }

  uint8_t* target() { return target_.get(); }
  uint8_t* local() { return local_.get(); }
  size_t window() const { return ctx_.size(); }
  // Largest fi_inject_write or fi_inject: tx_attr->inject_size.
  size_t inject_limit() const { return inject_limit_; }
  void on_done(DoneFn f) { on_done_ = std::move(f); }
  // Link::kWords words the other side sees too: what one side writes before a barrier() the
  // other reads after it. Zero when the scenario starts.
  uint64_t* words() { return link_->words; }

  // A free operation slot, polling the CQ until an operation completes if none is.
  bool acquire(size_t* slot);
  // The operations, on slot `slot` (acquired) with `tag` for on_done. Offsets are into this
  // side's local buffers and the peer's target region.
  bool write(size_t slot, uint64_t tag, size_t local_off, size_t len, size_t remote_off);
  bool read(size_t slot, uint64_t tag, size_t local_off, size_t len, size_t remote_off);
  // FI_SUM of the uint64_t at local_off into the peer's uint64_t at remote_off.
  bool atomic_add(size_t slot, uint64_t tag, size_t operand_off, size_t remote_off);
  // The same, fetching the peer's value from before the sum into local result_off.
  bool fetch_add(size_t slot, uint64_t tag, size_t operand_off, size_t result_off,
                 size_t remote_off);
  // fi_inject_write: no slot, no completion.
  bool inject_write(size_t local_off, size_t len, size_t remote_off);
  // Messages to and from the peer, from and into this side's local buffers. A receive must
  // complete with exactly `len` bytes: every scenario sends whole buffers.
  bool send(size_t slot, uint64_t tag, size_t local_off, size_t len);
  bool recv(size_t slot, uint64_t tag, size_t local_off, size_t len);
  // fi_inject: no slot, no completion.
  bool inject(size_t local_off, size_t len);

  // Polls the CQ until every operation posted has completed.
  bool drain();
  // Polls the CQ (which drives a provider's manual progress, also for the peer's operations on
  // this side's region) until `ready()` holds; `what` names the wait in the failure, and *why,
  // when given, is what ready() last saw wrong.
  bool wait_until(const char* what, const std::function<bool()>& ready,
                  const std::string* why = nullptr);
  // Waits until the other side has called barrier() as often as this one, polling the CQ
  // meanwhile when `poll`.
  bool barrier(bool poll);

  bool fail(const std::string& why, bool unsupported = false);
  const msg::Outcome& outcome() const { return out_; }

 private:
  class Spin;
  bool stopped();
  std::string state() const;
  bool setup_fail(const std::string& call, long rc) {
    return fail(msg::fi_error(call, rc), rc == -FI_ENOSYS || rc == -FI_EOPNOTSUPP);
  }
  bool getinfo(const Needs& needs);
  bool register_region(uint8_t* buf, size_t len, uint64_t access, uint64_t key, fid_mr** mr,
                       const char* what);
  bool exchange();
  std::string cq_error();

  // Retries `op` while it returns -FI_EAGAIN, reading the CQ in between.
  template <typename F>
  bool post(const char* call, size_t slot, Op kind, uint64_t tag, F op, size_t len = 0);
  bool progress(size_t* got);
  bool sort(const fi_cq_data_entry& e);
  uint64_t remote(size_t off) const { return peer_card_.addr + off; }

  const int index_;
  const std::string role_;
  Link* const link_;
  const ProviderSpec& spec_;
  const int64_t timeout_ns_;
  msg::Outcome out_;
  int barriers_ = 0;
  uint64_t done_ = 0;  // operations completed so far, for the failure reasons
  DoneFn on_done_;
  size_t inject_limit_ = 0;
  uint64_t mr_mode_ = 0;
  Card peer_card_;
  fi_addr_t peer_ = FI_ADDR_UNSPEC;

  struct Slot {
    bool posted = false;
    Op kind = Op::kWrite;
    uint64_t tag = 0;
    size_t len = 0;  // a receive's: the length its completion must report
  };
  std::vector<fi_context2> ctx_;
  std::vector<Slot> slots_;
  std::vector<size_t> free_;

  std::unique_ptr<uint8_t, msg::MemFree> target_, local_;
  // Closed in the reverse order: regions, endpoint, CQ, AV, domain, fabric.
  InfoPtr info_;
  FidPtr<fid_fabric> fabric_;
  FidPtr<fid_domain> domain_;
  FidPtr<fid_av> av_;
  FidPtr<fid_cq> cq_;
  FidPtr<fid_ep> ep_;
  FidPtr<fid_mr> target_mr_, local_mr_;
  void* local_desc_ = nullptr;  // fi_mr_desc of local_mr_ with FI_MR_LOCAL, else null
};

// One side's part in a scenario: what it needs and what it does once both sides started.
struct Part {
  Needs needs;
  std::function<bool(Side&)> body;
};

// Runs a server (side 0) and a client (side 1), each pinned to a CPU of its own, through start,
// their parts and finish. The figure is the caller's to fill in when the result is kOk;
// otherwise `why` names the side and the step that failed first.
//
// With Options::rma_threads the two sides are two threads of this process. Otherwise they are
// two processes (ServerProcess, rma.h): a scenario's run() runs in both, each building its
// Parts, and run_pair plays the client Part here and the server Part there, so a Part may
// rely on nothing of the other's but the Link (Side::words for what the scenario's sides tell
// each other). The client's run_pair sends the server process the scenario to run, waits for
// its outcome (at most Options::timeout_ms and a margin after its own side is done) and
// returns the combined Sample; the server's returns its own side's, which nobody reads. A
// scenario's run() calls run_pair once at most. One that returns before it in the client
// process sends nothing, so the server process never runs it; one that returns before it in
// the server process fails the server's side, and so the client's at once.
Sample run_pair(const Provider& p, const Options& o, const Part& server, const Part& client);

}  // namespace fabq::tools::bench::rma
