// admission_aimd_test.cc: the AIMD controller of seed 001 §3.2 against sequences worked out by
// hand from its control law (eq. 1), the burst overrides, the timeout and utilization gating.
#include "packserve/sched/admission_aimd.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace packserve::sched {
namespace {

// Small numbers so the sequences can be followed by hand.
AimdConfig test_config() {
  AimdConfig c;
  c.n_min = 2;
  c.n_max = 32;
  c.alpha = 2;
  c.beta = 0.5;
  c.tau_low_ms = 1000;
  c.tau_high_ms = 2000;
  c.ewma_gamma = 0.5;
  c.p95_window_samples = 10;
  c.control_interval_ms = 100;
  c.burst_queue_depth = 64;
  c.burst_arrival_rate_per_s = 50;
  c.arrival_rate_tau_ms = 1000;
  c.utilization_gate = 0.85;
  c.staging_timeout_ms = 200;
  return c;
}

// Drives one control epoch: 10 TTFT samples of `ttft_ms` (the whole p95 window), then a
// decide() 100 ms later; returns N_t after the epoch.
struct Driver {
  AimdController ctl{test_config()};
  double now_ms = 0;
  Driver() { (void)ctl.decide(AdmissionInput{0, 0, 0, 0}); }  // starts the epoch clock
  int32_t epoch(double ttft_ms, double utilization = 0.5) {
    for (int i = 0; i < 10; ++i) ctl.observe_ttft(ttft_ms);
    now_ms += 100;
    (void)ctl.decide(AdmissionInput{now_ms, 0, 0, utilization});
    return ctl.threshold();
  }
};

TEST(AimdController, ColdStartAtNMin) {
  AimdController ctl(test_config());
  EXPECT_EQ(ctl.threshold(), 2);
  EXPECT_FALSE(ctl.has_smoothed_ttft());
  // No TTFT telemetry: epochs pass, N_t does not move.
  for (int t = 0; t <= 1000; t += 100) (void)ctl.decide(AdmissionInput{double(t), 1, 0, 0});
  EXPECT_EQ(ctl.threshold(), 2);
  EXPECT_EQ(ctl.stats().num_epochs, 0);
}

TEST(AimdController, BurstDecreasesMultiplicativelyThenRecoversAdditively) {
  Driver d;
  // Phase 1, TTFT 100 ms: S = 100 <= tau_low every epoch -> +alpha: 2 -> 4 -> ... -> 16.
  std::vector<int32_t> n;
  for (int i = 0; i < 7; ++i) n.push_back(d.epoch(100));
  EXPECT_EQ(n, (std::vector<int32_t>{4, 6, 8, 10, 12, 14, 16}));
  EXPECT_DOUBLE_EQ(d.ctl.smoothed_p95_ttft_ms(), 100);

  // Phase 2, a burst: TTFT 3000 ms. S = 0.5 * 3000 + 0.5 * S:
  //   1550 (band: hold 16), 2275 (MD: ceil(0.5 * 16) = 8), 2637.5 (4), 2818.75 (2),
  //   2909.375 (max(N_min, 1) = 2).
  n.clear();
  const std::vector<double> s_expected = {1550, 2275, 2637.5, 2818.75, 2909.375};
  for (int i = 0; i < 5; ++i) {
    n.push_back(d.epoch(3000));
    EXPECT_DOUBLE_EQ(d.ctl.smoothed_p95_ttft_ms(), s_expected[static_cast<size_t>(i)]);
  }
  EXPECT_EQ(n, (std::vector<int32_t>{16, 8, 4, 2, 2}));

  // During the burst the overrides fire below N_t: a deep queue, then a high arrival rate.
  const AdmissionDecision deep = d.ctl.decide(AdmissionInput{d.now_ms, 64, 0, 0.5});
  EXPECT_EQ(deep.reason, AdmissionReason::kBurstQueueDepth);
  EXPECT_EQ(deep.num_release, 64);
  for (int i = 0; i < 60; ++i) d.ctl.observe_arrival(d.now_ms);  // 60 at once: 60 req/s
  EXPECT_NEAR(d.ctl.arrival_rate_per_s(d.now_ms), 60.0, 1e-9);
  const AdmissionDecision rate = d.ctl.decide(AdmissionInput{d.now_ms, 1, 0, 0.5});
  EXPECT_EQ(rate.reason, AdmissionReason::kBurstArrivalRate);
  EXPECT_EQ(rate.num_release, 1);

  // Phase 3, load gone: TTFT 100 ms. S: 1504.69 (hold), 802.34 (AI), 451.17, 275.59, ...
  n.clear();
  for (int i = 0; i < 5; ++i) n.push_back(d.epoch(100));
  EXPECT_EQ(n, (std::vector<int32_t>{2, 4, 6, 8, 10}));
  EXPECT_EQ(d.ctl.stats().num_decreases, 4);
}

TEST(AimdController, SteadyLoadStaysInTheBand) {
  Driver d;
  for (int i = 0; i < 3; ++i) d.epoch(100);  // N = 8
  ASSERT_EQ(d.ctl.threshold(), 8);
  // TTFT 1500 ms, inside [1000, 2000]: S = 800 (AI -> 10), then 1150, 1325, ... -> 1500,
  // all inside the band, so N stays 10 for good.
  EXPECT_EQ(d.epoch(1500), 10);
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(d.epoch(1500), 10);
    EXPECT_GT(d.ctl.smoothed_p95_ttft_ms(), 1000);
    EXPECT_LT(d.ctl.smoothed_p95_ttft_ms(), 2000);
  }
  EXPECT_EQ(d.ctl.stats().num_holds, 50);
}

