// `ajet ledger EXP_DIR`: the task ledger of a classic run (or any front's store) — every task
// drawn, what became of it, and the summary: trained, dropped by reason, in flight, skipped,
// duplicated (store/ledger.h). From the store file of a stopped run (EXP_DIR/swarm/swarm.sqlite, or
// the file itself) or from a running front (--url; GET /ledger, admin token from --token or
// $AJET_ADMIN_TOKEN): the store admits one process, so a live run is read through its front.
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "client/swarm_client.h"
#include "command.h"
#include "common/error.h"
#include "common/json.h"
#include "store/store.h"

namespace ajet::cli {
namespace {

namespace fs = std::filesystem;

struct LedgerArgs {
  std::string where;  // experiment directory or store file
  std::string url;
  std::string token;
  bool rows = false;
  bool json = false;
  bool check = false;
};

// The ledger as GET /ledger answers it: {"global_step", "summary", "rows"?}.
Json ledger_from_store(const std::string& where, bool rows) {
  fs::path path = where;
  if (fs::is_directory(path)) path = path / "swarm" / "swarm.sqlite";
  if (!fs::exists(path)) {
    fail(ErrorCode::kNotFound, "no store at " + path.string() +
                                   " (pass an experiment directory of `ajet --conf`, a store file, "
                                   "or --url of a running front)");
  }
  store::Store st(path);
  const int64_t through = std::stoll(st.get_state(store::kStateGlobalStep).value_or("0"));
  const std::vector<store::LedgerRow> list = st.ledger_rows();
  Json out{{"global_step", through}, {"summary", store::summarize(list, through).to_json()}};
  if (rows) {
    Json array = Json::array();
    for (const store::LedgerRow& r : list) array.push_back(r.to_json());
    out["rows"] = std::move(array);
  }
  return out;
}

std::string summary_text(const Json& ledger) {
  const Json& s = ledger["summary"];
  std::string out =
      "task ledger at global step " + std::to_string(ledger.value("global_step", 0)) + "\n";
  out += "  rows " + std::to_string(s.value("rows", 0)) + ", trained " +
         std::to_string(s.value("trained", 0)) + ", dropped " +
         std::to_string(s.value("dropped", 0)) + ", in flight " +
         std::to_string(s.value("in_flight", 0)) + ", redone after a kill " +
         std::to_string(s.value("redone", 0)) + "\n";
  out += "  skipped " + std::to_string(s.value("skipped", 0)) + ", duplicated " +
         std::to_string(s.value("duplicated", 0)) + "\n";
  const Json by_reason = s.value("dropped_by_reason", Json::object());  // items() needs it alive
  for (const auto& [reason, n] : by_reason.items())
    out += "  dropped (" + reason + "): " + n.dump() + "\n";
  for (const char* key : {"skipped_keys", "duplicated_keys"}) {
    for (const Json& k : s.value(key, Json::array()))
      out += std::string("  ") + (key[0] == 's' ? "skipped: " : "duplicated: ") +
             k.get<std::string>() + "\n";
  }
  return out;
}

std::string rows_text(const Json& ledger) {
  std::string out = "key\ttask_id\tdrawn_step\tstate\tstep\treason\tconsumed\tattempts\n";
  for (const Json& r : ledger.value("rows", Json::array())) {
    out += r.value("key", "") + "\t" + r.value("task_id", "") + "\t" +
           std::to_string(r.value("drawn_step", 0)) + "\t" + r.value("state", "") + "\t" +
           (r["step"].is_null() ? std::string("-") : r["step"].dump()) + "\t" +
           r.value("reason", "") + "\t" + std::to_string(r.value("consumed", 0)) + "\t" +
           std::to_string(r.value("attempts", 0)) + "\n";
  }
  return out;
}

void run_ledger(const LedgerArgs& args) {
  if (args.where.empty() == args.url.empty())
    invalid_argument("ajet ledger: pass an experiment directory (or store file), or --url URL");
  Json ledger;
  if (!args.url.empty()) {
    client::SwarmClientOptions options;
    if (!args.token.empty()) options.admin_token = args.token;
    client::SwarmClient front(args.url, options);
    ledger = front.get_ledger(args.rows || args.json);
  } else {
    ledger = ledger_from_store(args.where, args.rows || args.json);
  }
  const std::string text = args.json ? ledger.dump(2) + "\n"
                                     : (args.rows ? rows_text(ledger) : "") + summary_text(ledger);
  std::fwrite(text.data(), 1, text.size(), stdout);
  const Json& s = ledger["summary"];
  if (args.check && (s.value("skipped", 0) > 0 || s.value("duplicated", 0) > 0)) {
    fail(ErrorCode::kFailedPrecondition,
         "ledger check: " + std::to_string(s.value("skipped", 0)) + " skipped, " +
             std::to_string(s.value("duplicated", 0)) + " duplicated tasks");
  }
}

const CommandRegistration kLedger("ledger", [](CLI::App& app) {
  auto args = std::make_shared<LedgerArgs>();
  auto* cmd = app.add_subcommand(
      "ledger",
      "The task ledger of a run: every task drawn, trained (at which step) or dropped (why), and\n"
      "what was skipped or trained twice across crashes and --resume (docs/classic.md)");
  auto* where = cmd->add_option("exp_dir", args->where,
                                "Experiment directory of a stopped run (or its swarm.sqlite)");
  auto* url =
      cmd->add_option("--url", args->url, "A running ajet-swarm, e.g. http://127.0.0.1:10086");
  where->excludes(url);
  cmd->add_option("--token", args->token, "Admin token for --url (default: $AJET_ADMIN_TOKEN)")
      ->needs(url);
  cmd->add_flag("--rows", args->rows, "Print every row (tab-separated) before the summary");
  cmd->add_flag("--json", args->json, "Print the ledger as GET /ledger?rows=1 answers it");
  cmd->add_flag("--check", args->check, "Exit 1 when a task was skipped or trained twice");
  cmd->callback([args] { run_ledger(*args); });
});

}  // namespace
}  // namespace ajet::cli
