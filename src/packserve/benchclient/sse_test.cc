// sse_test.cc: the SSE parser on a stream cut at every byte position (and byte by byte), with
// "\n" and "\r\n" line ends, comments, multi-line data and a truncated tail.
#include "packserve/benchclient/sse.h"

#include <gtest/gtest.h>

namespace packserve::benchclient {
namespace {

std::vector<std::string> datas(const std::vector<SseEvent>& events) {
  std::vector<std::string> out;
  for (const SseEvent& e : events) out.push_back(e.data);
  return out;
}

TEST(SseParser, EveryCutGivesTheSameEvents) {
  const std::string stream =
      ": keep-alive comment\r\n"
      "data: {\"a\":1}\r\n\r\n"
      "event: ping\ndata:x\n\n"
      "data: line1\ndata: line2\n\n"
      "retry: 10\n\n"  // no data: not dispatched
      "data: [DONE]\r\n\r\n";
  const std::vector<std::string> expected = {"{\"a\":1}", "x", "line1\nline2", "[DONE]"};
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    SseParser p;
    std::vector<SseEvent> events = p.feed(std::string_view(stream).substr(0, cut));
    const std::vector<SseEvent> rest = p.feed(std::string_view(stream).substr(cut));
    events.insert(events.end(), rest.begin(), rest.end());
    EXPECT_EQ(datas(events), expected) << "cut at " << cut;
    EXPECT_EQ(events[1].event, "ping");
    EXPECT_FALSE(p.has_partial_event());
  }
  SseParser bytewise;
  std::vector<SseEvent> events;
  for (char c : stream) {
    auto e = bytewise.feed(std::string_view(&c, 1));
    events.insert(events.end(), e.begin(), e.end());
  }
  EXPECT_EQ(datas(events), expected);
}

TEST(SseParser, TruncatedTailIsPending) {
  SseParser p;
  EXPECT_TRUE(p.feed("data: {\"a\"").empty());
  EXPECT_TRUE(p.has_partial_event());
  EXPECT_TRUE(p.feed(":1}\n").empty());  // complete line, event not yet dispatched
  EXPECT_TRUE(p.has_partial_event());
  EXPECT_EQ(datas(p.feed("\n")), std::vector<std::string>{"{\"a\":1}"});
}

TEST(SseParser, LoneCarriageReturnEndsALine) {
  SseParser p;
  EXPECT_EQ(datas(p.feed("data: a\r\rdata: b\r")), std::vector<std::string>{"a"});
  EXPECT_TRUE(p.feed("\n").empty());  // the "\n" of a "\r\n" split across pieces
  EXPECT_EQ(datas(p.feed("\n")), std::vector<std::string>{"b"});
}

}  // namespace
}  // namespace packserve::benchclient
