// serve_cmd.cc: `packserve serve --model DIR | --dummy-model NAME` (issue 5 "Server";
// docs/server.md): the OpenAI-compatible HTTP server over the engine on the --backend
// (cpu, cuda or auto; backend_flags.h).
//
// Start-up: the port is bound first (a bad --host/--port fails at once, exit 2) and stderr gets
// "packserve serve: listening on http://HOST:PORT (model NAME, loading)"; the model loads on a
// loader thread while the server answers /health 503 and generation 503 "loading"; when the
// engine runs, the server turns ready ("packserve serve: ready" on stderr). A model that fails
// to load ends the process with exit 2 and the reason on stderr.
//
// Shutdown: SIGINT or SIGTERM -> new generation requests get 503, /health 503; live requests
// may finish within --drain-grace-s, the rest are cancelled; open streams get up to 5 s more to
// write their last events; then the listener stops and the process exits 0.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "packserve/cli/commands.h"
#include "packserve/cli/engine_flags.h"
#include "packserve/common/log.h"
#include "packserve/engine/engine.h"
#include "packserve/model/checkpoint.h"
#include "packserve/model/dummy_model.h"
#include "packserve/server/engine_adapter.h"
#include "packserve/server/http_server.h"
#include "packserve/tokenizer/chat_template.h"
#include "packserve/tokenizer/tokenizer.h"

