// bench_cmd.cc: `packserve bench` (issue 5 "Benchmark client"; docs/bench.md).
//
//   packserve bench --trace FILE [--format F] (--url URL | --in-process) (--model DIR |
//                   --dummy-model NAME | --tokenizer PATH) [window, rate, caps, SLO flags]
//                   [--out DIR]
//   packserve bench --compare A.json B.json
// Replays the trace's requests at their (time-scaled) arrival times, or at a Poisson rate,
// with prompt texts synthesized to the trace's token lengths (benchclient/prompt_synth.h),
// streams every request, prints a summary table on stdout and, with --out, writes
// DIR/result.json and the four plots (benchclient/run_plots.h).
// Exit codes (commands.h): 0 the run finished and at least one request completed; 1 no
// request completed (every one failed: the reasons are in the summary); 2 bad input (flags,
// trace, tokenizer, server not reachable or not healthy).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "packserve/benchclient/compare.h"
#include "packserve/benchclient/http_client.h"
#include "packserve/benchclient/progress.h"
#include "packserve/benchclient/prompt_synth.h"
#include "packserve/benchclient/replay.h"
#include "packserve/benchclient/result_json.h"
#include "packserve/benchclient/run_plots.h"
#include "packserve/cli/bench_inprocess.h"
#include "packserve/cli/commands.h"
#include "packserve/model/dummy_model.h"
#include "packserve/model/dummy_tokenizer.h"
#include "packserve/trace/request_trace.h"

