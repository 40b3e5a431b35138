// Router unit tests: dispatch by method and path, path parameters, 404/405 shapes. No sockets: the
// handlers answer through Respond::from.
#include <gtest/gtest.h>

#include <mutex>

#include "http/response.h"
#include "http/router.h"
#include "http/stream.h"

namespace ajet::http {
namespace {

Request make_request(std::string method, std::string target) {
  Request r;
  r.method = std::move(method);
  r.target = std::move(target);
  split_target(r.target, r.path, r.query);
  return r;
}

Response call(const Router& router, std::string method, std::string target) {
  std::optional<Response> got;
  router(make_request(std::move(method), std::move(target)),
         Respond::from([&](Response r) { got = std::move(r); }));
  EXPECT_TRUE(got.has_value());
  return got ? std::move(*got) : Response{};
}

Router make_router() {
  Router router;
  router.get("/health", [](Request, Respond respond) {
    respond(json_response({{"status", "ok"}}));
  });
  router.post("/health", [](Request, Respond respond) { respond(text_response("posted")); });
  router.get("/episodes/{episode_uuid}", [](Request req, Respond respond) {
    respond(json_response(
        {{"episode", req.path_params.at("episode_uuid")}, {"q", req.query["verbose"]}}));
  });
  router.get("/episodes/latest",
             [](Request, Respond respond) { respond(text_response("latest")); });
  router.post("/tasks/{task}/episodes/{episode}", [](Request req, Respond respond) {
    respond(text_response(req.path_params.at("task") + "|" + req.path_params.at("episode")));
  });
  return router;
}

TEST(HttpRouter, ExactPathsByMethod) {
  Router router = make_router();
  EXPECT_EQ(Json::parse(call(router, "GET", "/health").body)["status"], "ok");
  EXPECT_EQ(call(router, "POST", "/health").body, "posted");
  Response head = call(router, "HEAD", "/health");  // HEAD uses the GET handler
  EXPECT_EQ(head.status, 200);
}

TEST(HttpRouter, PathParametersAreDecodedAndExactPathsWin) {
  Router router = make_router();
  Json j = Json::parse(call(router, "GET", "/episodes/ep%2D42?verbose=yes").body);
  EXPECT_EQ(j["episode"], "ep-42");
  EXPECT_EQ(j["q"], "yes");
  EXPECT_EQ(call(router, "GET", "/episodes/latest").body, "latest");
  EXPECT_EQ(call(router, "POST", "/tasks/t1/episodes/e2").body, "t1|e2");
}

TEST(HttpRouter, UnknownPathIs404WithTheErrorShape) {
  Router router = make_router();
  for (const char* target : {"/nope", "/episodes", "/episodes/", "/episodes/a/b", "/health/"}) {
    Response r = call(router, "GET", target);
    EXPECT_EQ(r.status, 404) << target;
    Json j = Json::parse(r.body);
    EXPECT_EQ(j["error"]["type"], "not_found_error");
    EXPECT_NE(j["error"]["message"].get<std::string>().find(target), std::string::npos);
  }
}

TEST(HttpRouter, WrongMethodIs405WithAllow) {
  Router router = make_router();
  Response r = call(router, "DELETE", "/health");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.headers.get("Allow").value(), "GET, POST");
  Json j = Json::parse(r.body);
  EXPECT_EQ(j["error"]["code"], "method_not_allowed");
  EXPECT_EQ(call(router, "POST", "/episodes/x").status, 405);
}

TEST(HttpRouter, BadRegistrationsThrow) {
  Router router = make_router();
  auto h = [](Request, Respond respond) { respond(Response{}); };
  EXPECT_THROW(router.get("/health", h), Error);
  EXPECT_THROW(router.get("/episodes/{episode_uuid}", h), Error);
  EXPECT_THROW(router.get("no-slash", h), Error);
  EXPECT_THROW(router.get("/a/x{y}", h), Error);
  EXPECT_NO_THROW(router.add("PUT", "/episodes/{episode_uuid}", h));
}

// What an observer was told, in order (copied: RouteOutcome's views live only during the call).
struct Seen {
  std::string route;
  std::string method;
  int status = 0;
};
struct Observed {
  std::mutex mu;
  std::vector<Seen> seen;
  std::vector<Seen> all() {
    std::lock_guard lock(mu);
    return seen;
  }
};

Router observed_router(const std::shared_ptr<Observed>& log) {
  Router router = make_router();
  router.observe([log](const RouteOutcome& o) {
    EXPECT_GE(o.elapsed.count(), 0);
    std::lock_guard lock(log->mu);
    log->seen.push_back(Seen{std::string(o.route), std::string(o.method), o.status});
  });
  return router;
}

TEST(HttpRouterObserver, ReportsThePatternNeverThePath) {
  auto log = std::make_shared<Observed>();
  Router router = observed_router(log);
  EXPECT_EQ(call(router, "GET", "/health").status, 200);
  EXPECT_EQ(call(router, "GET", "/episodes/ep%2D42?verbose=yes").status, 200);
  EXPECT_EQ(call(router, "GET", "/episodes/latest").status, 200);
  EXPECT_EQ(call(router, "POST", "/tasks/t1/episodes/e2").status, 200);
  EXPECT_EQ(call(router, "DELETE", "/health").status, 405);
  EXPECT_EQ(call(router, "GET", "/secret/path/of/a/scanner").status, 404);
  EXPECT_EQ(call(router, "HEAD", "/health").status, 200);
  std::vector<Seen> seen = log->all();
  ASSERT_EQ(seen.size(), 7u);
  EXPECT_EQ(seen[0].route, "/health");
  EXPECT_EQ(seen[1].route, "/episodes/{episode_uuid}");
  EXPECT_EQ(seen[2].route, "/episodes/latest");
  EXPECT_EQ(seen[3].route, "/tasks/{task}/episodes/{episode}");
  EXPECT_EQ(seen[3].method, "POST");
  EXPECT_EQ(seen[4].route, "/health");
  EXPECT_EQ(seen[4].status, 405);
  EXPECT_EQ(seen[5].route, kUnmatchedRoute);
  EXPECT_EQ(seen[5].status, 404);
  EXPECT_EQ(seen[6].method, "HEAD");
}

TEST(HttpRouterObserver, AThrowingHandlerIsAnsweredAndReportedAsTheServerWouldAnswerIt) {
  auto log = std::make_shared<Observed>();
  Router router;
  router.get("/bad", [](Request, Respond) { invalid_argument("field 'x' is wrong"); });
  router.get("/broken", [](Request, Respond) { throw std::runtime_error("boom"); });
  router.get("/silent", [](Request, Respond) {});  // drops its Respond
  router.observe([log](const RouteOutcome& o) {
    std::lock_guard lock(log->mu);
    log->seen.push_back(Seen{std::string(o.route), std::string(o.method), o.status});
  });
  std::optional<Response> got;
  EXPECT_THROW(
      router(make_request("GET", "/bad"), Respond::from([&](Response r) { got = std::move(r); })),
      Error);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->status, 400);
  EXPECT_NE(got->body.find("field 'x' is wrong"), std::string::npos);
  got.reset();
  EXPECT_THROW(router(make_request("GET", "/broken"),
                      Respond::from([&](Response r) { got = std::move(r); })),
               std::runtime_error);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->status, 500);
  EXPECT_NE(got->body.find("boom"), std::string::npos);
  EXPECT_EQ(call(router, "GET", "/silent").status, 500);
  std::vector<Seen> seen = log->all();
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0].status, 400);
  EXPECT_EQ(seen[1].status, 500);
  EXPECT_EQ(seen[2].route, "/silent");
  EXPECT_EQ(seen[2].status, 500);
}

