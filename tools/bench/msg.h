// `fabq bench`'s MSG scenarios (msg.cc): what the tests reach without a connection.
//
// The scenarios connect two FI_EP_MSG endpoints of the provider under test over TCP on
// 127.0.0.1, the server side in a thread of its own, and check every message they carry
// against MsgFormat. msg_scenarios() lists them; all_scenarios() puts them after the queue
// scenarios.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tools/bench/bench.h"

namespace fabq::tools::bench {

// Which way a message goes. It is part of the stamp, so a message that comes back unchanged
// is never taken for the reply.
enum class MsgDir : uint64_t { kToServer = 0, kToClient = 1 };

// The content of every message: a pseudo-random pattern fixed by the size, with the message's
// stamp (sequence number and direction, 8 bytes) written over it at offset 0, at every 4 KiB
// and in the last 8 bytes. Buffers keep the pattern, so a sender only restamps (one store per
// 4 KiB); check() compares every byte, so a lost, stale, truncated, misplaced or corrupted
// payload is caught, not just a wrong header.
//
// Immutable after construction: its const members may be called from any thread.
class MsgFormat {
 public:
  static constexpr size_t kMinSize = 8;
  static constexpr size_t kStampEvery = 4096;

  explicit MsgFormat(size_t size);  // size >= kMinSize
  MsgFormat(const MsgFormat&) = delete;
  MsgFormat& operator=(const MsgFormat&) = delete;

  size_t size() const { return pattern_.size(); }
  // Copies the pattern into `buf` (size() bytes): what buffers hold before the first stamp.
  void fill(void* buf) const;
  // Stamps message `seq` (> 0) going `dir` into `buf`, which holds the pattern.
  void stamp(void* buf, uint64_t seq, MsgDir dir) const;
  // The 8 bytes stamp() writes, which also end every message: what a reader polling the last
  // bytes of a buffer (the RMA ping-pong) waits for.
  static uint64_t stamp_value(uint64_t seq, MsgDir dir) {
    return seq << 1 | static_cast<uint64_t>(dir);
  }
  // Checks the `len` bytes received in `buf` as one message going `dir`: the length, every
  // stamp and every byte between them. True with the message's sequence number in *seq;
  // false with the first difference in *why.
  [[nodiscard]] bool check(const void* buf, size_t len, MsgDir dir, uint64_t* seq,
                           std::string* why) const;

 private:
  std::vector<uint8_t> pattern_;
  std::vector<size_t> stamps_;  // offsets of the stamps: ascending, 8 bytes apart at least
};

// "8", "64", "1Ki", "64Ki", "1Mi": how scenario names spell a message size.
std::string msg_size_name(size_t bytes);
// "8 B", "64 B", "1 KiB", "64 KiB", "1 MiB": the same for reading.
std::string msg_size_label(size_t bytes);

// The MSG scenarios in report order: msg-pingpong/<size>, msg-rate/<size>, msg-comp-rate/8.
const std::vector<Scenario>& msg_scenarios();

}  // namespace fabq::tools::bench
