// parallel_copy.h: a memcpy split over a few persistent host threads, for the CUDA forward's
// logits (pinned staging -> the caller's std::vector): one thread copies ~7 GB/s on the GPU
// machines measured (docs/forward-cuda.md), so a 32-row step's 16 MB of f32 logits took
// 2.3 ms on one thread. Plain C++ (no CUDA), usable and tested without a device.
// Contract: copy(dst, src, bytes) returns once all bytes are copied (memcpy semantics; the
// ranges must not overlap); copies under min_parallel_bytes run on the caller's thread. The
// caller's thread copies a part itself.
// Thread-safety: one thread calls copy() at a time (the backend's driving thread); the
// workers (a WorkerPool) are owned and joined by the destructor.
#pragma once

#include <cstddef>

#include "packserve/common/worker_pool.h"

namespace packserve::model::cuda {

class ParallelCopier {
 public:
  // num_threads: total threads per copy, the caller's included (1 = plain memcpy);
  // clamped to [1, 16].
  explicit ParallelCopier(int num_threads, size_t min_parallel_bytes = size_t{1} << 20);

  void copy(void* dst, const void* src, size_t bytes);
  int num_threads() const { return pool_.num_threads(); }
  // Its threads, for the step's other host loops (the draws sample_rows leaves to the host).
  WorkerPool& workers() { return pool_; }

 private:
  size_t min_parallel_bytes_;
  WorkerPool pool_;
};

}  // namespace packserve::model::cuda
