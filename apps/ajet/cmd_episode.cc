// `ajet episode list` and `ajet episode show`: recorded episodes, from the SQLite store file
// (--store) or from a running front (--url; GET /episodes and GET /episodes/{uuid}, admin token
// from
// --token or $AJET_ADMIN_TOKEN). The store admits one process, so a live run is read through --url.
// Reading with --store opens the store as a front would, but writes nothing (it only adds the list
// indexes an older store lacks).
//
// show prints readable text (episode_text.h) or, with --json, the episode document of
// docs/tracking.md unchanged. Text pieces need the model's tokenizer: --tokenizer DIR, else the
// model.path of the train config stored with the episodes (state key train_config_yaml) when that
// directory has a tokenizer.json; without one the document has no text pieces ("tokenizer": false).
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "command.h"
#include "client/swarm_client.h"
#include "common/error.h"
#include "common/json.h"
#include "common/no_color.h"
#include "config/load.h"
#include "episode_text.h"
#include "http/client.h"
#include "store/episode_list.h"
#include "store/store.h"
#include "text/tokenizer.h"
#include "tracking/episode_json.h"
#include "tracking/episode_tracker.h"
#include "tracking/merge.h"

namespace ajet::cli {
namespace {

// Where episodes come from: a store file or a running front.
struct Source {
  std::string store;
  std::string url;
  std::string token;  // default $AJET_ADMIN_TOKEN
};

void add_source_options(CLI::App* cmd, Source& source) {
  auto* store = cmd->add_option("--store", source.store,
                                "SQLite store file of the swarm server (not while it runs)");
  auto* url =
      cmd->add_option("--url", source.url, "A running ajet-swarm, e.g. http://127.0.0.1:10086");
  store->excludes(url);
  cmd->add_option("--token", source.token, "Admin token for --url (default: $AJET_ADMIN_TOKEN)")
      ->needs(url);
}

void check_source(const Source& source, const char* command) {
  if (source.store.empty() && source.url.empty()) {
    invalid_argument(
        std::string("ajet episode ") + command +
        ": pass --store FILE (a stopped run's store) or --url URL (a running ajet-swarm)");
  }
}

std::unique_ptr<store::Store> open_store(const std::string& path) {
  // Opening creates a missing file: refuse first, so a typo never leaves an empty store behind.
  if (!std::filesystem::exists(path)) fail(ErrorCode::kNotFound, "no store at " + path);
  return std::make_unique<store::Store>(path);
}

std::string query_escape(const std::string& text) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out += {'%', hex[c >> 4], hex[c & 15]};
    }
  }
  return out;
}

// GET `target` from the front with the admin token; the body as JSON. The front's 400 (a bad
// parameter) is a usage error; 401 says where the token comes from.
Json get_from_front(const Source& source, const std::string& target) {
  const std::string token =
      source.token.empty() ? client::admin_token_for(source.url) : source.token;
  http::Headers headers;
  if (!token.empty()) headers.add("Authorization", "Bearer " + token);
  http::HttpClient client(source.url);
  http::ClientResponse r = client.get(target, headers);
  if (r.status == 200) return r.json();
  std::string message = r.body;
  if (std::optional<Json> body = try_parse_json(r.body);
      body && body->contains("error") && (*body)["error"].is_object()) {
    message = (*body)["error"].value("message", r.body);
  }
  const std::string what = "GET " + target + " from " + source.url + ": HTTP " +
                           std::to_string(r.status) + ": " + message;
  if (r.status == 400) invalid_argument(what);
  if (r.status == 401)
    fail(ErrorCode::kUnauthenticated, what + " (pass --token or set AJET_ADMIN_TOKEN)");
  if (r.status == 404) fail(ErrorCode::kNotFound, what);
  fail(ErrorCode::kUnavailable, what);
}

void write_stdout(const std::string& text) { std::fwrite(text.data(), 1, text.size(), stdout); }

double now_unix() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// ---- list ----

struct ListArgs {
  Source source;
  std::optional<int64_t> step;
  std::string task, client, agent, status, type, success, cursor;
  std::optional<double> reward_min, reward_max;
  int limit = store::kEpisodePageDefaultLimit;
  bool json = false;
  bool full_uuids = false;
};

std::string number_text(double v) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

// The flags as GET /episodes parameters: both sources then read them through one parser.
std::map<std::string, std::string> list_params(const ListArgs& a) {
  std::map<std::string, std::string> p{{"limit", std::to_string(a.limit)}};
  auto put = [&p](const char* name, const std::string& value) {
    if (!value.empty()) p[name] = value;
  };
  put("cursor", a.cursor);
  if (a.step) p["step"] = std::to_string(*a.step);
  put("task", a.task);
  put("client", a.client);
  put("agent", a.agent);
  put("status", a.status);
  put("type", a.type);
  if (a.reward_min) p["reward_min"] = number_text(*a.reward_min);
  if (a.reward_max) p["reward_max"] = number_text(*a.reward_max);
  put("success", a.success);
  return p;
}