namespace packserve::cli {
namespace {

constexpr std::chrono::seconds kStreamFlushTimeout{5};

struct ServeArgs {
  std::string model_dir;
  std::string dummy_model;
  std::string served_model_name;  // empty: the dummy name or the model directory's name
  server::ServerConfig server;
  int32_t max_waiting_requests = 1024;
  int32_t max_model_len = 0;
  EngineFlags engine;
  uint64_t seed = 0;
  std::string chat_template = "auto";
  double drain_grace_s = 10.0;
};

int fail_input(const std::string& message) {
  std::cerr << "error: " << message << "\n";
  return 2;
}

// Everything the loader thread builds; the engine is shared with the server's adapter.
struct Loaded {
  std::shared_ptr<engine::Engine> engine;
  std::shared_ptr<server::EngineAdapter> adapter;
};

Result<Loaded> load_engine(const ServeArgs& args) {
  std::string dir = args.model_dir;
  if (!args.dummy_model.empty()) {
    PS_ASSIGN_OR_RETURN(
        dir, model::ensure_dummy_model(args.dummy_model, model::default_dummy_model_cache_dir()));
  }
  PS_ASSIGN_OR_RETURN(auto weights, model::load_checkpoint(dir));
  PS_ASSIGN_OR_RETURN(auto tok, tokenizer::Tokenizer::from_dir(dir));
  std::optional<tokenizer::ChatTemplateFamily> family;
  if (args.chat_template != "auto") {
    PS_ASSIGN_OR_RETURN(family, tokenizer::parse_chat_template_family(args.chat_template));
  }
  std::optional<tokenizer::ChatTemplate> chat;
  if (auto loaded = tokenizer::ChatTemplate::from_dir(dir, family); loaded.ok()) {
    chat = std::move(loaded.value());
  } else {
    PS_LOG_WARN("server", "no chat template, /v1/chat/completions answers 400: {}",
                loaded.status().to_string());
  }

  engine::EngineConfig config;
  PS_RETURN_IF_ERROR(apply_engine_flags(args.engine, config));
  config.max_model_len = args.max_model_len;
  config.max_waiting_requests = args.max_waiting_requests;
  config.seed = args.seed;

  PS_ASSIGN_OR_RETURN(auto backend,
                      make_engine_backend(args.engine.backend, weights, args.engine.threads,
                                          args.engine.cpu_default_num_pages, config));
  PS_ASSIGN_OR_RETURN(auto created,
                      engine::Engine::create(config, std::move(backend.backend), tok));
  Loaded loaded;
  loaded.engine = std::shared_ptr<engine::Engine>(std::move(created));
  loaded.adapter = std::make_shared<server::EngineAdapter>(loaded.engine, std::move(chat));
  return loaded;
}

int run_serve(ServeArgs args) {
  if (args.model_dir.empty() == args.dummy_model.empty()) {
    return fail_input("give exactly one of --model DIR and --dummy-model NAME");
  }
  if (!(args.drain_grace_s >= 0.0)) return fail_input("--drain-grace-s: expected >= 0");
  args.server.served_model_name =
      !args.served_model_name.empty() ? args.served_model_name
      : !args.dummy_model.empty()
          ? args.dummy_model
          : std::filesystem::path(args.model_dir).lexically_normal().filename().string();
  if (args.server.served_model_name.empty()) args.server.served_model_name = args.model_dir;

  // Signals are taken by sigtimedwait below: block them before any thread starts so every
  // thread inherits the mask. A client that goes away must not kill us with SIGPIPE.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  server::HttpServer http(args.server);
  if (Status s = http.start(); !s.ok()) return fail_input(s.to_string());
  // Always on stderr (whatever --log-level): with --port 0 it is the only way to learn the port.
  std::cerr << "packserve serve: listening on http://" << args.server.host << ":" << http.port()
            << " (model " << args.server.served_model_name << ", loading)" << std::endl;

  std::mutex mutex;
  std::optional<Result<Loaded>> load_result;  // guarded by mutex
  std::thread loader([&] {
    Result<Loaded> r = load_engine(args);
    if (r.ok()) http.set_engine(r.value().adapter);
    std::lock_guard<std::mutex> lock(mutex);
    load_result.emplace(std::move(r));
  });

  int received = 0;
  bool logged_ready = false;
  while (received <= 0) {
    const timespec tick{0, 200 * 1000 * 1000};
    received = sigtimedwait(&signals, nullptr, &tick);
    std::lock_guard<std::mutex> lock(mutex);
    if (load_result && !load_result->ok()) break;
    if (load_result && !logged_ready) {
      std::cerr << "packserve serve: ready" << std::endl;
      logged_ready = true;
    }
  }
  if (received > 0) {
    PS_LOG_INFO("server", "signal={} draining grace_s={}", received, args.drain_grace_s);
  }
  http.begin_drain();
  loader.join();
  if (!load_result->ok()) {
    http.stop();
    return fail_input("loading the model: " + load_result->status().to_string());
  }
  const Loaded& loaded = load_result->value();
  loaded.engine->drain(std::chrono::milliseconds(static_cast<int64_t>(args.drain_grace_s * 1000)));
  // Every request has finished or been cancelled; their streams may still be writing their
  // last events to slow clients, which stop() would cut.
  if (!http.wait_streams_flushed(kStreamFlushTimeout)) {
    PS_LOG_WARN("server", "streams still open after {} s: closing them",
                kStreamFlushTimeout.count());
  }
  http.stop();
  loaded.engine->stop();
  PS_LOG_INFO("server", "stopped");
  return 0;
}

}  // namespace

void register_serve_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "serve",
      "OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions, /v1/models, "
      "/tokenize, /detokenize, /health, /metrics) on the --backend (cpu, cuda or auto); "
      "docs/server.md");
  auto* model_opt =
      cmd->add_option("--model", args->model_dir, "Hugging Face checkpoint directory");
  auto* dummy_opt = cmd->add_option("--dummy-model", args->dummy_model,
                                    "a dummy model by name (tiny, tiny-llama, ...), made once "
                                    "in the cache when missing");
  model_opt->excludes(dummy_opt);
  cmd->add_option("--served-model-name", args->served_model_name,
                  "model name of /v1/models and requests (default: the dummy name or the "
                  "model directory's name)");
  cmd->add_option("--host", args->server.host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", args->server.port, "TCP port (0: any free port)")
      ->capture_default_str();
  cmd->add_option("--api-key", args->server.api_key,
                  "require Authorization: Bearer KEY on /v1/*, /tokenize and /detokenize "
                  "(else 401)");
  cmd->add_option("--max-body-bytes", args->server.max_body_bytes,
                  "largest request body (larger: 413)")
      ->capture_default_str();
  cmd->add_option("--reasoning-parser", args->server.reasoning_parser,
                  "qwen3: a <think>...</think> block opening a chat reply is returned as "
                  "message.reasoning_content (streamed: delta.reasoning_content), not content "
                  "(default: none, the reply is all content)")
      ->check(CLI::IsMember({"qwen3"}));
  cmd->add_flag("--exclude-tools-when-tool-choice-none",
                args->server.exclude_tools_when_tool_choice_none,
                "with tool_choice \"none\" leave the tools out of the chat prompt (default: the "
                "model sees them and answers in text, as vLLM does)");
  cmd->add_option("--http-threads", args->server.num_http_threads,
                  "HTTP worker threads (a streaming request holds one)")
      ->capture_default_str();
  cmd->add_option("--max-waiting", args->max_waiting_requests,
                  "requests waiting for admission before new ones get 429")
      ->capture_default_str();
  cmd->add_option(
         "--max-model-len", args->max_model_len,
         "prompt + max_tokens limit (0: the model's context length: max_position_embeddings, "
         "or with yarn scaling original_max_position_embeddings x factor)")
      ->capture_default_str();
  cmd->add_option(
         "--chat-template", args->chat_template,
         "auto (from tokenizer_config.json) | llama3 | chatml | mistral | mistral-tekken | "
         "mistral-v1")
      ->capture_default_str();
  cmd->add_option("--drain-grace-s", args->drain_grace_s,
                  "on SIGINT/SIGTERM, time live requests get to finish before cancellation")
      ->capture_default_str();
  add_engine_flags(*cmd, args->engine);
  cmd->add_option("--seed", args->seed, "engine RNG seed (requests without a seed)")
      ->capture_default_str();
  cmd->callback([args, &exit_code] { exit_code = run_serve(*args); });
}

}  // namespace packserve::cli
