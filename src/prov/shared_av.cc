#include "prov/shared_av.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

namespace fabq::prov {

// 64 bytes, then the entries, then the fi_addr_t array.
struct SharedAvTable::Header {
  uint64_t magic;
  uint64_t capacity;
  std::atomic<uint64_t> count;    // entries claimed
  std::atomic<uint32_t> removed;  // an entry was ever removed
  uint32_t pad;
  uint64_t reserved[4];
};
struct SharedAvTable::Entry {
  sockaddr_in sa;
  std::atomic<uint32_t> state;  // State; written last (release) when valid
  uint32_t pad;
};
static_assert(sizeof(std::atomic<uint64_t>) == 8 && std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

namespace {

constexpr uint64_t kMagic = 0x66616271'61763031ULL;  // "fabqav01"
constexpr size_t kHeaderBytes = 64;

size_t bytes_for(size_t capacity) {
  return kHeaderBytes + capacity * (sizeof(sockaddr_in) + 8) + capacity * sizeof(fi_addr_t);
}

std::string shm_name_of(const char* name) {
  std::string s = "/fabq-av." + std::to_string(getuid()) + ".";
  for (const char* p = name; *p != '\0'; ++p) s += *p == '/' ? '_' : *p;
  return s;
}

}  // namespace

SharedAvTable::Header* SharedAvTable::header() const {
  return static_cast<Header*>(base_);
}
SharedAvTable::Entry* SharedAvTable::entries() const {
  return reinterpret_cast<Entry*>(static_cast<char*>(base_) + kHeaderBytes);
}

SharedAvTable::SharedAvTable(core::UniqueFd fd, void* base, size_t bytes, std::string shm_name,
                             bool read_only)
    : fd_(std::move(fd)),
      base_(base),
      bytes_(bytes),
      shm_name_(std::move(shm_name)),
      read_only_(read_only) {
  capacity_ = header()->capacity;
  map_ =
      reinterpret_cast<fi_addr_t*>(reinterpret_cast<char*>(entries()) + capacity_ * sizeof(Entry));
}

std::unique_ptr<SharedAvTable> SharedAvTable::open(const char* name, bool read_only,
                                                   size_t capacity, int* err) {
  static_assert(sizeof(Header) == kHeaderBytes && sizeof(Entry) == sizeof(sockaddr_in) + 8);
  *err = 0;
  if (name == nullptr || *name == '\0' || std::strlen(name) > 200) {
    *err = -FI_EINVAL;
    return nullptr;
  }
  const std::string shm_name = shm_name_of(name);
  if (capacity == 0) capacity = kDefaultCapacity;
  if (capacity > kMaxCapacity) capacity = kMaxCapacity;
  core::UniqueFd fd(
      shm_open(shm_name.c_str(), (read_only ? O_RDONLY : O_RDWR | O_CREAT) | O_CLOEXEC, 0600));
  if (!fd.valid()) {
    *err = errno == ENOENT ? -FI_EINVAL : -errno;
    return nullptr;
  }
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) {
    *err = -errno;
    return nullptr;
  }
  // Nobody holds it: a new table, or one a dead job left. A writer starts it afresh; a reader
  // finds no table.
  const bool unheld = flock(fd.get(), LOCK_EX | LOCK_NB) == 0;
  if (unheld && read_only) {
    flock(fd.get(), LOCK_UN);
    *err = -FI_EINVAL;
    return nullptr;
  }
  size_t bytes = static_cast<size_t>(st.st_size);
  if (unheld) {
    bytes = bytes_for(capacity);
    if (ftruncate(fd.get(), 0) != 0 || ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
      *err = -errno;
      flock(fd.get(), LOCK_UN);
      return nullptr;
    }
  }
  if (bytes < kHeaderBytes) {
    *err = -FI_EINVAL;
    return nullptr;
  }
  void* base =
      mmap(nullptr, bytes, read_only ? PROT_READ : PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED) {
    *err = -errno;
    if (unheld) flock(fd.get(), LOCK_UN);
    return nullptr;
  }
  auto* h = static_cast<Header*>(base);
  if (unheld) {
    new (h) Header{
        .magic = 0, .capacity = capacity, .count = 0, .removed = 0, .pad = 0, .reserved = {}};
    auto* map = reinterpret_cast<fi_addr_t*>(static_cast<char*>(base) + kHeaderBytes +
                                             capacity * sizeof(Entry));
    for (size_t i = 0; i < capacity; ++i) map[i] = FI_ADDR_NOTAVAIL;
    __atomic_store_n(&h->magic, kMagic, __ATOMIC_RELEASE);
    // Held shared from now on, like every other holder.
    flock(fd.get(), LOCK_SH);
  } else {
    flock(fd.get(), LOCK_SH);
  }
  if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != kMagic || bytes < bytes_for(h->capacity)) {
    munmap(base, bytes);
    *err = -FI_EINVAL;
    return nullptr;
  }
  auto* t = new (std::nothrow) SharedAvTable(std::move(fd), base, bytes, shm_name, read_only);
  if (t == nullptr) {
    munmap(base, bytes);
    *err = -FI_ENOMEM;
  }
  return std::unique_ptr<SharedAvTable>(t);
}

SharedAvTable::~SharedAvTable() {
  munmap(base_, bytes_);
  // The last holder removes the name; the others keep the table for their processes.
  if (flock(fd_.get(), LOCK_EX | LOCK_NB) == 0) shm_unlink(shm_name_.c_str());
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
