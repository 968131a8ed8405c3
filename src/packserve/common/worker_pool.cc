// worker_pool.cc: WorkerPool (worker_pool.h). One job at a time: the caller publishes it under
// the mutex and bumps the generation; every worker wakes, claims tasks from next_task_ until
// they run out and reports done; the caller claims tasks too, then waits for busy_ == 0.
#include "packserve/common/worker_pool.h"

#include <algorithm>

namespace packserve {

WorkerPool::WorkerPool(int num_threads) {
  const int n = std::clamp(num_threads, 1, 64);
  workers_.reserve(static_cast<size_t>(n - 1));
  for (int i = 0; i + 1 < n; ++i) workers_.emplace_back([this] { worker(); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void WorkerPool::run_tasks() {
  for (;;) {
    const int64_t i = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (i >= num_tasks_) return;
    (*fn_)(i);
  }
}

void WorkerPool::run(int64_t num_tasks, const std::function<void(int64_t)>& fn) {
  if (num_tasks <= 0) return;
  if (workers_.empty() || num_tasks == 1) {
    for (int64_t i = 0; i < num_tasks; ++i) fn(i);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    num_tasks_ = num_tasks;
    next_task_.store(0, std::memory_order_relaxed);
    busy_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  start_cv_.notify_all();
  run_tasks();
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [this] { return busy_ == 0; });
}

void WorkerPool::worker() {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    run_tasks();
    bool last = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      last = --busy_ == 0;
    }
    if (last) done_cv_.notify_one();
  }
}

int default_worker_threads() {
  const unsigned hw = std::thread::hardware_concurrency();
  return std::clamp(static_cast<int>(hw), 1, 8);
}

}  // namespace packserve
