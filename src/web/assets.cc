#include "web/assets.h"

#include <vector>

#include "common/error.h"
#include "web/embedded.h"

namespace ajet::web {

namespace {

std::string_view content_type_for(std::string_view name) {
  auto ends = [&](std::string_view ext) {
    return name.size() >= ext.size() && name.substr(name.size() - ext.size()) == ext;
  };
  if (ends(".html")) return "text/html; charset=utf-8";
  if (ends(".js")) return "text/javascript; charset=utf-8";
  if (ends(".css")) return "text/css; charset=utf-8";
  if (ends(".svg")) return "image/svg+xml";
  return "application/octet-stream";
}

const std::vector<Asset>& assets() {
  static const std::vector<Asset> all = [] {
    std::vector<Asset> out;
    for (const EmbeddedFile* f = kEmbeddedFiles; f->name != nullptr; ++f) {
      out.push_back(Asset{f->name, content_type_for(f->name), std::string_view(f->bytes, f->size)});
    }
    return out;
  }();
  return all;
}

const Asset& required(std::string_view name) {
  const Asset* a = find_asset(name);
  if (a == nullptr)
    fail(ErrorCode::kInternal, "web asset " + std::string(name) + " was not compiled in");
  return *a;
}

// JSON inside <script>: no "</script>", no "<!--", no entity surprises.
std::string script_safe_json(const Json& value) {
  const std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size() + 64);
  for (char c : text) {
    switch (c) {
      case '<': out += "\\u003c"; break;
      case '>': out += "\\u003e"; break;
      case '&': out += "\\u0026"; break;
      default: out += c;
    }
  }
  return out;
}

std::string html_escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace

const Asset* find_asset(std::string_view name) {
  for (const Asset& a : assets()) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

std::string dashboard_snapshot_html(const Json& snapshot) {
  std::string title = "AgentJet dashboard";
  if (snapshot.is_object() && snapshot.contains("title") && snapshot["title"].is_string()) {
    title = snapshot["title"].get<std::string>() + " · " + title;
  }
  std::string out;
  out += "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  out += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  out += "<title>" + html_escape(title) + "</title>\n<style>\n";
  out += required("style.css").body;
  out += "</style>\n</head>\n<body>\n<div id=\"app\"></div>\n<script>window.AJET_SNAPSHOT = ";
  out += script_safe_json(snapshot);
  out += ";</script>\n<script>\n";
  out += required("ui.js").body;
  out += "</script>\n</body>\n</html>\n";
  return out;
}

}  // namespace ajet::web
