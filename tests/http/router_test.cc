// Router unit tests: dispatch by method and path, path parameters, 404/405 shapes. No sockets: the
// handlers answer through Respond::from.
#include <gtest/gtest.h>

#include "http/response.h"
#include "http/router.h"

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
  router(make_request(std::move(method), std::move(target)), Respond::from([&](Response r) { got = std::move(r); }));
  EXPECT_TRUE(got.has_value());
  return got ? std::move(*got) : Response{};
}

Router make_router() {
  Router router;
  router.get("/health", [](Request, Respond respond) { respond(json_response({{"status", "ok"}})); });
  router.post("/health", [](Request, Respond respond) { respond(text_response("posted")); });
  router.get("/episodes/{episode_uuid}", [](Request req, Respond respond) {
    respond(json_response({{"episode", req.path_params.at("episode_uuid")}, {"q", req.query["verbose"]}}));
  });
  router.get("/episodes/latest", [](Request, Respond respond) { respond(text_response("latest")); });
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

}  // namespace
}  // namespace ajet::http
