// admission_aimd.cc: AIMD admission controller (seed 001 §3.2); contract in admission_aimd.h.
#include "packserve/sched/admission_aimd.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

namespace packserve::sched {
namespace {

std::string num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

Status AimdConfig::validate() const {
  if (n_min < 1) return invalid_argument("aimd.n_min: expected >= 1, got " + num(n_min));
  if (n_max < n_min) {
    return invalid_argument("aimd.n_max: expected >= aimd.n_min (" + num(n_min) + "), got " +
                            num(n_max));
  }
  if (alpha < 1) return invalid_argument("aimd.alpha: expected >= 1, got " + num(alpha));
  if (!(beta > 0.0 && beta < 1.0)) {
    return invalid_argument("aimd.beta: expected in (0, 1), got " + num(beta));
  }
  if (!(tau_low_ms >= 0.0)) {
    return invalid_argument("aimd.tau_low_ms: expected >= 0, got " + num(tau_low_ms));
  }
  if (!(tau_high_ms > tau_low_ms)) {
    return invalid_argument("aimd.tau_high_ms: expected > aimd.tau_low_ms (" + num(tau_low_ms) +
                            "), got " + num(tau_high_ms));
  }
  if (!(ewma_gamma > 0.0 && ewma_gamma <= 1.0)) {
    return invalid_argument("aimd.ewma_gamma: expected in (0, 1], got " + num(ewma_gamma));
  }
  if (p95_window_samples < 1) {
    return invalid_argument("aimd.p95_window_samples: expected >= 1, got " +
                            num(p95_window_samples));
  }
  if (!(control_interval_ms > 0.0)) {
    return invalid_argument("aimd.control_interval_ms: expected > 0, got " +
                            num(control_interval_ms));
  }
  if (burst_queue_depth < 1) {
    return invalid_argument("aimd.burst_queue_depth: expected >= 1, got " + num(burst_queue_depth));
  }
  if (!(burst_arrival_rate_per_s > 0.0)) {
    return invalid_argument("aimd.burst_arrival_rate_per_s: expected > 0, got " +
                            num(burst_arrival_rate_per_s));
  }
  if (!(arrival_rate_tau_ms > 0.0)) {
    return invalid_argument("aimd.arrival_rate_tau_ms: expected > 0, got " +
                            num(arrival_rate_tau_ms));
  }
  if (!(utilization_gate > 0.0 && utilization_gate <= 1.0)) {
    return invalid_argument("aimd.utilization_gate: expected in (0, 1], got " +
                            num(utilization_gate));
  }
  if (!(staging_timeout_ms > 0.0)) {
    return invalid_argument("aimd.staging_timeout_ms: expected > 0, got " +
                            num(staging_timeout_ms));
  }
  return ok_status();
}

std::string_view admission_reason_name(AdmissionReason reason) {
  switch (reason) {
    case AdmissionReason::kHold:
      return "hold";
    case AdmissionReason::kEmpty:
      return "empty";
    case AdmissionReason::kThreshold:
      return "threshold";
    case AdmissionReason::kBurstQueueDepth:
      return "burst_queue_depth";
    case AdmissionReason::kBurstArrivalRate:
      return "burst_arrival_rate";
    case AdmissionReason::kTimeout:
      return "timeout";
  }
  return "unknown";
}

AimdController::AimdController(const AimdConfig& config)
    : config_(config), threshold_(config.n_min) {
  const Status s = config.validate();
  PS_CHECK(s.ok()) << s.to_string();
}

void AimdController::observe_arrival(double now_ms) {
  // Decay the estimate to now, then add this arrival's 1/tau impulse.
  const double tau = config_.arrival_rate_tau_ms;
  if (now_ms > rate_time_ms_) {
    rate_per_ms_ *= std::exp(-(now_ms - rate_time_ms_) / tau);
    rate_time_ms_ = now_ms;
  }
  rate_per_ms_ += 1.0 / tau;
}

double AimdController::arrival_rate_per_s(double now_ms) const {
  const double dt = std::max(0.0, now_ms - rate_time_ms_);
  return rate_per_ms_ * std::exp(-dt / config_.arrival_rate_tau_ms) * 1000.0;
}

void AimdController::observe_ttft(double ttft_ms) {
  ttft_window_ms_.push_back(ttft_ms);
  while (static_cast<int64_t>(ttft_window_ms_.size()) > config_.p95_window_samples) {
    ttft_window_ms_.pop_front();
  }
  ++num_ttft_since_epoch_;
}

double AimdController::window_p95_ms() const {
  // Nearest rank: the ceil(0.95 * n)-th smallest sample.
  std::vector<double> v(ttft_window_ms_.begin(), ttft_window_ms_.end());
  const size_t n = v.size();
  size_t rank = static_cast<size_t>(std::ceil(0.95 * static_cast<double>(n)));
  rank = std::clamp<size_t>(rank, 1, n);
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(rank - 1), v.end());
  return v[rank - 1];
}

void AimdController::run_epoch(double now_ms, double utilization) {
  last_epoch_ms_ = now_ms;
  if (num_ttft_since_epoch_ == 0) return;  // no new telemetry: nothing to react to
  num_ttft_since_epoch_ = 0;
  const double p95 = window_p95_ms();
  if (!has_smoothed_) {
    smoothed_p95_ms_ = p95;
    has_smoothed_ = true;
  } else {
    smoothed_p95_ms_ = config_.ewma_gamma * p95 + (1.0 - config_.ewma_gamma) * smoothed_p95_ms_;
  }
  ++stats_.num_epochs;
  if (smoothed_p95_ms_ <= config_.tau_low_ms) {
    if (utilization < config_.utilization_gate) {
      threshold_ = std::min(config_.n_max, threshold_ + config_.alpha);
      ++stats_.num_increases;
    } else {
      ++stats_.num_increases_gated;
    }
  } else if (smoothed_p95_ms_ >= config_.tau_high_ms) {
    const double scaled = std::ceil(config_.beta * static_cast<double>(threshold_));
    threshold_ = std::max(config_.n_min, static_cast<int32_t>(scaled));
    ++stats_.num_decreases;
  } else {
    ++stats_.num_holds;
  }
}

AdmissionDecision AimdController::decide(const AdmissionInput& input) {
  if (!epoch_started_) {
    epoch_started_ = true;
    last_epoch_ms_ = input.now_ms;
  } else if (input.now_ms - last_epoch_ms_ >= config_.control_interval_ms) {
    run_epoch(input.now_ms, input.utilization);
  }

  AdmissionDecision d;
  if (input.num_staged <= 0) {
    d.reason = AdmissionReason::kEmpty;
    return d;
  }
  if (input.num_staged >= config_.burst_queue_depth) {
    d.reason = AdmissionReason::kBurstQueueDepth;
    ++stats_.num_trigger_burst_queue;
  } else if (arrival_rate_per_s(input.now_ms) >= config_.burst_arrival_rate_per_s) {
    d.reason = AdmissionReason::kBurstArrivalRate;
    ++stats_.num_trigger_burst_rate;
  } else if (input.num_staged >= threshold_) {
    d.reason = AdmissionReason::kThreshold;
    ++stats_.num_trigger_threshold;
  } else if (input.oldest_staged_wait_ms >= config_.staging_timeout_ms) {
    d.reason = AdmissionReason::kTimeout;
    ++stats_.num_trigger_timeout;
  } else {
    d.reason = AdmissionReason::kHold;
    return d;
  }
  d.num_release = input.num_staged;
  return d;
}

}  // namespace packserve::sched
