// http_server.cc: see http_server.h.
#include "packserve/server/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <ctime>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <utility>

#include "packserve/common/log.h"
#include "packserve/server/generate_handler.h"
#include "packserve/server/tokenize_handler.h"

namespace packserve::server {

namespace {

using nlohmann::json;

constexpr int kListenBacklog = 1024;

const char* const kRoutes[] = {"/v1/completions", "/v1/chat/completions", "/v1/models",
                               "/tokenize",       "/detokenize",          "/health",
                               "/metrics"};

std::string route_label(const std::string& path) {
  for (const char* r : kRoutes) {
    if (path == r) return r;
  }
  return "other";
}

bool starts_with(const std::string& s, std::string_view prefix) {
  return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

// The routes behind --api-key: the API (/v1/*) and the tokenizer routes, which read the
// same model; /health and /metrics stay open for probes and scrapers.
bool needs_api_key(const std::string& path) {
  return starts_with(path, "/v1/") || path == "/tokenize" || path == "/detokenize";
}

// Compares without an early exit, so the time taken says nothing about the key.
bool same_secret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ b[i % (b.empty() ? 1 : b.size())]);
  }
  return diff == 0 && !b.empty();
}

ApiError unavailable(ServerState state) {
  const bool loading = state == ServerState::kLoading;
  return ApiError{503, "service_unavailable_error",
                  loading ? "the model is still loading; retry shortly"
                          : "the server is shutting down and accepts no new requests",
                  std::nullopt, std::string(loading ? "loading" : "draining")};
}

}  // namespace

Status ServerConfig::validate() const {
  if (port < 0 || port > 65535) {
    return invalid_argument("server.port: expected 0..65535, got " + std::to_string(port));
  }
  if (max_body_bytes < 1024) {
    return invalid_argument("server.max_body_bytes: expected >= 1024, got " +
                            std::to_string(max_body_bytes));
  }
  if (num_http_threads < 2) {
    return invalid_argument("server.num_http_threads: expected >= 2, got " +
                            std::to_string(num_http_threads));
  }
  if (heartbeat_ms < 10) {
    return invalid_argument("server.heartbeat_ms: expected >= 10, got " +
                            std::to_string(heartbeat_ms));
  }
  if (served_model_name.empty()) return invalid_argument("server.served_model_name: empty");
  if (!reasoning_parser.empty() && reasoning_parser != "qwen3") {
    return invalid_argument("server.reasoning_parser: expected \"qwen3\" or none, got \"" +
                            reasoning_parser + "\"");
  }
  return ok_status();
}

struct HttpServer::Impl {
  ServerConfig config;
  httplib::Server http;
  std::thread listen_thread;
  int bound_port = 0;
  std::atomic<bool> stopping{false};
  OpenStreams open_streams;
  std::atomic<ServerState> state{ServerState::kLoading};

  mutable std::mutex mutex;
  std::shared_ptr<EngineApi> engine;                      // guarded by mutex
  std::map<std::pair<std::string, int>, int64_t> counts;  // guarded by mutex

  std::shared_ptr<EngineApi> current_engine() const {
    std::lock_guard<std::mutex> lock(mutex);
    return engine;
  }

  void install_routes();
  void generate(Endpoint endpoint, const httplib::Request& req, httplib::Response& res);
  using TokenizerHandler = void (*)(const EngineApi&, const std::string&, const httplib::Request&,
                                    httplib::Response&);
  void tokenizer_route(TokenizerHandler handler, const httplib::Request& req,
                       httplib::Response& res);
};

void HttpServer::Impl::generate(Endpoint endpoint, const httplib::Request& req,
                                httplib::Response& res) {
  const ServerState s = state.load();
  std::shared_ptr<EngineApi> e = current_engine();
  if (s != ServerState::kReady || !e) {
    set_error(res, unavailable(s));
    return;
  }
  GenerateOptions options{config.served_model_name,
                          config.heartbeat_ms,
                          &stopping,
                          &open_streams,
                          config.reasoning_parser == "qwen3",
                          config.exclude_tools_when_tool_choice_none};
  handle_generate(e, options, endpoint, req, res);
}

// /tokenize and /detokenize need only the tokenizer, which comes with the engine: while the
// model loads there is none (503 "loading", as the generation routes answer); from ready on
// they answer in every state, draining included, as /v1/models and /metrics do, since they
// submit nothing to the engine.
void HttpServer::Impl::tokenizer_route(TokenizerHandler handler, const httplib::Request& req,
                                       httplib::Response& res) {
  std::shared_ptr<EngineApi> e = current_engine();
  if (!e) {
    set_error(res, unavailable(state.load()));
    return;
  }
  handler(*e, config.served_model_name, req, res);
}

