#include "packserve/cli/engine_flags.h"

#include "packserve/attention/plan.h"
#include "packserve/sched/ngram_proposer.h"
#include "packserve/sched/scheduler.h"

namespace packserve::cli {

void add_engine_flags(CLI::App& cmd, EngineFlags& f, const std::string& p) {
  cmd.add_option("--num-pages", f.num_pages,
                 p + "KV-cache pages; 0: " + std::to_string(f.cpu_default_num_pages) +
                     " on cpu, from --gpu-memory-utilization on cuda")
      ->capture_default_str();
  cmd.add_option("--page-size", f.page_size, p + "tokens per KV page")->capture_default_str();
  cmd.add_option("--max-num-batched-tokens", f.max_num_batched_tokens,
                 p + "token budget per engine step")
      ->capture_default_str();
  cmd.add_option("--max-num-running-requests", f.max_num_running_requests,
                 p + "requests holding KV at once")
      ->capture_default_str();
  cmd.add_option("--policy", f.policy,
                 p + "admission policy: fcfs | aimd | priority (requests' \"priority\", lower "
                     "first)")
      ->capture_default_str();
  cmd.add_option(
         "--attention-policy", f.attention_policy,
         p + "attention planner: naive | balanced | prefix | auto (per step: prefix when it "
             "deduplicates enough shared KV, else balanced)")
      ->capture_default_str();
  cmd.add_flag("--no-prefix-caching", f.no_prefix_caching, p + "disable the prefix cache");
  cmd.add_option("--prefix-wait-min-tokens", f.prefix_wait_min_tokens,
                 p + "a waiting request whose next N+ prompt tokens running requests are "
                     "computing waits for them instead of computing them too (0 = never)")
      ->capture_default_str();
  cmd.add_option("--threads", f.threads, p + "CPU attention executor threads")
      ->capture_default_str();
  cmd.add_option("--sampler-threads", f.sampler_threads,
                 p + "host threads sampling a step's rows (the engine's, or the cpu "
                     "backend's draws) and filling structured outputs' token masks; 0: min(8, "
                     "hardware threads)")
      ->capture_default_str();
  cmd.add_flag("--no-backend-sampling", f.no_backend_sampling,
               p + "sample non-greedy and logprob rows on the host from their logits instead "
                   "of in the forward backend (the same tokens and logprobs; cuda then copies "
                   "every such row's logits, and masks structured outputs' rows on the host)");
  cmd.add_option("--num-speculative-tokens", f.num_speculative_tokens,
                 p +
                     "speculative decoding by prompt lookup (vLLM's ngram method) for requests "
                     "without penalties, logit bias, min_tokens or structured outputs (sampled "
                     "or with logprobs: unless --no-backend-sampling): up to N draft tokens per "
                     "decode step, found in the request's own prompt and output and verified in "
                     "the same forward (sampled: by rejection sampling; 0 = off, at most " +
                     std::to_string(sched::kMaxSpeculativeTokens) + ")")
      ->capture_default_str();
  cmd.add_option("--prompt-lookup-min", f.prompt_lookup_min,
                 p + "speculative decoding: the shortest suffix of the tokens looked up")
      ->capture_default_str();
  cmd.add_option("--prompt-lookup-max", f.prompt_lookup_max,
                 p +
                     "speculative decoding: the longest suffix of the tokens looked up (the "
                     "longest that recurs wins; at most " +
                     std::to_string(sched::kMaxSpeculativeNgram) + ")")
      ->capture_default_str();
  add_backend_flags(cmd, f.backend, p);
}

Status apply_engine_flags(const EngineFlags& f, engine::EngineConfig& config) {
  config.kv.num_pages = f.num_pages;
  config.kv.page_size = f.page_size;
  config.kv.enable_prefix_caching = !f.no_prefix_caching;
  config.scheduler.max_num_batched_tokens = f.max_num_batched_tokens;
  config.scheduler.max_num_running_requests = f.max_num_running_requests;
  config.scheduler.prefix_wait_min_tokens = f.prefix_wait_min_tokens;
  auto policy = sched::parse_scheduling_policy(f.policy);
  if (!policy.ok()) return invalid_argument("--policy: " + policy.status().message());
  config.scheduler.policy = *policy;
  auto attention_policy = attention::parse_policy(f.attention_policy);
  if (!attention_policy.ok()) {
    return invalid_argument("--attention-policy: " + attention_policy.status().message());
  }
  config.plan.policy = *attention_policy;
  if (f.sampler_threads < 0 || f.sampler_threads > 64) {
    return invalid_argument("--sampler-threads: expected 0 (auto) to 64, got " +
                            std::to_string(f.sampler_threads));
  }
  config.num_sampler_threads = f.sampler_threads;
  config.backend_sampling = !f.no_backend_sampling;
  config.speculation = {f.num_speculative_tokens, f.prompt_lookup_min, f.prompt_lookup_max};
  if (Status s = sched::validate_speculation(config.speculation); !s.ok()) {
    // The fields are the flags' names: "prompt_lookup_min, prompt_lookup_max: ..." ->
    // "--prompt-lookup-min, --prompt-lookup-max: ...".
    std::string message = "--" + s.message();
    for (size_t i = 0; i < message.size() && message[i] != ':'; ++i) {
      if (message[i] == '_') message[i] = '-';
      if (message[i] == ' ') message.insert(i + 1, "--"), i += 2;
    }
    return invalid_argument(message);
  }
  return ok_status();
}

}  // namespace packserve::cli
