#include "classic/run_record.h"

#include <sstream>

#include "classic/dashboard_snapshot.h"
#include "classic/markdown_tables.h"
#include "classic/metrics.h"
#include "client/swarm_client.h"
#include "common/fs.h"
#include "common/log.h"

namespace ajet::classic {

namespace fs = std::filesystem;

RunRecord::RunRecord(const PreparedConfig& prepared, std::function<void(const std::string&)> say)
    : exp_dir_(prepared.exp_dir),
      title_(prepared.config.experiment_name + " (" + prepared.config.backbone + ")"),
      say_(std::move(say)),
      jsonl_(config::logger_enabled(prepared.config, "jsonl")),
      console_(config::logger_enabled(prepared.config, "console")) {}

void RunRecord::add(Json record) {
  if (jsonl_) append_jsonl(metrics_path(), record);
  records_.push_back(std::move(record));
  write_snapshot();
}

void RunRecord::write_snapshot() {
  if (client_ == nullptr) return;
  try {
    write_dashboard_snapshot(curve_path(), fetch_dashboard_snapshot(*client_, title_));
  } catch (const std::exception& e) {
    if (!snapshot_warned_) log().warn("classic: reward_curve.html not updated: {}", e.what());
    snapshot_warned_ = true;
  }
}

void RunRecord::post_metrics(int64_t step, const Json& metrics) {
  if (metrics.empty() || client_ == nullptr) return;
  try {
    client_->log_metrics(step, metrics);
  } catch (const std::exception& e) {
    if (!post_warned_)
      log().warn("classic: POST /log_metrics failed ({}); these numbers miss the front's store",
                 e.what());
    post_warned_ = true;
  }
}

void RunRecord::append_markdown(const std::optional<std::string>& configured,
                                const std::string& section) {
  if (!configured || configured->empty()) return;
  const fs::path p = *configured;
  try {
    classic::append_markdown(p.is_absolute() ? p : exp_dir_ / p, section);
  } catch (const std::exception& e) {
    log().warn("classic: {}", e.what());
  }
}

std::vector<Json> RunRecord::read_earlier(const fs::path& metrics_jsonl) {
  std::vector<Json> earlier;
  if (!fs::exists(metrics_jsonl)) return earlier;
  std::istringstream in(read_file(metrics_jsonl));
  std::string line;
  while (std::getline(in, line)) {
    std::optional<Json> r = try_parse_json(line);
    if (r && r->is_object()) earlier.push_back(std::move(*r));
  }
  return earlier;
}

void RunRecord::keep_earlier(std::vector<Json> earlier, int64_t up_to_step) {
  for (auto& r : earlier) {
    const std::string kind = r.value("kind", "");
    if ((kind == "train" || kind == "validation") && r.value("step", int64_t(0)) <= up_to_step) {
      records_.push_back(std::move(r));
    }
  }
}

void RunRecord::mark_resume(const Json& marker) {
  if (jsonl_) append_jsonl(metrics_path(), marker);
}

bool RunRecord::has_validation(int64_t step) const {
  for (const Json& r : records_) {
    if (r.value("kind", "") == "validation" && r.value("step", int64_t(-1)) == step) return true;
  }
  return false;
}

}  // namespace ajet::classic
