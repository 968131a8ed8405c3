// batch_spec.cc: parsing, validation and building of batch specs (batch_spec.h).
//
// nlohmann-json throws; every call that can throw is inside this file's try blocks, and
// types are checked before any get<>(), so no exception leaves the module.
#include "packserve/attention/batch_spec.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "packserve/common/rng.h"

namespace packserve::attention {
namespace {

using nlohmann::json;

std::string quoted(const std::string& s) { return "\"" + s + "\""; }

// Salts of the independent random streams of one spec seed.
constexpr uint64_t kSaltPermutation = 0x7065726d75746521ull;
constexpr uint64_t kSaltQ = 0x7175657279202121ull;
constexpr uint64_t kSaltK = 0x6b65797320212121ull;
constexpr uint64_t kSaltV = 0x76616c7565732121ull;

Result<std::map<std::string, int>> index_prefixes(const BatchSpec& spec) {
  std::map<std::string, int> index;
  for (size_t i = 0; i < spec.prefixes.size(); ++i) {
    const PrefixSpec& p = spec.prefixes[i];
    const std::string field = "prefixes[" + std::to_string(i) + "]";
    if (p.id.empty()) return invalid_argument(field + ".id: expected a non-empty string");
    if (!index.emplace(p.id, static_cast<int>(i)).second) {
      return invalid_argument(field + ".id = " + quoted(p.id) + ": duplicate id (also at " +
                              "prefixes[" + std::to_string(index[p.id]) + "])");
    }
  }
  return index;
}

// The chain of node indices from the root down to `node` (cycle-free: validated).
std::vector<int> chain_of(const BatchSpec& spec, const std::map<std::string, int>& index,
                          int node) {
  std::vector<int> chain;
  for (int n = node; n >= 0;) {
    chain.push_back(n);
    const std::string& parent = spec.prefixes[n].parent;
    n = parent.empty() ? -1 : index.at(parent);
  }
  std::reverse(chain.begin(), chain.end());
  return chain;
}

// --- JSON field readers: every type is checked before get<>().
Result<int64_t> read_integer(const json& value, const std::string& field) {
  if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
      return invalid_argument(field + " = " + std::to_string(u) + ": expected at most 2^31 - 1");
    }
    return static_cast<int64_t>(u);
  }
  if (value.is_number_integer()) {
    const int64_t v = value.get<int64_t>();
    if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
      return invalid_argument(field + " = " + std::to_string(v) + ": expected a 32-bit integer");
    }
    return v;
  }
  return invalid_argument(field + ": expected an integer, got " + value.type_name() + " " +
                          value.dump());
}

Result<int> read_int(const json& object, const char* key, const std::string& where) {
  const std::string field = where.empty() ? key : where + "." + key;
  if (!object.contains(key)) return invalid_argument(field + ": missing required field");
  PS_ASSIGN_OR_RETURN(int64_t v, read_integer(object.at(key), field));
  return static_cast<int>(v);
}

Result<std::string> read_string(const json& object, const char* key, const std::string& where) {
  const std::string field = where.empty() ? key : where + "." + key;
  const json& value = object.at(key);
  if (!value.is_string()) {
    return invalid_argument(field + ": expected a string, got " + value.type_name() + " " +
                            value.dump());
  }
  return value.get<std::string>();
}

Status check_keys(const json& object, std::initializer_list<const char*> allowed,
                  const std::string& where) {
  if (!object.is_object()) {
    return invalid_argument((where.empty() ? std::string("batch spec") : where) +
                            ": expected an object, got " + object.type_name());
  }
  for (const auto& item : object.items()) {
    const bool known =
        std::any_of(allowed.begin(), allowed.end(), [&](const char* k) { return item.key() == k; });
    if (!known) {
      std::string list;
      for (const char* k : allowed) list += (list.empty() ? "" : ", ") + std::string(k);
      return invalid_argument((where.empty() ? std::string("") : where + ".") + item.key() +
                              ": unknown field (expected one of " + list + ")");
    }
  }
  return ok_status();
}

