// tp_group_test.cc [label cpu]: RankThreads, the host threads that drive tensor-parallel ranks:
// their tasks run at once (a task that waits for all the others would never return otherwise),
// each returns its own status, and the threads are reused step after step.
#include "packserve/model/cuda/tp_group.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace packserve::model::cuda {
namespace {

TEST(RankThreads, TasksRunAtOnceAndReturnTheirOwnStatus) {
  constexpr int kThreads = 3;
  RankThreads threads(kThreads);
  EXPECT_EQ(threads.size(), kThreads);
  for (int round = 0; round < 20; ++round) {
    std::atomic<int> arrived{0};
    // Every task, the caller's included, waits until all kThreads + 1 have arrived.
    auto barrier = [&]() -> Status {
      arrived.fetch_add(1);
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (arrived.load() < kThreads + 1) {
        if (std::chrono::steady_clock::now() > deadline) return internal_error("not concurrent");
        std::this_thread::yield();
      }
      return ok_status();
    };
    std::vector<std::function<Status()>> tasks;
    for (int i = 0; i < kThreads; ++i) {
      tasks.emplace_back([&, i]() -> Status {
        PS_RETURN_IF_ERROR(barrier());
        if (i == 1) return invalid_argument("task 1 of round " + std::to_string(round));
        return ok_status();
      });
    }
    threads.start(tasks);
    ASSERT_TRUE(barrier().ok());  // the caller's own rank
    const std::vector<Status> results = threads.wait();
    ASSERT_EQ(results.size(), 3u);
    EXPECT_TRUE(results[0].ok()) << results[0].to_string();
    EXPECT_EQ(results[1].message(), "task 1 of round " + std::to_string(round));
    EXPECT_TRUE(results[2].ok()) << results[2].to_string();
  }
}

TEST(RankThreads, NoThreadsIsANoOp) {
  RankThreads threads(0);
  std::vector<std::function<Status()>> none;
  threads.start(none);
  EXPECT_TRUE(threads.wait().empty());
}

}  // namespace
}  // namespace packserve::model::cuda
