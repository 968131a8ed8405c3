// simulate_cmd.cc: `packserve simulate --trace FILE ...` (issue 3 "Simulator and trace replay"):
// loads a trace window, replays it through the real scheduler + KV manager with the cost model
// as the model (sched/simulator.h), prints a readable report or, with --json, one JSON object.
// Every scheduler / KV / AIMD flag maps one-to-one to a config field of the same name
// (dashes for underscores; AIMD fields carry an "aimd-" prefix). --kv-cache-dtype takes the
// engine's names (model/factory/backend_factory.h) and sets the cost model's KV element size
// (model/kv_cache_dtype.h); auto keeps the cost model's own. Exit codes (commands.h):
// 0 success, 1 the replay failed a check (pages leaked, token counts inconsistent), 2 bad input.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "packserve/cli/commands.h"
#include "packserve/common/shared_dir.h"
#include "packserve/model/factory/backend_factory.h"
#include "packserve/model/kv_cache_dtype.h"
#include "packserve/sched/simulator.h"
#include "packserve/trace/request_trace.h"

namespace packserve::cli {
namespace {

using nlohmann::json;
using sched::SimulationReport;

struct SimulateArgs {
  std::string trace_path;
  std::string format;  // empty: detect
  std::string policy = "fcfs";
  std::string packing = "none";
  std::string cost_model_path;          // empty: data/cost_models/h100_llama31_8b.json
  std::string kv_cache_dtype = "auto";  // auto: the cost model's kv_dtype_bytes
  trace::TraceWindow window;
  sched::SimulatorConfig sim;
  bool json_output = false;
};

int fail_input(const Status& status) {
  std::cerr << "error: " << status.to_string() << "\n";
  return 2;
}

json summary_json(const sched::LatencySummary& s) {
  return {{"p50", s.p50}, {"p90", s.p90}, {"p99", s.p99}, {"mean", s.mean}, {"count", s.count}};
}

json report_json(const SimulationReport& r, const SimulateArgs& a, const trace::Trace& t,
                 const sched::CostModel& cm, model::KvCacheDtype kv_cache_dtype,
                 const sched::SimulatorConfig& sim) {
  return {{"trace", t.source},
          {"format", std::string(trace::trace_format_name(t.format))},
          {"policy", a.policy},
          {"packing", a.packing},
          {"cost_model", cm.config().name},
          {"kv_cache_dtype", std::string(model::kv_cache_dtype_name(kv_cache_dtype))},
          {"kv_dtype_bytes", cm.config().kv_dtype_bytes},
          {"time_scale", a.window.time_scale},
          {"start_s", a.window.start_s},
          {"duration_s", a.window.duration_s},
          {"max_requests", a.window.max_requests},
          {"slo_ttft_ms", sim.slo_ttft_ms},
          {"slo_tpot_ms", sim.slo_tpot_ms},
          {"requests", r.requests},
          {"completed", r.completed},
          {"kv_exhausted", r.kv_exhausted},
          {"ttft_ms", summary_json(r.ttft_ms)},
          {"tpot_ms", summary_json(r.tpot_ms)},
          {"tbt_ms", summary_json(r.tbt_ms)},
          {"ttlt_ms", summary_json(r.ttlt_ms)},
          {"makespan_s", r.makespan_s},
          {"output_tokens", r.output_tokens},
          {"output_tokens_per_s", r.output_tokens_per_s},
          {"requests_per_s", r.requests_per_s},
          {"goodput_req_per_s", r.goodput_req_per_s},
          {"requests_meeting_slo", r.requests_meeting_slo},
          {"preemptions", r.preemptions},
          {"prefix_hit_rate", r.prefix_hit_rate},
          {"pages_total", r.pages_total},
          {"pages_leaked", r.pages_leaked},
          {"token_count_mismatches", r.token_count_mismatches},
          {"steps", r.num_steps},
          {"prefill_tokens", r.num_prefill_tokens},
          {"recomputed_tokens", r.num_recomputed_tokens},
          {"busy_s", r.busy_ms / 1000.0},
          {"aimd_releases", r.aimd_releases},
          {"prefix_waits", r.prefix_waits},
          {"aimd_final_threshold", r.aimd_final_threshold}};
}

void print_text(const SimulationReport& r, const SimulateArgs& a, const trace::Trace& t,
                const sched::CostModel& cm, model::KvCacheDtype kv_cache_dtype) {
  auto line = [](const char* name, const sched::LatencySummary& s) {
    std::printf("  %-5s ms  p50 %10.2f  p90 %10.2f  p99 %10.2f  mean %10.2f  (n=%lld)\n", name,
                s.p50, s.p90, s.p99, s.mean, static_cast<long long>(s.count));
  };
  std::printf("trace %s (%s), policy %s, packing %s, time scale %g\n", t.source.c_str(),
              std::string(trace::trace_format_name(t.format)).c_str(), a.policy.c_str(),
              a.packing.c_str(), a.window.time_scale);
  std::printf("cost model: %s\n", cm.config().name.c_str());
  std::printf("kv cache dtype %s (kv_dtype_bytes %lld, %.0f KV bytes per token)\n",
              std::string(model::kv_cache_dtype_name(kv_cache_dtype)).c_str(),
              static_cast<long long>(cm.config().kv_dtype_bytes), cm.kv_bytes_per_token());
  std::printf("requests %lld, completed %lld, kv_exhausted %lld, makespan %.2f s\n",
              static_cast<long long>(r.requests), static_cast<long long>(r.completed),
              static_cast<long long>(r.kv_exhausted), r.makespan_s);
  line("TTFT", r.ttft_ms);
  line("TPOT", r.tpot_ms);
  line("TBT", r.tbt_ms);
  line("TTLT", r.ttlt_ms);
  std::printf("throughput %.1f output tokens/s, %.3f requests/s\n", r.output_tokens_per_s,
              r.requests_per_s);
  std::printf("goodput %.3f req/s (TTFT <= %g ms and TPOT <= %g ms: %lld requests)\n",
              r.goodput_req_per_s, a.sim.slo_ttft_ms, a.sim.slo_tpot_ms,
              static_cast<long long>(r.requests_meeting_slo));
  std::printf("preemptions %lld, recomputed tokens %lld, prefix hit rate %.4f\n",
              static_cast<long long>(r.preemptions),
              static_cast<long long>(r.num_recomputed_tokens), r.prefix_hit_rate);
  std::printf("pages total %lld, leaked %lld; token count mismatches %lld; steps %lld\n",
              static_cast<long long>(r.pages_total), static_cast<long long>(r.pages_leaked),
              static_cast<long long>(r.token_count_mismatches),
              static_cast<long long>(r.num_steps));
}

int run_simulate(SimulateArgs& a) {
  std::optional<trace::TraceFormat> format;
  if (!a.format.empty()) {
    Result<trace::TraceFormat> f = trace::parse_trace_format(a.format);
    if (!f.ok()) return fail_input(f.status());
    format = *f;
  }
  Result<sched::SchedulingPolicy> policy = sched::parse_scheduling_policy(a.policy);
  if (!policy.ok()) return fail_input(policy.status());
  a.sim.scheduler.policy = *policy;
  Result<sched::PackingAlgorithm> packing = sched::parse_packing_algorithm(a.packing);
  if (!packing.ok()) return fail_input(packing.status());
  a.sim.scheduler.packing = *packing;
  Result<model::KvCacheDtype> kv_cache_dtype = model::parse_kv_cache_dtype(a.kv_cache_dtype);
  if (!kv_cache_dtype.ok()) {
    return fail_input(invalid_argument("--kv-cache-dtype: " + kv_cache_dtype.status().message()));
  }
  if (a.cost_model_path.empty()) {
    a.cost_model_path = source_root() + "/data/cost_models/h100_llama31_8b.json";
  }
  Result<sched::CostModel> cost_model = sched::CostModel::load(a.cost_model_path);
  if (!cost_model.ok()) return fail_input(cost_model.status());
  if (*kv_cache_dtype != model::KvCacheDtype::kAuto) {
    sched::CostModelConfig c = cost_model->config();
    c.kv_dtype_bytes = static_cast<int64_t>(model::kv_cache_element_bytes(*kv_cache_dtype));
    *cost_model = sched::CostModel(c);
  }
  Status valid = a.sim.validate();
  if (!valid.ok()) return fail_input(valid);
  Result<trace::Trace> t = trace::load_trace(a.trace_path, format, a.window);
  if (!t.ok()) return fail_input(t.status());
  Result<SimulationReport> report = sched::simulate(*t, *cost_model, a.sim);
  if (!report.ok()) {
    std::cerr << "error: " << report.status().to_string() << "\n";
    return report.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  if (a.json_output) {
    std::printf("%s\n",
                report_json(*report, a, *t, *cost_model, *kv_cache_dtype, a.sim).dump().c_str());
  } else {
    print_text(*report, a, *t, *cost_model, *kv_cache_dtype);
  }
  return report->pages_leaked == 0 && report->token_count_mismatches == 0 ? 0 : 1;
}

}  // namespace

void register_simulate_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<SimulateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "simulate", "replay a request trace through the scheduler with a cost model as the GPU");
  SimulateArgs& a = *args;
  sched::SchedulerConfig& s = a.sim.scheduler;
  sched::AimdConfig& m = a.sim.scheduler.aimd;
  a.sim.kv.num_pages = 0;
  cmd->add_option("--trace", a.trace_path, "trace file (Mooncake JSONL, Azure CSV, BurstGPT CSV)")
      ->required();
  cmd->add_option("--format", a.format, "mooncake|azure|burstgpt (default: detected)");
  cmd->add_option("--policy", a.policy,
                  "admission policy: fcfs|aimd|priority (trace requests all have priority 0)")
      ->capture_default_str();
  cmd->add_option("--packing", a.packing, "AIMD release packing: none|ffd|dp")
      ->capture_default_str();
  cmd->add_option("--cost-model", a.cost_model_path,
                  "cost model JSON (default: data/cost_models/h100_llama31_8b.json)");
  cmd->add_option("--kv-cache-dtype", a.kv_cache_dtype,
                  "KV cache element type: auto (the cost model's model.kv_dtype_bytes) | fp8 | "
                  "fp8_e4m3 (float8 e4m3, 1 byte: half the KV bytes per token, so less KV "
                  "traffic per step and about twice the pages when --num-pages is 0)")
      ->capture_default_str();
  cmd->add_option("--time-scale", a.window.time_scale,
                  "multiply inter-arrival times by this (< 1 = faster)")
      ->capture_default_str();
  cmd->add_option("--start-s", a.window.start_s, "window start, s of file time")
      ->capture_default_str();
  cmd->add_option("--duration-s", a.window.duration_s, "window length, s (0 = to the end)")
      ->capture_default_str();
  cmd->add_option("--max-requests", a.window.max_requests, "at most N requests (0 = all)")
      ->capture_default_str();
  cmd->add_option("--slo-ttft-ms", a.sim.slo_ttft_ms, "goodput SLO on TTFT, ms")
      ->capture_default_str();
  cmd->add_option("--slo-tpot-ms", a.sim.slo_tpot_ms, "goodput SLO on TPOT, ms")
      ->capture_default_str();
  // Scheduler (SchedulerConfig).
  cmd->add_option("--max-num-batched-tokens", s.max_num_batched_tokens,
                  "token budget: query rows per step")
      ->capture_default_str();
  cmd->add_option("--max-num-running-requests", s.max_num_running_requests,
                  "requests holding KV at once")
      ->capture_default_str();
  cmd->add_option("--max-prefill-chunk-tokens", s.max_prefill_chunk_tokens,
                  "largest prefill chunk per request per step (0 = the budget)")
      ->capture_default_str();
  cmd->add_option("--prefill-bin-tokens", s.prefill_bin_tokens,
                  "AIMD packing bin capacity T_max, tokens (0 = the token budget)")
      ->capture_default_str();
  cmd->add_option("--prefill-bin-max-requests", s.prefill_bin_max_requests,
                  "AIMD packing bin size B_max, requests (0 = unlimited)")
      ->capture_default_str();
  cmd->add_option("--prefix-wait-min-tokens", s.prefix_wait_min_tokens,
                  "a waiting request whose next N+ prompt tokens running requests are computing "
                  "waits for them (0 = never)")
      ->capture_default_str();
  cmd->add_flag("--check-invariants-every-step", s.check_invariants_every_step,
                "run the KV/scheduler invariant check after every step (slow)");
  // KV cache (KvCacheConfig).
  cmd->add_option("--num-pages", a.sim.kv.num_pages,
                  "KV pages (0 = the cost model's kv_capacity_bytes / page bytes)")
      ->capture_default_str();
  cmd->add_option("--page-size", a.sim.kv.page_size, "tokens per KV page")->capture_default_str();
  cmd->add_option("--enable-prefix-caching", a.sim.kv.enable_prefix_caching,
                  "prefix caching on/off (true|false)")
      ->capture_default_str();
  // AIMD (AimdConfig, seed 001).
  cmd->add_option("--aimd-n-min", m.n_min, "N_min, also the cold-start threshold")
      ->capture_default_str();
  cmd->add_option("--aimd-n-max", m.n_max, "N_max")->capture_default_str();
  cmd->add_option("--aimd-alpha", m.alpha, "additive increase per epoch, requests")
      ->capture_default_str();
  cmd->add_option("--aimd-beta", m.beta, "multiplicative decrease factor in (0,1)")
      ->capture_default_str();
  cmd->add_option("--aimd-tau-low-ms", m.tau_low_ms, "band low edge on smoothed p95 TTFT, ms")
      ->capture_default_str();
  cmd->add_option("--aimd-tau-high-ms", m.tau_high_ms, "band high edge, ms")->capture_default_str();
  cmd->add_option("--aimd-ewma-gamma", m.ewma_gamma, "EWMA weight of the newest p95")
      ->capture_default_str();
  cmd->add_option("--aimd-p95-window-samples", m.p95_window_samples,
                  "TTFT samples the p95 is taken over")
      ->capture_default_str();
  cmd->add_option("--aimd-control-interval-ms", m.control_interval_ms, "control epoch, ms")
      ->capture_default_str();
  cmd->add_option("--aimd-burst-queue-depth", m.burst_queue_depth,
                  "burst override: staged requests")
      ->capture_default_str();
  cmd->add_option("--aimd-burst-arrival-rate-per-s", m.burst_arrival_rate_per_s,
                  "burst override: arrival rate, req/s")
      ->capture_default_str();
  cmd->add_option("--aimd-arrival-rate-tau-ms", m.arrival_rate_tau_ms,
                  "time constant of the arrival-rate estimate, ms")
      ->capture_default_str();
  cmd->add_option("--aimd-utilization-gate", m.utilization_gate,
                  "increase N_t only below this utilization")
      ->capture_default_str();
  cmd->add_option("--aimd-staging-timeout-ms", m.staging_timeout_ms,
                  "release the staging queue when its oldest waited this long, ms")
      ->capture_default_str();
  cmd->add_flag("--json", a.json_output, "print one JSON object instead of the text report");
  cmd->callback([args, &exit_code]() { exit_code = run_simulate(*args); });
}

}  // namespace packserve::cli