void HttpServer::Impl::install_routes() {
  http.new_task_queue = [n = config.num_http_threads] {
    return new httplib::ThreadPool(static_cast<std::size_t>(n));
  };
  http.set_payload_max_length(config.max_body_bytes);
  http.set_keep_alive_max_count(1000);
  // An idle keep-alive connection holds a worker; stop() waits for it up to this long.
  http.set_keep_alive_timeout(2);
  http.set_read_timeout(30, 0);
  http.set_write_timeout(30, 0);

  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (config.api_key.empty() || !needs_api_key(req.path)) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    const std::string auth = req.get_header_value("Authorization");
    const std::string kBearer = "Bearer ";
    if (!starts_with(auth, kBearer) || !same_secret(auth.substr(kBearer.size()), config.api_key)) {
      set_error(res, ApiError{401, "authentication_error",
                              auth.empty() ? "missing Authorization: Bearer <api key> header"
                                           : "invalid API key",
                              std::nullopt, std::string("invalid_api_key")});
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });

  http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    generate(Endpoint::kCompletions, req, res);
  });
  http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    generate(Endpoint::kChatCompletions, req, res);
  });
  http.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    tokenizer_route(&handle_tokenize, req, res);
  });
  http.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    tokenizer_route(&handle_detokenize, req, res);
  });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    json model = {{"id", config.served_model_name},
                  {"object", "model"},
                  {"created", static_cast<int64_t>(std::time(nullptr))},
                  {"owned_by", "packserve"}};
    if (auto e = current_engine()) model["max_model_len"] = e->max_model_len();
    res.set_content(json{{"object", "list"}, {"data", json::array({model})}}.dump(),
                    "application/json");
  });
  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const ServerState s = state.load();
    res.status = s == ServerState::kReady ? 200 : 503;
    res.set_content(json{{"status", s == ServerState::kReady ? "ok" : server_state_name(s)}}.dump(),
                    "application/json");
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    MetricsSnapshot snap;
    snap.state = state.load();
    if (auto e = current_engine()) snap.engine = e->metrics();
    {
      std::lock_guard<std::mutex> lock(mutex);
      for (const auto& [key, count] : counts) {
        snap.http_requests.push_back(HttpRequestCount{key.first, key.second, count});
      }
    }
    res.set_content(render_metrics_text(snap), "text/plain; version=0.0.4");
  });

  // Answers httplib produced itself (404 no route, 413 body too large, 400 unreadable
  // request) get an error object too.
  http.set_error_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        ApiError error;
        error.status = res.status;
        if (res.status == 404) {
          error.type = "not_found_error";
          error.message = "no route " + req.method + " " + req.path;
          error.code = "not_found";
        } else if (res.status == 413) {
          error.message = "request body: larger than the server's limit (--max-body-bytes)";
          error.code = "request_too_large";
        } else if (res.status >= 500) {
          error.type = "server_error";
          error.message = "internal error";
        } else {
          error.message = "bad request";
        }
        set_error(res, error);
        return httplib::Server::HandlerResponse::Handled;
      }));
  http.set_exception_handler([](const httplib::Request& req, httplib::Response& res,
                                std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    PS_LOG_ERROR("server", "handler for {} {} threw: {}", req.method, req.path, what);
    set_error(res,
              ApiError{500, "server_error", "internal error: " + what, std::nullopt, std::nullopt});
  });
  http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mutex);
    ++counts[{route_label(req.path), res.status}];
  });
}

HttpServer::HttpServer(ServerConfig config) : impl_(std::make_unique<Impl>()) {
  impl_->config = std::move(config);
}

HttpServer::~HttpServer() { stop(); }

Status HttpServer::start() {
  PS_RETURN_IF_ERROR(impl_->config.validate());
  impl_->install_routes();
  const auto& c = impl_->config;
  // cpp-httplib 0.11 listens with a backlog of 5: a burst of new connections (64 streaming
  // clients starting at once) overflows it and the kernel drops some, which clients see as
  // failed reads after a SYN retransmit. Capture the listening socket and listen again with a
  // deep backlog (Linux updates the backlog of a listening socket).
  int listen_fd = -1;
  impl_->http.set_socket_options([&listen_fd](socket_t fd) {
    int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    listen_fd = fd;
  });
  if (c.port == 0) {
    impl_->bound_port = impl_->http.bind_to_any_port(c.host);
  } else {
    impl_->bound_port = impl_->http.bind_to_port(c.host, c.port) ? c.port : -1;
  }
  if (impl_->bound_port <= 0) {
    return internal_error("server: cannot listen on " + c.host + ":" + std::to_string(c.port) +
                          " (in use, or not an address of this host)");
  }
  if (listen_fd >= 0 && ::listen(listen_fd, kListenBacklog) != 0) {
    PS_LOG_WARN("server", "could not raise the listen backlog to {}", kListenBacklog);
  }
  impl_->listen_thread = std::thread([this] { impl_->http.listen_after_bind(); });
  PS_LOG_INFO("server", "listening host={} port={}", c.host, impl_->bound_port);
  return ok_status();
}

int HttpServer::port() const { return impl_->bound_port; }

void HttpServer::set_engine(std::shared_ptr<EngineApi> engine) {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->engine = std::move(engine);
  }
  ServerState expected = ServerState::kLoading;
  impl_->state.compare_exchange_strong(expected, ServerState::kReady);
}

void HttpServer::begin_drain() { impl_->state.store(ServerState::kDraining); }

ServerState HttpServer::state() const { return impl_->state.load(); }

bool HttpServer::wait_streams_flushed(std::chrono::milliseconds timeout) {
  return impl_->open_streams.wait_all_closed(timeout);
}

void HttpServer::stop() {
  impl_->state.store(ServerState::kDraining);
  impl_->stopping.store(true);
  impl_->http.stop();
  if (impl_->listen_thread.joinable()) impl_->listen_thread.join();
}

}  // namespace packserve::server
