// attention_bench.cu: GPU timings of the CUDA attention executor (issue 6 "Benchmarks") beside
// the ceilings measured in the same process. One JSON line per case on stdout, then a
// markdown table on stderr-free stdout after the line "### table".
//
// Cases (bf16, head_dim 128, 32 qo / 8 kv heads, page size 16; lengths lognormal with median
// 1000 tokens, sigma 1.0, capped at 16k, seeded):
//   decode_b{32,128,512}   q_len 1; bytes = K+V of every request's context
//   pat_[1,4,64]_[2048,512,256], pat_[1,256]_[4096,128]   shared-prefix decode trees;
//                          bound = unique K/V bytes (each physical page once) / copy bandwidth
//   prefill_48             48 prompts lognormal median 200 capped 8k + one 8k prompt;
//                          useful FLOPs = 4 * head_dim * qo_heads * causal-visible pairs
//   prefill_8k, dense_256x4096  (--cases wide) plans of 128-row passes only: one 8k prompt;
//                          256 rows over 4096 keys (PAT [1,256]'s root as one request)
//   mixed                  128 decode rows + one 2k prefill chunk: one launch vs two
//   overhead_8             plan + upload + run (+ sync) of 8 decode rows (kv 128), host wall
//                          time, eager vs graph replay
//   *_fp8kv  (--cases fp8kv) decode_b{32,128,512}, the PAT trees (prefix policy) and
//                          prefill_48 over a float8 KV cache (e4m3 pages, DeviceBatch::kv_fp8);
//                          bytes and bounds count one byte per K/V element. Their peers are
//                          the bf16 rows of the same names in the same process.
// Timing (bench_harness.cuh): eager = median of 20 runs each after an L2 flush; graph = median
// per call of graph replays of 10 back-to-back calls. K/V/Q are random bf16 on the device.
// Usage: attention_bench [--cases decode,pat,prefill,wide,mixed,overhead,fp8kv] [--timeline DIR]
//                        [--cost-alpha A] [--cost-item X] [--cost-wide-key W]
//   --cost-alpha, --cost-item, --cost-wide-key: the planner's CostModel::alpha, ::item and
//   ::wide_key (plan.h) for every case instead of the defaults (to calibrate them).
//   --timeline DIR: after timing a decode, pat or prefill case, one more warm run records the
//   kernel timeline (run_cuda.h DeviceBatch::timeline) into DIR/<case>_<policy>.csv, one line
//   per (KV head, work item): the item's shape, its SM and block, start/end in globaltimer ns
//   and in SM clock cycles, and the phases of its first q pass (row positions known, first KV
//   stage landed, KV walk done; globaltimer ns). scripts/timeline.py summarises the files.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "bench/gpu/bench_harness.cuh"
#include "packserve/attention/cuda/gpu_batch.h"
#include "packserve/attention/cuda/run_cuda.h"
#include "packserve/attention/cuda/workspace.h"
#include "packserve/attention/plan.h"
#include "packserve/common/rng.h"

namespace packserve::bench {
namespace {

using attention::BatchLayout;
using attention::Plan;
using attention::Policy;
using attention::cuda::DeviceBuffer;
using attention::cuda::Workspace;

constexpr int kQoHeads = 32, kKvHeads = 8, kHeadDim = 128, kPageSize = 16;
bool g_kv_fp8 = false;  // layouts built now have float8 K/V pages (the fp8kv cases)

void die(const Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, s.to_string().c_str());
    std::exit(3);
  }
}

