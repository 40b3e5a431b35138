// The run record: what a classic run leaves in its experiment directory and sends to its front.
// metrics.jsonl (one JSON line per step, validation and resume), the Markdown sections of
// ajet.trainer_common.*_print_to_markdown_file_path, reward_curve.html (the front's dashboard with
// every series inlined), the numbers posted to the front's store (POST /log_metrics), and on
// --resume the earlier run's records reloaded from metrics.jsonl.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "classic/launcher.h"
#include "common/json.h"

namespace ajet::client {
class SwarmClient;
}

namespace ajet::classic {

class RunRecord {
 public:
  RunRecord(const PreparedConfig& prepared, std::function<void(const std::string&)> say);

  // The front the snapshot and the posted metrics go to (set once it answers).
  void attach(client::SwarmClient* client) { client_ = client; }
  // A line of metrics.jsonl (when the jsonl logger is on), kept, and the snapshot rewritten.
  void add(Json record);
  // POST /log_metrics; a refusal is logged once, never fatal.
  void post_metrics(int64_t step, const Json& metrics);
  // Appends to a configured Markdown file ("" / unset: nothing); relative paths are under exp_dir.
  void append_markdown(const std::optional<std::string>& configured, const std::string& section);
  // reward_curve.html from the front's history; a front that does not answer leaves the last one.
  void write_snapshot();

  // --resume: the earlier run's train and validation records up to `step` are kept (for the summary
  // and the reward curve); then the {"kind":"resume"} line is appended.
  static std::vector<Json> read_earlier(const std::filesystem::path& metrics_jsonl);
  void keep_earlier(std::vector<Json> earlier, int64_t up_to_step);
  void mark_resume(const Json& marker);

  bool has_validation(int64_t step) const;
  const std::vector<Json>& records() const { return records_; }
  std::vector<Json> take_records() { return std::move(records_); }
  std::filesystem::path metrics_path() const { return exp_dir_ / "metrics.jsonl"; }
  std::filesystem::path curve_path() const { return exp_dir_ / "reward_curve.html"; }
  bool jsonl() const { return jsonl_; }
  bool console() const { return console_; }

 private:
  std::filesystem::path exp_dir_;
  std::string title_;
  std::function<void(const std::string&)> say_;
  client::SwarmClient* client_ = nullptr;
  std::vector<Json> records_;
  bool jsonl_ = true, console_ = true;
  bool post_warned_ = false, snapshot_warned_ = false;
};

}  // namespace ajet::classic