std::string page_target(const std::map<std::string, std::string>& params) {
  std::string target = "/episodes";
  char sep = '?';
  for (const auto& [k, v] : params) {
    target += sep + k + "=" + query_escape(v);
    sep = '&';
  }
  return target;
}

Json fetch_page(const Source& source, const std::map<std::string, std::string>& params) {
  if (!source.url.empty()) return get_from_front(source, page_target(params));
  const store::EpisodePageRequest request = store::episode_page_request_from_params(params);
  std::unique_ptr<store::Store> st = open_store(source.store);
  return store::episode_page_json(st->list_episodes(request));
}

void run_episode_list(const ListArgs& args) {
  check_source(args.source, "list");
  const Json page = fetch_page(args.source, list_params(args));
  write_stdout(args.json ? page.dump(2, ' ', false, Json::error_handler_t::replace) + "\n"
                         : episode_table(page, now_unix(), args.full_uuids));
}

// ---- show ----

struct ShowArgs {
  Source source;
  std::string uuid;
  std::string tokenizer;
  std::string compare_level;  // "" = from the stored config (default token)
  std::string color = "auto";
  bool json = false;
  int indent = 2;
};

// `uuid`: resolved (Store::resolve_episode_uuid).
Json document_from_store(store::Store& st, const ShowArgs& args, const std::string& uuid) {
  std::optional<store::EpisodeRow> episode = st.get_episode(uuid);
  if (!episode)
    fail(ErrorCode::kNotFound, "episode " + uuid + " is not in store " + args.source.store);
  std::vector<store::CallRow> rows = st.get_calls(uuid);

  std::optional<config::Config> cfg;
  if (auto yaml = st.get_state(store::kStateTrainConfigYaml); yaml && !yaml->empty()) {
    try {
      cfg = config::parse_config(*yaml, "train config stored in " + args.source.store,
                                 config::ConfigUse::kSwarmServer)
                .config;
    } catch (const Error& e) {
      std::fprintf(stderr, "ajet episode show: ignoring the stored train config: %s\n", e.what());
    }
  }

  std::filesystem::path tokenizer_dir = args.tokenizer;
  if (tokenizer_dir.empty() && cfg && !cfg->model.path.empty() &&
      std::filesystem::exists(std::filesystem::path(cfg->model.path) / "tokenizer.json")) {
    tokenizer_dir = cfg->model.path;
  }
  std::unique_ptr<text::Tokenizer> tok;
  std::unique_ptr<tracking::ChatFormat> format;
  if (!tokenizer_dir.empty()) {
    tok = std::make_unique<text::Tokenizer>(text::Tokenizer::load(tokenizer_dir));
    try {
      format = std::make_unique<tracking::ChatFormat>(tracking::ChatFormat::from_tokenizer(*tok));
    } catch (const Error& e) {
      std::fprintf(stderr,
                   "ajet episode show: no chat format (%s); text-level merging is unavailable\n",
                   e.what());
    }
  } else {
    std::fprintf(
        stderr,
        "ajet episode show: no tokenizer (pass --tokenizer DIR): token ids without text pieces\n");
  }

  tracking::MergeOptions options =
      cfg ? tracking::MergeOptions::from_config(*cfg, format.get()) : tracking::MergeOptions{};
  options.format = format.get();
  if (!args.compare_level.empty())
    options.compare_level = tracking::compare_level_from_name(args.compare_level);

  std::vector<tracking::CallRecord> calls = tracking::calls_from_rows(rows, format.get());
  tracking::EpisodeInfo info{episode->uuid, episode->task_id, episode->reward.value_or(0.0)};
  tracking::MergedEpisode merged = tracking::merge_episode(info, calls, options);
  tracking::EpisodeView view = tracking::EpisodeView::from_row(*episode);
  view.dropped_calls = st.get_dropped_calls(uuid);
  return tracking::episode_json(view, calls, merged, tok.get());
}

// The episode's GET /episodes row (step, client, times) for the text header; null when the front
// is too old to list episodes.
Json summary_from_front(const Source& source, const std::string& uuid) {
  try {
    const Json page = get_from_front(source, "/episodes?limit=1&uuid=" + query_escape(uuid));
    if (page.contains("episodes") && page["episodes"].is_array() && !page["episodes"].empty())
      return page["episodes"][0];
  } catch (const Error&) {
  }
  return nullptr;
}

bool use_color(const std::string& mode) {
  if (mode == "always") return true;
  if (mode == "never") return false;
  return ::isatty(STDOUT_FILENO) == 1 && !no_color_requested();
}

