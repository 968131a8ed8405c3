// step_profile.cuh: the timers behind CudaForwardBackend::last_step_profile() (forward_cuda.h):
// a host stopwatch for the phases of forward() and, with CudaForwardOptions::profile_ops, CUDA
// events recorded on the step's stream after every op so that the GPU time between two
// consecutive events is charged to the op that ends at the second one.
// What the event times mean: on a busy stream the span between two events is the op's kernel
// time; when the host launches slower than the GPU runs, the span also holds the launch gap
// (so sum(op_gpu_ms) == the step's GPU span, gaps included). Eager steps only: a captured
// graph is timed as a whole.
// Thread-safety: none; one backend, one thread.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <vector>

#include "packserve/model/cuda/device_util.cuh"
#include "packserve/model/cuda/forward_cuda.h"

namespace packserve::model::cuda {

// Milliseconds since the previous lap().
class Stopwatch {
 public:
  Stopwatch() : last_(std::chrono::steady_clock::now()) {}
  double lap() {
    const auto now = std::chrono::steady_clock::now();
    const double ms = std::chrono::duration<double, std::milli>(now - last_).count();
    last_ = now;
    return ms;
  }

 private:
  std::chrono::steady_clock::time_point last_;
};

// A pool of events recorded in order; ops[i] names what ran between event i - 1 and event i.
class OpTimeline {
 public:
  OpTimeline() = default;
  OpTimeline(const OpTimeline&) = delete;
  OpTimeline& operator=(const OpTimeline&) = delete;
  ~OpTimeline() {
    for (cudaEvent_t e : events_) (void)cudaEventDestroy(e);
  }
  void begin() { used_ = 0; }
  // Records an event after `op` on `stream` (the first call marks the start; its op is ignored).
  Status mark(StepOp op, cudaStream_t stream) {
    if (used_ == events_.size()) {
      cudaEvent_t e = nullptr;
      PS_MODEL_CUDA_RETURN_IF_ERROR(cudaEventCreate(&e));
      events_.push_back(e);
      ops_.push_back(op);
    }
    ops_[used_] = op;
    PS_MODEL_CUDA_RETURN_IF_ERROR(cudaEventRecord(events_[used_], stream));
    ++used_;
    return ok_status();
  }
  // After the stream was synchronised: adds each span to its op's total.
  Status accumulate(double (&op_ms)[kNumStepOps]) const {
    for (size_t i = 1; i < used_; ++i) {
      float ms = 0.0f;
      PS_MODEL_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, events_[i - 1], events_[i]));
      op_ms[static_cast<size_t>(ops_[i])] += ms;
    }
    return ok_status();
  }

 private:
  std::vector<cudaEvent_t> events_;
  std::vector<StepOp> ops_;
  size_t used_ = 0;
};

}  // namespace packserve::model::cuda