Result<BatchSpec> parse_json(const json& root) {
  PS_RETURN_IF_ERROR(check_keys(root,
                                {"num_qo_heads", "num_kv_heads", "head_dim", "page_size", "dtype",
                                 "kv_dtype", "seed", "prefixes", "requests"},
                                ""));
  BatchSpec spec;
  PS_ASSIGN_OR_RETURN(spec.num_qo_heads, read_int(root, "num_qo_heads", ""));
  PS_ASSIGN_OR_RETURN(spec.num_kv_heads, read_int(root, "num_kv_heads", ""));
  PS_ASSIGN_OR_RETURN(spec.head_dim, read_int(root, "head_dim", ""));
  PS_ASSIGN_OR_RETURN(spec.page_size, read_int(root, "page_size", ""));
  if (!root.contains("dtype")) return invalid_argument("dtype: missing required field");
  PS_ASSIGN_OR_RETURN(std::string dtype_text, read_string(root, "dtype", ""));
  PS_ASSIGN_OR_RETURN(spec.dtype, parse_dtype(dtype_text));
  if (root.contains("kv_dtype")) {
    PS_ASSIGN_OR_RETURN(std::string kv_text, read_string(root, "kv_dtype", ""));
    if (kv_text == "fp8_e4m3") {
      spec.kv_fp8 = true;
    } else if (kv_text != dtype_text) {
      return invalid_argument("kv_dtype: expected \"fp8_e4m3\" or the dtype \"" + dtype_text +
                              "\", got \"" + kv_text + "\"");
    }
  }
  if (root.contains("seed")) {
    const json& seed = root.at("seed");
    if (!seed.is_number_integer() || (!seed.is_number_unsigned() && seed.get<int64_t>() < 0)) {
      return invalid_argument("seed: expected a non-negative integer, got " + seed.dump());
    }
    spec.seed = seed.is_number_unsigned() ? seed.get<uint64_t>()
                                          : static_cast<uint64_t>(seed.get<int64_t>());
  }
  if (root.contains("prefixes")) {
    const json& prefixes = root.at("prefixes");
    if (!prefixes.is_array()) {
      return invalid_argument(std::string("prefixes: expected an array, got ") +
                              prefixes.type_name());
    }
    for (size_t i = 0; i < prefixes.size(); ++i) {
      const std::string where = "prefixes[" + std::to_string(i) + "]";
      const json& p = prefixes[i];
      PS_RETURN_IF_ERROR(check_keys(p, {"id", "len", "parent"}, where));
      PrefixSpec node;
      if (!p.contains("id")) return invalid_argument(where + ".id: missing required field");
      PS_ASSIGN_OR_RETURN(node.id, read_string(p, "id", where));
      PS_ASSIGN_OR_RETURN(node.len, read_int(p, "len", where));
      if (p.contains("parent")) {
        PS_ASSIGN_OR_RETURN(node.parent, read_string(p, "parent", where));
        if (node.parent.empty()) {
          return invalid_argument(where +
                                  ".parent: expected a prefix id, got \"\" (omit the "
                                  "field for a root)");
        }
      }
      spec.prefixes.push_back(std::move(node));
    }
  }
  if (!root.contains("requests")) return invalid_argument("requests: missing required field");
  const json& requests = root.at("requests");
  if (!requests.is_array()) {
    return invalid_argument(std::string("requests: expected an array, got ") +
                            requests.type_name());
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    const std::string where = "requests[" + std::to_string(i) + "]";
    const json& r = requests[i];
    PS_RETURN_IF_ERROR(check_keys(r, {"q_len", "kv_len", "prefix"}, where));
    RequestSpec request;
    PS_ASSIGN_OR_RETURN(request.q_len, read_int(r, "q_len", where));
    PS_ASSIGN_OR_RETURN(request.kv_len, read_int(r, "kv_len", where));
    if (r.contains("prefix")) {
      PS_ASSIGN_OR_RETURN(request.prefix, read_string(r, "prefix", where));
      if (request.prefix.empty()) {
        return invalid_argument(where +
                                ".prefix: expected a prefix id, got \"\" (omit the "
                                "field for no prefix)");
      }
    }
    spec.requests.push_back(std::move(request));
  }
  PS_RETURN_IF_ERROR(validate_spec(spec));
  return spec;
}

}  // namespace

