// fabq provider: the table of a named address vector (fi_av(3) `name`, FI_SHARED_AV), shared by
// every process of one user on the host that opens the same name.
//
// The table is a file of POSIX shared memory, /dev/shm/fabq-av.<euid>.<name> ('/' in the name
// becomes '_'), mapped by each process that opens it. An fi_addr_t is an entry's index, the same
// in every process. Entries are only appended: an insert claims the next index (a CAS on the
// count, so processes may insert at once), writes the address, then publishes it (release); a
// removal marks it removed for good. Readers never lock: a lookup reads the state (acquire), then
// the address.
//
// Layout (little-endian; prov/shared_av_header.h):
//
//   offset               what
//        0               magic 0x6661627161763031 ("fabqav01"), capacity, count (u64 each)
//       24               removed (u32: an entry was ever removed), 0 (u32), 4 reserved u64 (0)
//       64               capacity entries of 24 bytes: sockaddr_in, state (u32), 0 (u32)
//   64 + 24 * capacity   capacity fi_addr_t: attr->map_addr (FI_ADDR_NOTAVAIL until valid)
//
// The object is exactly that long; capacity is 1 to kMaxCapacity.
//
// One table per name. Who holds the table holds flock(LOCK_SH) on its file, from before it can
// use it until it has unmapped it. A name only ever names a whole table:
//   - Create (a writer that finds no name): an unnamed file (O_TMPFILE, 0600 whatever the umask),
//     held, sized and filled in, then given the name with linkat(2), which fails if the name
//     exists meanwhile: another process made the table first, and this one joins that instead.
//   - Join: open the name (O_NOFOLLOW, O_NONBLOCK), check what fstat(2) says (a regular file of
//     this user that no other user may read or write), then take LOCK_SH and check that the name
//     still names the file this process holds. If it does, nobody can remove the name while this
//     process holds the lock; if not, the table's last holder removed it in between, and the open
//     starts over with whatever the name names now.
//   - A file nobody holds (LOCK_EX | LOCK_NB succeeds on it while it is still the name's) was left
//     by processes that died: the opener removes the name and starts over, so a writer starts
//     afresh and a reader finds no table.
//   - Close: unmap, then take LOCK_EX | LOCK_NB; only the last holder gets it, and it removes the
//     name if the name still names its file. Holding LOCK_EX, it keeps everybody who opened the
//     file meanwhile waiting for LOCK_SH, after which they find the name gone and start over.
// So no process ever holds a table that lost its name while another makes a new one, and no
// process removes a name that names another table than its own.
//
// What is at the name is checked before a byte of it is trusted: another user's file, one that
// other users may read or write, a link, a FIFO, a directory: -FI_EACCES (core/private_file.h).
// Then the header (av_table::check_header(), on a copy of it: magic, capacity, the object's
// size against it, count, the reserved fields): a header no table could have: -FI_EINVAL. Both
// are logged. The capacity so checked is the only one this process ever uses.
//
// Another user can still take a name first (/dev/shm is every user's): this user's opens of it
// then fail with -FI_EACCES until that file is gone; they are refused, never taken over.
//
// An open waits at most a second for LOCK_SH (a closing process holds LOCK_EX only while it
// removes the name; one stopped there, or a buggy process that holds it, makes the open fail with
// -FI_EAGAIN instead of hang).
//
// What a process of the same user can still do: write any entry or fi_addr_t (every lookup
// checks indices against the checked capacity; an address is what it is), and shrink the file,
// which makes every process that maps it fault (SIGBUS) when it next touches the lost pages.
//
// Threads: any. Memory: nothing is allocated per lookup or insert but the reverse-lookup cache
// (a hash map the calling process keeps, under the AV's lock).
#pragma once

#include <netinet/in.h>
#include <rdma/fabric.h>
#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/unique_fd.h"
#include "prov/shared_av_header.h"

namespace fabq::prov {

struct SharedAvMapping;  // shared_av.cc

class SharedAvTable {
 public:
  enum class State : uint32_t { kEmpty = 0, kValid = 1, kRemoved = 2 };
  static constexpr size_t kDefaultCapacity = 1024;
  static constexpr size_t kMaxCapacity = av_table::kMaxCapacity;

  // Opens (read_only: FI_READ) or creates the table `name`; `capacity` (0: kDefaultCapacity,
  // above kMaxCapacity: kMaxCapacity) sizes a new one. Null with *err set to the fi_av_open
  // error: -FI_EINVAL (a bad name, FI_READ of a table that does not exist, or a header no table
  // could have), -FI_EACCES (what is at the name is not this user's private table), -FI_EAGAIN
  // (the name was removed under this open kOpenAttempts times in a row, or a closing process
  // kept the table locked for a second), -FI_ENOMEM, or the errno of a failing system call,
  // negated. A refusal is logged (FI_LOG_AV).
  static std::unique_ptr<SharedAvTable> open(const char* name, bool read_only, size_t capacity,
                                             int* err);
  // How many times an open starts over because the name was removed under it (by a table's
  // last holder, or as a dead job's) before it gives up.
  static constexpr int kOpenAttempts = 1000;
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
  using Header = av_table::Header;
  using Entry = av_table::Entry;
  SharedAvTable(SharedAvMapping m, std::string path, bool read_only);
  Header* header() const;
  Entry* entries() const;

  core::UniqueFd fd_;  // holds LOCK_SH
  void* base_;
  size_t bytes_;
  dev_t dev_;  // the file, to tell whether the name still names it
  ino_t ino_;
  std::string path_;
  bool read_only_;
  size_t capacity_;  // checked when opened; never read from the table again
  fi_addr_t* map_;
};

}  // namespace fabq::prov
