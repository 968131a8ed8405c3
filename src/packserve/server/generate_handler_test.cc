// generate_handler_test.cc: engine refusals map to the documented HTTP status, type and param.
#include "packserve/server/generate_handler.h"

#include <gtest/gtest.h>

namespace packserve::server {
namespace {

TEST(EngineError, MapsStatusCodes) {
  ApiError e =
      engine_error(invalid_argument("temperature: expected a finite number >= 0, got nan"));
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.type, "invalid_request_error");
  EXPECT_EQ(e.param, std::optional<std::string>("temperature"));
  // A message that does not start with a field name has no param.
  e = engine_error(invalid_argument("prompt + max_tokens exceeds the context: 600 > 512"));
  EXPECT_EQ(e.status, 400);
  EXPECT_FALSE(e.param.has_value());
  e = engine_error(resource_exhausted("waiting queue is full"));
  EXPECT_EQ(e.status, 429);
  EXPECT_EQ(e.type, "rate_limit_error");
  EXPECT_EQ(e.code, std::optional<std::string>("queue_full"));
  e = engine_error(failed_precondition("draining"));
  EXPECT_EQ(e.status, 503);
  EXPECT_EQ(e.type, "service_unavailable_error");
  e = engine_error(internal_error("backend failed"));
  EXPECT_EQ(e.status, 500);
  EXPECT_EQ(e.type, "server_error");
}

}  // namespace
}  // namespace packserve::server