namespace packserve::cli {
namespace {

using namespace packserve::benchclient;  // NOLINT(google-build-using-namespace)

struct BenchArgs {
  std::string trace_path;
  std::string format;
  std::string url;
  bool in_process = false;
  std::string model_dir, dummy_model, tokenizer_path, model_name;
  double time_scale = 1.0;
  std::optional<double> request_rate;
  RequestSampling sampling;
  uint64_t seed = 0;
  double start_s = 0.0, duration_s = 0.0;
  int64_t max_requests = 0;
  int32_t max_input_tokens = 0, max_output_tokens = 0;
  std::optional<double> slo_ttft_ms, slo_tpot_ms;
  std::string out_dir;
  int32_t max_concurrency = 0;
  bool no_ignore_eos = false;
  int64_t request_timeout_s = 600;
  std::vector<std::string> compare;
  InProcessOptions engine;
};

int fail_input(const std::string& message) {
  std::cerr << "error: " << message << "\n";
  return 2;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

class HttpSender final : public RequestSender {
 public:
  HttpSender(Endpoint endpoint, std::string model, bool ignore_eos, RequestSampling sampling,
             std::chrono::seconds timeout)
      : endpoint_(std::move(endpoint)),
        model_(std::move(model)),
        ignore_eos_(ignore_eos),
        sampling_(sampling),
        timeout_(timeout) {}
  void send(const ReplayRequest& request, std::chrono::steady_clock::time_point origin,
            RequestRecord& record) override {
    stream_completion(endpoint_,
                      {model_, request.prompt, request.max_tokens, ignore_eos_, sampling_}, origin,
                      timeout_, record);
  }
  std::optional<double> running_batch_size() override {
    auto r = http_get(endpoint_, "/metrics", std::chrono::milliseconds(2000));
    if (!r.ok() || r->status != 200) return std::nullopt;
    return prometheus_value(r->body,
                            {"packserve_num_requests_running", "vllm:num_requests_running"});
  }
  std::string running_batch_source() const override { return "server /metrics"; }

 private:
  Endpoint endpoint_;
  std::string model_;
  bool ignore_eos_;
  RequestSampling sampling_;
  std::chrono::seconds timeout_;
};

int run_compare(const BenchArgs& args) {
  auto a = read_result_json(args.compare[0]);
  if (!a.ok()) return fail_input("--compare: " + a.status().message());
  auto b = read_result_json(args.compare[1]);
  if (!b.ok()) return fail_input("--compare: " + b.status().message());
  std::cout << compare_results(*a, *b, args.compare[0], args.compare[1]);
  return 0;
}

// The model directory whose tokenizer synthesizes the prompts (and, in-process, is served).
// Over HTTP a dummy model needs only its tokenizer (the built-in one, the same for every
// dummy arch), so no checkpoint is made: "" is returned and load_tokenizer builds it.
Result<std::string> resolve_model_dir(const BenchArgs& args) {
  if (!args.dummy_model.empty() && !args.in_process) {
    const std::vector<std::string> names = model::dummy_model_names();
    if (std::find(names.begin(), names.end(), args.dummy_model) == names.end()) {
      std::string known;
      for (const std::string& n : names) known += (known.empty() ? "" : ", ") + n;
      return invalid_argument("--dummy-model: unknown name '" + args.dummy_model +
                              "'; known: " + known);
    }
    return std::string();
  }
  if (!args.dummy_model.empty()) {
    auto made = model::ensure_dummy_model(args.dummy_model, model::default_dummy_model_cache_dir());
    if (!made.ok()) return invalid_argument("--dummy-model: " + made.status().message());
    return *made;
  }
  return args.model_dir;
}

int run_bench(const BenchArgs& args) {
  if (args.url.empty() == !args.in_process)
    return fail_input("give exactly one of --url and --in-process");
  const int num_sources = !args.model_dir.empty() + !args.dummy_model.empty();
  if (num_sources > 1) return fail_input("give at most one of --model and --dummy-model");
  if (args.in_process && num_sources == 0) {
    return fail_input("--in-process needs --model DIR or --dummy-model NAME");
  }
  if (num_sources == 0 && args.tokenizer_path.empty()) {
    return fail_input(
        "prompt synthesis needs the server model's tokenizer: give --model DIR, "
        "--dummy-model NAME or --tokenizer PATH (a tokenizer.json or its folder)");
  }
  if (args.request_rate && !(*args.request_rate > 0 && std::isfinite(*args.request_rate))) {
    return fail_input("--request-rate: expected a number > 0");
  }
  const RequestSampling& sampling = args.sampling;
  if (sampling.temperature &&
      !(*sampling.temperature >= 0 && std::isfinite(*sampling.temperature))) {
    return fail_input("--temperature: expected a finite number >= 0 (0 = greedy)");
  }
  if (sampling.top_k && *sampling.top_k < 0) {
    return fail_input("--top-k: expected an integer >= 0 (0 = off)");
  }
  if (sampling.top_p && !(*sampling.top_p > 0 && *sampling.top_p <= 1)) {
    return fail_input("--top-p: expected a number in (0, 1]");
  }
  for (const auto& [flag, value] : {std::pair{"--presence-penalty", sampling.presence_penalty},
                                    std::pair{"--frequency-penalty", sampling.frequency_penalty}}) {
    if (value && !(*value >= -2 && *value <= 2)) {
      return fail_input(std::string(flag) + ": expected a number in [-2, 2]");
    }
  }
  std::optional<trace::TraceFormat> format;
  if (!args.format.empty()) {
    auto f = trace::parse_trace_format(args.format);
    if (!f.ok()) return fail_input("--format: " + f.status().message());
    format = *f;
  }
  trace::TraceWindow window;
  window.start_s = args.start_s;
  window.duration_s = args.duration_s;
  window.max_requests = args.max_requests;
  window.time_scale = args.time_scale;
  if (Status s = window.validate(); !s.ok()) {
    return fail_input("--start-s/--duration-s/--max-requests/--time-scale: " + s.message());
  }
  auto loaded = trace::load_trace(args.trace_path, format, window);
  if (!loaded.ok()) return fail_input(loaded.status().message());
  if (loaded->requests.empty())
    return fail_input(args.trace_path + ": the window holds no requests");

  auto model_dir = resolve_model_dir(args);
  if (!model_dir.ok()) return fail_input(model_dir.status().message());
  const std::string tok_path = args.tokenizer_path.empty() ? *model_dir : args.tokenizer_path;
  auto tok = tok_path.empty() ? tokenizer::Tokenizer::from_json_text(
                                    model::make_dummy_tokenizer().tokenizer_json, "dummy tokenizer")
             : std::filesystem::is_directory(tok_path) ? tokenizer::Tokenizer::from_dir(tok_path)
                                                       : tokenizer::Tokenizer::from_file(tok_path);
  if (!tok.ok()) return fail_input(tok.status().message());
  auto synth = PromptSynthesizer::create(*tok);
  if (!synth.ok()) return fail_input(synth.status().message());

  // The requests: prompts synthesized before the clock starts.
  std::vector<ReplayRequest> requests;
  int64_t mismatches = 0;
  const std::vector<double> poisson =
      args.request_rate
          ? poisson_arrivals_ms(loaded->requests.size(), *args.request_rate, args.seed)
          : std::vector<double>{};
  for (size_t i = 0; i < loaded->requests.size(); ++i) {
    const trace::TraceRequest& tr = loaded->requests[i];
    auto p = synth->synthesize(tr.segments, args.max_input_tokens);
    if (!p.ok())
      return fail_input(args.trace_path + ":" + std::to_string(tr.line_number) + ": " +
                        p.status().message());
    if (p->verified_tokens != p->target_tokens) ++mismatches;
    ReplayRequest r;
    r.index = static_cast<int64_t>(i);
    r.arrival_ms = args.request_rate ? poisson[i] : tr.arrival_ms;
    r.prompt = std::move(p->text);
    r.prompt_tokens = p->verified_tokens;
    r.max_tokens = args.max_output_tokens > 0 ? std::min(tr.output_tokens, args.max_output_tokens)
                                              : tr.output_tokens;
    requests.push_back(std::move(r));
  }

  RunInfo info;
  info.date = utc_now();
  info.trace = args.trace_path;
  info.trace_format = std::string(trace::trace_format_name(loaded->format));
  info.request_rate = args.request_rate;
  info.sampling = args.sampling;
  info.time_scale = args.time_scale;
  info.max_concurrency = args.max_concurrency;
  info.slo = SloConfig{args.slo_ttft_ms, args.slo_tpot_ms};
  info.prompt_token_mismatches = mismatches;

  std::unique_ptr<RequestSender> sender;
  if (args.in_process) {
    auto s = make_inprocess_sender(*model_dir, args.engine, !args.no_ignore_eos, args.sampling);
    if (!s.ok()) return fail_input(s.status().message());
    sender = std::move(s).value();
    info.backend = "in-process";
    info.model_id = *model_dir;
  } else {
    auto endpoint = parse_url(args.url);
    if (!endpoint.ok()) return fail_input(endpoint.status().message());
    auto health = http_get(*endpoint, "/health", std::chrono::milliseconds(5000));
    if (!health.ok())
      return fail_input("server not reachable (is it running?): " + health.status().message());
    if (health->status != 200) {
      return fail_input("server not healthy: GET /health answered " +
                        std::to_string(health->status));
    }
    std::string model = args.model_name;
    if (model.empty()) {
      auto models = http_get(*endpoint, "/v1/models", std::chrono::milliseconds(5000));
      if (models.ok() && models->status == 200) {
        auto j = nlohmann::json::parse(models->body, nullptr, false);
        if (j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty() &&
            j["data"][0].contains("id") && j["data"][0]["id"].is_string()) {
          model = j["data"][0]["id"].get<std::string>();
        }
      }
      if (model.empty()) return fail_input("GET /v1/models named no model: give --model-name");
    }
    sender = std::make_unique<HttpSender>(*endpoint, model, !args.no_ignore_eos, args.sampling,
                                          std::chrono::seconds(args.request_timeout_s));
    info.backend = "openai-http " + args.url;
    info.model_id = model;
  }

  std::cerr << "bench: " << requests.size() << " requests from " << args.trace_path << " ("
            << info.trace_format << "), over " << requests.back().arrival_ms / 1000.0
            << " s of arrivals; prompts synthesized, " << mismatches << " with a token count off\n";
  ProgressDisplay progress(stderr, isatty(STDERR_FILENO) != 0);
  ReplayOptions options;
  options.max_concurrency = args.max_concurrency;
  options.on_progress = [&](const ReplayProgress& p) { progress.update(p); };
  ReplayResult result = replay(requests, *sender, options);
  progress.finish();
  sender.reset();  // in-process: stops the engine before the summary

  info.running_batch_source = result.running_batch_source;
  info.running_batch = result.running_batch;
  const RunSummary summary = summarize(result.records, info.slo);
  std::cout << summary_table(info, summary) << std::flush;
  if (!args.out_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(args.out_dir, ec);
    if (ec) return fail_input("--out: cannot create '" + args.out_dir + "': " + ec.message());
    const nlohmann::json j = result_to_json(info, summary, result.records);
    if (Status s = write_text_file(args.out_dir + "/result.json", j.dump(2) + "\n"); !s.ok()) {
      return fail_input(s.message());
    }
    if (Status s = write_run_plots(args.out_dir, result.records, summary, result.running_batch,
                                   result.running_batch_source);
        !s.ok()) {
      return fail_input(s.message());
    }
    std::cerr << "bench: wrote " << args.out_dir << "/result.json and " << run_plot_files().size()
              << " plots\n";
  }
  return summary.completed > 0 ? 0 : 1;
}

}  // namespace

void register_bench_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand(
      "bench",
      "replay a request trace against a server (--url) or the engine in-process, report "
      "TTFT/TPOT/TBT/TTLT, throughput and goodput; --compare two result files");
  cmd->add_option("--trace", args->trace_path,
                  "trace file (Mooncake JSONL, Azure or BurstGPT CSV)");
  cmd->add_option("--format", args->format,
                  "trace format: mooncake|azure|burstgpt (default: detected)");
  cmd->add_option("--url", args->url, "server base URL, e.g. http://127.0.0.1:8000");
  cmd->add_flag("--in-process", args->in_process,
                "run the engine in this process (--backend cpu|cuda|auto)");
  cmd->add_option(
      "--model", args->model_dir,
      "model directory (its tokenizer.json synthesizes the prompts; served with --in-process)");
  cmd->add_option("--dummy-model", args->dummy_model,
                  "dummy model name (e.g. tiny), made in the dummy-model cache when missing");
  cmd->add_option("--tokenizer", args->tokenizer_path,
                  "tokenizer.json (or its folder) of the server's model, when neither --model nor "
                  "--dummy-model is given");
  cmd->add_option("--model-name", args->model_name,
                  "\"model\" field of the requests (default: the first of GET /v1/models)");
  cmd->add_option("--time-scale", args->time_scale,
                  "multiply the trace's arrival times (0.5 = twice as fast; default 1)");
  cmd->add_option("--request-rate", args->request_rate,
                  "replace arrival times by a Poisson process of R requests/s");
  cmd->add_option("--seed", args->seed, "seed of the Poisson arrivals (default 0)");
  cmd->add_option("--start-s", args->start_s, "window start in trace time, s (default 0)");
  cmd->add_option("--duration-s", args->duration_s, "window length, s (default 0 = to the end)");
  cmd->add_option("--max-requests", args->max_requests,
                  "at most N requests of the window (default 0 = all)");
  cmd->add_option(
      "--max-input-tokens", args->max_input_tokens,
      "cap each prompt at its first N tokens (shared prefixes stay shared; default 0 = no cap)");
  cmd->add_option("--max-output-tokens", args->max_output_tokens,
                  "cap each request's max_tokens at N (default 0 = the trace's output length)");
  cmd->add_option("--slo-ttft-ms", args->slo_ttft_ms, "goodput SLO on TTFT, ms");
  cmd->add_option("--slo-tpot-ms", args->slo_tpot_ms, "goodput SLO on TPOT, ms");
  cmd->add_option("--out", args->out_dir, "write DIR/result.json and the PNG plots");
  cmd->add_option("--max-concurrency", args->max_concurrency,
                  "at most N requests in flight (default 0 = no limit)");
  cmd->add_flag("--no-ignore-eos", args->no_ignore_eos,
                "do not send ignore_eos (outputs may end before the trace's length)");
  cmd->add_option("--temperature", args->sampling.temperature,
                  "sampling temperature of every request, >= 0 (0 = greedy; default: the "
                  "server's, 1 in packserve)");
  cmd->add_option("--top-k", args->sampling.top_k,
                  "top-k of every request, >= 0 (0 = off; default: the server's, off)");
  cmd->add_option("--top-p", args->sampling.top_p,
                  "top-p of every request, in (0, 1] (default: the server's, 1 = off)");
  cmd->add_option("--presence-penalty", args->sampling.presence_penalty,
                  "presence_penalty of every request, in [-2, 2] (default: the server's, 0)");
  cmd->add_option("--frequency-penalty", args->sampling.frequency_penalty,
                  "frequency_penalty of every request, in [-2, 2] (default: the server's, 0)");
  cmd->add_flag("--logprobs", args->sampling.logprobs,
                "ask for the sampled token's logprob with every request");
  cmd->add_option("--request-timeout-s", args->request_timeout_s,
                  "per-request read timeout, s (default 600)");
  cmd->add_option("--compare", args->compare,
                  "print two result.json files side by side with ratios")
      ->expected(2);
  add_inprocess_options(*cmd, args->engine);
  cmd->callback([args, &exit_code] {
    if (!args->compare.empty()) {
      exit_code = run_compare(*args);
    } else if (args->trace_path.empty()) {
      exit_code = fail_input("--trace FILE is required (or --compare A.json B.json)");
    } else {
      exit_code = run_bench(*args);
    }
  });
}

}  // namespace packserve::cli
