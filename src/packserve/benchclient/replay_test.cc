// replay_test.cc: replay over a fake sender: every request is sent once, not before its
// arrival time, records come back in request order, max_concurrency is never exceeded, the
// running batch falls back to the in-flight count when the sender has none; Poisson arrivals
// are deterministic per seed with the asked mean rate; the progress line's text.
#include "packserve/benchclient/replay.h"

#include <gtest/gtest.h>

#include <mutex>
#include <thread>

#include "packserve/benchclient/progress.h"

namespace packserve::benchclient {
namespace {

class FakeSender final : public RequestSender {
 public:
  void send(const ReplayRequest& request, std::chrono::steady_clock::time_point origin,
            RequestRecord& record) override {
    auto ms = [&] {
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - origin)
          .count();
    };
    {
      std::lock_guard lock(mutex_);
      ++in_flight_;
      max_in_flight_ = std::max(max_in_flight_, in_flight_);
      ++sends_;
    }
    record.send_ms = ms();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    record.chunk_ms = {ms()};
    record.output_tokens = 1;
    record.success = request.max_tokens != 99;  // 99 marks a request that fails
    if (!record.success) record.error = "fake failure";
    record.end_ms = ms();
    std::lock_guard lock(mutex_);
    --in_flight_;
  }
  std::optional<double> running_batch_size() override { return std::nullopt; }
  std::string running_batch_source() const override { return "fake"; }

  std::mutex mutex_;
  int in_flight_ = 0, max_in_flight_ = 0, sends_ = 0;
};

std::vector<ReplayRequest> make_requests(int n, double gap_ms) {
  std::vector<ReplayRequest> rs;
  for (int i = 0; i < n; ++i) {
    rs.push_back({i, i * gap_ms, "p", 3, i == 2 ? 99 : 4});
  }
  return rs;
}

TEST(Replay, SendsEachOnceAfterItsArrivalInOrder) {
  FakeSender sender;
  const std::vector<ReplayRequest> rs = make_requests(12, 2.0);
  int progress_calls = 0;
  ReplayOptions options;
  options.on_progress = [&](const ReplayProgress&) { ++progress_calls; };
  const ReplayResult r = replay(rs, sender, options);
  EXPECT_EQ(sender.sends_, 12);
  ASSERT_EQ(r.records.size(), 12u);
  for (size_t i = 0; i < rs.size(); ++i) {
    EXPECT_EQ(r.records[i].index, static_cast<int64_t>(i));
    EXPECT_GE(r.records[i].send_ms, rs[i].arrival_ms);
    EXPECT_EQ(r.records[i].scheduled_ms, rs[i].arrival_ms);
    EXPECT_EQ(r.records[i].prompt_tokens, 3);
  }
  EXPECT_FALSE(r.records[2].success);
  EXPECT_EQ(r.records[2].error, "fake failure");
  EXPECT_EQ(r.running_batch_source, "client in-flight count");
  EXPECT_FALSE(r.running_batch.empty());
  EXPECT_GE(progress_calls, 1);
}

TEST(Replay, MaxConcurrencyHolds) {
  FakeSender sender;
  ReplayOptions options;
  options.max_concurrency = 3;
  const ReplayResult r = replay(make_requests(20, 0.0), sender, options);
  EXPECT_EQ(sender.sends_, 20);
  EXPECT_LE(sender.max_in_flight_, 3);
  EXPECT_LE(max_concurrency(r.records), 3);
}

TEST(PoissonArrivals, DeterministicWithTheAskedRate) {
  const std::vector<double> a = poisson_arrivals_ms(20000, 4.0, 7);
  EXPECT_EQ(a, poisson_arrivals_ms(20000, 4.0, 7));
  EXPECT_NE(a, poisson_arrivals_ms(20000, 4.0, 8));
  for (size_t i = 1; i < a.size(); ++i) ASSERT_GE(a[i], a[i - 1]);
  // Mean gap 250 ms; the standard error of the mean of 20000 exponential gaps is 250/sqrt(20000)
  // = 1.8 ms, so 5 standard errors is 9 ms.
  EXPECT_NEAR(a.back() / 20000.0, 250.0, 9.0);
}

TEST(Progress, LineText) {
  ReplayProgress p{300, 45, 2, 12, 3100, 12.34};
  EXPECT_EQ(progress_line(p, 10),
            "[#.........] 45/300 done, 2 failed, 12 in flight, 3100 tok, 12.3 s");
}

}  // namespace
}  // namespace packserve::benchclient
