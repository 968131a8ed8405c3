// worker_pool_test.cc: WorkerPool runs every task exactly once, on several threads, job after
// job; the caller's results are visible when run() returns.
#include "packserve/common/worker_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace packserve {
namespace {

TEST(WorkerPool, EveryTaskRunsExactlyOnce) {
  for (int threads : {1, 2, 3, 8}) {
    WorkerPool pool(threads);
    for (int64_t n : {0, 1, 2, 7, 100, 1000}) {
      std::vector<int> hits(static_cast<size_t>(n), 0);  // each slot written by one task only
      pool.run(n, [&](int64_t i) { hits[static_cast<size_t>(i)] += 1; });
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(hits[static_cast<size_t>(i)], 1) << "threads " << threads << " n " << n;
      }
    }
  }
}

TEST(WorkerPool, UsesSeveralThreads) {
  WorkerPool pool(4);
  EXPECT_EQ(pool.num_threads(), 4);
  std::mutex mu;
  std::set<std::thread::id> ids;
  std::atomic<int> arrived{0};
  // Every task waits until 4 have started, so the 4 must run on 4 different threads.
  pool.run(4, [&](int64_t) {
    arrived.fetch_add(1);
    while (arrived.load() < 4) std::this_thread::yield();
    std::lock_guard<std::mutex> lock(mu);
    ids.insert(std::this_thread::get_id());
  });
  EXPECT_EQ(ids.size(), 4u);
  EXPECT_TRUE(ids.count(std::this_thread::get_id())) << "the caller takes part";
}

TEST(WorkerPool, ManyJobsInARowAndClamping) {
  WorkerPool pool(3);
  int64_t total = 0;
  for (int job = 0; job < 2000; ++job) {
    std::vector<int64_t> parts(5, 0);
    pool.run(5, [&](int64_t i) { parts[static_cast<size_t>(i)] = i + job; });
    for (int64_t p : parts) total += p;
  }
  EXPECT_EQ(total, 2000 * 10 + 5 * (1999 * 2000 / 2));
  EXPECT_EQ(WorkerPool(0).num_threads(), 1);
  EXPECT_EQ(WorkerPool(1000).num_threads(), 64);
  EXPECT_GE(default_worker_threads(), 1);
  EXPECT_LE(default_worker_threads(), 8);
}

}  // namespace
}  // namespace packserve
