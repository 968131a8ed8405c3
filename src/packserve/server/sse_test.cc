// sse_test.cc: SSE framing, checked against hand-written frames and by round trip through
// SseParser (fed whole and byte by byte).
#include "packserve/server/sse.h"

#include <gtest/gtest.h>

namespace packserve::server {
namespace {

TEST(Sse, FramesByHand) {
  EXPECT_EQ(sse_data(R"({"a":1})"), "data: {\"a\":1}\n\n");
  EXPECT_EQ(sse_data("x\ny"), "data: x\ndata: y\n\n");
  EXPECT_EQ(sse_data("x\r\ny\rz"), "data: x\ndata: y\ndata: z\n\n");
  EXPECT_EQ(sse_data(""), "data: \n\n");
  EXPECT_EQ(sse_comment("keep-alive"), ": keep-alive\n\n");
  EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
}

TEST(Sse, ParserHandlesCommentsFieldsAndCrlf) {
  SseParser p;
  auto events =
      p.push(": ping\n\nevent: x\ndata: one\n\ndata:two\r\n\r\nid: 3\n\ndata: a\ndata: b\n\n");
  EXPECT_EQ(events, (std::vector<std::string>{"one", "two", "a\nb"}));
  EXPECT_EQ(p.num_pending_bytes(), 0u);
  EXPECT_TRUE(p.push("data: unfinished\n").empty());
  EXPECT_GT(p.num_pending_bytes(), 0u);
}

TEST(Sse, RoundTripWholeAndBytewise) {
  const std::vector<std::string> payloads = {R"({"choices":[{"text":"hi"}]})", "multi\nline", "",
                                             "[DONE]", "unicode \xc3\xa9 \xf0\x9f\x98\x80"};
  std::string stream;
  for (const auto& p : payloads) stream += sse_data(p);
  stream += sse_comment("keep-alive");
  SseParser whole;
  EXPECT_EQ(whole.push(stream), payloads);
  SseParser bytewise;
  std::vector<std::string> got;
  for (char c : stream) {
    for (auto& e : bytewise.push(std::string_view(&c, 1))) got.push_back(e);
  }
  EXPECT_EQ(got, payloads);
  EXPECT_EQ(bytewise.num_pending_bytes(), 0u);
}

}  // namespace
}  // namespace packserve::server
