#include "prov/shared_av.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <new>

#include "core/private_file.h"
#include "prov/provider.h"

namespace fabq::prov {

// A table's file, held (LOCK_SH) and mapped, whose header this process checked.
struct SharedAvMapping {
  core::UniqueFd fd;
  void* base = nullptr;
  size_t bytes = 0;
  size_t capacity = 0;
  dev_t dev = 0;
  ino_t ino = 0;

  SharedAvMapping() = default;
  SharedAvMapping(const SharedAvMapping&) = delete;
  SharedAvMapping& operator=(const SharedAvMapping&) = delete;
  SharedAvMapping(SharedAvMapping&& o) noexcept { *this = std::move(o); }
  SharedAvMapping& operator=(SharedAvMapping&& o) noexcept {
    if (this != &o) {
      unmap();
      fd = std::move(o.fd);
      base = std::exchange(o.base, nullptr);
      bytes = o.bytes;
      capacity = o.capacity;
      dev = o.dev;
      ino = o.ino;
    }
    return *this;
  }
  ~SharedAvMapping() { unmap(); }
  void unmap() {
    if (base != nullptr) munmap(base, bytes);
    base = nullptr;
  }
};

namespace {

// Where POSIX shared memory lives (what shm_open(3) opens); the table is opened there directly,
// so that the open can refuse links and not block on a FIFO.
constexpr char kShmDir[] = "/dev/shm";

std::string path_of(const char* name) {
  std::string s = std::string(kShmDir) + "/fabq-av." + std::to_string(geteuid()) + ".";
  for (const char* p = name; *p != '\0'; ++p) s += *p == '/' ? '_' : *p;
  return s;
}

// Whether `path` names the file `st` describes (a link at the name is not followed).
bool names(const std::string& path, const struct stat& st) {
  struct stat now {};
  return lstat(path.c_str(), &now) == 0 && now.st_dev == st.st_dev && now.st_ino == st.st_ino;
}

// How long an open waits for LOCK_SH. Only a closing process holds LOCK_EX, for the moment it
// takes to remove the name, unless it was stopped there (or a buggy process of the user holds it):
// the open then fails with -FI_EAGAIN instead of waiting for it.
constexpr int kLockWaitMs = 1000;

int lock_shared(int fd) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(kLockWaitMs);
  for (int tries = 0;; ++tries) {
    if (flock(fd, LOCK_SH | LOCK_NB) == 0) return 0;
    if (errno != EWOULDBLOCK && errno != EINTR) return -errno;
    if (std::chrono::steady_clock::now() >= end) return -FI_EAGAIN;
    // A closing process holds it for a few system calls: let it run, then back off.
    if (tries < 64) {
      sched_yield();
    } else {
      usleep(static_cast<useconds_t>(std::min(tries - 63, 100)) * 10);
    }
  }
}

// Maps `fd` (bytes long, capacity entries) into *m; 0 or a negative errno.
int map(core::UniqueFd fd, size_t bytes, size_t capacity, bool read_only, SharedAvMapping* m) {
  void* base =
      mmap(nullptr, bytes, read_only ? PROT_READ : PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED) return -errno;
  m->fd = std::move(fd);
  m->base = base;
  m->bytes = bytes;
  m->capacity = capacity;
  return 0;
}

// A new, empty table of `capacity` entries at `path`, held: 0, -EEXIST if the name exists (made by
// another process since this one looked), or a negative errno. The file has no name until it is
// whole, so nobody ever opens a table that is being filled in.
int create(const std::string& path, size_t capacity, SharedAvMapping* out) {
  core::UniqueFd fd(open(kShmDir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
  // The umask may have taken the owner's bits; nobody else gets any.
  if (!fd.valid() || fchmod(fd.get(), 0600) != 0) return -errno;
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return -errno;
  // Nobody else can have it yet: it has no name.
  if (flock(fd.get(), LOCK_SH) != 0) return -errno;
  const size_t bytes = *av_table::table_bytes(capacity);
  if (ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) return -errno;
  SharedAvMapping m;
  if (const int rc = map(std::move(fd), bytes, capacity, /*read_only=*/false, &m); rc != 0) {
    return rc;
  }
  m.dev = st.st_dev;
  m.ino = st.st_ino;
  new (m.base) av_table::Header{.magic = av_table::kMagic,
                                .capacity = capacity,
                                .count = 0,
                                .removed = 0,
                                .pad = 0,
                                .reserved = {}};
  auto* map_addr =
      reinterpret_cast<fi_addr_t*>(static_cast<char*>(m.base) + av_table::map_offset(capacity));
  std::fill_n(map_addr, capacity, FI_ADDR_NOTAVAIL);
  // An O_TMPFILE file gets a name through /proc (linkat(2)); without /proc, a process with
  // CAP_DAC_READ_SEARCH may name it by its descriptor.
  char proc[48];
  std::snprintf(proc, sizeof(proc), "/proc/self/fd/%d", m.fd.get());
  if (linkat(AT_FDCWD, proc, AT_FDCWD, path.c_str(), AT_SYMLINK_FOLLOW) != 0) {
    if (errno != ENOENT || linkat(m.fd.get(), "", AT_FDCWD, path.c_str(), AT_EMPTY_PATH) != 0) {
      return -errno;
    }
  }
  *out = std::move(m);
  return 0;
}

// What the errno of an open of the name says about what is there.
bool refused_by_open(int e) {
  // A link (O_NOFOLLOW), a directory opened to write, a socket, another user's private file.
  return e == ELOOP || e == EISDIR || e == ENXIO || e == EACCES || e == EPERM || e == ENODEV;
}

// Refuses what is at the name: logged, with what was found there (it is no mistake of the
// application's, and whoever put it there may be another user). Null, with *err = code.
std::nullptr_t refuse(int* err, int code, const char* name, const std::string& path,
                      const char* why, const char* what) {
  FABQ_WARN(FI_LOG_AV, "named AV \"%s\": %s %s (%s): refused\n", name, path.c_str(), why, what);
  *err = code;
  return nullptr;
}

}  // namespace

SharedAvTable::Header* SharedAvTable::header() const {
  return static_cast<Header*>(base_);
}
SharedAvTable::Entry* SharedAvTable::entries() const {
  return reinterpret_cast<Entry*>(static_cast<char*>(base_) + av_table::kHeaderBytes);
}

SharedAvTable::SharedAvTable(SharedAvMapping m, std::string path, bool read_only)
    : fd_(std::move(m.fd)),
      base_(std::exchange(m.base, nullptr)),
      bytes_(m.bytes),
      dev_(m.dev),
      ino_(m.ino),
      path_(std::move(path)),
      read_only_(read_only),
      capacity_(m.capacity),
      map_(reinterpret_cast<fi_addr_t*>(static_cast<char*>(base_) +
                                        av_table::map_offset(capacity_))) {}

std::unique_ptr<SharedAvTable> SharedAvTable::open(const char* name, bool read_only,
                                                   size_t capacity, int* err) {
  *err = 0;
  if (name == nullptr || *name == '\0' || std::strlen(name) > 200) {
    *err = -FI_EINVAL;
    return nullptr;
  }
  const std::string path = path_of(name);
  if (capacity == 0) capacity = kDefaultCapacity;
  if (capacity > kMaxCapacity) capacity = kMaxCapacity;
  for (int attempt = 0; attempt < kOpenAttempts; ++attempt) {
    core::UniqueFd fd(::open(path.c_str(), (read_only ? O_RDONLY : O_RDWR) | O_NOFOLLOW |
                                               O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
    SharedAvMapping m;
    if (!fd.valid()) {
      const int e = errno;
      if (refused_by_open(e)) {
        return refuse(err, -FI_EACCES, name, path, "cannot be opened as a table", strerror(e));
      }
      if (e != ENOENT) {
        *err = -e;
        return nullptr;
      }
      if (read_only) {
        *err = -FI_EINVAL;  // no table of that name
        return nullptr;
      }
      const int rc = create(path, capacity, &m);
      if (rc == -EEXIST) continue;  // another process named its table first: join that one
      if (rc != 0) {
        *err = rc;
        return nullptr;
      }
    } else {
      struct stat st {};
      if (fstat(fd.get(), &st) != 0) {
        *err = -errno;
        return nullptr;
      }
      const core::FileFault fault = core::private_file_fault(st.st_mode, st.st_uid, geteuid());
      if (fault != core::FileFault::kNone) {
        char what[32];
        if (fault == core::FileFault::kNotOwner) {
          std::snprintf(what, sizeof(what), "uid %lu", static_cast<unsigned long>(st.st_uid));
        } else {
          std::snprintf(what, sizeof(what), "mode 0%lo", static_cast<unsigned long>(st.st_mode));
        }
        return refuse(err, -FI_EACCES, name, path, core::describe(fault), what);
      }
      // Nobody holds it, and it is still the name's: processes that died left it. Removed, and
      // the open starts over (the lock goes with the descriptor).
      if (flock(fd.get(), LOCK_EX | LOCK_NB) == 0) {
        if (names(path, st)) unlink(path.c_str());
        continue;
      }
      if (const int rc = lock_shared(fd.get()); rc != 0) {
        if (rc == -FI_EAGAIN) {
          FABQ_WARN(FI_LOG_AV, "named AV \"%s\": %s stayed locked for %d ms\n", name, path.c_str(),
                    kLockWaitMs);
        }
        *err = rc;
        return nullptr;
      }
      // Held: from now on nobody removes the name while it names this file. If it does not any
      // more, the last holder removed it before this process took its lock.
      if (!names(path, st)) continue;
      unsigned char raw[av_table::kHeaderBytes];
      const ssize_t got = pread(fd.get(), raw, sizeof(raw), 0);
      if (got < 0) {
        *err = -errno;
        return nullptr;
      }
      // What the header says is checked on this copy, and only the capacity checked here is
      // used: the table may change under this process, its header too.
      const av_table::HeaderFields h =
          got == sizeof(raw) ? av_table::read_header(raw) : av_table::HeaderFields{};
      const av_table::HeaderFault bad =
          av_table::check_header(h, static_cast<uint64_t>(st.st_size));
      if (bad != av_table::HeaderFault::kNone) {
        char what[40];
        std::snprintf(what, sizeof(what), "capacity %llu",
                      static_cast<unsigned long long>(h.capacity));
        return refuse(err, -FI_EINVAL, name, path, av_table::describe(bad), what);
      }
      if (const int rc = map(std::move(fd), static_cast<size_t>(st.st_size),
                             static_cast<size_t>(h.capacity), read_only, &m);
          rc != 0) {
        *err = rc;
        return nullptr;
      }
      m.dev = st.st_dev;
      m.ino = st.st_ino;
    }
    auto* t = new (std::nothrow) SharedAvTable(std::move(m), path, read_only);
    if (t == nullptr) *err = -FI_ENOMEM;
    return std::unique_ptr<SharedAvTable>(t);
  }
  FABQ_WARN(FI_LOG_AV, "named AV \"%s\": removed under %d opens in a row\n", name, kOpenAttempts);
  *err = -FI_EAGAIN;
  return nullptr;
}

SharedAvTable::~SharedAvTable() {
  munmap(base_, bytes_);
  // Only the last holder gets the lock; the others keep the table for their processes. It
  // removes the name only if the name is still its table's: a buggy process of the user may
  // have removed it by hand, and another table may have it now.
  if (flock(fd_.get(), LOCK_EX | LOCK_NB) != 0) return;
  struct stat mine {};
  mine.st_dev = dev_;
  mine.st_ino = ino_;
  if (names(path_, mine)) unlink(path_.c_str());
}

fi_addr_t SharedAvTable::insert(const sockaddr_in& sa) {
  Header* h = header();
  uint64_t index = h->count.load(std::memory_order_relaxed);
  do {
    if (index >= capacity_) return FI_ADDR_NOTAVAIL;
  } while (!h->count.compare_exchange_weak(index, index + 1, std::memory_order_relaxed));
  Entry& e = entries()[index];
  e.sa = sockaddr_in{};
  e.sa.sin_family = AF_INET;
  e.sa.sin_port = sa.sin_port;
  e.sa.sin_addr = sa.sin_addr;
  map_[index] = index;
  e.state.store(static_cast<uint32_t>(State::kValid), std::memory_order_release);
  return index;
}

bool SharedAvTable::remove(fi_addr_t addr) {
  if (addr >= capacity_) return false;
  uint32_t valid = static_cast<uint32_t>(State::kValid);
  if (!entries()[addr].state.compare_exchange_strong(valid, static_cast<uint32_t>(State::kRemoved),
                                                     std::memory_order_acq_rel)) {
    return false;
  }
  map_[addr] = FI_ADDR_NOTAVAIL;
  header()->removed.store(1, std::memory_order_release);
  return true;
}

bool SharedAvTable::valid(fi_addr_t addr) const {
  return addr < capacity_ && entries()[addr].state.load(std::memory_order_acquire) ==
                                 static_cast<uint32_t>(State::kValid);
}

SharedAvTable::State SharedAvTable::state(fi_addr_t addr) const {
  if (addr >= capacity_) return State::kEmpty;
  return static_cast<State>(entries()[addr].state.load(std::memory_order_acquire));
}

bool SharedAvTable::lookup(fi_addr_t addr, sockaddr_in* out) const {
  if (!valid(addr)) return false;
  *out = entries()[addr].sa;
  return true;
}

bool SharedAvTable::ever_removed() const {
  return header()->removed.load(std::memory_order_acquire) != 0;
}

size_t SharedAvTable::count() const {
  return std::min<uint64_t>(header()->count.load(std::memory_order_acquire), capacity_);
}

}  // namespace fabq::prov