// Builds a layout request by request; pages are numbered in allocation order, then permuted.
struct LayoutBuilder {
  BatchLayout l;
  int next_page = 0;
  LayoutBuilder() {
    l.num_qo_heads = kQoHeads;
    l.num_kv_heads = kKvHeads;
    l.head_dim = kHeadDim;
    l.page_size = kPageSize;
    l.dtype = DType::kBF16;
    l.kv_fp8 = g_kv_fp8;
    l.qo_indptr = {0};
    l.kv_page_indptr = {0};
  }
  std::vector<int32_t> new_pages(int n) {
    std::vector<int32_t> p(n);
    std::iota(p.begin(), p.end(), next_page);
    next_page += n;
    return p;
  }
  // own_tokens >= q_len new tokens after `shared` pages.
  void add(int q_len, int own_tokens, const std::vector<int32_t>& shared = {}) {
    std::vector<int32_t> pages = shared;
    const int own_pages = (own_tokens + kPageSize - 1) / kPageSize;
    const std::vector<int32_t> mine = new_pages(own_pages);
    pages.insert(pages.end(), mine.begin(), mine.end());
    l.qo_indptr.push_back(l.qo_indptr.back() + q_len);
    l.kv_page_indices.insert(l.kv_page_indices.end(), pages.begin(), pages.end());
    l.kv_page_indptr.push_back(static_cast<int32_t>(l.kv_page_indices.size()));
    l.kv_last_page_len.push_back(own_tokens - (own_pages - 1) * kPageSize);
  }
  BatchLayout finish(uint64_t seed) {
    l.num_pages = next_page;
    std::vector<int32_t> perm(next_page);
    std::iota(perm.begin(), perm.end(), 0);
    Rng rng(seed);
    for (int i = next_page - 1; i > 0; --i) {
      std::swap(perm[i], perm[static_cast<int>(rng.next_u64() % static_cast<uint64_t>(i + 1))]);
    }
    for (int32_t& p : l.kv_page_indices) p = perm[p];
    die(attention::validate(l), "layout");
    return l;
  }
};

int64_t kv_token_bytes(const BatchLayout& l) {
  return int64_t{kKvHeads} * kHeadDim * 2 * static_cast<int64_t>(dtype_size_bytes(l.kv_dtype()));
}

int64_t bytes_needed(const BatchLayout& l) {
  int64_t tokens = 0;
  for (int r = 0; r < l.batch_size(); ++r) tokens += l.kv_len(r);
  return tokens * kv_token_bytes(l);
}
int64_t bytes_unique(const BatchLayout& l) {  // each physical page once (full pages counted)
  std::vector<char> seen(l.num_pages, 0);
  int64_t tokens = 0;
  for (int r = 0; r < l.batch_size(); ++r) {
    for (int i = 0; i < l.num_pages_of(r); ++i) {
      const int32_t p = l.kv_page_indices[l.kv_page_indptr[r] + i];
      if (seen[p]) continue;
      seen[p] = 1;
      tokens += i + 1 < l.num_pages_of(r) ? kPageSize : l.kv_last_page_len[r];
    }
  }
  return tokens * kv_token_bytes(l);
}
double useful_flops(const BatchLayout& l) {  // QK and PV over causal-visible pairs
  double pairs = 0;
  for (int r = 0; r < l.batch_size(); ++r) {
    for (int i = 0; i < l.q_len(r); ++i) pairs += l.row_position(r, i) + 1;
  }
  return 4.0 * kHeadDim * kQoHeads * pairs;
}

attention::CostModel g_cost;  // --cost-alpha, --cost-item, --cost-wide-key

// Device tensors of one layout plus its workspace and plan.
struct Prepared {
  BatchLayout layout;
  DeviceBuffer q, k, v, out, pos, kvp, kvi;
  attention::cuda::DeviceBatch view;
  std::unique_ptr<Workspace> ws;
  Plan plan;
};