Status validate_spec(const BatchSpec& spec) {
  BatchLayout shape;  // reuse the layout's shape rules, with the spec's field names
  if (spec.num_qo_heads < 1) {
    return invalid_argument("num_qo_heads = " + std::to_string(spec.num_qo_heads) +
                            ": expected >= 1");
  }
  if (spec.num_kv_heads < 1) {
    return invalid_argument("num_kv_heads = " + std::to_string(spec.num_kv_heads) +
                            ": expected >= 1");
  }
  shape.num_qo_heads = spec.num_qo_heads;
  shape.num_kv_heads = spec.num_kv_heads;
  shape.head_dim = spec.head_dim;
  shape.page_size = spec.page_size;
  shape.dtype = spec.dtype;
  shape.kv_fp8 = spec.kv_fp8;
  shape.qo_indptr = {0};
  shape.kv_page_indptr = {0};
  PS_RETURN_IF_ERROR(validate(shape));  // heads, divisibility, group size, head_dim, page_size

  PS_ASSIGN_OR_RETURN(auto index, index_prefixes(spec));
  const int num_nodes = static_cast<int>(spec.prefixes.size());
  for (int i = 0; i < num_nodes; ++i) {
    const PrefixSpec& p = spec.prefixes[i];
    const std::string field = "prefixes[" + std::to_string(i) + "]";
    if (p.len < 1 || p.len % spec.page_size != 0) {
      return invalid_argument(
          field + ".len = " + std::to_string(p.len) +
          ": expected a positive multiple of page_size = " + std::to_string(spec.page_size));
    }
    if (!p.parent.empty() && index.find(p.parent) == index.end()) {
      return invalid_argument(field + ".parent = " + quoted(p.parent) + ": no prefix has this id");
    }
  }
  // Cycles: walking up from any node must reach a root within num_nodes steps.
  std::vector<int64_t> chain_len(num_nodes, 0);
  for (int i = 0; i < num_nodes; ++i) {
    std::string path = quoted(spec.prefixes[i].id);
    int64_t len = 0;
    int n = i;
    for (int steps = 0; n >= 0; ++steps) {
      if (steps == num_nodes) {
        return invalid_argument("prefixes[" + std::to_string(i) + "].parent: cycle " + path);
      }
      len += spec.prefixes[n].len;
      const std::string& parent = spec.prefixes[n].parent;
      n = parent.empty() ? -1 : index.at(parent);
      if (n >= 0) path += " -> " + quoted(spec.prefixes[n].id);
    }
    chain_len[i] = len;
  }

  if (spec.requests.empty()) return invalid_argument("requests: expected at least 1 request");
  int64_t total_rows = 0, total_pages = 0;
  std::vector<char> node_used(num_nodes, 0);
  for (size_t i = 0; i < spec.requests.size(); ++i) {
    const RequestSpec& r = spec.requests[i];
    const std::string field = "requests[" + std::to_string(i) + "]";
    if (r.q_len < 1) {
      return invalid_argument(field + ".q_len = " + std::to_string(r.q_len) + ": expected >= 1");
    }
    if (r.kv_len < r.q_len) {
      return invalid_argument(field + ".kv_len = " + std::to_string(r.kv_len) + " < q_len = " +
                              std::to_string(r.q_len) + ": expected kv_len >= q_len");
    }
    int64_t prefix_len = 0;
    if (!r.prefix.empty()) {
      const auto it = index.find(r.prefix);
      if (it == index.end()) {
        return invalid_argument(field + ".prefix = " + quoted(r.prefix) +
                                ": no prefix has this id");
      }
      prefix_len = chain_len[it->second];
      for (int n : chain_of(spec, index, it->second)) node_used[n] = 1;
    }
    if (static_cast<int64_t>(r.kv_len) - r.q_len < prefix_len) {
      return invalid_argument(field + ".kv_len = " + std::to_string(r.kv_len) +
                              ": kv_len - q_len = " + std::to_string(r.kv_len - r.q_len) + " < " +
                              std::to_string(prefix_len) + ", the length of prefix chain " +
                              quoted(r.prefix) + " (query rows must follow the shared prefix)");
    }
    total_rows += r.q_len;
    total_pages += (r.kv_len - prefix_len + spec.page_size - 1) / spec.page_size;
  }
  for (int i = 0; i < num_nodes; ++i) {
    if (node_used[i]) total_pages += spec.prefixes[i].len / spec.page_size;
  }
  const int64_t q_elements = total_rows * spec.num_qo_heads * spec.head_dim;
  const int64_t kv_elements = total_pages * spec.page_size * spec.num_kv_heads * spec.head_dim;
  if (q_elements > kMaxSpecTensorElements || kv_elements > kMaxSpecTensorElements) {
    return invalid_argument("requests: the batch needs " + std::to_string(q_elements) +
                            " q elements and " + std::to_string(kv_elements) +
                            " k_pages elements, expected at most " +
                            std::to_string(kMaxSpecTensorElements) + " each");
  }
  return ok_status();
}

