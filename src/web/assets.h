// The web pages (web/: the training dashboard, the episode list, the token viewer), compiled in:
// the front serves them under /ui/ and a classic run writes the dashboard as one self-contained
// file. Nothing is fetched at run time: the pages are the project's own HTML, CSS and JavaScript.
#pragma once

#include <string>
#include <string_view>

#include "common/json.h"

namespace ajet::web {

struct Asset {
  std::string_view name;          // "index.html", "ui.js", "style.css"
  std::string_view content_type;  // from the extension
  std::string_view body;
};

// The embedded file called `name` (a base name, as in the URL /ui/<name>); nullptr for any other.
const Asset* find_asset(std::string_view name);

// One HTML file that shows the dashboard without a server: the CSS and the script inlined, and
// `snapshot` as the data the live page would fetch:
//   {"title": str, "global_step": int, "names": [{"name", "points", "last_step"}],
//    "series": {name: [[step, value, unix_time], ...]}, "latest_checkpoint": str or null}
// (the shapes of GET /metrics_history; the checkpoint as GET /get_engine_status says it, optional).
// `snapshot` goes in a <script> with '<', '>' and '&' escaped.
std::string dashboard_snapshot_html(const Json& snapshot);

}  // namespace ajet::web