TEST(AimdController, UtilizationGatesIncreases) {
  Driver d;
  EXPECT_EQ(d.epoch(100, /*utilization=*/0.9), 2);
  EXPECT_EQ(d.epoch(100, 0.9), 2);
  EXPECT_EQ(d.ctl.stats().num_increases_gated, 2);
  EXPECT_EQ(d.epoch(100, 0.5), 4);
}

TEST(AimdController, NeverAboveNMax) {
  Driver d;
  for (int i = 0; i < 40; ++i) d.epoch(10);
  EXPECT_EQ(d.ctl.threshold(), 32);
}

TEST(AimdController, ThresholdTimeoutAndHold) {
  AimdController ctl(test_config());  // N = 2
  EXPECT_EQ(ctl.decide(AdmissionInput{0, 0, 0, 0}).reason, AdmissionReason::kEmpty);
  const AdmissionDecision hold = ctl.decide(AdmissionInput{10, 1, 10, 0});
  EXPECT_EQ(hold.reason, AdmissionReason::kHold);
  EXPECT_EQ(hold.num_release, 0);
  const AdmissionDecision timeout = ctl.decide(AdmissionInput{250, 1, 200, 0});
  EXPECT_EQ(timeout.reason, AdmissionReason::kTimeout);
  EXPECT_EQ(timeout.num_release, 1);
  const AdmissionDecision threshold = ctl.decide(AdmissionInput{260, 3, 5, 0});
  EXPECT_EQ(threshold.reason, AdmissionReason::kThreshold);
  EXPECT_EQ(threshold.num_release, 3);
}

TEST(AimdController, SteadyArrivalsDoNotTriggerTheRateOverride) {
  AimdController ctl(test_config());
  // 3 req/s for 10 s: the estimate settles near 3 req/s, far below 50.
  for (int i = 0; i < 30; ++i) ctl.observe_arrival(i * 333.0);
  EXPECT_LT(ctl.arrival_rate_per_s(10000), 6.0);
  EXPECT_GT(ctl.arrival_rate_per_s(10000), 1.0);
}

TEST(AimdConfig, ValidateNamesTheField) {
  AimdConfig c;
  c.beta = 1.0;
  EXPECT_NE(c.validate().message().find("aimd.beta"), std::string::npos);
  c = AimdConfig();
  c.n_max = 0;
  EXPECT_NE(c.validate().message().find("aimd.n_max"), std::string::npos);
  c = AimdConfig();
  c.tau_high_ms = c.tau_low_ms;
  EXPECT_NE(c.validate().message().find("aimd.tau_high_ms"), std::string::npos);
  EXPECT_TRUE(AimdConfig().validate().ok());
}

}  // namespace
}  // namespace packserve::sched
