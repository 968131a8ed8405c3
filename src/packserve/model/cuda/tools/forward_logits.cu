// forward_logits.cu: a small driver of the CUDA forward for cross-checks against Hugging Face
// transformers (scripts/model_gpu_check.py): loads a checkpoint directory (load_checkpoint),
// optionally writing a dummy one first (make_dummy_model), prefills every prompt in ONE packed
// batch, then decodes all prompts together greedily (argmax; no stop tokens): the first token
// from the logits on the host, the others from the backend's on-device argmax
// (kOutputArgmax), so the check covers both.
//   forward_logits --model DIR [--make-dummy ARCH [--dummy-init random|copy]] --prompts FILE.jsonl
//   --max-tokens N
//                  --logits-out FILE.npy --out FILE.jsonl
// prompts: one {"prompt_ids": [...]} per line. logits-out: f32 [prompts, vocab], the logits
// after each prompt's last token (.npy v1.0). out: one {"ids": [...]} line per prompt, the N
// greedy tokens. Exit 0 on success, 1 with the error on stderr.
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "packserve/common/argmax.h"
#include "packserve/model/checkpoint.h"
#include "packserve/model/cuda/forward_cuda.h"
#include "packserve/model/dummy_model.h"

namespace {

using namespace packserve;
using namespace packserve::model;

int fail(const std::string& what) {
  std::cerr << "forward_logits: " << what << "\n";
  return 1;
}

bool write_npy(const std::string& path, const std::vector<float>& data, size_t rows, size_t cols) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" +
                       std::to_string(rows) + ", " + std::to_string(cols) + "), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  f.write("\x93NUMPY\x01\x00", 8);
  const uint16_t len = static_cast<uint16_t>(header.size());
  f.write(reinterpret_cast<const char*>(&len), 2);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  f.write(reinterpret_cast<const char*>(data.data()),
          static_cast<std::streamsize>(data.size() * sizeof(float)));
  return static_cast<bool>(f);
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_dir, make_dummy, dummy_init = "random", prompts_path, logits_out, out_path;
  int max_tokens = 64;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model")
      model_dir = v;
    else if (k == "--make-dummy")
      make_dummy = v;
    else if (k == "--dummy-init")
      dummy_init = v;
    else if (k == "--prompts")
      prompts_path = v;
    else if (k == "--max-tokens") {
      const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), max_tokens);
      if (ec != std::errc() || end != v.data() + v.size() || max_tokens < 1) {
        return fail("--max-tokens " + v + ": expected an integer >= 1");
      }
    } else if (k == "--logits-out")
      logits_out = v;
    else if (k == "--out")
      out_path = v;
    else
      return fail("unknown option " + k);
  }
  if (model_dir.empty() || prompts_path.empty()) {
    return fail(
        "usage: --model DIR [--make-dummy ARCH [--dummy-init random|copy]] --prompts FILE "
        "--max-tokens N "
        "[--logits-out F.npy] [--out F.jsonl]");
  }
  if (!make_dummy.empty()) {
    DummyModelOptions o;
    o.arch = make_dummy;
    o.out_dir = model_dir;
    auto init = parse_dummy_init(dummy_init);
    if (!init.ok()) return fail(init.status().to_string());
    o.init = *init;
    auto made = make_dummy_model(o);
    if (!made.ok()) return fail(made.status().to_string());
  }
  auto weights = load_checkpoint(model_dir);
  if (!weights.ok()) return fail(weights.status().to_string());
  std::vector<std::vector<int32_t>> prompts;
  std::ifstream pf(prompts_path);
  if (!pf) return fail("cannot read " + prompts_path);
  int line_no = 0;
  for (std::string line; std::getline(pf, line);) {
    ++line_no;
    if (line.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("prompt_ids") || !j["prompt_ids"].is_array() ||
        !std::all_of(j["prompt_ids"].begin(), j["prompt_ids"].end(),
                     [](const nlohmann::json& x) { return x.is_number_integer(); })) {
      return fail(prompts_path + ":" + std::to_string(line_no) +
                  ": expected {\"prompt_ids\": [integers]}");
    }
    prompts.push_back(j["prompt_ids"].get<std::vector<int32_t>>());
  }
  if (prompts.empty()) return fail("no prompts in " + prompts_path);
  const int page_size = 16;
  std::vector<std::vector<int32_t>> pages(prompts.size());
  int next_page = 0, total_rows = 0;
  for (size_t p = 0; p < prompts.size(); ++p) {
    const int len = static_cast<int>(prompts[p].size()) + max_tokens;
    for (int i = 0; i < (len + page_size - 1) / page_size; ++i) pages[p].push_back(next_page++);
    total_rows += static_cast<int>(prompts[p].size());
  }
  CudaForwardOptions options;
  options.max_batch_rows = std::max(total_rows, 64);
  auto backend =
      CudaForwardBackend::create(weights.value(), KvPoolShape{next_page, page_size}, options);
  if (!backend.ok()) return fail(backend.status().to_string());
  const size_t vocab = static_cast<size_t>(weights.value().config.vocab_size);
  std::vector<std::vector<int32_t>> seqs = prompts, generated(prompts.size());
  std::vector<float> first_logits;
  for (int step = 0; step < max_tokens; ++step) {
    ForwardBatch b;
    b.qo_indptr.push_back(0);
    b.page_indptr.push_back(0);
    for (size_t p = 0; p < seqs.size(); ++p) {
      const int kv_len = static_cast<int>(seqs[p].size());
      const int q_len = step == 0 ? kv_len : 1;
      b.token_ids.insert(b.token_ids.end(), seqs[p].end() - q_len, seqs[p].end());
      b.qo_indptr.push_back(static_cast<int32_t>(b.token_ids.size()));
      b.kv_len.push_back(kv_len);
      const int n = (kv_len + page_size - 1) / page_size;
      b.page_ids.insert(b.page_ids.end(), pages[p].begin(), pages[p].begin() + n);
      b.page_indptr.push_back(static_cast<int32_t>(b.page_ids.size()));
      // The first step's logits are written out; later steps take the on-device argmax.
      b.samples.push_back(step == 0 ? kOutputLogits : kOutputArgmax);
    }
    ForwardOutput out;
    const Status s = backend.value()->forward(b, out);
    if (!s.ok()) return fail(s.to_string());
    if (step == 0) first_logits = out.logits;
    for (size_t p = 0; p < seqs.size(); ++p) {
      const int32_t tok =
          step == 0 ? argmax_lowest(std::span<const float>(out.logits).subspan(p * vocab, vocab))
                    : out.argmax[p];
      seqs[p].push_back(tok);
      generated[p].push_back(tok);
    }
  }
  if (!logits_out.empty() && !write_npy(logits_out, first_logits, prompts.size(), vocab)) {
    return fail("cannot write " + logits_out);
  }
  if (!out_path.empty()) {
    std::ofstream of(out_path);
    for (const auto& g : generated) of << nlohmann::json{{"ids", g}}.dump() << "\n";
  }
  return 0;
}
