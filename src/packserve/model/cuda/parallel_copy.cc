// parallel_copy.cc: ParallelCopier (parallel_copy.h). One job at a time: the caller publishes
// (dst, src, bytes) under the mutex, bumps the generation and wakes the workers; worker i
// copies part i + 1, the caller part 0, and the caller waits until pending_ reaches 0.
#include "packserve/model/cuda/parallel_copy.h"

#include <algorithm>
#include <cstring>

namespace packserve::model::cuda {

ParallelCopier::ParallelCopier(int num_threads, size_t min_parallel_bytes)
    : num_parts_(std::clamp(num_threads, 1, 16)), min_parallel_bytes_(min_parallel_bytes) {
  workers_.reserve(static_cast<size_t>(num_parts_ - 1));
  for (int i = 0; i + 1 < num_parts_; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ParallelCopier::~ParallelCopier() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ParallelCopier::copy_part(int part, int parts) {
  constexpr size_t kAlign = 4096;
  const size_t parts_z = static_cast<size_t>(parts);
  const size_t per = ((bytes_ + parts_z - 1) / parts_z + kAlign - 1) / kAlign * kAlign;
  const size_t begin = std::min(bytes_, per * static_cast<size_t>(part));
  const size_t end = std::min(bytes_, begin + per);
  if (end > begin) std::memcpy(dst_ + begin, src_ + begin, end - begin);
}

void ParallelCopier::copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  if (workers_.empty() || bytes < min_parallel_bytes_) {
    std::memcpy(dst, src, bytes);
    return;
  }
  const int parts = num_parts_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    dst_ = static_cast<std::byte*>(dst);
    src_ = static_cast<const std::byte*>(src);
    bytes_ = bytes;
    pending_ = parts - 1;
    ++generation_;
  }
  start_cv_.notify_all();
  copy_part(0, parts);
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [this] { return pending_ == 0; });
}

void ParallelCopier::worker(int index) {
  uint64_t seen = 0;
  const int parts = num_parts_;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    copy_part(index + 1, parts);
    {
      std::lock_guard<std::mutex> lock(mu_);
      --pending_;
    }
    done_cv_.notify_one();
  }
}

}  // namespace packserve::model::cuda
