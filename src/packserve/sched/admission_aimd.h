// admission_aimd.h: the admission controller in front of prefill (seed 001 §3.2, §3.4, §3.5).
//
// Owns: the batching threshold N_t and the signals that move it. New prompts wait in the
// scheduler's staging queue; each scheduler step asks decide() how many staged requests to
// release into prefill now. A release ("trigger") happens when
//   |Q| >= burst_queue_depth                         (burst override on queue depth q_t)
//   or arrival-rate estimate >= burst_arrival_rate_per_s   (burst override on lambda_t)
//   or |Q| >= N_t                                     (threshold, seed 001 §3.4 item 2)
//   or the oldest staged request waited >= staging_timeout_ms   (timeout, SLO safety)
// and then releases the whole queue (the packer splits it into prefill chunks).
//
// Control law (seed 001 eq. 1), applied once per control epoch of control_interval_ms and only
// when at least one new TTFT sample arrived since the previous epoch:
//   S_t = EWMA_gamma(p95 of the last p95_window_samples TTFT samples)
//   S_t <= tau_low_ms  -> N_{t+1} = min(N_max, N_t + alpha)   (additive increase), applied only
//                         when utilization < utilization_gate (utilization gating, §3.2)
//   S_t >= tau_high_ms -> N_{t+1} = max(N_min, ceil(beta * N_t))   (multiplicative decrease)
//   otherwise          -> N_{t+1} = N_t                              (hysteresis band)
// Cold start: N_0 = N_min, S undefined until the first TTFT sample (seed 001 §3.5).
//
// The seed gives the structure, not the numbers; the defaults below are ours and are
// documented in docs/simulator.md. Time is in milliseconds of the caller's clock (simulated
// or real), which must be non-decreasing across calls.
// Invariants: n_min <= threshold() <= n_max at all times.
// Thread-safety: none; owned and called by the scheduler's single thread.
#pragma once

#include <cstdint>
#include <deque>
#include <string_view>

#include "packserve/common/status.h"

namespace packserve::sched {

struct AimdConfig {
  // N_min: smallest batching threshold, in requests; also the cold-start value N_0. >= 1.
  int32_t n_min = 1;
  // N_max: largest batching threshold, in requests. >= n_min.
  int32_t n_max = 32;
  // alpha: additive increase of N_t per control epoch, in requests. >= 1.
  int32_t alpha = 1;
  // beta: multiplicative decrease factor, N_t <- ceil(beta * N_t). In (0, 1).
  double beta = 0.5;
  // tau_low: lower edge of the hysteresis band on smoothed p95 TTFT, ms. S_t <= tau_low -> AI.
  double tau_low_ms = 1000.0;
  // tau_high: upper edge of the band, ms; S_t >= tau_high -> MD. > tau_low_ms.
  double tau_high_ms = 2000.0;
  // gamma: EWMA weight of the newest p95 value, S_t = gamma * p95 + (1 - gamma) * S_{t-1}.
  // In (0, 1].
  double ewma_gamma = 0.3;
  // Number of most recent TTFT samples the p95 is computed over (nearest rank). >= 1.
  int32_t p95_window_samples = 64;
  // Length of one control epoch, ms: N_t changes at most once per epoch. > 0.
  double control_interval_ms = 100.0;
  // q_thresh: burst override when the staging queue holds at least this many requests. >= 1.
  int32_t burst_queue_depth = 64;
  // lambda_thresh: burst override when the arrival-rate estimate reaches this, requests/s. > 0.
  double burst_arrival_rate_per_s = 50.0;
  // Time constant of the arrival-rate estimate, ms: lambda = sum over arrivals of
  // exp(-(now - t_arrival) / tau) / tau (an exponentially weighted moving average of the
  // arrival count, well defined when several requests share one timestamp). > 0.
  double arrival_rate_tau_ms = 1000.0;
  // u*: additive increases are applied only when the reported utilization is below this
  // fraction (seed 001: "e.g. 85%"). In (0, 1].
  double utilization_gate = 0.85;
  // Timeout: release the queue once its oldest request has waited this long, ms. > 0.
  double staging_timeout_ms = 200.0;

  // Names the first bad field, its value and the expected range.
  Status validate() const;
};

// Why decide() released (or did not release) the staging queue. When several conditions hold,
// the first in this order is reported.
enum class AdmissionReason {
  kHold,              // nothing released: below N_t, no override, no timeout
  kEmpty,             // nothing staged
  kBurstQueueDepth,   // |Q| >= burst_queue_depth
  kBurstArrivalRate,  // arrival-rate estimate >= burst_arrival_rate_per_s
  kThreshold,         // |Q| >= N_t
  kTimeout,           // oldest staged request waited >= staging_timeout_ms
};
std::string_view admission_reason_name(AdmissionReason reason);

struct AdmissionInput {
  double now_ms = 0.0;                 // caller's clock, non-decreasing
  int64_t num_staged = 0;              // requests in the staging queue, q_t
  double oldest_staged_wait_ms = 0.0;  // now - arrival of the oldest staged request (0 if empty)
  double utilization = 0.0;            // device busy fraction in [0, 1] (e.g. last step's
                                       // batched tokens / token budget)
};

struct AdmissionDecision {
  int64_t num_release = 0;  // staged requests to move into prefill now (0 or num_staged)
  AdmissionReason reason = AdmissionReason::kEmpty;
};

// Counters for reports and tests.
struct AimdStats {
  int64_t num_epochs = 0;           // control epochs that evaluated S_t
  int64_t num_increases = 0;        // AI applied
  int64_t num_increases_gated = 0;  // AI wanted but blocked by utilization_gate
  int64_t num_decreases = 0;        // MD applied
  int64_t num_holds = 0;            // S_t inside the band
  int64_t num_trigger_threshold = 0;
  int64_t num_trigger_burst_queue = 0;
  int64_t num_trigger_burst_rate = 0;
  int64_t num_trigger_timeout = 0;
};

class AimdController {
 public:
  // `config` must be valid (config.validate().ok()); checked with PS_CHECK.
  explicit AimdController(const AimdConfig& config);

  // A request entered the staging queue at `now_ms`.
  void observe_arrival(double now_ms);
  // A request produced its first token; `ttft_ms` = first token time - arrival time.
  void observe_ttft(double ttft_ms);

  // One scheduler step: runs the control epoch when due (updating N_t from S_t and
  // input.utilization), then decides whether to release the staging queue.
  AdmissionDecision decide(const AdmissionInput& input);

  int32_t threshold() const { return threshold_; }  // N_t
  // S_t; 0 and has_smoothed_ttft() false before the first TTFT sample.
  double smoothed_p95_ttft_ms() const { return smoothed_p95_ms_; }
  bool has_smoothed_ttft() const { return has_smoothed_; }
  // Arrival-rate estimate at `now_ms`, requests/s.
  double arrival_rate_per_s(double now_ms) const;
  const AimdStats& stats() const { return stats_; }
  const AimdConfig& config() const { return config_; }

 private:
  void run_epoch(double now_ms, double utilization);
  double window_p95_ms() const;

  AimdConfig config_;
  int32_t threshold_;
  double smoothed_p95_ms_ = 0.0;
  bool has_smoothed_ = false;
  std::deque<double> ttft_window_ms_;
  int64_t num_ttft_since_epoch_ = 0;
  double last_epoch_ms_ = 0.0;
  bool epoch_started_ = false;
  // Arrival-rate estimate at time rate_time_ms_ (decays exponentially from there).
  double rate_per_ms_ = 0.0;
  double rate_time_ms_ = 0.0;
  AimdStats stats_;
};

}  // namespace packserve::sched
