// scheduler_config.cc: SchedulerConfig::validate() and the policy / finish-reason names
// (scheduler.h, request.h).
#include <fmt/format.h>

#include "packserve/sched/scheduler.h"

namespace packserve::sched {

std::string_view scheduling_policy_name(SchedulingPolicy policy) {
  switch (policy) {
    case SchedulingPolicy::kFcfs:
      return "fcfs";
    case SchedulingPolicy::kAimd:
      return "aimd";
    case SchedulingPolicy::kPriority:
      return "priority";
  }
  return "unknown";
}

Result<SchedulingPolicy> parse_scheduling_policy(std::string_view name) {
  if (name == "fcfs") return SchedulingPolicy::kFcfs;
  if (name == "aimd") return SchedulingPolicy::kAimd;
  if (name == "priority") return SchedulingPolicy::kPriority;
  return invalid_argument(
      fmt::format("scheduler.policy: expected one of fcfs|aimd|priority, got \"{}\"", name));
}

std::string_view finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kKvExhausted:
      return "kv_exhausted";
  }
  return "unknown";
}

Status SchedulerConfig::validate() const {
  if (policy != SchedulingPolicy::kFcfs && policy != SchedulingPolicy::kAimd &&
      policy != SchedulingPolicy::kPriority) {
    return invalid_argument(fmt::format("scheduler.policy: expected fcfs, aimd or priority, got {}",
                                        static_cast<int>(policy)));
  }
  if (packing != PackingAlgorithm::kNone && packing != PackingAlgorithm::kFirstFitDecreasing &&
      packing != PackingAlgorithm::kDp) {
    return invalid_argument(fmt::format("scheduler.packing: expected none, ffd or dp, got {}",
                                        static_cast<int>(packing)));
  }
  if (max_num_batched_tokens < 1) {
    return invalid_argument(
        fmt::format("scheduler.max_num_batched_tokens: expected an integer >= 1, got {}",
                    max_num_batched_tokens));
  }
  if (max_num_running_requests < 1) {
    return invalid_argument(
        fmt::format("scheduler.max_num_running_requests: expected an integer >= 1, got {}",
                    max_num_running_requests));
  }
  if (max_prefill_chunk_tokens < 0) {
    return invalid_argument(fmt::format(
        "scheduler.max_prefill_chunk_tokens: expected an integer >= 0 (0 = the token budget), "
        "got {}",
        max_prefill_chunk_tokens));
  }
  if (prefill_bin_tokens < 0) {
    return invalid_argument(fmt::format(
        "scheduler.prefill_bin_tokens: expected an integer >= 0 (0 = max_num_batched_tokens), "
        "got {}",
        prefill_bin_tokens));
  }
  if (prefill_bin_max_requests < 0) {
    return invalid_argument(fmt::format(
        "scheduler.prefill_bin_max_requests: expected an integer >= 0 (0 = unlimited), got {}",
        prefill_bin_max_requests));
  }
  if (prefix_wait_min_tokens < 0) {
    return invalid_argument(fmt::format(
        "scheduler.prefix_wait_min_tokens: expected an integer >= 0 (0 = never wait), got {}",
        prefix_wait_min_tokens));
  }
  if (policy == SchedulingPolicy::kAimd) {
    const Status aimd_status = aimd.validate();
    if (!aimd_status.ok()) {
      return invalid_argument("scheduler." + aimd_status.message());
    }
  }
  return ok_status();
}

}  // namespace packserve::sched
