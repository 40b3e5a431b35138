#include "classic/dashboard_snapshot.h"

#include <chrono>
#include <vector>

#include "common/fs.h"
#include "web/assets.h"

namespace ajet::classic {

Json fetch_dashboard_snapshot(client::SwarmClient& client, const std::string& title) {
  const Json index = client.get_metrics_history();
  Json snapshot = {
      {"title", title},
      {"global_step", index.value("global_step", Json(nullptr))},
      {"names", index.value("names", Json::array())},
      {"series", Json::object()},
      {"generated_at",
       std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count()}};
  std::vector<std::string> names;
  for (const Json& n : snapshot.at("names")) names.push_back(n.value("name", ""));
  constexpr size_t kNamesPerRequest = 32;  // the route's limit
  for (size_t i = 0; i < names.size(); i += kNamesPerRequest) {
    const std::vector<std::string> chunk(
        names.begin() + long(i),
        names.begin() + long(std::min(names.size(), i + kNamesPerRequest)));
    const Json part = client.get_metrics_history(chunk);
    const Json series =
        part.value("series", Json::object());  // named: items() of a temporary would dangle
    for (const auto& [name, rows] : series.items()) snapshot["series"][name] = rows;
  }
  // the page's headline names the model (null before the first checkpoint or without a front)
  const Json status = client.get_engine_status().body;
  snapshot["latest_checkpoint"] =
      status.is_object() ? status.value("latest_checkpoint", Json(nullptr)) : Json(nullptr);
  return snapshot;
}

void write_dashboard_snapshot(const std::filesystem::path& path, const Json& snapshot) {
  write_file_atomic(path, web::dashboard_snapshot_html(snapshot));
}

}  // namespace ajet::classic
