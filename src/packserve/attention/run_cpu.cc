// run_cpu.cc: CPU executor and coverage counter (run_cpu.h).
#include "packserve/attention/run_cpu.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "packserve/attention/merge.h"

namespace packserve::attention {
namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::string item_name(int i) { return "plan.items[" + std::to_string(i) + "]"; }

// Bounds checks that make execution memory-safe and race-free (see run_cpu.h).
Status check_plan_bounds(const Plan& plan, const BatchLayout& layout) {
  if (plan.group_size != layout.group_size() || plan.num_kv_heads != layout.num_kv_heads ||
      plan.head_dim != layout.head_dim) {
    return invalid_argument(
        "plan: group_size/num_kv_heads/head_dim = " + std::to_string(plan.group_size) + "/" +
        std::to_string(plan.num_kv_heads) + "/" + std::to_string(plan.head_dim) +
        ", the layout has " + std::to_string(layout.group_size()) + "/" +
        std::to_string(layout.num_kv_heads) + "/" + std::to_string(layout.head_dim));
  }
  if (plan.num_partial_slots < 0) {
    return invalid_argument("plan.num_partial_slots = " + std::to_string(plan.num_partial_slots) +
                            ": expected >= 0");
  }
  const int total_rows = layout.total_rows();
  // Items and merges are head-implicit (plan.h): written-once is checked per row.
  std::vector<char> output_written(static_cast<size_t>(total_rows), 0);
  std::vector<char> slot_written(plan.num_partial_slots, 0);
  const int64_t num_item_rows = static_cast<int64_t>(plan.item_rows.size());
  for (int i = 0; i < static_cast<int>(plan.items.size()); ++i) {
    const WorkItem& item = plan.items[i];
    const std::string name = item_name(i);
    if (item.rows_begin < 0 || item.rows_end <= item.rows_begin || item.rows_end > num_item_rows) {
      return invalid_argument(name + ".rows = [" + std::to_string(item.rows_begin) + ", " +
                              std::to_string(item.rows_end) +
                              "): expected a non-empty range within item_rows (size " +
                              std::to_string(num_item_rows) + ")");
    }
    if (item.kv_request < 0 || item.kv_request >= layout.batch_size()) {
      return invalid_argument(name + ".kv_request = " + std::to_string(item.kv_request) +
                              ": expected in [0, " + std::to_string(layout.batch_size()) + ")");
    }
    if (item.kv_begin < 0 || item.kv_end <= item.kv_begin ||
        item.kv_end > layout.kv_len(item.kv_request)) {
      return invalid_argument(name + ".kv = [" + std::to_string(item.kv_begin) + ", " +
                              std::to_string(item.kv_end) + "): expected a non-empty range " +
                              "within kv_len(request " + std::to_string(item.kv_request) +
                              ") = " + std::to_string(layout.kv_len(item.kv_request)));
    }
    if (!item.writes_final &&
        (item.partial_begin < 0 ||
         static_cast<int64_t>(item.partial_begin) + item.num_rows() > plan.num_partial_slots)) {
      return invalid_argument(
          name + ".partial_begin = " + std::to_string(item.partial_begin) + ": slots for " +
          std::to_string(item.num_rows()) +
          " rows exceed num_partial_slots = " + std::to_string(plan.num_partial_slots));
    }
    for (int k = 0; k < item.num_rows(); ++k) {
      const int32_t row = plan.item_rows[item.rows_begin + k];
      if (row < 0 || row >= total_rows) {
        return invalid_argument(name + " row " + std::to_string(k) + " = " + std::to_string(row) +
                                ": expected a query row in [0, " + std::to_string(total_rows) +
                                ")");
      }
      char& written =
          item.writes_final ? output_written[row] : slot_written[item.partial_begin + k];
      if (written) {
        return invalid_argument(name + " row " + std::to_string(row) + ": its " +
                                (item.writes_final
                                     ? std::string("output")
                                     : "partial slot " + std::to_string(item.partial_begin + k)) +
                                " is written twice");
      }
      written = 1;
    }
  }
  const int num_merges = plan.num_merges();
  if (num_merges == 0 && plan.merge_indptr.empty() && plan.merge_slots.empty()) {
    return ok_status();  // no merge map at all
  }
  if (plan.merge_indptr.size() != static_cast<size_t>(num_merges) + 1 ||
      plan.merge_indptr[0] != 0 ||
      plan.merge_indptr.back() != static_cast<int32_t>(plan.merge_slots.size())) {
    return invalid_argument("plan merge map: merge_indptr must have num_merges + 1 = " +
                            std::to_string(num_merges + 1) + " entries from 0 to " +
                            "merge_slots.size()");
  }
  for (int e = 0; e < num_merges; ++e) {
    if (plan.merge_indptr[e + 1] < plan.merge_indptr[e]) {
      return invalid_argument("plan.merge_indptr[" + std::to_string(e + 1) + "] = " +
                              std::to_string(plan.merge_indptr[e + 1]) + " < merge_indptr[" +
                              std::to_string(e) + "] = " + std::to_string(plan.merge_indptr[e]) +
                              ": offsets must be non-decreasing");
    }
  }
  for (int e = 0; e < num_merges; ++e) {
    const std::string name = "plan merge entry " + std::to_string(e);
    const int32_t row = plan.merge_row[e];
    if (row < 0 || row >= total_rows) {
      return invalid_argument(name + ": row " + std::to_string(row) + " outside [0, " +
                              std::to_string(total_rows) + ")");
    }
    char& written = output_written[row];
    if (written) {
      return invalid_argument(name + ": output of row " + std::to_string(row) +
                              " is written twice");
    }
    written = 1;
    for (int32_t s = plan.merge_indptr[e]; s < plan.merge_indptr[e + 1]; ++s) {
      if (plan.merge_slots[s] < 0 || plan.merge_slots[s] >= plan.num_partial_slots) {
        return invalid_argument(
            name + ": slot " + std::to_string(plan.merge_slots[s]) +
            " outside [0, num_partial_slots = " + std::to_string(plan.num_partial_slots) + ")");
      }
    }
  }
  return ok_status();
}

// Runs f(index, worker) for index in [0, n) on num_threads workers (the caller is worker 0).
template <typename F>
void parallel_for(int n, int num_threads, F&& f) {
  const int workers = std::max(1, std::min(num_threads, n));
  std::atomic<int> next{0};
  const auto loop = [&](int worker) {
    for (int i = next.fetch_add(1); i < n; i = next.fetch_add(1)) f(i, worker);
  };
  std::vector<std::thread> threads;
  for (int w = 1; w < workers; ++w) threads.emplace_back(loop, w);
  loop(0);
  for (std::thread& t : threads) t.join();
}

// Converts `count` elements starting at element `offset` of a dtype buffer to f32 (exact).
void load_f32(std::span<const std::byte> data, size_t offset, int count, DType dtype, float* dst) {
  const std::byte* src = data.data() + offset * dtype_size_bytes(dtype);
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(count) * 4);
      return;
    case DType::kBF16:
      for (int d = 0; d < count; ++d) {
        uint16_t h;
        std::memcpy(&h, src + 2 * d, 2);
        dst[d] = bf16_to_float(h);
      }
      return;
    case DType::kF16:
      for (int d = 0; d < count; ++d) {
        uint16_t h;
        std::memcpy(&h, src + 2 * d, 2);
        dst[d] = f16_to_float(h);
      }
      return;
    case DType::kFP8E4M3:
      for (int d = 0; d < count; ++d) dst[d] = e4m3_value(static_cast<uint8_t>(src[d]));
      return;
  }
}

