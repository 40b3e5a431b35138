// Unit tests of the plain HTTP structs and helpers: headers, targets, error shapes, SSE framing,
// once-only callbacks and ChannelStream. No sockets.
#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "http/message.h"
#include "http/response.h"
#include "http/sse.h"
#include "http/stream.h"

namespace ajet::http {
namespace {

TEST(HttpHeaders, LookupIgnoresCaseAndKeepsDuplicates) {
  Headers h{{"Content-Type", "application/json"}};
  h.add("X-Tag", "a");
  h.add("x-tag", "b");
  EXPECT_EQ(h.get("content-type").value(), "application/json");
  EXPECT_EQ(h.get("X-TAG").value(), "a");
  EXPECT_EQ(h.size(), 3u);
  h.set("X-Tag", "c");
  EXPECT_EQ(h.size(), 2u);
  EXPECT_EQ(h.get("x-tag").value(), "c");
  EXPECT_FALSE(h.get("missing").has_value());
  EXPECT_EQ(h.get_or("missing", "fallback"), "fallback");
  h.erase("CONTENT-TYPE");
  EXPECT_FALSE(h.has("Content-Type"));
}

TEST(HttpSplitTarget, DecodesQueryButNotPath) {
  std::string path;
  std::map<std::string, std::string> query;
  split_target("/a%20b/c?x=1&name=J%C3%BCrgen+M&flag&x=2#frag", path, query);
  EXPECT_EQ(path, "/a%20b/c");
  EXPECT_EQ(query.at("x"), "2");
  EXPECT_EQ(query.at("name"), "J\xC3\xBCrgen M");
  EXPECT_EQ(query.at("flag"), "");
  EXPECT_EQ(percent_decode("100%", false), "100%");  // a broken escape stays as it is
  EXPECT_EQ(percent_decode("%zz%41", false), "%zzA");
}

TEST(HttpResponses, ErrorHasOpenAiShape) {
  Response r =
      error_response(413, "request body exceeds the limit of 10 bytes", "", "request_too_large");
  EXPECT_EQ(r.status, 413);
  EXPECT_EQ(r.headers.get("Content-Type").value(), "application/json");
  Json body = Json::parse(r.body);
  EXPECT_EQ(body["error"]["message"], "request body exceeds the limit of 10 bytes");
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  EXPECT_EQ(body["error"]["code"], "request_too_large");

  Json no_code = Json::parse(error_response(503, "engine is BOOTING").body);
  EXPECT_TRUE(no_code["error"]["code"].is_null());
  EXPECT_EQ(no_code["error"]["type"], "service_unavailable_error");
}

TEST(HttpResponses, AjetErrorsMapToStatuses) {
  Response r = error_response(Error(ErrorCode::kInvalidArgument, "field 'n' must be an integer"));
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(Json::parse(r.body)["error"]["code"], "invalid_argument");
  EXPECT_EQ(status_for(ErrorCode::kUnauthenticated), 401);
  EXPECT_EQ(status_for(ErrorCode::kNotFound), 404);
  EXPECT_EQ(status_for(ErrorCode::kResourceExhausted), 413);
  EXPECT_EQ(status_for(ErrorCode::kUnavailable), 503);
  EXPECT_EQ(status_for(ErrorCode::kInternal), 500);
}

TEST(HttpResponses, JsonAndRetryAfter) {
  Response r = json_response({{"engine_status", "ENGINE.ROLLING"}}, 201);
  EXPECT_EQ(r.status, 201);
  EXPECT_EQ(Json::parse(r.body)["engine_status"], "ENGINE.ROLLING");
  set_retry_after(r, std::chrono::milliseconds(1500));
  EXPECT_EQ(r.headers.get("Retry-After").value(), "2");
  set_retry_after(r, std::chrono::milliseconds(-5));
  EXPECT_EQ(r.headers.get("Retry-After").value(), "0");
  EXPECT_EQ(r.headers.size(), 2u);  // replaced, not added
}

TEST(HttpSse, EventsRoundTripThroughTheParserInAnySplit) {
  std::string wire = sse_event("{\"a\":1}") + ": keep-alive comment\n\n" +
                     sse_event("line1\nline2", "update") + "data: crlf\r\n\r\n" +
                     "id: 7\ndata:no-space\n\n" + sse_event("[DONE]");
  for (size_t step : {size_t(1), size_t(2), size_t(3), size_t(7), wire.size()}) {
    SseParser parser;
    std::vector<SseEvent> events;
    for (size_t i = 0; i < wire.size(); i += step) {
      ASSERT_TRUE(parser.feed(std::string_view(wire).substr(i, step), [&](const SseEvent& e) {
        events.push_back(e);
        return true;
      }));
    }
    ASSERT_EQ(events.size(), 5u) << "step " << step;
    EXPECT_EQ(events[0].data, "{\"a\":1}");
    EXPECT_EQ(events[1].data, "line1\nline2");
    EXPECT_EQ(events[1].event, "update");
    EXPECT_EQ(events[2].data, "crlf");
    EXPECT_EQ(events[3].data, "no-space");
    EXPECT_EQ(events[3].id, "7");
    EXPECT_EQ(events[4].data, "[DONE]");
  }
}

// A bare CR in the payload ends a line for every SSE parser: it must not let the rest of the
// payload read as fields of its own (here an event name and an id the payload never set).
TEST(HttpSse, CarriageReturnsInThePayloadCannotInjectFields) {
  SseParser parser;
  std::vector<SseEvent> events;
  parser.feed(sse_event("a\revent: evil\r\nid: 9\rb"), [&](const SseEvent& e) {
    events.push_back(e);
    return true;
  });
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].event, "");
  EXPECT_EQ(events[0].id, "");
  EXPECT_EQ(events[0].data, "a\nevent: evil\nid: 9\nb");  // every line kept, as data
}

