// generate_cmd.cc: `packserve generate` (issue 4 "Command line"): offline batch generation.
//
// Loads a checkpoint (--model DIR) or a dummy model (--dummy-model NAME, made once in the
// dummy-model cache), starts an Engine on the --backend (cpu, cuda or auto; backend_flags.h),
// submits every prompt of
// --prompts FILE.jsonl at once (continuous batching does the rest) and writes one JSON line
// per prompt, in input order, on stdout:
//   {"index", "text", "token_ids", "finish_reason", "num_prompt_tokens", "num_output_tokens",
//    "num_cached_prompt_tokens", "ttft_ms", "e2e_ms"[, "logprobs"][, "error"]}
// Input lines: {"prompt": "..."} (encoded with the model's tokenizer, add_special_tokens as
// Hugging Face's default: Llama-3's BOS is prepended) or {"prompt_ids": [...]}; empty lines
// are skipped; anything else is an error naming the file and line.
// --logits-out FILE.npy: for each prompt in order, the f32 logits of the position after its
// last prompt token: NPY v1.0, '<f4', C order, shape (prompts, vocab_size).
// Sampling: --seed S gives prompt i the seed S + i (its output does not depend on the others);
// without it the engine's RNG (seed 0) seeds requests in submission order.
// Exit codes (commands.h): 0 all prompts done; 1 some request finished with "error";
// 2 bad input (flags, model, prompts file) -- nothing is written to stdout then.
#include <bit>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "packserve/cli/commands.h"
#include "packserve/cli/engine_flags.h"
#include "packserve/common/log.h"
#include "packserve/engine/engine.h"
#include "packserve/model/checkpoint.h"
#include "packserve/model/dummy_model.h"
#include "packserve/tokenizer/tokenizer.h"