// The value of every e4m3 byte times `scale`, each product rounded once to f32: float8 K/V
// pages decode through it, one table load per element (e4m3_value costs an ldexp and branches).
using E4m3Table = std::array<float, 256>;
E4m3Table e4m3_table(float scale) {
  E4m3Table table;
  for (int b = 0; b < 256; ++b) {
    table[static_cast<size_t>(b)] = e4m3_value(static_cast<uint8_t>(b)) * scale;
  }
  return table;
}

// load_f32 of K/V elements; e4m3 bytes become table[byte] (their values times the scale).
void load_kv(std::span<const std::byte> data, size_t offset, int count, DType dtype,
             const E4m3Table& table, float* dst) {
  if (dtype != DType::kFP8E4M3) {
    load_f32(data, offset, count, dtype, dst);
    return;
  }
  const std::byte* src = data.data() + offset;
  for (int d = 0; d < count; ++d) dst[d] = table[static_cast<uint8_t>(src[d])];
}

// Dot product in a fixed order: 8 interleaved lanes, then a fixed tree (n % 8 == 0).
float dot8(const float* a, const float* b, int n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int d = 0; d < n; d += 8) {
    for (int l = 0; l < 8; ++l) acc[l] += a[d + l] * b[d + l];
  }
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

struct Scratch {
  std::vector<float> k, v, q, scores, acc;
};

