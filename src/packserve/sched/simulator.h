// simulator.h: the discrete-event trace-replay simulator (issue 3 "Simulator and trace replay";
// DESIGN.md "Scheduler", "Metrics").
//
// Owns: one replay. The scheduler and its KV-cache manager run for real (scheduler.h); the model
// is the cost model (cost_model.h) behind the ModelExecutor interface: a step lasts
// CostModel::step_time_ms(batch) and samples deterministic dummy token ids (never a stop token:
// a request ends after exactly the trace's output_tokens tokens, FinishReason::kLength).
//
// Event loop on a simulated clock now_ms (starting at 0):
//   1. every trace request with arrival_ms <= now_ms is materialized (trace::materialize_prompt)
//      and added to the scheduler; its prompt lives only while the request does;
//   2. if the scheduler has work, step(now_ms) and now_ms = the step's end time; requests that
//      arrive during a step join at its end (an engine does not change a running batch);
//   3. if the step was empty (nothing runnable: e.g. AIMD holding the staging queue), now_ms
//      jumps to the next arrival or the staging deadline, whichever comes first.
// Metrics, exactly as DESIGN.md "Metrics" (ms): TTFT = first token time - arrival; TPOT =
// (last token time - first token time) / (output tokens - 1), over requests with >= 2 tokens;
// TBT = every gap between a request's consecutive token times; TTLT = last token time -
// arrival. Goodput = requests with TTFT <= slo_ttft_ms and TPOT <= slo_tpot_ms (a one-token
// request meets the TPOT SLO) / makespan. Throughputs divide by the makespan = time of the
// last token (the replay starts at 0). pages_leaked = pages_total - pages_free - pages_cached
// once every request has ended.
// Determinism: the same trace, cost model and config give the same report.
// Thread-safety: simulate() is reentrant; nothing is shared.
#pragma once

#include <cstdint>
#include <string>

#include "packserve/common/status.h"
#include "packserve/kv/kv_cache.h"
#include "packserve/sched/cost_model.h"
#include "packserve/sched/scheduler.h"
#include "packserve/sched/sim_metrics.h"
#include "packserve/trace/request_trace.h"

namespace packserve::sched {

struct SimulatorConfig {
  SchedulerConfig scheduler;
  // kv.num_pages = 0 means "what fits in the cost model's kv_capacity_bytes"
  // (CostModel::num_kv_pages(kv.page_size)).
  kv::KvCacheConfig kv{0, 16, true};
  double slo_ttft_ms = 2000.0;  // goodput SLO on TTFT, ms; > 0
  double slo_tpot_ms = 100.0;   // goodput SLO on TPOT, ms; > 0
  Status validate() const;
};

struct SimulationReport {
  int64_t requests = 0;   // in the trace window
  int64_t completed = 0;  // finished with kLength after all their tokens
  int64_t kv_exhausted = 0;
  LatencySummary ttft_ms, tpot_ms, tbt_ms, ttlt_ms;
  double makespan_s = 0;
  int64_t output_tokens = 0;  // token events
  double output_tokens_per_s = 0;
  double requests_per_s = 0;
  double goodput_req_per_s = 0;
  int64_t requests_meeting_slo = 0;
  int64_t preemptions = 0;
  double prefix_hit_rate = 0;  // KV manager: hit tokens / looked-up tokens
  int64_t pages_total = 0;
  int64_t pages_leaked = 0;
  // Requests whose token events were not output_index 0, 1, 2, ... or whose count differs from
  // the trace's output_tokens (must be 0).
  int64_t token_count_mismatches = 0;
  int64_t num_steps = 0;              // non-empty steps
  int64_t num_prefill_tokens = 0;     // scheduled, incl. recompute
  int64_t num_recomputed_tokens = 0;  // after preemptions
  double busy_ms = 0;                 // sum of step durations
  int64_t aimd_releases = 0;
  int64_t prefix_waits = 0;  // SchedulerStats::num_prefix_waits
  int32_t aimd_final_threshold = 0;
};

// Replays `trace` (requests sorted by arrival, as the loaders produce). Errors: invalid config
// (kInvalidArgument), a scheduler error (returned unchanged), a replay that stops making
// progress (kInternal, our bug).
Result<SimulationReport> simulate(const trace::Trace& trace, const CostModel& cost_model,
                                  const SimulatorConfig& config);

}  // namespace packserve::sched
