// engine_flags.h: the engine, KV-cache and scheduler flags shared by `packserve generate`,
// `serve` and `bench --in-process` (docs/engine.md), so the three commands spell, default and
// check them the same way:
//   --num-pages N (0: cpu_default_num_pages on cpu, from --gpu-memory-utilization on cuda)
//   --page-size N  --max-num-batched-tokens N  --max-num-running-requests N
//   --policy fcfs|aimd  --attention-policy naive|balanced|prefix|auto  --no-prefix-caching
//   --prefix-wait-min-tokens N  --num-speculative-tokens N  --prompt-lookup-min N
//   --prompt-lookup-max N
//   --threads N (CPU attention executor)  --sampler-threads N  and the backend flags of
//   backend_flags.h.
// Thread-safety: call from one thread at start-up.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "packserve/cli/backend_flags.h"
#include "packserve/common/status.h"
#include "packserve/engine/engine.h"

namespace packserve::cli {

struct EngineFlags {
  int32_t num_pages = 0;
  int32_t page_size = 16;
  int32_t max_num_batched_tokens = 2048;
  int32_t max_num_running_requests = 256;
  std::string policy = "fcfs";
  std::string attention_policy = "auto";
  bool no_prefix_caching = false;
  int32_t prefix_wait_min_tokens = 256;
  bool no_backend_sampling = false;
  int threads = 1;
  int32_t sampler_threads = 0;         // 0: auto
  int32_t num_speculative_tokens = 0;  // 0: off
  int32_t prompt_lookup_min = 2;
  int32_t prompt_lookup_max = 4;
  BackendFlags backend;
  int32_t cpu_default_num_pages = 2048;  // what --num-pages 0 means on the CPU backend
};

// Registers the flags above on `cmd`; help texts start with help_prefix (e.g. "--in-process: ").
void add_engine_flags(CLI::App& cmd, EngineFlags& flags, const std::string& help_prefix = "");

// Sets config.kv (pages, page size, prefix caching), config.scheduler (budget, running limit,
// prefix wait, policy), config.plan.policy, config.num_sampler_threads, config.backend_sampling
// and config.speculation.
// Errors: kInvalidArgument naming the flag.
Status apply_engine_flags(const EngineFlags& flags, engine::EngineConfig& config);

}  // namespace packserve::cli
