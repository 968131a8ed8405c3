// worker_pool.h: a fixed set of host threads that runs one parallel loop at a time, for short
// CPU-bound loops on a driving thread (the engine's per-row sampling, the CUDA backend's
// logits copy).
//
// run(n, fn) calls fn(i) once for every i in [0, n), spread over the workers and the calling
// thread (tasks are claimed from a shared counter, so uneven tasks balance), and returns when
// every call has returned. With one thread, or one task, the caller runs everything itself.
// Contract: fn must not throw (an exception escaping a worker ends the process, as for any
// std::thread); tasks must be independent.
// Thread-safety: one thread calls run() at a time; the workers are joined by the destructor.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace packserve {

class WorkerPool {
 public:
  // num_threads: threads per run(), the caller's included, clamped to [1, 64].
  explicit WorkerPool(int num_threads);
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;
  ~WorkerPool();

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }
  void run(int64_t num_tasks, const std::function<void(int64_t)>& fn);

 private:
  void worker();
  void run_tasks();  // claims tasks of the current job until none is left

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  uint64_t generation_ = 0;  // bumped per job; guarded by mu_
  int busy_ = 0;             // workers still in the current job; guarded by mu_
  bool stop_ = false;        // guarded by mu_
  const std::function<void(int64_t)>* fn_ = nullptr;  // the current job, set under mu_
  int64_t num_tasks_ = 0;
  std::atomic<int64_t> next_task_{0};
};

// Threads for host loops: min(8, hardware threads), at least 1.
int default_worker_threads();

}  // namespace packserve