struct Executor {
  const Plan& plan;
  const BatchLayout& layout;
  const AttentionTensors& tensors;
  std::span<float> out;
  E4m3Table k_table, v_table;      // kv_fp8: e4m3 values times k_scale / v_scale
  std::vector<float> partial_o;    // [num_kv_heads, num_partial_slots, group_size, head_dim]
  std::vector<float> partial_lse;  // [num_kv_heads, num_partial_slots, group_size]

  // Storage index of partial slot `slot`, qo head g of the group, for KV head kv_head.
  size_t slot_index(int kv_head, int32_t slot, int g) const {
    return (static_cast<size_t>(kv_head) * plan.num_partial_slots + slot) * plan.group_size + g;
  }

  void run_item(int index, int kv_head, Scratch& s) {
    const WorkItem& item = plan.items[index];
    const int d_head = layout.head_dim;
    const int group = layout.group_size();
    const int n_keys = item.kv_tokens();
    const int ps = layout.page_size;
    s.k.resize(static_cast<size_t>(n_keys) * d_head);
    s.v.resize(static_cast<size_t>(n_keys) * d_head);
    for (int t = 0; t < n_keys; ++t) {
      const int position = item.kv_begin + t;
      const size_t base =
          ((static_cast<size_t>(layout.page_of(item.kv_request, position)) * ps + position % ps) *
               layout.num_kv_heads +
           kv_head) *
          d_head;
      load_kv(tensors.k_pages, base, d_head, layout.kv_dtype(), k_table, s.k.data() + t * d_head);
      load_kv(tensors.v_pages, base, d_head, layout.kv_dtype(), v_table, s.v.data() + t * d_head);
    }
    s.q.resize(d_head);
    s.acc.resize(d_head);
    s.scores.resize(n_keys);
    const float scale_log2 = tensors.sm_scale * kLog2e;
    for (int k = 0; k < item.num_rows(); ++k) {
      const int row = plan.item_rows[item.rows_begin + k];
      const int r = request_of_row(layout, row);
      const int position = layout.row_position(r, row - layout.qo_indptr[r]);
      const int visible = std::clamp(position + 1 - item.kv_begin, 0, n_keys);
      for (int g = 0; g < group; ++g) {
        const int h = kv_head * group + g;
        const size_t q_base = (static_cast<size_t>(row) * layout.num_qo_heads + h) * d_head;
        load_f32(tensors.q, q_base, d_head, layout.dtype, s.q.data());
        // Pass 1: scores (base 2) and their max.
        float m = kNegInf;
        for (int j = 0; j < visible; ++j) {
          s.scores[j] = dot8(s.q.data(), s.k.data() + j * d_head, d_head) * scale_log2;
          m = std::max(m, s.scores[j]);
        }
        // Pass 2: weights, their sum and the weighted V, keys in ascending position.
        std::fill(s.acc.begin(), s.acc.end(), 0.0f);
        float l = 0.0f;
        for (int j = 0; j < visible; ++j) {
          const float w = std::exp2(s.scores[j] - m);
          l += w;
          const float* v = s.v.data() + j * d_head;
          for (int d = 0; d < d_head; ++d) s.acc[d] += w * v[d];
        }
        float* o;
        if (item.writes_final) {
          o = out.data() + q_base;
        } else {
          const size_t slot = slot_index(kv_head, item.partial_begin + k, g);
          o = partial_o.data() + slot * d_head;
          partial_lse[slot] = visible > 0 ? m + std::log2(l) : kNegInf;
        }
        for (int d = 0; d < d_head; ++d) o[d] = visible > 0 ? s.acc[d] / l : 0.0f;
      }
    }
  }

