// parallel_copy.cc: ParallelCopier (parallel_copy.h): the bytes cut into one 4 KiB-aligned
// part per thread, the parts run as WorkerPool tasks.
#include "packserve/model/cuda/parallel_copy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace packserve::model::cuda {

ParallelCopier::ParallelCopier(int num_threads, size_t min_parallel_bytes)
    : min_parallel_bytes_(min_parallel_bytes), pool_(std::clamp(num_threads, 1, 16)) {}

void ParallelCopier::copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  const int parts = pool_.num_threads();
  if (parts == 1 || bytes < min_parallel_bytes_) {
    std::memcpy(dst, src, bytes);
    return;
  }
  constexpr size_t kAlign = 4096;
  const size_t parts_z = static_cast<size_t>(parts);
  const size_t per = ((bytes + parts_z - 1) / parts_z + kAlign - 1) / kAlign * kAlign;
  auto* d = static_cast<std::byte*>(dst);
  const auto* s = static_cast<const std::byte*>(src);
  pool_.run(parts, [&](int64_t part) {
    const size_t begin = std::min(bytes, per * static_cast<size_t>(part));
    const size_t end = std::min(bytes, begin + per);
    if (end > begin) std::memcpy(d + begin, s + begin, end - begin);
  });
}

}  // namespace packserve::model::cuda
