// How `fabq demo` writes its lines, and what the lines call what libfabric gives: return
// codes, completion flags, events, addresses.
#pragma once

#include <rdma/fabric.h>
#include <sys/types.h>
#include <time.h>

#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <string>

namespace fabq::tools::demo {

inline constexpr int kWaitMs = 10'000;  // the longest any wait lasts before the demo fails

// The outcomes of a wait besides the provider's own codes; outside the fabric errno range.
inline constexpr ssize_t kTimedOut = -1'000'001;
inline constexpr ssize_t kPeerGone = -1'000'002;
inline constexpr ssize_t kCqTrouble = -1'000'003;  // the CQ, read while waiting on the EQ, failed

double seconds_since(const timespec& start);

// Prints one line: the time since `start`, who speaks, the text. The line is formatted first
// and written with one write(2): both processes write to the same stdout, and a write of at
// most PIPE_BUF bytes to a pipe is never interleaved with another process's.
void vemit(const timespec& start, const char* who, const char* fmt, va_list ap);
__attribute__((format(printf, 3, 4))) void emit(const timespec& start, const char* who,
                                                const char* fmt, ...);

// "-FI_ENODATA (No data available)" for a libfabric return code; a wait's own outcomes in
// words.
std::string describe(ssize_t rc, const char* peer);
std::string errno_name(int err);
// "FI_RECV|FI_MSG|FI_REMOTE_CQ_DATA": the flags of a completion, by name.
std::string cq_flags(uint64_t flags);
const char* event_name(uint32_t event);
const char* progress_name(fi_progress p);
// "127.0.0.1:40123" for the IPv4 and IPv6 socket addresses fi_getinfo and fi_getname give.
std::string address(const void* addr, size_t len);
unsigned port_of(const void* addr, size_t len);
// Received bytes as text for a line: at most `len`, anything unprintable as '.'.
std::string printable(const char* buf, size_t len);

}  // namespace fabq::tools::demo