  void run_merge(int e, int kv_head) {
    const int d_head = layout.head_dim;
    const int group = layout.group_size();
    const int begin = plan.merge_indptr[e];
    const int num_parts = plan.merge_indptr[e + 1] - begin;
    std::vector<std::span<const float>> o_parts(num_parts);
    std::vector<float> lse_parts(num_parts);
    for (int g = 0; g < group; ++g) {
      for (int p = 0; p < num_parts; ++p) {
        const size_t slot = slot_index(kv_head, plan.merge_slots[begin + p], g);
        o_parts[p] = std::span<const float>(partial_o.data() + slot * d_head, d_head);
        lse_parts[p] = partial_lse[slot];
      }
      const int h = kv_head * group + g;
      const size_t o_base =
          (static_cast<size_t>(plan.merge_row[e]) * layout.num_qo_heads + h) * d_head;
      float lse = 0.0f;
      merge_states(o_parts, lse_parts, out.subspan(o_base, d_head), lse);
    }
  }
};

}  // namespace

Status run_cpu(const Plan& plan, const BatchLayout& layout, const AttentionTensors& tensors,
               std::span<float> out, const RunCpuOptions& options) {
  PS_RETURN_IF_ERROR(check_tensors(layout, tensors));
  if (out.size() != layout.q_elements()) {
    return invalid_argument("out: " + std::to_string(out.size()) + " floats, expected " +
                            std::to_string(layout.q_elements()) +
                            " = total_rows * num_qo_heads * head_dim");
  }
  if (options.num_threads < 1) {
    return invalid_argument("num_threads = " + std::to_string(options.num_threads) +
                            ": expected >= 1");
  }
  PS_RETURN_IF_ERROR(check_plan_bounds(plan, layout));
  const int heads = layout.num_kv_heads;
  const size_t slot_floats =
      static_cast<size_t>(heads) * plan.num_partial_slots * layout.group_size();
  // NaN-filled, so a slot merged without being written poisons the output visibly.
  Executor exec{
      plan,
      layout,
      tensors,
      out,
      e4m3_table(tensors.k_scale),
      e4m3_table(tensors.v_scale),
      std::vector<float>(slot_floats * layout.head_dim, std::numeric_limits<float>::quiet_NaN()),
      std::vector<float>(slot_floats, std::numeric_limits<float>::quiet_NaN())};
  const int workers = options.num_threads;
  std::vector<Scratch> scratch(workers);
  // Every item and merge entry once per KV head (plan.h: head-implicit).
  parallel_for(static_cast<int>(plan.items.size()) * heads, workers,
               [&](int i, int worker) { exec.run_item(i / heads, i % heads, scratch[worker]); });
  parallel_for(plan.num_merges() * heads, workers,
               [&](int e, int) { exec.run_merge(e / heads, e % heads); });
  return ok_status();
}