namespace packserve::cli {
namespace {

using nlohmann::json;

struct GenerateArgs {
  std::string model_dir;
  std::string dummy_model;
  std::string prompts_path;
  std::string logits_out;
  int32_t max_tokens = 16;
  int32_t min_tokens = 0;
  double temperature = 1.0;
  int32_t top_k = 0;
  double top_p = 1.0;
  double min_p = 0.0;
  double presence_penalty = 0.0;
  double frequency_penalty = 0.0;
  double repetition_penalty = 1.0;
  std::vector<std::string> logit_bias;  // "ID:BIAS"
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  bool logprobs = false;
  // Structured outputs (at most one): a regex, a JSON schema file, a GBNF / EBNF grammar file,
  // a structural tag file, any JSON object, choices.
  std::string regex;
  std::string json_schema_path;
  std::string grammar_path;
  std::string structural_tag_path;
  bool json_object = false;
  std::vector<std::string> choices;
  EngineFlags engine;
};

// The structured output of the flags; errors name the flag.
Result<engine::StructuredOutput> structured_output(const GenerateArgs& args) {
  engine::StructuredOutput s;
  const int given = static_cast<int>(!args.regex.empty()) +
                    static_cast<int>(!args.json_schema_path.empty()) +
                    static_cast<int>(!args.grammar_path.empty()) +
                    static_cast<int>(!args.structural_tag_path.empty()) +
                    static_cast<int>(args.json_object) + static_cast<int>(!args.choices.empty());
  if (given > 1) {
    return invalid_argument(
        "give at most one of --regex, --json-schema, --grammar, --structural-tag, --json-object, "
        "--choice");
  }
  // The text of a constraint file; errors name the flag.
  const auto read_file = [](const std::string& flag,
                            const std::string& path) -> Result<std::string> {
    std::ifstream in(path, std::ios::binary);
    if (!in) return invalid_argument(flag + ": cannot read " + path);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  if (!args.regex.empty()) {
    s.kind = engine::StructuredOutput::Kind::kRegex;
    s.spec = args.regex;
    s.field = "--regex";
  } else if (!args.json_schema_path.empty()) {
    s.kind = engine::StructuredOutput::Kind::kJsonSchema;
    PS_ASSIGN_OR_RETURN(s.spec, read_file("--json-schema", args.json_schema_path));
    s.field = "--json-schema " + args.json_schema_path;
  } else if (!args.grammar_path.empty()) {
    s.kind = engine::StructuredOutput::Kind::kGrammar;
    PS_ASSIGN_OR_RETURN(s.spec, read_file("--grammar", args.grammar_path));
    s.field = "--grammar " + args.grammar_path;
  } else if (!args.structural_tag_path.empty()) {
    s.kind = engine::StructuredOutput::Kind::kStructuralTag;
    PS_ASSIGN_OR_RETURN(s.spec, read_file("--structural-tag", args.structural_tag_path));
    s.field = "--structural-tag " + args.structural_tag_path;
  } else if (args.json_object) {
    s.kind = engine::StructuredOutput::Kind::kJsonObject;
    s.field = "--json-object";
  } else if (!args.choices.empty()) {
    s.kind = engine::StructuredOutput::Kind::kChoice;
    s.choices = args.choices;
    s.field = "--choice";
  }
  return s;
}

int fail_input(const std::string& message) {
  std::cerr << "error: " << message << "\n";
  return 2;
}

// Reads the prompts file; errors are "FILE:LINE: what".
Result<std::vector<std::vector<int32_t>>> read_prompts(const std::string& path,
                                                       const tokenizer::Tokenizer& tok) {
  std::ifstream in(path);
  if (!in) return not_found(path + ": cannot open the prompts file");
  std::vector<std::vector<int32_t>> prompts;
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    const std::string where = path + ":" + std::to_string(line_no) + ": ";
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json value;
    try {
      value = json::parse(line);
    } catch (const json::exception& e) {
      return invalid_argument(where + "not valid JSON: " + e.what());
    }
    if (!value.is_object() || value.size() != 1 ||
        !(value.contains("prompt") || value.contains("prompt_ids"))) {
      return invalid_argument(where +
                              R"(expected {"prompt": string} or {"prompt_ids": [integer, ...]})");
    }
    if (value.contains("prompt")) {
      if (!value["prompt"].is_string()) {
        return invalid_argument(where + "\"prompt\": expected a string");
      }
      auto ids = tok.encode(value["prompt"].get<std::string>(),
                            tokenizer::EncodeOptions{.add_special_tokens = true});
      if (!ids.ok()) return invalid_argument(where + "\"prompt\": " + ids.status().message());
      if (ids->empty()) return invalid_argument(where + "\"prompt\": encodes to no tokens");
      prompts.push_back(std::move(ids).value());
      continue;
    }
    const json& arr = value["prompt_ids"];
    if (!arr.is_array() || arr.empty()) {
      return invalid_argument(where + "\"prompt_ids\": expected a non-empty array of integers");
    }
    std::vector<int32_t> ids;
    for (size_t i = 0; i < arr.size(); ++i) {
      if (!arr[i].is_number_integer() || arr[i].get<int64_t>() < 0 ||
          arr[i].get<int64_t>() > std::numeric_limits<int32_t>::max()) {
        return invalid_argument(where + "\"prompt_ids\"[" + std::to_string(i) +
                                "]: expected a non-negative integer token id, got " +
                                arr[i].dump());
      }
      ids.push_back(static_cast<int32_t>(arr[i].get<int64_t>()));
    }
    prompts.push_back(std::move(ids));
  }
  if (prompts.empty()) return invalid_argument(path + ": no prompts");
  return prompts;
}

// NPY v1.0: magic, version, little-endian u16 header length, a Python dict literal padded
// with spaces to a multiple of 64 bytes and ended by '\n', then the raw little-endian f32 data.
Status write_npy(const std::string& path, const std::vector<float>& data, int64_t rows,
                 int64_t cols) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" +
                       std::to_string(rows) + ", " + std::to_string(cols) + "), }";
  const size_t preamble = 10;
  size_t total = preamble + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  if (!out) return internal_error(path + ": cannot open for writing");
  const uint16_t len = static_cast<uint16_t>(header.size());
  const char magic[8] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0};
  out.write(magic, 8);
  const char len_bytes[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
  out.write(len_bytes, 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  static_assert(std::endian::native == std::endian::little, "NPY writer assumes little endian");
  out.write(reinterpret_cast<const char*>(data.data()),
            static_cast<std::streamsize>(data.size() * sizeof(float)));
  if (!out) return internal_error(path + ": write failed");
  return ok_status();
}

// --logit-bias values "ID:BIAS" as the engine's pairs (it checks the ranges and the ids).
Result<std::vector<std::pair<int32_t, double>>> parse_logit_bias(
    const std::vector<std::string>& values) {
  std::vector<std::pair<int32_t, double>> out;
  for (const std::string& v : values) {
    const size_t colon = v.find(':');
    int32_t id = 0;
    double bias = 0.0;
    const char* end = v.data() + v.size();
    const bool ok = colon != std::string::npos &&
                    std::from_chars(v.data(), v.data() + colon, id).ptr == v.data() + colon &&
                    colon > 0 && colon + 1 < v.size() &&
                    std::from_chars(v.data() + colon + 1, end, bias).ptr == end;
    if (!ok) {
      return invalid_argument("--logit-bias " + v +
                              ": expected ID:BIAS, a token id and a number (e.g. 198:-100)");
    }
    out.emplace_back(id, bias);
  }
  return out;
}

int run_generate(const GenerateArgs& args) {
  if (args.model_dir.empty() == args.dummy_model.empty()) {
    return fail_input("give exactly one of --model DIR and --dummy-model NAME");
  }
  std::string dir = args.model_dir;
  if (!args.dummy_model.empty()) {
    auto made = model::ensure_dummy_model(args.dummy_model, model::default_dummy_model_cache_dir());
    if (!made.ok()) return fail_input("--dummy-model: " + made.status().to_string());
    dir = *made;
  }
  auto weights = model::load_checkpoint(dir);
  if (!weights.ok()) return fail_input(weights.status().to_string());
  auto tok = tokenizer::Tokenizer::from_dir(dir);
  if (!tok.ok()) return fail_input(tok.status().to_string());
  auto prompts = read_prompts(args.prompts_path, *tok);
  if (!prompts.ok()) return fail_input(prompts.status().message());

  engine::EngineConfig config;
  if (Status s = apply_engine_flags(args.engine, config); !s.ok()) return fail_input(s.message());
  config.max_waiting_requests =
      std::max<int32_t>(config.max_waiting_requests, static_cast<int32_t>(prompts->size()));

  auto backend = make_engine_backend(args.engine.backend, *weights, args.engine.threads,
                                     args.engine.cpu_default_num_pages, config);
  if (!backend.ok()) return fail_input(backend.status().to_string());
  auto created = engine::Engine::create(config, std::move(backend->backend), *tok);
  if (!created.ok()) return fail_input(created.status().to_string());
  engine::Engine& eng = **created;
  const int64_t vocab = eng.model_config().vocab_size;

  const auto logit_bias = parse_logit_bias(args.logit_bias);
  if (!logit_bias.ok()) return fail_input(logit_bias.status().message());
  const auto structured = structured_output(args);
  if (!structured.ok()) return fail_input(structured.status().message());
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::shared_ptr<engine::RequestStream>> streams;
  for (size_t i = 0; i < prompts->size(); ++i) {
    engine::GenerateRequest request;
    request.prompt_token_ids = (*prompts)[i];
    request.sampling.max_tokens = args.max_tokens;
    request.sampling.min_tokens = args.min_tokens;
    request.sampling.temperature = args.temperature;
    request.sampling.top_k = args.top_k;
    request.sampling.top_p = args.top_p;
    request.sampling.min_p = args.min_p;
    request.sampling.presence_penalty = args.presence_penalty;
    request.sampling.frequency_penalty = args.frequency_penalty;
    request.sampling.repetition_penalty = args.repetition_penalty;
    request.sampling.logit_bias = *logit_bias;
    if (args.seed) request.sampling.seed = *args.seed + i;
    request.sampling.stop = args.stop;
    request.sampling.ignore_eos = args.ignore_eos;
    request.sampling.logprobs = args.logprobs;
    request.sampling.structured = *structured;
    request.return_last_prompt_logits = !args.logits_out.empty();
    auto stream = eng.submit(std::move(request));
    if (!stream.ok()) {
      return fail_input(args.prompts_path + ": prompt " + std::to_string(i) + ": " +
                        stream.status().message());
    }
    streams.push_back(*stream);
  }

  std::vector<json> lines;
  std::vector<float> logits;
  if (!args.logits_out.empty()) logits.assign(static_cast<size_t>(vocab) * prompts->size(), NAN);
  int64_t total_tokens = 0;
  bool any_error = false;
  for (size_t i = 0; i < streams.size(); ++i) {
    json line;
    std::string text;
    std::vector<int32_t> token_ids;
    std::vector<float> logprobs;
    engine::RequestOutput last;
    bool finished = false;
    while (!finished) {
      auto update = streams[i]->next(std::chrono::milliseconds(1000));
      if (!update) continue;
      for (const auto& t : update->tokens) {
        token_ids.push_back(t.token_id);
        if (t.logprob) logprobs.push_back(*t.logprob);
      }
      text += update->text_delta;
      if (!update->last_prompt_logits.empty() &&
          static_cast<int64_t>(update->last_prompt_logits.size()) == vocab) {
        std::copy(update->last_prompt_logits.begin(), update->last_prompt_logits.end(),
                  logits.begin() + static_cast<std::ptrdiff_t>(i * static_cast<size_t>(vocab)));
      }
      finished = update->finished;
      last = std::move(*update);
    }
    total_tokens += static_cast<int64_t>(token_ids.size());
    line["index"] = i;
    line["text"] = text;
    line["token_ids"] = token_ids;
    line["finish_reason"] = last.finish_reason;
    line["num_prompt_tokens"] = last.num_prompt_tokens;
    line["num_output_tokens"] = last.num_output_tokens;
    line["num_cached_prompt_tokens"] = last.num_cached_prompt_tokens;
    line["ttft_ms"] = last.first_token_time_ms
                          ? json(*last.first_token_time_ms - last.arrival_time_ms)
                          : json(nullptr);
    line["e2e_ms"] = last.last_token_time_ms - last.arrival_time_ms;
    if (args.logprobs) line["logprobs"] = logprobs;
    if (last.finish_reason == "error") {
      line["error"] = last.error;
      any_error = true;
    }
    lines.push_back(std::move(line));
  }
  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const json& line : lines) std::cout << line.dump() << "\n";
  std::cout.flush();
  if (!args.logits_out.empty()) {
    Status s = write_npy(args.logits_out, logits, static_cast<int64_t>(prompts->size()), vocab);
    if (!s.ok()) {
      std::cerr << "error: " << s.to_string() << "\n";
      return 1;
    }
  }
  std::cerr << "generate: prompts=" << prompts->size() << " output_tokens=" << total_tokens
            << " wall_s=" << wall_s
            << " output_tokens_per_s=" << static_cast<double>(total_tokens) / wall_s;
  eng.stop();  // every output is in: the metrics of the last step are published
  const engine::EngineMetrics m = eng.metrics();
  std::cerr << " steps=" << m.num_steps << " graph_captures=" << m.backend.graph_captures;
  if (config.speculation.num_speculative_tokens > 0) {
    std::cerr << " draft_tokens=" << m.spec_draft_tokens
              << " accepted_draft_tokens=" << m.spec_accepted_tokens;
  }
  std::cerr << "\n";
  return any_error ? 1 : 0;
}

}  // namespace

