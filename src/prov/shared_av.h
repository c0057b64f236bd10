// fabq provider: the table of a named address vector (fi_av(3) `name`, FI_SHARED_AV), shared by
// every process of the host that opens the same name.
//
// The table lives in a POSIX shared-memory object "/fabq-av.<uid>.<name>" ('/' in the name
// becomes '_'), mapped by each process that opens it: a header, `capacity` entries (an IPv4
// address and its state) and the fi_addr_t array that fi_av_open returns as attr->map_addr. An
// fi_addr_t is an entry's index, the same in every process. Entries are only appended: an
// insert claims the next index (a CAS on the count, so processes may insert at once), writes
// the address, then publishes it (release); a removal marks it removed for good. Readers never
// lock: a lookup reads the state (acquire), then the address.
//
// Who holds the name holds a shared flock on it. Opening for writing creates the object if it
// does not exist, and starts it afresh if nobody holds it (a job that died left it behind);
// opening with FI_READ requires it to exist and be held. The last process to close it unlinks
// the name (it takes the lock exclusively to know it is the last).
//
// Threads: any. Memory: nothing is allocated per lookup or insert but the reverse-lookup cache
// (a hash map the calling process keeps, under the AV's lock).
#pragma once

#include <netinet/in.h>
#include <rdma/fabric.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/unique_fd.h"

namespace fabq::prov {

class SharedAvTable {
 public:
  enum class State : uint32_t { kEmpty = 0, kValid = 1, kRemoved = 2 };
  static constexpr size_t kDefaultCapacity = 1024;
  static constexpr size_t kMaxCapacity = 65536;

  // Opens (read_only: FI_READ) or creates the table `name`; `capacity` (0: kDefaultCapacity,
  // at most kMaxCapacity) sizes a new one. Null with *err set to the fi_av_open error:
  // -FI_EINVAL (a bad name, or FI_READ of a table that does not exist), -FI_ENOMEM, or the
  // errno of a failing system call, negated.
  static std::unique_ptr<SharedAvTable> open(const char* name, bool read_only, size_t capacity,
                                             int* err);
  ~SharedAvTable();
  SharedAvTable(const SharedAvTable&) = delete;
  SharedAvTable& operator=(const SharedAvTable&) = delete;

  bool read_only() const { return read_only_; }
  size_t capacity() const { return capacity_; }
  // What fi_av_open returns as attr->map_addr: the fi_addr_t of each entry by index
  // (FI_ADDR_NOTAVAIL for one not valid), in this process's mapping.
  void* map_addr() const { return map_; }

  // Appends `sa`: its index, or FI_ADDR_NOTAVAIL when the table is full. Not on a read-only
  // table.
  fi_addr_t insert(const sockaddr_in& sa);
  // Marks `addr` removed; false when it names no valid entry.
  bool remove(fi_addr_t addr);
  // The address at `addr`; false when it names no valid entry.
  bool lookup(fi_addr_t addr, sockaddr_in* out) const;
  bool valid(fi_addr_t addr) const;
  State state(fi_addr_t addr) const;
  // Whether any process ever removed an entry (acquire).
  bool ever_removed() const;
  // Entries claimed so far (some may still be being written).
  size_t count() const;

 private:
  struct Header;
  struct Entry;
  SharedAvTable(core::UniqueFd fd, void* base, size_t bytes, std::string shm_name, bool read_only);
  Header* header() const;
  Entry* entries() const;

  core::UniqueFd fd_;
  void* base_;
  size_t bytes_;
  std::string shm_name_;
  bool read_only_;
  size_t capacity_ = 0;
  fi_addr_t* map_ = nullptr;
};

}  // namespace fabq::prov
