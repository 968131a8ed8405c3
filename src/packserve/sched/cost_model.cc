// cost_model.cc: roofline step-time model; contract in cost_model.h.
#include "packserve/sched/cost_model.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace packserve::sched {
namespace {

std::string num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// Reads object `obj` field by field: each must be present and of the right type; unknown keys
// are rejected (a typo must not silently keep a default).
class JsonFields {
 public:
  JsonFields(const nlohmann::json& obj, std::string path, const std::string& source)
      : obj_(obj), path_(std::move(path)), source_(source) {}

  Status get_int(const char* key, int64_t& out) {
    const nlohmann::json* v = nullptr;
    PS_RETURN_IF_ERROR(find(key, v));
    if (!v->is_number_integer()) return bad(key, "an integer", v->dump());
    out = v->get<int64_t>();
    return ok_status();
  }
  // As get_int, but an absent key leaves `out` as it is.
  Status get_optional_int(const char* key, int64_t& out) {
    if (!obj_.contains(key)) {
      seen_.insert(key);
      return ok_status();
    }
    return get_int(key, out);
  }
  Status get_double(const char* key, double& out) {
    const nlohmann::json* v = nullptr;
    PS_RETURN_IF_ERROR(find(key, v));
    if (!v->is_number()) return bad(key, "a number", v->dump());
    out = v->get<double>();
    return ok_status();
  }
  Status get_string(const char* key, std::string& out) {
    const nlohmann::json* v = nullptr;
    PS_RETURN_IF_ERROR(find(key, v));
    if (!v->is_string()) return bad(key, "a string", v->dump());
    out = v->get<std::string>();
    return ok_status();
  }
  Status get_object(const char* key, const nlohmann::json*& out) {
    PS_RETURN_IF_ERROR(find(key, out));
    if (!out->is_object()) return bad(key, "an object", out->dump());
    return ok_status();
  }
  Status no_unknown_keys() const {
    for (auto it = obj_.begin(); it != obj_.end(); ++it) {
      if (!seen_.count(it.key())) {
        return invalid_argument(source_ + ": " + path_ + it.key() + ": unknown key");
      }
    }
    return ok_status();
  }

 private:
  Status find(const char* key, const nlohmann::json*& out) {
    seen_.insert(key);
    const auto it = obj_.find(key);
    if (it == obj_.end()) return invalid_argument(source_ + ": " + path_ + key + ": missing");
    out = &*it;
    return ok_status();
  }
  Status bad(const char* key, const char* expected, const std::string& got) const {
    return invalid_argument(source_ + ": " + path_ + key + ": expected " + expected + ", got " +
                            got);
  }
  const nlohmann::json& obj_;
  std::string path_;
  const std::string& source_;
  std::set<std::string> seen_;
};

}  // namespace

Status CostModelConfig::validate() const {
  const std::pair<const char*, int64_t> counts[] = {
      {"model.num_layers", num_layers},     {"model.hidden_size", hidden_size},
      {"model.num_qo_heads", num_qo_heads}, {"model.num_kv_heads", num_kv_heads},
      {"model.head_dim", head_dim},         {"model.intermediate_size", intermediate_size},
      {"model.vocab_size", vocab_size},     {"model.dtype_bytes", dtype_bytes}};
  for (const auto& [field, v] : counts) {
    if (v < 1)
      return invalid_argument(std::string(field) + ": expected >= 1, got " + num(double(v)));
  }
  if (num_qo_heads % num_kv_heads != 0) {
    return invalid_argument("model.num_qo_heads: expected a multiple of model.num_kv_heads (" +
                            num(double(num_kv_heads)) + "), got " + num(double(num_qo_heads)));
  }
  if (kv_dtype_bytes != 1 && kv_dtype_bytes != 2 && kv_dtype_bytes != 4) {
    return invalid_argument(
        "model.kv_dtype_bytes: expected 1 (float8), 2 (bf16/fp16) or 4 (f32) bytes per K or V "
        "element (default: model.dtype_bytes), got " +
        num(double(kv_dtype_bytes)));
  }
  const std::pair<const char*, double> rates[] = {
      {"device.hbm_bytes_per_s", hbm_bytes_per_s},
      {"device.gemm_flops_per_s", gemm_flops_per_s},
      {"device.attention_flops_per_s", attention_flops_per_s},
      {"device.kv_capacity_bytes", kv_capacity_bytes}};
  for (const auto& [field, v] : rates) {
    if (!(v > 0) || !std::isfinite(v)) {
      return invalid_argument(std::string(field) + ": expected a finite number > 0, got " + num(v));
    }
  }
  if (!(step_overhead_us >= 0) || !std::isfinite(step_overhead_us)) {
    return invalid_argument("device.step_overhead_us: expected a finite number >= 0, got " +
                            num(step_overhead_us));
  }
  return ok_status();
}

StepWork step_work_of(const ScheduledBatch& batch) {
  StepWork w;
  w.num_prefill_tokens = batch.num_prefill_tokens;
  w.num_decode_rows = batch.num_decode_rows;
  for (const ScheduledSequence& s : batch.sequences) {
    const int64_t q = s.num_tokens;
    w.attention_pairs += q * s.start_position + q * (q + 1) / 2;
    w.kv_read_tokens += s.kv_len();
    if (s.samples_token) ++w.num_sample_rows;
  }
  return w;
}

