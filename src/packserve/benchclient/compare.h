// compare.h: `packserve bench --compare A.json B.json`: two result files side by side, one row
// per summary metric: A, B and B/A ("-" when A is 0 or a field is missing or null).
// Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace packserve::benchclient {

// The metrics compared, in order (result.json field names).
const std::vector<std::string>& compared_fields();

std::string compare_results(const nlohmann::json& a, const nlohmann::json& b,
                            const std::string& name_a, const std::string& name_b);

}  // namespace packserve::benchclient
