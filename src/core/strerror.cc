#include "core/strerror.h"

#include <rdma/fi_errno.h>

#include <cstdio>
#include <cstring>

#include "core/async_event.h"

namespace fabq::core {
namespace {

struct ErrnoText {
  int err;
  const char* name;
  const char* message;
};

// libfabric's own codes and the system codes fabq reports. Messages follow fi_errno(3).
constexpr ErrnoText kTable[] = {
    {FI_EPERM, "FI_EPERM", "Operation not permitted"},
    {FI_ENOENT, "FI_ENOENT", "No such file or directory"},
    {FI_EINTR, "FI_EINTR", "Interrupted system call"},
    {FI_EIO, "FI_EIO", "Input/output error"},
    {FI_E2BIG, "FI_E2BIG", "Argument list too long"},
    {FI_EBADF, "FI_EBADF", "Bad file descriptor"},
    {FI_EAGAIN, "FI_EAGAIN", "Resource temporarily unavailable"},
    {FI_ENOMEM, "FI_ENOMEM", "Cannot allocate memory"},
    {FI_EACCES, "FI_EACCES", "Permission denied"},
    {FI_EFAULT, "FI_EFAULT", "Bad address"},
    {FI_EBUSY, "FI_EBUSY", "Device or resource busy"},
    {FI_ENODEV, "FI_ENODEV", "No such device"},
    {FI_EINVAL, "FI_EINVAL", "Invalid argument"},
    {FI_EMFILE, "FI_EMFILE", "Too many open files"},
    {FI_ENOSPC, "FI_ENOSPC", "No space left on device"},
    {FI_ENOSYS, "FI_ENOSYS", "Function not implemented"},
    {FI_EWOULDBLOCK, "FI_EWOULDBLOCK", "Operation would block"},
    {FI_ENOMSG, "FI_ENOMSG", "No message of desired type"},
    {FI_ENODATA, "FI_ENODATA", "No data available"},
    {FI_EOVERFLOW, "FI_EOVERFLOW", "Value too large for defined data type"},
    {FI_EMSGSIZE, "FI_EMSGSIZE", "Message too long"},
    {FI_ENOPROTOOPT, "FI_ENOPROTOOPT", "Protocol not available"},
    {FI_EOPNOTSUPP, "FI_EOPNOTSUPP", "Operation not supported on transport endpoint"},
    {FI_EADDRINUSE, "FI_EADDRINUSE", "Address already in use"},
    {FI_EADDRNOTAVAIL, "FI_EADDRNOTAVAIL", "Cannot assign requested address"},
    {FI_ENETDOWN, "FI_ENETDOWN", "Network is down"},
    {FI_ENETUNREACH, "FI_ENETUNREACH", "Network is unreachable"},
    {FI_ECONNABORTED, "FI_ECONNABORTED", "Software caused connection abort"},
    {FI_ECONNRESET, "FI_ECONNRESET", "Connection reset by peer"},
    {FI_ENOBUFS, "FI_ENOBUFS", "No buffer space available"},
    {FI_EISCONN, "FI_EISCONN", "Transport endpoint is already connected"},
    {FI_ENOTCONN, "FI_ENOTCONN", "Transport endpoint is not connected"},
    {FI_ESHUTDOWN, "FI_ESHUTDOWN", "Cannot send after transport endpoint shutdown"},
    {FI_ETIMEDOUT, "FI_ETIMEDOUT", "Connection timed out"},
    {FI_ECONNREFUSED, "FI_ECONNREFUSED", "Connection refused"},
    {FI_EHOSTDOWN, "FI_EHOSTDOWN", "Host is down"},
    {FI_EHOSTUNREACH, "FI_EHOSTUNREACH", "No route to host"},
    {FI_EALREADY, "FI_EALREADY", "Operation already in progress"},
    {FI_EINPROGRESS, "FI_EINPROGRESS", "Operation now in progress"},
    {FI_EREMOTEIO, "FI_EREMOTEIO", "Remote I/O error"},
    {FI_ECANCELED, "FI_ECANCELED", "Operation canceled"},
    {FI_EKEYREJECTED, "FI_EKEYREJECTED", "Key was rejected by service"},
    {FI_EOTHER, "FI_EOTHER", "Unspecified error"},
    {FI_ETOOSMALL, "FI_ETOOSMALL", "Provided buffer is too small"},
    {FI_EOPBADSTATE, "FI_EOPBADSTATE", "Operation not permitted in current state"},
    {FI_EAVAIL, "FI_EAVAIL", "Error available"},
    {FI_EBADFLAGS, "FI_EBADFLAGS", "Flags not supported"},
    {FI_ENOEQ, "FI_ENOEQ", "Missing or unavailable event queue"},
    {FI_EDOMAIN, "FI_EDOMAIN", "Invalid resource domain"},
    {FI_ENOCQ, "FI_ENOCQ", "Missing or unavailable completion queue"},
    {FI_ECRC, "FI_ECRC", "CRC error"},
    {FI_ETRUNC, "FI_ETRUNC", "Truncation error"},
    {FI_ENOKEY, "FI_ENOKEY", "Required key not available"},
    {FI_ENOAV, "FI_ENOAV", "Missing or unavailable address vector"},
    {FI_EOVERRUN, "FI_EOVERRUN", "Queue has been overrun"},
    {FI_ENORX, "FI_ENORX", "Receiver not ready, no receive buffers available"},
};

const ErrnoText* find(int err) {
  for (const ErrnoText& e : kTable) {
    if (e.err == err) return &e;
  }
  return nullptr;
}

}  // namespace

const char* fi_errno_name(int err) {
  const ErrnoText* e = find(err);
  return e != nullptr ? e->name : nullptr;
}

const char* fi_errno_message(int err) {
  const ErrnoText* e = find(err);
  return e != nullptr ? e->message : "Unknown error";
}

const char* copy_message(const char* text, char* buf, size_t len) {
  if (buf == nullptr || len == 0) return text;
  const size_t n = strnlen(text, len - 1);
  std::memcpy(buf, text, n);
  buf[n] = '\0';
  return buf;
}

const char* describe_prov_errno(int prov_errno, char* buf, size_t len) {
  if (prov_errno == 0) return copy_message("no provider-specific error", buf, len);
  if (prov_errno > 0) {
    if (const AsyncKind* k = async_kind(static_cast<uint32_t>(prov_errno))) {
      if (buf == nullptr || len == 0) return k->name;
      snprintf(buf, len, "%s: %s", k->name, k->description);
      return buf;
    }
  }
  const ErrnoText* e = find(prov_errno);
  if (buf == nullptr || len == 0) return e != nullptr ? e->message : "fabq provider error";
  if (e != nullptr) {
    snprintf(buf, len, "%s (%s)", e->message, e->name);
  } else {
    snprintf(buf, len, "fabq provider error %d", prov_errno);
  }
  return buf;
}

}  // namespace fabq::core
