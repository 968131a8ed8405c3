// parallel_copy.h: a memcpy split over a few persistent host threads, for the CUDA forward's
// logits (pinned staging -> the caller's std::vector): one thread copies ~7 GB/s on the GPU
// machines measured (docs/forward-cuda.md), so a 32-row step's 16 MB of f32 logits took
// 2.3 ms on one thread. Plain C++ (no CUDA), usable and tested without a device.
// Contract: copy(dst, src, bytes) returns once all bytes are copied (memcpy semantics; the
// ranges must not overlap); copies under min_parallel_bytes run on the caller's thread. The
// caller's thread copies the first part itself.
// Thread-safety: one thread calls copy() at a time (the backend's driving thread); the
// workers are owned and joined by the destructor.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace packserve::model::cuda {

class ParallelCopier {
 public:
  // num_threads: total threads per copy, the caller's included (1 = plain memcpy);
  // clamped to [1, 16].
  explicit ParallelCopier(int num_threads, size_t min_parallel_bytes = size_t{1} << 20);
  ParallelCopier(const ParallelCopier&) = delete;
  ParallelCopier& operator=(const ParallelCopier&) = delete;
  ~ParallelCopier();

  void copy(void* dst, const void* src, size_t bytes);
  int num_threads() const { return num_parts_; }

 private:
  void worker(int index);
  // Part `part` of `parts` of the current job: [begin, end) bytes, 4 KiB aligned.
  void copy_part(int part, int parts);

  const int num_parts_;  // threads per copy, the caller's included; fixed before workers start
  size_t min_parallel_bytes_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  uint64_t generation_ = 0;  // bumped per parallel job
  int pending_ = 0;          // workers still copying the current job
  bool stop_ = false;
  std::byte* dst_ = nullptr;
  const std::byte* src_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace packserve::model::cuda