void run_episode_show(const ShowArgs& args) {
  check_source(args.source, "show");
  if (!args.source.url.empty() && (!args.tokenizer.empty() || !args.compare_level.empty())) {
    invalid_argument(
        "ajet episode show: --tokenizer and --compare-level apply to --store; with --url the front "
        "merges with its own model and config");
  }
  Json document;
  Json summary;
  // The uuid may be the start of one (the 12 characters `list` prints): the front or the store
  // resolves it, and the summary is asked for by the whole uuid.
  if (!args.source.url.empty()) {
    document = get_from_front(args.source, "/episodes/" + query_escape(args.uuid));
    if (!args.json)
      summary = summary_from_front(args.source, document.value("episode_uuid", args.uuid));
  } else {
    std::unique_ptr<store::Store> st = open_store(args.source.store);
    const std::string uuid = st->resolve_episode_uuid(args.uuid);
    document = document_from_store(*st, args, uuid);
    if (!args.json) {
      store::EpisodePageRequest one;
      one.filter.uuid = uuid;
      one.limit = 1;
      store::EpisodePage page = st->list_episodes(one);
      if (!page.episodes.empty()) summary = store::episode_summary_json(page.episodes[0]);
    }
  }
  if (args.json) {
    write_stdout(document.dump(args.indent, ' ', false, Json::error_handler_t::replace) + "\n");
  } else {
    write_stdout(episode_text(document, summary, TextStyle{use_color(args.color)}));
  }
}

const CommandRegistration kEpisode("episode", [](CLI::App& app) {
  auto* group = app.add_subcommand("episode", "Inspect recorded episodes");
  group->require_subcommand(1);

  auto list_args = std::make_shared<ListArgs>();
  auto* list = group->add_subcommand("list",
                                     "List episodes, newest first, a page at a time: uuid, step, "
                                     "type, task, status, reward, LLM calls,\n"
                                     "prompt/generated tokens and age. Filters combine (all must "
                                     "hold). The last line gives the --cursor\n"
                                     "of the next page.");
  add_source_options(list, list_args->source);
  list->add_option("--step", list_args->step, "Episodes in the batch of this global step")
      ->check(CLI::NonNegativeNumber);
  list->add_option("--task", list_args->task, "Task id");
  list->add_option("--client", list_args->client, "Client uuid");
  list->add_option("--agent", list_args->agent,
                   "Episodes with at least one LLM call by this agent");
  list->add_option("--status", list_args->status, "Episode status")
      ->check(
          CLI::IsMember({"claimed", "prepared", "finished", "aborted", "reclaimed", "dropped"}));
  list->add_option("--type", list_args->type, "train or eval")
      ->check(CLI::IsMember({"train", "eval"}));
  list->add_option("--reward-min", list_args->reward_min, "Reward at least this");
  list->add_option("--reward-max", list_args->reward_max, "Reward at most this");
  list->add_option("--success", list_args->success, "true or false")
      ->check(CLI::IsMember({"true", "false"}));
  list->add_option("--limit", list_args->limit, "Episodes per page")
      ->check(CLI::Range(1, store::kEpisodePageMaxLimit))
      ->capture_default_str();
  list->add_option("--cursor", list_args->cursor,
                   "Continue after the page that printed this cursor");
  list->add_flag("--json", list_args->json, "Print the page as GET /episodes answers it");
  list->add_flag("--full-uuids", list_args->full_uuids,
                 "Print whole uuids (default: the first 12 characters)");
  list->callback([list_args] { run_episode_list(*list_args); });

  auto show_args = std::make_shared<ShowArgs>();
  auto* show = group->add_subcommand("show",
                                     "Print one episode: its LLM calls as messages (tool calls and "
                                     "results as text) and its merged training\n"
                                     "samples with every token marked trained or masked (colours "
                                     "in a terminal: blue trained, orange masked,\n"
                                     "dim when the policy gave the token p < 0.3; "
                                     "[trained]/[masked] markers when piped or NO_COLOR is set).\n"
                                     "--json prints the episode document instead (calls, samples, "
                                     "merge diagnostics; docs/tracking.md).");
  add_source_options(show, show_args->source);
  show->add_option(
          "uuid", show_args->uuid,
          "Episode uuid, or its start when only one episode's uuid has it (as list prints)")
      ->required();
  show->add_flag("--json", show_args->json,
                 "Print the JSON document (as GET /episodes/{uuid} serves it)");
  show->add_option("--color", show_args->color,
                   "Colour the tokens: auto (a terminal without NO_COLOR), always, never")
      ->check(CLI::IsMember({"auto", "always", "never"}))
      ->capture_default_str();
  show->add_option("--tokenizer", show_args->tokenizer,
                   "Tokenizer directory for text pieces (--store; default: model.path of the "
                   "stored train config)");
  show->add_option("--compare-level", show_args->compare_level,
                   "Merge at 'token' or 'text' level (--store; default: the stored config's "
                   "timeline_compare_level, "
                   "else token)")
      ->check(CLI::IsMember({"token", "text"}));
  show->add_option("--indent", show_args->indent, "JSON indentation with --json (-1: one line)")
      ->capture_default_str();
  show->callback([show_args] { run_episode_show(*show_args); });
});

}  // namespace
}  // namespace ajet::cli