TEST(HttpSse, ParserStopsWhenTheCallbackSaysSo) {
  SseParser parser;
  int seen = 0;
  EXPECT_FALSE(
      parser.feed(sse_event("1") + sse_event("2"), [&](const SseEvent&) { return ++seen < 1; }));
  EXPECT_EQ(seen, 1);
}

TEST(HttpOnceCallback, DeliversOnceAndLaterCallsAreRefused) {
  std::vector<int> got;
  auto cb = OnceCallback<int>::from([&](int v) { got.push_back(v); });
  OnceCallback<int> copy = cb;
  EXPECT_TRUE(copy(1));
  EXPECT_FALSE(cb(2));
  EXPECT_EQ(got, std::vector<int>{1});
}

TEST(HttpOnceCallback, DroppedRespondAnswers500) {
  std::optional<Response> got;
  {
    Respond respond = Respond::from([&](Response r) { got = std::move(r); });
    Respond copy = respond;
    Respond moved = std::move(copy);
  }  // every handle gone, never called
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->status, 500);
  EXPECT_EQ(Json::parse(got->body)["error"]["code"], "no_response");
}

// Collects what a stream hands over, one next() at a time, like the server does.
std::vector<Chunk> drain(BodyStream& stream, size_t max_chunks) {
  std::vector<Chunk> out;
  while (out.size() < max_chunks) {
    std::promise<Chunk> got;
    stream.next(Deliver::from([&](Chunk c) { got.set_value(std::move(c)); }));
    Chunk c = got.get_future().get();
    bool end = !c.has_value();
    out.push_back(std::move(c));
    if (end) break;
  }
  return out;
}

TEST(HttpChannelStream, QueuedChunksAreJoinedAndCloseEndsTheBody) {
  ChannelStream stream;
  EXPECT_TRUE(stream.push("a"));
  EXPECT_TRUE(stream.push("b"));
  stream.close();
  EXPECT_FALSE(stream.push("late"));
  std::vector<Chunk> chunks = drain(stream, 10);
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0].value(), "ab");
  EXPECT_FALSE(chunks[1].has_value());
}

TEST(HttpChannelStream, NextBeforePushWaitsForTheProducerThread) {
  ChannelStream stream;
  std::promise<Chunk> got;
  stream.next(Deliver::from([&](Chunk c) { got.set_value(std::move(c)); }));
  std::thread producer([&] { stream.push("token"); });
  EXPECT_EQ(got.get_future().get().value(), "token");
  producer.join();
}

TEST(HttpChannelStream, CancelRunsTheCallbackAndStopsTheProducer) {
  ChannelStream stream;
  int cancels = 0;
  stream.on_cancel([&] { ++cancels; });
  stream.push("x");
  stream.cancel();
  stream.cancel();
  EXPECT_EQ(cancels, 1);
  EXPECT_TRUE(stream.cancelled());
  EXPECT_FALSE(stream.push("y"));
  EXPECT_EQ(stream.queued(), 0u);
  int late = 0;
  stream.on_cancel([&] { ++late; });  // registered after the fact: runs at once
  EXPECT_EQ(late, 1);
}

TEST(HttpChannelStream, CancelCallbackIsReleasedOnceTheBodyEnded) {
  auto token = std::make_shared<int>(0);
  ChannelStream stream;
  stream.on_cancel([token] { ++*token; });
  EXPECT_EQ(token.use_count(), 2);
  stream.push("last");
  stream.close();
  drain(stream, 10);
  EXPECT_EQ(token.use_count(), 1);  // a cycle through the callback cannot outlive the body
  stream.cancel();
  EXPECT_EQ(*token, 0);
}

TEST(HttpChannelStream, BoundedPushBlocksUntilTheConsumerTakes) {
  ChannelStream stream(1);
  ASSERT_TRUE(stream.push("first"));
  std::promise<void> second_pushed;
  std::thread producer([&] {
    stream.push("second");  // blocks: capacity 1 is taken
    second_pushed.set_value();
  });
  std::vector<Chunk> first = drain(stream, 1);  // makes room
  second_pushed.get_future().wait();
  producer.join();
  EXPECT_EQ(first[0].value(), "first");
  stream.close();
  std::vector<Chunk> rest = drain(stream, 10);
  ASSERT_EQ(rest.size(), 2u);
  EXPECT_EQ(rest[0].value(), "second");
}

}  // namespace
}  // namespace ajet::http