std::unique_ptr<Prepared> prepare(const BatchLayout& l, Policy policy, int num_ctas,
                                  const Prepared* share_kv = nullptr) {
  auto p = std::make_unique<Prepared>();
  p->layout = l;
  const size_t q_elems = l.q_elements();
  die(p->q.reserve(q_elems * 2), "q");
  die(p->out.reserve(q_elems * 2), "out");
  fill_random(p->q.get(), q_elems, 11);
  if (share_kv == nullptr) {
    const size_t kv_bytes = l.kv_page_elements() * dtype_size_bytes(l.kv_dtype());
    die(p->k.reserve(kv_bytes), "k");
    die(p->v.reserve(kv_bytes), "v");
    auto fill = l.kv_fp8 ? fill_random_e4m3 : fill_random;
    fill(p->k.get(), l.kv_page_elements(), 12);
    fill(p->v.get(), l.kv_page_elements(), 13);
  }
  const std::vector<int32_t> positions = l.row_positions();
  die(p->pos.upload(positions.data(), positions.size() * 4), "positions");
  die(p->kvp.upload(l.kv_page_indptr.data(), l.kv_page_indptr.size() * 4), "kvp");
  die(p->kvi.upload(l.kv_page_indices.data(), l.kv_page_indices.size() * 4), "kvi");
  p->view.q = p->q.get();
  p->view.k_pages = share_kv ? share_kv->k.get() : p->k.get();
  p->view.v_pages = share_kv ? share_kv->v.get() : p->v.get();
  p->view.q_positions = static_cast<const int32_t*>(p->pos.get());
  p->view.kv_page_indptr = static_cast<const int32_t*>(p->kvp.get());
  p->view.kv_page_indices = static_cast<const int32_t*>(p->kvi.get());
  p->view.kv_fp8 = l.kv_fp8;
  p->view.page_size = kPageSize;
  p->view.sm_scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  p->view.out = p->out.get();
  attention::PlanOptions opt;
  opt.policy = policy;
  opt.cost = g_cost;
  Result<Plan> plan = attention::make_plan(l, attention::DeviceShape{num_ctas}, opt);
  if (!plan.ok()) die(plan.status(), "make_plan");
  p->plan = std::move(plan).value();
  const attention::PlanCapacity cap{l.total_rows(), static_cast<int>(l.kv_page_indices.size()),
                                    num_ctas, kKvHeads};
  Result<Workspace> ws = Workspace::create(cap, {kQoHeads, kKvHeads, kHeadDim, DType::kBF16});
  die(ws.ok() ? ok_status() : ws.status(), "workspace");
  p->ws = std::make_unique<Workspace>(std::move(ws).value());
  die(p->ws->upload(p->plan, nullptr), "upload");
  BENCH_CUDA(cudaDeviceSynchronize());
  return p;
}

void run(const Prepared& p, cudaStream_t s) {
  die(attention::cuda::run_cuda(*p.ws, p.view, s), "run_cuda");
}

struct Row {
  std::string name, policy;
  double eager_ms, graph_ms, bytes, flops, bound_ms;
  int wide_items = 0;  // items the wide kernel ran (Workspace::num_wide_items)
};
std::vector<Row> g_rows;
std::string g_timeline_dir;  // --timeline

// One warm run with the kernel timeline on; writes DIR/<name>_<policy>.csv.
void write_timeline(Prepared& p, const std::string& name, const std::string& policy) {
  const Plan& plan = p.plan;
  const size_t records = plan.items.size() * static_cast<size_t>(kKvHeads);
  const size_t fields = attention::cuda::kTimelineFields;
  DeviceBuffer buf;
  die(buf.reserve(records * fields * 8), "timeline buffer");
  BENCH_CUDA(cudaMemset(buf.get(), 0, records * fields * 8));
  p.view.timeline = static_cast<uint64_t*>(buf.get());
  run(p, nullptr);
  BENCH_CUDA(cudaDeviceSynchronize());
  p.view.timeline = nullptr;
  std::vector<uint64_t> host(records * fields);
  BENCH_CUDA(cudaMemcpy(host.data(), buf.get(), host.size() * 8, cudaMemcpyDeviceToHost));
  const std::string path = g_timeline_dir + "/" + name + "_" + policy + ".csv";
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) die(Status(StatusCode::kInvalidArgument, "cannot write " + path), "timeline");
  // queue: the planned queue (the static schedule dispatch_order starts from); block: the CTA
  // that claimed the item.
  std::fprintf(f,
               "head,item,queue,rows,folded,tile_q,kv_tokens,writes_final,sm,block,start_ns,"
               "end_ns,start_clk,end_clk,positions_ns,first_stage_ns,walk_done_ns\n");
  for (int h = 0; h < kKvHeads; ++h) {
    for (size_t i = 0; i < plan.items.size(); ++i) {
      const attention::WorkItem& it = plan.items[i];
      const uint64_t* r = host.data() + (h * plan.items.size() + i) * fields;
      if (r[0] == 0) continue;  // no ticket ran it (a quad item's heads 4 k + 1 .. 4 k + 3)
      auto u = [&](int field) { return static_cast<unsigned long long>(r[field]); };
      std::fprintf(f, "%d,%zu,%d,%d,%d,%d,%d,%d,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu\n", h,
                   i, it.cta, it.num_rows(), it.num_rows() * plan.group_size, it.tile.tile_q,
                   it.kv_tokens(), it.writes_final ? 1 : 0, u(4), u(5), u(0), u(1), u(2), u(3),
                   u(attention::cuda::kTimelinePositions), u(attention::cuda::kTimelineFirstStage),
                   u(attention::cuda::kTimelineWalkDone));
    }
  }
  std::fclose(f);
}