// A streamed answer counts when its stream ends: before the server (here the test) receives the
// end.
TEST(HttpRouterObserver, AStreamIsReportedWhenItEndsOrIsCancelled) {
  auto log = std::make_shared<Observed>();
  auto channel = std::make_shared<ChannelStream>();
  Router router;
  router.get("/stream/{id}", [&channel](Request, Respond respond) {
    Response r;
    r.status = 201;
    r.stream = channel;
    respond(std::move(r));
  });
  router.observe([log](const RouteOutcome& o) {
    std::lock_guard lock(log->mu);
    log->seen.push_back(Seen{std::string(o.route), std::string(o.method), o.status});
  });
  Response r = call(router, "GET", "/stream/7");
  ASSERT_TRUE(r.stream);
  EXPECT_NE(r.stream, channel);  // wrapped
  EXPECT_TRUE(log->all().empty());

  channel->push("one");
  std::optional<Chunk> first;
  r.stream->next(Deliver::from([&](Chunk c) { first = std::move(c); }));
  ASSERT_TRUE(first && *first);
  EXPECT_EQ(**first, "one");
  EXPECT_TRUE(log->all().empty());

  size_t reports_at_end = 99;
  bool ended = false;
  r.stream->next(Deliver::from([&](Chunk c) {
    ended = !c.has_value();
    reports_at_end = log->all().size();
  }));
  channel->close();
  EXPECT_TRUE(ended);
  EXPECT_EQ(reports_at_end, 1u);
  r.stream.reset();  // the server lets go: no second report
  std::vector<Seen> seen = log->all();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].route, "/stream/{id}");
  EXPECT_EQ(seen[0].status, 201);

  // The client went away mid-stream.
  channel = std::make_shared<ChannelStream>();
  Response cancelled = call(router, "GET", "/stream/8");
  cancelled.stream->cancel();
  EXPECT_TRUE(channel->cancelled());
  EXPECT_EQ(log->all().size(), 2u);
  // A HEAD answer's stream is dropped unread.
  channel = std::make_shared<ChannelStream>();
  call(router, "HEAD", "/stream/9");
  EXPECT_EQ(log->all().size(), 3u);
}

// An answer that comes after the Router is gone (a pool thread finishing late) is still reported.
TEST(HttpRouterObserver, ALateAnswerOutlivesTheRouter) {
  auto log = std::make_shared<Observed>();
  Respond held;
  std::optional<Response> got;
  {
    Router router;
    router.post("/later", [&held](Request, Respond respond) { held = std::move(respond); });
    router.observe([log](const RouteOutcome& o) {
      std::lock_guard lock(log->mu);
      log->seen.push_back(Seen{std::string(o.route), std::string(o.method), o.status});
    });
    router(make_request("POST", "/later"), Respond::from([&](Response r) { got = std::move(r); }));
  }
  EXPECT_TRUE(log->all().empty());
  held(text_response("late", 202));
  ASSERT_TRUE(got);
  EXPECT_EQ(got->status, 202);
  std::vector<Seen> seen = log->all();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].route, "/later");
  EXPECT_EQ(seen[0].method, "POST");
}

}  // namespace
}  // namespace ajet::http
