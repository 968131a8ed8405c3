// simulator.cc: the trace-replay event loop and its metrics; contract in simulator.h.
#include "packserve/sched/simulator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>
#include <vector>

namespace packserve::sched {
namespace {

// The cost model as a ModelExecutor: duration from the roofline, dummy sampled ids.
class CostModelExecutor final : public ModelExecutor {
 public:
  CostModelExecutor(const CostModel& model, int32_t vocab_size)
      : model_(model), vocab_(static_cast<uint64_t>(vocab_size)) {}

  Result<StepOutput> execute(const ScheduledBatch& batch) override {
    StepOutput out;
    out.step_duration_ms = model_.step_time_ms(step_work_of(batch));
    out.sampled_token_ids.reserve(batch.sequences.size());
    for (const ScheduledSequence& s : batch.sequences) {
      // A function of (request, position) only: deterministic whatever else is batched.
      uint64_t z = s.id * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(s.kv_len());
      z = (z ^ (z >> 31)) * 0xbf58476d1ce4e5b9ull;
      out.sampled_token_ids.push_back(static_cast<TokenId>((z ^ (z >> 29)) % vocab_));
    }
    busy_ms_ += out.step_duration_ms;
    return out;
  }
  double busy_ms() const { return busy_ms_; }

 private:
  const CostModel& model_;
  uint64_t vocab_;
  double busy_ms_ = 0;
};

struct LiveRequest {
  double arrival_ms = 0;
  double first_ms = 0;
  double last_ms = 0;
  int32_t expected_output_tokens = 0;
  int32_t num_tokens = 0;
  bool indices_ok = true;
};

}  // namespace

Status SimulatorConfig::validate() const {
  PS_RETURN_IF_ERROR(scheduler.validate());
  if (kv.num_pages != 0) PS_RETURN_IF_ERROR(kv.validate());
  if (!(slo_ttft_ms > 0)) {
    return invalid_argument("slo_ttft_ms: expected > 0, got " + std::to_string(slo_ttft_ms));
  }
  if (!(slo_tpot_ms > 0)) {
    return invalid_argument("slo_tpot_ms: expected > 0, got " + std::to_string(slo_tpot_ms));
  }
  return ok_status();
}

Result<SimulationReport> simulate(const trace::Trace& trace, const CostModel& cost_model,
                                  const SimulatorConfig& config) {
  PS_RETURN_IF_ERROR(config.validate());
  kv::KvCacheConfig kv_config = config.kv;
  if (kv_config.num_pages == 0) {
    const int64_t pages = cost_model.num_kv_pages(kv_config.page_size);
    if (pages < 1 || pages > std::numeric_limits<int32_t>::max()) {
      return invalid_argument("kv.num_pages: the cost model's kv_capacity_bytes gives " +
                              std::to_string(pages) + " pages, expected in [1, 2^31)");
    }
    kv_config.num_pages = static_cast<int32_t>(pages);
  }
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Scheduler> scheduler,
                      Scheduler::create(config.scheduler, kv_config));
  const auto vocab = static_cast<int32_t>(
      std::min<int64_t>(cost_model.config().vocab_size, std::numeric_limits<int32_t>::max()));
  CostModelExecutor executor(cost_model, vocab);

  SimulationReport report;
  report.requests = static_cast<int64_t>(trace.requests.size());
  std::unordered_map<RequestId, LiveRequest> live;
  std::vector<double> ttft, tpot, ttlt;
  ttft.reserve(trace.requests.size());
  ttlt.reserve(trace.requests.size());
  LatencyHistogram tbt;