void report(const Ceilings& c, Row r) {
  const double gbps = r.bytes / (r.graph_ms * 1e-3) / 1e9;
  const double tflops = r.flops / (r.graph_ms * 1e-3) / 1e12;
  std::printf(
      "{\"case\":\"%s\",\"policy\":\"%s\",\"graph_ms\":%.4f,\"eager_ms\":%.4f,\"kv_bytes\":%.0f,"
      "\"effective_gbps\":%.1f,\"frac_copy_bw\":%.3f,\"useful_tflops\":%.1f,"
      "\"frac_matmul\":%.3f,\"bound_ms\":%.4f,\"x_bound\":%.2f,\"copy_gbps\":%.1f,"
      "\"matmul_tflops\":%.1f,\"wide_items\":%d}\n",
      r.name.c_str(), r.policy.c_str(), r.graph_ms, r.eager_ms, r.bytes, gbps, gbps / c.copy_gbps,
      tflops, tflops / c.bf16_tflops, r.bound_ms, r.bound_ms > 0 ? r.graph_ms / r.bound_ms : 0.0,
      c.copy_gbps, c.bf16_tflops, r.wide_items);
  std::fflush(stdout);
  g_rows.push_back(r);
}

void time_case(Timer& t, const Ceilings& c, const std::string& name, const BatchLayout& l,
               Policy policy, int ctas, double bound_bytes) {
  auto p = prepare(l, policy, ctas);
  Row r{name, std::string(attention::policy_name(policy)), 0, 0, 0, 0, 0};
  r.eager_ms = t.eager_ms([&](cudaStream_t s) { run(*p, s); });
  r.graph_ms = t.graph_ms([&](cudaStream_t s) { run(*p, s); });
  r.bytes = static_cast<double>(bound_bytes > 0 ? bound_bytes : bytes_needed(l));
  r.flops = useful_flops(l);
  r.bound_ms = bound_bytes > 0 ? bound_bytes / (c.copy_gbps * 1e9) * 1e3 : 0;
  r.wide_items = p->ws->num_wide_items();
  report(c, r);
  if (!g_timeline_dir.empty()) write_timeline(*p, name, r.policy);
}

int lognormal_len(Rng& rng, double median, int cap) {
  return std::clamp(static_cast<int>(rng.lognormal(median, 1.0)), 1, cap);
}

BatchLayout decode_layout(int batch, uint64_t seed) {
  Rng rng(seed);
  LayoutBuilder b;
  for (int i = 0; i < batch; ++i) b.add(1, lognormal_len(rng, 1000, 16384));
  return b.finish(seed);
}

// PAT tree: level sizes B = {1, b1, b2...} fan-out, L = tokens per node per level; leaves decode.
BatchLayout tree_layout(const std::vector<int>& fanout, const std::vector<int>& len) {
  LayoutBuilder b;
  std::vector<std::vector<int32_t>> level = {{}};  // page lists of the current level's nodes
  for (size_t d = 0; d + 1 < fanout.size(); ++d) {
    std::vector<std::vector<int32_t>> next;
    for (const auto& parent : level) {
      const int children = d == 0 ? fanout[0] : fanout[d] / fanout[d - 1];
      for (int c = 0; c < children; ++c) {
        std::vector<int32_t> pages = parent;
        const std::vector<int32_t> own = b.new_pages(len[d] / kPageSize);
        pages.insert(pages.end(), own.begin(), own.end());
        next.push_back(pages);
      }
    }
    level = std::move(next);
  }
  const size_t d = fanout.size() - 1;
  for (const auto& parent : level) {
    const int children = fanout[d] / fanout[d - 1];
    for (int c = 0; c < children; ++c) b.add(1, len[d], parent);
  }
  return b.finish(7);
}

BatchLayout prefill_layout() {
  Rng rng(48);
  LayoutBuilder b;
  for (int i = 0; i < 48; ++i) {
    const int n = std::clamp(static_cast<int>(rng.lognormal(200, 1.0)), 1, 8192);
    b.add(n, n);
  }
  b.add(8192, 8192);
  return b.finish(48);
}

}  // namespace
}  // namespace packserve::bench

