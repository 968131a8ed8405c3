// http_test_util.h: the loopback HTTP fixture of the server's tests (http_server_test.cc,
// tokenize_handler_test.cc): an HttpServer on a free port over a FakeEngine (or any
// EngineApi), plain POST/GET helpers, an OpenAI error-object check and an SSE reader. Test-only.
// Thread-safety: one test thread drives it; the helpers may be called from client threads.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "packserve/server/fake_engine_test_util.h"
#include "packserve/server/http_server.h"
#include "packserve/server/sse.h"

namespace packserve::server::testing {

struct Answer {
  int status = 0;
  std::string body;
  nlohmann::json parsed() const { return nlohmann::json::parse(body); }
};

// Fixture of the HTTP tests (suite ServerTest, shared by the files that test routes): a
// server on a free loopback port serving "tiny", over a FakeEngine (64-token context).
class ServerTest : public ::testing::Test {
 protected:
  void start(ServerConfig config = {}, bool with_engine = true,
             std::chrono::milliseconds token_interval = std::chrono::milliseconds(1),
             int max_live = 1000) {
    start_server(std::move(config));
    engine_ = std::make_shared<FakeEngine>(token_interval, 64, max_live);
    if (with_engine) server_->set_engine(engine_);
  }
  // A server over `engine` instead of the fake (engine_ stays null).
  void start_with(std::shared_ptr<EngineApi> engine, ServerConfig config = {}) {
    start_server(std::move(config));
    server_->set_engine(std::move(engine));
  }
  void start_server(ServerConfig config) {
    config.port = 0;
    config.served_model_name = "tiny";
    config.heartbeat_ms = 50;
    server_ = std::make_unique<HttpServer>(config);
    ASSERT_TRUE(server_->start().ok());
  }
  void TearDown() override {
    if (server_) server_->stop();
  }
  httplib::Client client() {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(10, 0);
    return c;
  }
  Answer post(const std::string& path, const std::string& body,
              const httplib::Headers& headers = {}) {
    auto c = client();
    auto res = c.Post(path.c_str(), headers, body, "application/json");
    if (!res) return Answer{-1, httplib::to_string(res.error())};
    return Answer{res->status, res->body};
  }
  Answer get(const std::string& path) {
    auto c = client();
    auto res = c.Get(path.c_str());
    if (!res) return Answer{-1, ""};
    return Answer{res->status, res->body};
  }
  // Asserts an OpenAI error object with `status` and `type`; returns it.
  nlohmann::json expect_error(const Answer& a, int status, const std::string& type) {
    EXPECT_EQ(a.status, status) << a.body;
    nlohmann::json j = nlohmann::json::parse(a.body, nullptr, false);
    EXPECT_TRUE(j.is_object() && j.contains("error")) << a.body;
    if (!j.is_object() || !j.contains("error")) return nlohmann::json();
    EXPECT_EQ(j["error"]["type"], type) << a.body;
    EXPECT_TRUE(j["error"]["message"].is_string());
    EXPECT_TRUE(j["error"].contains("param"));
    EXPECT_TRUE(j["error"].contains("code"));
    return j["error"];
  }
  void wait_for_no_live() {
    for (int i = 0; i < 200 && engine_->num_live() > 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(engine_->num_live(), 0);
  }

  std::unique_ptr<HttpServer> server_;
  std::shared_ptr<FakeEngine> engine_;
};

// Reads a whole SSE response; returns its events' data.
inline std::vector<std::string> read_stream(httplib::Client& c, const std::string& path,
                                            const std::string& body, int* status) {
  SseParser parser;
  std::vector<std::string> events;
  const auto t0 = std::chrono::steady_clock::now();
  auto res = c.Post(path.c_str(), httplib::Headers{}, body, "application/json");
  *status = res ? res->status : -1;
  if (!res) {
    ADD_FAILURE() << "request failed: " << httplib::to_string(res.error()) << " after "
                  << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()
                  << " s";
  }
  if (res) events = parser.push(res->body);
  EXPECT_EQ(parser.num_pending_bytes(), 0u);
  return events;
}

}  // namespace packserve::server::testing
