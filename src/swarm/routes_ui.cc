// GET /ui/ and /ui/<file>: the embedded web pages (src/web). Static and public: every number and
// token they show comes from the admin-token routes (/episodes, /metrics_history), fetched by the
// page with the token the user gives it.
#include "http/response.h"
#include "openai/openai_errors.h"
#include "swarm/routes.h"
#include "web/assets.h"

namespace ajet::swarm {

namespace {

http::Response asset_response(const web::Asset& asset) {
  http::Response r = http::text_response(std::string(asset.body), 200, asset.content_type);
  r.headers.set("Cache-Control", "no-cache");
  r.headers.set("X-Content-Type-Options", "nosniff");
  // Only this origin's scripts and data; inline style attributes carry the token colours.
  r.headers.set("Content-Security-Policy",
                "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src "
                "'self' data:; "
                "connect-src 'self'; frame-ancestors 'none'");
  return r;
}

void serve_asset(std::string_view name, const http::Respond& respond) {
  const web::Asset* asset = web::find_asset(name);
  if (asset == nullptr) {
    respond(openai::openai_error(
        404,
        "No page /ui/" + std::string(name) + " (the pages are /ui/, /ui/ui.js, /ui/style.css).",
        "not_found"));
    return;
  }
  respond(asset_response(*asset));
}

}  // namespace

void add_ui_handlers(RouteHandlers& out) {
  out.add("ui_redirect", [](http::Request, http::Respond respond) {
    http::Response r;
    r.status = 308;
    r.headers.set("Location", "/ui/");
    respond(std::move(r));
  });
  out.add("ui_index",
          [](http::Request, http::Respond respond) { serve_asset("index.html", respond); });
  out.add("ui_asset", [](http::Request req, http::Respond respond) {
    serve_asset(req.path_params.at("file"), respond);
  });
}

}  // namespace ajet::swarm
