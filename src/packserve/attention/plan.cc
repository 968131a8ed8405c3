#include "packserve/attention/plan.h"

#include <string>

namespace packserve::attention {

std::string_view policy_name(Policy policy) {
  switch (policy) {
    case Policy::kNaive: return "naive";
    case Policy::kBalanced: return "balanced";
    case Policy::kPrefix: return "prefix";
  }
  return "?";
}

Result<Policy> parse_policy(std::string_view name) {
  if (name == "naive") return Policy::kNaive;
  if (name == "balanced") return Policy::kBalanced;
  if (name == "prefix") return Policy::kPrefix;
  return invalid_argument("policy: expected one of \"naive\", \"balanced\", \"prefix\", got \"" +
                          std::string(name) + "\"");
}

}  // namespace packserve::attention