CostModel::CostModel(const CostModelConfig& config) : config_(config) {
  const Status s = config.validate();
  PS_CHECK(s.ok()) << s.to_string();
}

Result<CostModel> CostModel::parse(std::string_view json_text, const std::string& source) {
  const nlohmann::json root = nlohmann::json::parse(json_text, nullptr, false);
  if (root.is_discarded() || !root.is_object()) {
    return invalid_argument(source + ": not a JSON object (parse error)");
  }
  CostModelConfig c;
  JsonFields top(root, "", source);
  const nlohmann::json* model = nullptr;
  const nlohmann::json* device = nullptr;
  PS_RETURN_IF_ERROR(top.get_string("name", c.name));
  PS_RETURN_IF_ERROR(top.get_object("model", model));
  PS_RETURN_IF_ERROR(top.get_object("device", device));
  PS_RETURN_IF_ERROR(top.no_unknown_keys());
  JsonFields m(*model, "model.", source);
  PS_RETURN_IF_ERROR(m.get_int("num_layers", c.num_layers));
  PS_RETURN_IF_ERROR(m.get_int("hidden_size", c.hidden_size));
  PS_RETURN_IF_ERROR(m.get_int("num_qo_heads", c.num_qo_heads));
  PS_RETURN_IF_ERROR(m.get_int("num_kv_heads", c.num_kv_heads));
  PS_RETURN_IF_ERROR(m.get_int("head_dim", c.head_dim));
  PS_RETURN_IF_ERROR(m.get_int("intermediate_size", c.intermediate_size));
  PS_RETURN_IF_ERROR(m.get_int("vocab_size", c.vocab_size));
  PS_RETURN_IF_ERROR(m.get_int("dtype_bytes", c.dtype_bytes));
  c.kv_dtype_bytes = c.dtype_bytes;  // a KV cache in the model's dtype unless the file says
  PS_RETURN_IF_ERROR(m.get_optional_int("kv_dtype_bytes", c.kv_dtype_bytes));
  PS_RETURN_IF_ERROR(m.no_unknown_keys());
  JsonFields d(*device, "device.", source);
  PS_RETURN_IF_ERROR(d.get_double("hbm_bytes_per_s", c.hbm_bytes_per_s));
  PS_RETURN_IF_ERROR(d.get_double("gemm_flops_per_s", c.gemm_flops_per_s));
  PS_RETURN_IF_ERROR(d.get_double("attention_flops_per_s", c.attention_flops_per_s));
  PS_RETURN_IF_ERROR(d.get_double("kv_capacity_bytes", c.kv_capacity_bytes));
  PS_RETURN_IF_ERROR(d.get_double("step_overhead_us", c.step_overhead_us));
  PS_RETURN_IF_ERROR(d.no_unknown_keys());
  const Status valid = c.validate();
  if (!valid.ok()) return invalid_argument(source + ": " + valid.message());
  return CostModel(c);
}

Result<CostModel> CostModel::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) return not_found(path + ": cannot open the cost model file");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse(ss.str(), path);
}

int64_t CostModel::linear_params_per_layer() const {
  const CostModelConfig& c = config_;
  const int64_t q = c.hidden_size * c.num_qo_heads * c.head_dim;
  const int64_t kv = 2 * c.hidden_size * c.num_kv_heads * c.head_dim;
  const int64_t o = c.num_qo_heads * c.head_dim * c.hidden_size;
  const int64_t mlp = 3 * c.hidden_size * c.intermediate_size;  // gate, up, down
  return q + kv + o + mlp;
}

double CostModel::kv_bytes_per_token() const {
  const CostModelConfig& c = config_;
  return 2.0 * double(c.num_layers * c.num_kv_heads * c.head_dim * c.kv_dtype_bytes);
}

double CostModel::weight_bytes_per_step() const {
  const CostModelConfig& c = config_;
  const double params =
      double(linear_params_per_layer() * c.num_layers) + double(c.hidden_size * c.vocab_size);
  return params * double(c.dtype_bytes);
}

int64_t CostModel::num_kv_pages(int64_t page_size) const {
  return static_cast<int64_t>(
      std::floor(config_.kv_capacity_bytes / (kv_bytes_per_token() * double(page_size))));
}

double CostModel::step_time_ms(const StepWork& w) const {
  const CostModelConfig& c = config_;
  const double rows = double(w.num_prefill_tokens + w.num_decode_rows);
  if (rows == 0) return 0.0;
  const double gemm_flops = 2.0 * double(linear_params_per_layer() * c.num_layers) * rows +
                            2.0 * double(c.hidden_size * c.vocab_size) * double(w.num_sample_rows);
  const double attn_flops =
      4.0 * double(c.num_qo_heads * c.head_dim * c.num_layers) * double(w.attention_pairs);
  const double bytes =
      weight_bytes_per_step() + kv_bytes_per_token() * (double(w.kv_read_tokens) + rows);
  const double memory_s = bytes / c.hbm_bytes_per_s;
  const double compute_s = gemm_flops / c.gemm_flops_per_s + attn_flops / c.attention_flops_per_s;
  return c.step_overhead_us * 1e-3 + std::max(memory_s, compute_s) * 1e3;
}

}  // namespace packserve::sched