Result<BatchSpec> parse_batch_spec(std::string_view json_text) {
  try {
    const json root = json::parse(json_text.begin(), json_text.end());
    return parse_json(root);
  } catch (const json::exception& e) {
    return invalid_argument(std::string("batch spec: invalid JSON: ") + e.what());
  }
}

Result<BatchSpec> load_batch_spec(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return not_found("batch spec file " + quoted(path) + ": cannot be opened");
  std::ostringstream text;
  text << file.rdbuf();
  if (file.bad()) return not_found("batch spec file " + quoted(path) + ": read error");
  Result<BatchSpec> spec = parse_batch_spec(text.str());
  if (!spec.ok()) {
    return Status(spec.status().code(), path + ": " + spec.status().message());
  }
  return spec;
}

std::string to_json(const BatchSpec& spec) {
  json root = json::object();
  root["num_qo_heads"] = spec.num_qo_heads;
  root["num_kv_heads"] = spec.num_kv_heads;
  root["head_dim"] = spec.head_dim;
  root["page_size"] = spec.page_size;
  root["dtype"] = std::string(dtype_name(spec.dtype));
  if (spec.kv_fp8) root["kv_dtype"] = std::string(dtype_name(DType::kFP8E4M3));
  root["seed"] = spec.seed;
  json prefixes = json::array();
  for (const PrefixSpec& p : spec.prefixes) {
    json node = {{"id", p.id}, {"len", p.len}};
    if (!p.parent.empty()) node["parent"] = p.parent;
    prefixes.push_back(std::move(node));
  }
  root["prefixes"] = std::move(prefixes);
  json requests = json::array();
  for (const RequestSpec& r : spec.requests) {
    json request = {{"q_len", r.q_len}, {"kv_len", r.kv_len}};
    if (!r.prefix.empty()) request["prefix"] = r.prefix;
    requests.push_back(std::move(request));
  }
  root["requests"] = std::move(requests);
  return root.dump();
}