  size_t next = 0;
  double now_ms = 0;
  int64_t idle_jumps_without_progress = 0;
  while (next < trace.requests.size() || scheduler->has_unfinished_requests()) {
    while (next < trace.requests.size() && trace.requests[next].arrival_ms <= now_ms) {
      const trace::TraceRequest& tr = trace.requests[next];
      Request r;
      r.id = static_cast<RequestId>(next);
      r.arrival_time_ms = tr.arrival_ms;
      trace::materialize_prompt(tr, vocab, r.prompt_token_ids);
      r.max_output_tokens = tr.output_tokens;
      live[r.id] = LiveRequest{tr.arrival_ms, 0, 0, tr.output_tokens, 0, true};
      PS_RETURN_IF_ERROR(scheduler->add_request(std::move(r)));
      ++next;
    }
    if (!scheduler->has_unfinished_requests()) {
      now_ms = trace.requests[next].arrival_ms;
      continue;
    }
    const int64_t nonempty_before = scheduler->stats().num_nonempty_steps;
    PS_ASSIGN_OR_RETURN(const StepEvents* events, scheduler->step(now_ms, executor));
    for (const TokenEvent& t : events->tokens) {
      LiveRequest& lr = live.at(t.id);
      if (t.output_index != lr.num_tokens) lr.indices_ok = false;
      if (lr.num_tokens == 0) {
        lr.first_ms = t.time_ms;
      } else {
        tbt.add(t.time_ms - lr.last_ms);
      }
      lr.last_ms = t.time_ms;
      ++lr.num_tokens;
      ++report.output_tokens;
    }
    for (const FinishedRequest& f : events->finished) {
      const LiveRequest lr = live.at(f.id);
      live.erase(f.id);
      if (f.reason == FinishReason::kKvExhausted) ++report.kv_exhausted;
      const bool consistent = lr.indices_ok && lr.num_tokens == f.num_output_tokens &&
                              lr.num_tokens == lr.expected_output_tokens;
      if (!consistent) ++report.token_count_mismatches;
      if (f.reason != FinishReason::kLength || lr.num_tokens == 0) continue;
      ++report.completed;
      const double t_first = lr.first_ms - lr.arrival_ms;
      ttft.push_back(t_first);
      ttlt.push_back(lr.last_ms - lr.arrival_ms);
      double t_pot = 0;
      if (lr.num_tokens >= 2) {
        t_pot = (lr.last_ms - lr.first_ms) / static_cast<double>(lr.num_tokens - 1);
        tpot.push_back(t_pot);
      }
      if (t_first <= config.slo_ttft_ms && t_pot <= config.slo_tpot_ms) {
        ++report.requests_meeting_slo;
      }
      report.makespan_s = std::max(report.makespan_s, lr.last_ms / 1000.0);
    }
    const bool progressed = scheduler->stats().num_nonempty_steps != nonempty_before;
    if (progressed) {
      now_ms = std::max(now_ms, events->end_time_ms);
      idle_jumps_without_progress = 0;
      continue;
    }
    // Nothing ran: jump to the next thing that can change the scheduler's mind.
    double wake = std::numeric_limits<double>::infinity();
    if (next < trace.requests.size()) wake = trace.requests[next].arrival_ms;
    if (const auto deadline = scheduler->staging_deadline_ms()) wake = std::min(wake, *deadline);
    if (!std::isfinite(wake) || ++idle_jumps_without_progress > 1000000) {
      return internal_error("simulator: no progress at now_ms=" + std::to_string(now_ms) +
                            " with " + std::to_string(scheduler->num_unfinished_requests()) +
                            " unfinished requests (running " +
                            std::to_string(scheduler->num_running()) + ", waiting " +
                            std::to_string(scheduler->num_waiting()) + ", staged " +
                            std::to_string(scheduler->num_staged()) + ")");
    }
    now_ms = std::max(now_ms, wake);
  }

  const SchedulerStats& st = scheduler->stats();
  const kv::KvCacheStats kv_stats = scheduler->kv_cache().stats();
  report.ttft_ms = summarize_exact(ttft);
  report.tpot_ms = summarize_exact(tpot);
  report.ttlt_ms = summarize_exact(ttlt);
  report.tbt_ms = tbt.summary();
  if (report.makespan_s > 0) {
    report.output_tokens_per_s = static_cast<double>(report.output_tokens) / report.makespan_s;
    report.requests_per_s = static_cast<double>(report.completed) / report.makespan_s;
    report.goodput_req_per_s = static_cast<double>(report.requests_meeting_slo) / report.makespan_s;
  }
  report.preemptions = st.num_preemptions;
  report.prefix_hit_rate = kv_stats.prefix_hit_rate();
  report.pages_total = kv_stats.pages_total;
  report.pages_leaked = kv_stats.pages_total - kv_stats.pages_free - kv_stats.pages_cached;
  report.num_steps = st.num_nonempty_steps;
  report.num_prefill_tokens = st.num_prefill_tokens;
  report.num_recomputed_tokens = st.num_recomputed_tokens;
  report.busy_ms = executor.busy_ms();
  report.aimd_releases = st.num_aimd_releases;
  report.prefix_waits = st.num_prefix_waits;
  report.aimd_final_threshold = scheduler->aimd() ? scheduler->aimd()->threshold() : 0;
  return report;
}

}  // namespace packserve::sched
