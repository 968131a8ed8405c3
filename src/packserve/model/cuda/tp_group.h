// tp_group.h: what tensor parallelism needs beyond one GPU (docs/forward-cuda.md "Tensor
// parallelism"): the ranks' NCCL communicators and the host threads that drive the ranks.
//
// NCCL is loaded at run time (dlopen of libnccl.so.2, found on the library path), the first
// time a group of more than one rank is created, so a binary runs without NCCL until tensor
// parallelism is asked for; without it, or in a build without nccl.h, create() is
// kUnimplemented naming what is missing. NVLink SHARP (multicast) is off unless the
// environment sets NCCL_NVLS_ENABLE itself.
// Thread-safety: a TpGroup is created on one thread; rank i's all_reduce_sum is called by one
// thread at a time (its driving thread); abort() from any thread. RankThreads: one caller.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "packserve/common/status.h"

namespace packserve::model::cuda {

class TpGroup {
 public:
  // One communicator per device (rank i on devices[i], every device distinct).
  // kUnimplemented without NCCL; kInternal naming NCCL's error.
  static Result<std::unique_ptr<TpGroup>> create(const std::vector<int>& devices);
  // Tests on one GPU: n ranks on the current device, without NCCL. all_reduce_sum meets the
  // ranks' host threads at a barrier; rank 0's stream waits for the others', adds their x into
  // its own in rank order and copies the sum back, and the others' streams wait for that. Eager
  // only: a capturing stream is kFailedPrecondition.
  static Result<std::unique_ptr<TpGroup>> create_on_one_device(int n);
  TpGroup(const TpGroup&) = delete;
  TpGroup& operator=(const TpGroup&) = delete;
  ~TpGroup();

  int size() const;
  bool on_one_device() const { return one_device_ != nullptr; }
  // In place: every rank's x[count] becomes the sum of all ranks' x (f32), enqueued on `stream`
  // (on rank's device; capturable in a CUDA graph). Every rank must call it, in the same order.
  Status all_reduce_sum(int rank, float* x, size_t count, cudaStream_t stream);
  // Ends the collectives in flight (a rank that failed to enqueue its part would leave the
  // others waiting forever); every later call fails.
  void abort();
  bool aborted() const { return aborted_; }

 private:
  struct OneDevice;  // create_on_one_device's state
  TpGroup() = default;
  Status one_device_all_reduce(int rank, float* x, size_t count, cudaStream_t stream);
  std::vector<void*> comms_;  // ncclComm_t
  std::unique_ptr<OneDevice> one_device_;
  std::atomic<bool> aborted_{false};
};

// n host threads, each running one task at a time, all at once (collectives need every rank
// to enqueue concurrently: NCCL may block a rank's first call until the others make theirs).
// start() hands task i to thread i and returns; the caller drives its own rank meanwhile and
// then collects the statuses with wait(), which it must call before the tasks' captures die.
class RankThreads {
 public:
  explicit RankThreads(int n);
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;
  ~RankThreads();
  int size() const { return static_cast<int>(slots_.size()); }
  // tasks.size() == size(); `tasks` must live until wait() returns.
  void start(const std::vector<std::function<Status()>>& tasks);
  std::vector<Status> wait();

 private:
  struct Slot {
    std::thread thread;
    std::mutex mu;
    std::condition_variable cv;
    const std::function<Status()>* task = nullptr;  // guarded by mu
    bool done = true, stop = false;                 // guarded by mu
    Status result;
  };
  std::vector<std::unique_ptr<Slot>> slots_;
};

}  // namespace packserve::model::cuda