int main(int argc, char** argv) {
  using namespace packserve;
  using namespace packserve::bench;
  std::string cases = "decode,pat,prefill,wide,mixed,overhead,fp8kv";
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--cases") cases = argv[i + 1];
    if (std::string(argv[i]) == "--timeline") g_timeline_dir = argv[i + 1];
    if (std::string(argv[i]) == "--cost-alpha") g_cost.alpha = std::atof(argv[i + 1]);
    if (std::string(argv[i]) == "--cost-item") g_cost.item = std::atof(argv[i + 1]);
    if (std::string(argv[i]) == "--cost-wide-key") g_cost.wide_key = std::atof(argv[i + 1]);
  }
  auto want = [&](const char* c) { return cases.find(c) != std::string::npos; };
  Timer t;
  const Ceilings c = measure_ceilings(t);
  const Result<attention::cuda::KernelOccupancy> occ =
      attention::cuda::kernel_occupancy(kHeadDim, DType::kBF16);
  die(occ.ok() ? ok_status() : occ.status(), "occupancy");
  const int ctas = occ->grid_ctas();
  std::printf(
      "{\"ceilings\":true,\"copy_gbps\":%.1f,\"matmul_tflops\":%.1f,\"num_sms\":%d,"
      "\"ctas_per_sm\":%d,\"smem_bytes_per_cta\":%d,"
      "\"cost_alpha\":%g,\"cost_item\":%g,\"cost_wide_key\":%g}\n",
      c.copy_gbps, c.bf16_tflops, occ->num_sms, occ->ctas_per_sm, occ->smem_bytes_per_cta,
      g_cost.alpha, g_cost.item, g_cost.wide_key);
  if (want("decode")) {
    for (int batch : {32, 128, 512}) {
      const BatchLayout l = decode_layout(batch, 1000 + batch);
      time_case(t, c, "decode_b" + std::to_string(batch), l, attention::Policy::kBalanced, ctas, 0);
    }
  }
  if (want("pat")) {
    const BatchLayout t1 = tree_layout({1, 4, 64}, {2048, 512, 256});
    const BatchLayout t2 = tree_layout({1, 256}, {4096, 128});
    for (auto policy : {attention::Policy::kPrefix, attention::Policy::kBalanced}) {
      time_case(t, c, "pat_[1,4,64]_[2048,512,256]", t1, policy, ctas,
                static_cast<double>(bytes_unique(t1)));
      time_case(t, c, "pat_[1,256]_[4096,128]", t2, policy, ctas,
                static_cast<double>(bytes_unique(t2)));
    }
  }
  if (want("prefill")) {
    time_case(t, c, "prefill_48", prefill_layout(), attention::Policy::kBalanced, ctas, 0);
  }
  if (want("wide")) {
    // Plans of 128-row passes only (run_cuda.h, all-wide): one 8k prompt, and 256 rows over
    // 4096 keys (the compute of PAT [1,256]'s root: 1024 folded rows per KV head).
    LayoutBuilder p8k, root;
    p8k.add(8192, 8192);
    root.add(256, 4096);
    time_case(t, c, "prefill_8k", p8k.finish(9), attention::Policy::kBalanced, ctas, 0);
    time_case(t, c, "dense_256x4096", root.finish(10), attention::Policy::kBalanced, ctas, 0);
  }
  if (want("mixed")) {
    LayoutBuilder mixed, dec, pre;
    Rng rng(128);
    std::vector<int> lens;
    for (int i = 0; i < 128; ++i) lens.push_back(lognormal_len(rng, 1000, 16384));
    for (int n : lens) mixed.add(1, n);
    mixed.add(2048, 2048);
    const BatchLayout ml = mixed.finish(5);
    time_case(t, c, "mixed_one_launch", ml, attention::Policy::kBalanced, ctas, 0);
    // Same requests as two launches: decode rows, then the prefill chunk (same KV pool).
    for (int r = 0; r < 128; ++r) dec.add(1, lens[r]);
    pre.add(2048, 2048);
    BatchLayout dl = dec.finish(5), pl = pre.finish(5);
    dl.kv_page_indices.assign(ml.kv_page_indices.begin(),
                              ml.kv_page_indices.begin() + ml.kv_page_indptr[128]);
    pl.kv_page_indices.assign(ml.kv_page_indices.begin() + ml.kv_page_indptr[128],
                              ml.kv_page_indices.end());
    dl.num_pages = pl.num_pages = ml.num_pages;
    auto base = prepare(ml, attention::Policy::kBalanced, ctas);
    auto pd = prepare(dl, attention::Policy::kBalanced, ctas, base.get());
    auto pp = prepare(pl, attention::Policy::kBalanced, ctas, base.get());
    Row r{"mixed_two_launches", "balanced", 0, 0, 0, 0, 0};
    auto both = [&](cudaStream_t s) {
      run(*pd, s);
      run(*pp, s);
    };
    r.eager_ms = t.eager_ms(both);
    r.graph_ms = t.graph_ms(both);
    r.bytes = static_cast<double>(bytes_needed(ml));
    r.flops = useful_flops(ml);
    report(c, r);
  }
  if (want("fp8kv")) {
    g_kv_fp8 = true;
    for (int batch : {32, 128, 512}) {
      const BatchLayout l = decode_layout(batch, 1000 + batch);
      time_case(t, c, "decode_b" + std::to_string(batch) + "_fp8kv", l,
                attention::Policy::kBalanced, ctas, 0);
    }
    const BatchLayout t1 = tree_layout({1, 4, 64}, {2048, 512, 256});
    const BatchLayout t2 = tree_layout({1, 256}, {4096, 128});
    time_case(t, c, "pat_[1,4,64]_[2048,512,256]_fp8kv", t1, attention::Policy::kPrefix, ctas,
              static_cast<double>(bytes_unique(t1)));
    time_case(t, c, "pat_[1,256]_[4096,128]_fp8kv", t2, attention::Policy::kPrefix, ctas,
              static_cast<double>(bytes_unique(t2)));
    time_case(t, c, "prefill_48_fp8kv", prefill_layout(), attention::Policy::kBalanced, ctas, 0);
    g_kv_fp8 = false;
  }
  if (want("overhead")) {
    LayoutBuilder b;
    for (int i = 0; i < 8; ++i) b.add(1, 128);
    const BatchLayout l = b.finish(8);
    auto p = prepare(l, attention::Policy::kBalanced, ctas);
    cudaStream_t s = t.stream();
    auto host_ms = [&](bool graph, cudaGraphExec_t exec) {
      std::vector<double> v;
      for (int i = 0; i < 60; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        Result<Plan> plan = attention::make_plan(l, attention::DeviceShape{ctas}, {});
        die(plan.ok() ? p->ws->upload(*plan, s) : plan.status(), "plan+upload");
        if (graph) {
          BENCH_CUDA(cudaGraphLaunch(exec, s));
        } else {
          run(*p, s);
        }
        BENCH_CUDA(cudaStreamSynchronize(s));
        const auto t1 = std::chrono::steady_clock::now();
        if (i >= 10) v.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      }
      return median(v);
    };
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    BENCH_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    run(*p, s);
    BENCH_CUDA(cudaStreamEndCapture(s, &graph));
    BENCH_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    const double eager = host_ms(false, exec), replay = host_ms(true, exec);
    std::printf(
        "{\"case\":\"overhead_8\",\"plan_upload_run_sync_ms_eager\":%.4f,"
        "\"plan_upload_run_sync_ms_graph\":%.4f}\n",
        eager, replay);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
  std::printf(
      "### table\n| case | policy | graph ms | eager ms | GB/s (frac copy) | TFLOP/s (frac mm) | x "
      "bound |\n|---|---|---|---|---|---|---|\n");
  for (const Row& r : g_rows) {
    const double gbps = r.bytes / (r.graph_ms * 1e-3) / 1e9;
    const double tf = r.flops / (r.graph_ms * 1e-3) / 1e12;
    std::printf(
        "| %s | %s | %.4f | %.4f | %.0f (%.2f) | %.1f (%.3f) | %s |\n", r.name.c_str(),
        r.policy.c_str(), r.graph_ms, r.eager_ms, gbps, gbps / c.copy_gbps, tf, tf / c.bf16_tflops,
        r.bound_ms > 0 ? std::to_string(r.graph_ms / r.bound_ms).substr(0, 5).c_str() : "-");
  }
  return 0;
}
