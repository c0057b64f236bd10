// fabq core: handing err_data to a readerr caller, for EQs and CQs alike.
//
// fi_eq(3)/fi_cq(3): when the caller passes err_data with err_data_size > 0, copy up to that
// many bytes there and set err_data_size to the number copied; otherwise (err_data_size 0, or
// a queue opened with an API below 1.5) point err_data at a buffer the queue owns, valid until
// the next read call on it. Called under the queue's read lock, which guards `queue_buf`.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>

namespace fabq::core {

inline void deliver_err_data(const void* data, size_t size, bool provider_owned,
                             unsigned char* queue_buf, void** err_data, size_t* err_data_size) {
  if (!provider_owned && *err_data != nullptr && *err_data_size > 0) {
    const size_t n = std::min(size, *err_data_size);
    if (n > 0) std::memcpy(*err_data, data, n);
    *err_data_size = n;
    return;
  }
  if (size > 0) std::memcpy(queue_buf, data, size);
  *err_data = size > 0 ? queue_buf : nullptr;
  *err_data_size = size;
}

}  // namespace fabq::core