Status count_coverage(const Plan& plan, const BatchLayout& layout) {
  PS_RETURN_IF_ERROR(check_plan_bounds(plan, layout));
  const int total_rows = layout.total_rows();
  // Items of each row (CSR), in item order.
  std::vector<int32_t> row_indptr(total_rows + 1, 0);
  for (const WorkItem& item : plan.items) {
    for (int k = item.rows_begin; k < item.rows_end; ++k) ++row_indptr[plan.item_rows[k] + 1];
  }
  for (int row = 0; row < total_rows; ++row) row_indptr[row + 1] += row_indptr[row];
  std::vector<int32_t> row_items(row_indptr.back());
  std::vector<int32_t> fill(row_indptr.begin(), row_indptr.end() - 1);
  for (int i = 0; i < static_cast<int>(plan.items.size()); ++i) {
    const WorkItem& item = plan.items[i];
    for (int k = item.rows_begin; k < item.rows_end; ++k) row_items[fill[plan.item_rows[k]]++] = i;
  }
  // An item covers its rows for every qo head (it runs once per KV head, plan.h), so the
  // count of (row, key) is the count of (row, qo head, key) for every qo head.
  std::vector<uint16_t> counts;
  for (int row = 0; row < total_rows; ++row) {
    const int r = request_of_row(layout, row);
    const int position = layout.row_position(r, row - layout.qo_indptr[r]);
    const std::string where = "row " + std::to_string(row) + " (request " + std::to_string(r) +
                              ", position " + std::to_string(position) + ")";
    counts.assign(position + 1, 0);
    for (int32_t x = row_indptr[row]; x < row_indptr[row + 1]; ++x) {
      const WorkItem& item = plan.items[row_items[x]];
      const int end = std::min(item.kv_end, position + 1);
      if (end <= item.kv_begin) {
        return internal_error(item_name(row_items[x]) + " holds " + where +
                              ", which sees none of its keys [" + std::to_string(item.kv_begin) +
                              ", " + std::to_string(item.kv_end) + ")");
      }
      for (int p = item.kv_begin; p < end; ++p) {
        if (p % layout.page_size == 0 || p == item.kv_begin) {
          if (layout.page_of(r, p) != layout.page_of(item.kv_request, p)) {
            return internal_error(item_name(row_items[x]) + " holds " + where +
                                  ", whose page at key " + std::to_string(p) + " is " +
                                  std::to_string(layout.page_of(r, p)) + ", not the item's page " +
                                  std::to_string(layout.page_of(item.kv_request, p)));
          }
        }
        if (counts[p] < UINT16_MAX) ++counts[p];
      }
    }
    for (int p = 0; p <= position; ++p) {
      if (counts[p] == 1) continue;
      std::string by;
      for (int32_t x = row_indptr[row]; x < row_indptr[row + 1]; ++x) {
        const WorkItem& item = plan.items[row_items[x]];
        if (item.kv_begin <= p && p < item.kv_end) {
          by += (by.empty() ? " by items " : ", ") + std::to_string(row_items[x]);
        }
      }
      return internal_error(where + ", every qo head, key " + std::to_string(p) + ": covered " +
                            std::to_string(counts[p]) + " times" + by);
    }
  }
  // Output side: exactly one producer per row; each slot merged once, by its owner.
  // (check_plan_bounds already rejected outputs and slots written twice.)
  std::vector<char> produced(static_cast<size_t>(total_rows), 0);
  std::vector<int32_t> slot_owner(plan.num_partial_slots, -1);  // row
  for (const WorkItem& item : plan.items) {
    for (int k = 0; k < item.num_rows(); ++k) {
      const int32_t row = plan.item_rows[item.rows_begin + k];
      if (item.writes_final) {
        produced[row] = 1;
      } else {
        slot_owner[item.partial_begin + k] = row;
      }
    }
  }
  std::vector<char> slot_merged(plan.num_partial_slots, 0);
  for (int e = 0; e < plan.num_merges(); ++e) {
    const int32_t row = plan.merge_row[e];
    produced[row] = 1;
    for (int32_t s = plan.merge_indptr[e]; s < plan.merge_indptr[e + 1]; ++s) {
      const int32_t slot = plan.merge_slots[s];
      if (slot_owner[slot] != row) {
        return internal_error("merge entry " + std::to_string(e) + " (row " + std::to_string(row) +
                              ") reads slot " + std::to_string(slot) + ", which " +
                              (slot_owner[slot] < 0
                                   ? std::string("no item writes")
                                   : "belongs to row " + std::to_string(slot_owner[slot])));
      }
      if (slot_merged[slot]++) {
        return internal_error("partial slot " + std::to_string(slot) + " is merged twice");
      }
    }
  }
  for (int32_t slot = 0; slot < plan.num_partial_slots; ++slot) {
    if (slot_owner[slot] >= 0 && !slot_merged[slot]) {
      return internal_error("partial slot " + std::to_string(slot) + " of row " +
                            std::to_string(slot_owner[slot]) + " is written but never merged");
    }
  }
  for (int row = 0; row < total_rows; ++row) {
    if (!produced[row]) {
      return internal_error("row " + std::to_string(row) +
                            ": no writes_final item and no merge entry produces its output");
    }
  }
  return ok_status();
}

}  // namespace packserve::attention
