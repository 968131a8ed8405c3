// compare.cc: see compare.h.
#include "packserve/benchclient/compare.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <sstream>

namespace packserve::benchclient {
namespace {

std::optional<double> number(const nlohmann::json& j, const std::string& field) {
  if (!j.contains(field) || !j[field].is_number()) return std::nullopt;
  return j[field].get<double>();
}

std::string cell(const std::optional<double>& v) {
  if (!v) return "-";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f", *v);
  return buf;
}

}  // namespace

const std::vector<std::string>& compared_fields() {
  static const std::vector<std::string> kFields = [] {
    std::vector<std::string> f = {"completed",
                                  "failed",
                                  "duration",
                                  "total_input_tokens",
                                  "total_output_tokens",
                                  "request_throughput",
                                  "request_goodput",
                                  "output_throughput",
                                  "total_token_throughput",
                                  "max_output_tokens_per_s",
                                  "max_concurrent_requests"};
    for (const char* m : {"ttft", "tpot", "itl", "e2el"}) {
      for (const char* stat : {"mean", "median", "p90", "p99"}) {
        f.push_back(std::string(stat) + "_" + m + "_ms");
      }
    }
    return f;
  }();
  return kFields;
}

std::string compare_results(const nlohmann::json& a, const nlohmann::json& b,
                            const std::string& name_a, const std::string& name_b) {
  std::ostringstream out;
  const auto shorten = [](std::string s) {
    return s.size() > 18 ? "..." + s.substr(s.size() - 15) : s;
  };
  char buf[200];
  std::snprintf(buf, sizeof(buf), "%-26s %18s %18s %8s\n", "metric", shorten(name_a).c_str(),
                shorten(name_b).c_str(), "B/A");
  out << buf;
  for (const std::string& field : compared_fields()) {
    const std::optional<double> va = number(a, field), vb = number(b, field);
    std::string ratio = "-";
    if (va && vb && *va != 0.0) {
      char r[32];
      std::snprintf(r, sizeof(r), "%.3f", *vb / *va);
      ratio = r;
    }
    std::snprintf(buf, sizeof(buf), "%-26s %18s %18s %8s\n", field.c_str(), cell(va).c_str(),
                  cell(vb).c_str(), ratio.c_str());
    out << buf;
  }
  return out.str();
}

}  // namespace packserve::benchclient