void register_generate_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "generate", "Offline batch generation: one JSON line per prompt of a JSONL file");
  auto* model_opt =
      cmd->add_option("--model", args->model_dir,
                      "Hugging Face checkpoint directory (config.json, *.safetensors, "
                      "tokenizer.json)");
  auto* dummy_opt =
      cmd->add_option("--dummy-model", args->dummy_model,
                      "random weights of a known shape (tiny, tiny-llama, tiny-qwen2, tiny-yarn, "
                      "qwen3-0.6b, ...), made once in the dummy-model cache");
  model_opt->excludes(dummy_opt);
  cmd->add_option("--prompts", args->prompts_path,
                  R"(JSONL file: {"prompt": "..."} or {"prompt_ids": [...]} per line)")
      ->required();
  cmd->add_option("--max-tokens", args->max_tokens, "output tokens per prompt (>= 1)")
      ->capture_default_str();
  cmd->add_option("--min-tokens", args->min_tokens,
                  "tokens before EOS or a --stop string can end a prompt's output "
                  "(0 to --max-tokens)")
      ->capture_default_str();
  cmd->add_option("--temperature", args->temperature, "0 = greedy")->capture_default_str();
  cmd->add_option("--top-k", args->top_k, "0 = off")->capture_default_str();
  cmd->add_option("--top-p", args->top_p, "in (0, 1]")->capture_default_str();
  cmd->add_option("--min-p", args->min_p, "in [0, 1]")->capture_default_str();
  cmd->add_option("--presence-penalty", args->presence_penalty,
                  "in [-2, 2]: subtracted from the logit of every token already generated")
      ->capture_default_str();
  cmd->add_option("--frequency-penalty", args->frequency_penalty,
                  "in [-2, 2]: times its count, subtracted from each generated token's logit")
      ->capture_default_str();
  cmd->add_option("--repetition-penalty", args->repetition_penalty,
                  "> 0, 1 = off: divides the positive logits (multiplies the others) of the "
                  "prompt's and the output's tokens")
      ->capture_default_str();
  cmd->add_option("--logit-bias", args->logit_bias,
                  "ID:BIAS, bias in [-100, 100] added to token ID's logit (repeatable)");
  cmd->add_option("--seed", args->seed, "prompt i samples with seed SEED + i");
  cmd->add_option("--stop", args->stop, "stop string (repeatable; excluded from the text)");
  cmd->add_flag("--ignore-eos", args->ignore_eos, "do not stop at the model's EOS tokens");
  cmd->add_flag("--logprobs", args->logprobs,
                "add \"logprobs\": log-softmax of the raw logits at each sampled token");
  cmd->add_option("--regex", args->regex,
                  "structured output: the whole output matches this regex (docs/engine.md "
                  "\"Structured outputs\")");
  cmd->add_option("--json-schema", args->json_schema_path,
                  "structured output: the output is JSON that FILE's JSON schema allows");
  cmd->add_option("--grammar", args->grammar_path,
                  "structured output: the output matches the root rule of FILE's GBNF / EBNF "
                  "grammar (recursion unrolled 3 deep; docs/engine.md \"Structured outputs\")");
  cmd->add_option("--structural-tag", args->structural_tag_path,
                  "structured output: free text in which FILE's triggers start its structures "
                  "(vLLM's structural tag JSON: {\"structures\": [{\"begin\", \"schema\", "
                  "\"end\"}], \"triggers\"}; docs/engine.md \"Structured outputs\")");
  cmd->add_flag("--json-object", args->json_object,
                "structured output: the output is one JSON object");
  cmd->add_option("--choice", args->choices,
                  "structured output: the output is exactly one of these strings (repeatable)");
  cmd->add_option("--logits-out", args->logits_out,
                  "write the logits after each prompt's last token: .npy, f32, (prompts, vocab)");
  add_engine_flags(*cmd, args->engine);
  cmd->callback([args, &exit_code] { exit_code = run_generate(*args); });
}

}  // namespace packserve::cli