Result<BatchData> build_batch(const BatchSpec& spec, const BuildOptions& options) {
  PS_RETURN_IF_ERROR(validate_spec(spec));
  PS_ASSIGN_OR_RETURN(auto index, index_prefixes(spec));
  const int ps = spec.page_size;

  // Logical pages: each used prefix node once (in spec order), then each request's own.
  const int num_nodes = static_cast<int>(spec.prefixes.size());
  std::vector<std::vector<int>> chains(spec.requests.size());
  std::vector<char> node_used(num_nodes, 0);
  for (size_t i = 0; i < spec.requests.size(); ++i) {
    if (spec.requests[i].prefix.empty()) continue;
    chains[i] = chain_of(spec, index, index.at(spec.requests[i].prefix));
    for (int n : chains[i]) node_used[n] = 1;
  }
  int num_pages = 0;
  std::vector<int> node_first_page(num_nodes, -1);
  for (int n = 0; n < num_nodes; ++n) {
    if (!node_used[n]) continue;
    node_first_page[n] = num_pages;
    num_pages += spec.prefixes[n].len / ps;
  }
  BatchData data;
  BatchLayout& layout = data.layout;
  layout.num_qo_heads = spec.num_qo_heads;
  layout.num_kv_heads = spec.num_kv_heads;
  layout.head_dim = spec.head_dim;
  layout.page_size = ps;
  layout.dtype = spec.dtype;
  layout.kv_fp8 = spec.kv_fp8;
  layout.qo_indptr = {0};
  layout.kv_page_indptr = {0};
  std::vector<int32_t> logical;  // logical page ids, request-major
  for (size_t i = 0; i < spec.requests.size(); ++i) {
    const RequestSpec& r = spec.requests[i];
    int prefix_len = 0;
    for (int n : chains[i]) {
      for (int p = 0; p < spec.prefixes[n].len / ps; ++p) logical.push_back(node_first_page[n] + p);
      prefix_len += spec.prefixes[n].len;
    }
    const int own_tokens = r.kv_len - prefix_len;  // >= q_len >= 1 (validated)
    const int own_pages = (own_tokens + ps - 1) / ps;
    for (int p = 0; p < own_pages; ++p) logical.push_back(num_pages++);
    layout.qo_indptr.push_back(layout.qo_indptr.back() + r.q_len);
    layout.kv_page_indptr.push_back(static_cast<int32_t>(logical.size()));
    layout.kv_last_page_len.push_back(own_tokens - (own_pages - 1) * ps);
  }
  layout.num_pages = num_pages;

  // Physical ids: a seeded Fisher-Yates shuffle, never the identity (paging must be exercised).
  std::vector<int32_t> physical(num_pages);
  for (int p = 0; p < num_pages; ++p) physical[p] = p;
  Rng perm_rng(spec.seed ^ kSaltPermutation);
  for (int p = num_pages - 1; p > 0; --p) {
    std::swap(physical[p], physical[perm_rng.uniform_int(0, p)]);
  }
  if (num_pages >= 2 && std::is_sorted(physical.begin(), physical.end())) {
    std::rotate(physical.begin(), physical.begin() + 1, physical.end());
  }
  layout.kv_page_indices.resize(logical.size());
  for (size_t i = 0; i < logical.size(); ++i) layout.kv_page_indices[i] = physical[logical[i]];
  PS_CHECK(validate(layout).ok()) << validate(layout).to_string();

  const auto fill = [&](std::vector<std::byte>& buffer, size_t elements, DType dtype,
                        uint64_t salt) {
    buffer.resize(elements * dtype_size_bytes(dtype));
    Rng rng(spec.seed ^ salt);
    for (size_t i = 0; i < elements; ++i) {
      store_from_float(buffer.data(), i, dtype, static_cast<float>(rng.normal()));
    }
  };
  const DType kv_dtype = layout.kv_dtype();
  fill(data.q, layout.q_elements(), spec.dtype, kSaltQ);
  fill(data.k_pages, layout.kv_page_elements(), kv_dtype, kSaltK);
  fill(data.v_pages, layout.kv_page_elements(), kv_dtype, kSaltV);
  if (options.poison_unused_slots) {
    const size_t token_elements = static_cast<size_t>(spec.num_kv_heads) * spec.head_dim;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (int r = 0; r < layout.batch_size(); ++r) {
      const size_t page =
          static_cast<size_t>(layout.kv_page_indices[layout.kv_page_indptr[r + 1] - 1]);
      for (int slot = layout.kv_last_page_len[r]; slot < ps; ++slot) {
        const size_t base = (page * ps + slot) * token_elements;
        for (size_t e = 0; e < token_elements; ++e) {
          store_from_float(data.k_pages.data(), base + e, kv_dtype, nan);
          store_from_float(data.v_pages.data(), base + e, kv_dtype, nan);
        }
      }
    }
  }
  data.sm_scale = 1.0f / std::sqrt(static_cast<float>(spec.head_dim));
  return data;
}

}  // namespace packserve::attention
