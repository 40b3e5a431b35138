// `ajet-swarm start`: runs the swarm server until SIGINT/SIGTERM/SIGHUP. Prints one ready line on
// stdout once it serves ("ajet-swarm ready: http://HOST:PORT …"; with --port 0 it names the bound
// port), after what it restored or moved aside and every warning of --conf. A store holding an
// earlier run needs --resume (continue it) or --fresh (move it aside); without either it exits 2.
// At the stop signal it saves the steps trained since the last checkpoint and says where (exit 0);
// a second signal exits at once with 128 + the signal (SwarmServer::handle_signals).
#include <signal.h>
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "command.h"
#include "common/error.h"
#include "episodes/commands.h"
#include "swarm/server.h"

namespace ajet::swarm_cli {
namespace {

// Servers commonly raise their soft descriptor limit to the hard one: the connection cap
// (--max-connections 0) is derived from it.
void raise_open_files_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return;
  limit.rlim_cur = limit.rlim_max;
  if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) {
    std::fprintf(stderr, "ajet-swarm: warning: cannot raise the open-files limit to %llu\n",
                 static_cast<unsigned long long>(limit.rlim_max));
  }
}

void run_start(swarm::FrontOptions options) {
  raise_open_files_limit();
  // A reader of stdout that went away (`ajet-swarm start | tee log`: Ctrl-C stops tee too) must not
  // kill the front with SIGPIPE while it says it is saving its checkpoint.
  ::signal(SIGPIPE, SIG_IGN);
  if (options.admin_token.empty()) {
    if (const char* env = std::getenv("AJET_ADMIN_TOKEN"); env != nullptr)
      options.admin_token = env;
  }
  if (options.inference_key.empty()) {
    if (const char* env = std::getenv("AJET_INFERENCE_KEY"); env != nullptr)
      options.inference_key = env;
  }
  if (options.host != "127.0.0.1" && options.host != "localhost" && options.host != "::1" &&
      options.admin_token.empty()) {
    std::fprintf(stderr,
                 "ajet-swarm: warning: listening on %s without an admin token: anyone who can "
                 "reach this port can "
                 "change the config, run synced code and stop the engine (set --admin-token or "
                 "AJET_ADMIN_TOKEN)\n",
                 options.host.c_str());
  }
  // One write per line: the signal thread says what a stop does while other threads print.
  swarm::SwarmServer server(std::move(options), [](const std::string& line) {
    std::cout << ("ajet-swarm: " + line + "\n") << std::flush;
  });
  server.handle_signals();
  const swarm::StartReport report = server.start();
  for (const auto& note : report.notes) std::cout << "ajet-swarm: " << note << std::endl;
  for (const auto& warning : report.config_warnings)
    std::cout << "ajet-swarm: warning: " << warning << std::endl;
  // Upstream clients wait for "Interchange server is running in blocking mode"; keep that phrase.
  std::cout << "ajet-swarm ready: " << server.url() << " (port " << server.port() << ", store "
            << server.options().store_path.string() << ", dir "
            << server.options().server_dir.string()
            << "). Interchange server is running in blocking mode." << std::endl;
  std::cout << "ajet-swarm: web pages (dashboard, episodes, tokens): " << server.url() << "/ui/"
            << (server.options().admin_token.empty() ? "" : "?token=<the admin token>")
            << std::endl;
  server.wait();
  std::cout << "ajet-swarm: stopped" << std::endl;
}

const CommandRegistration kStart("start", [](CLI::App& app) {
  auto options = std::make_shared<swarm::FrontOptions>();
  auto* cmd = app.add_subcommand(
      "start", "Run the swarm server (OpenAI-compatible API + swarm command API)");
  cmd->add_option("--port,--swarm-port", options->port,
                  "TCP port (0: any free port, printed in the ready line)")
      ->capture_default_str();
  cmd->add_option("--host", options->host,
                  "Address to bind (0.0.0.0 for every interface: set an admin token)")
      ->capture_default_str();
  cmd->add_option("--conf", options->conf,
                  "Train config YAML synced at start (clients may sync another later)");
  auto* resume = cmd->add_flag_callback(
      "--resume", [options] { options->old_store = swarm::OldStoreRule::kResume; },
      "Continue the earlier run the store holds: its episodes, global step and (when it was "
      "running) its engine from the newest checkpoint (after Ctrl-C or kill: the one the stop "
      "saved). Use it when restarting after a stop or a crash; harmless on an empty store");
  auto* fresh = cmd->add_flag_callback(
      "--fresh", [options] { options->old_store = swarm::OldStoreRule::kFresh; },
      "Start a new experiment: a store holding an earlier run is renamed to <store>.before-<time> "
      "first");
  resume->excludes(fresh);
  cmd->add_option("--admin-token", options->admin_token,
                  "Token that sync_train_config, sync_train_code, start_engine, stop_engine (and "
                  "episode views) "
                  "require as 'Authorization: Bearer <token>' (default: $AJET_ADMIN_TOKEN)");
  cmd->add_option(
      "--inference-key", options->inference_key,
      "Key for untracked calls of the OpenAI/Anthropic API (a teacher or judge for "
      "other runs): answered by the current policy, recorded in no episode, never "
      "trained on (default: $AJET_INFERENCE_KEY; none: every call needs an episode key)");
  cmd->add_option("--teacher-url", options->teacher_urls,
                  "A distillation teacher (http://host:port/v1) a synced config may name in "
                  "ajet.distillation.base_url; repeat for several. No other teacher is dialed");
  cmd->add_option("--exp-dir", options->server_dir,
                  "Server directory: the store, experiment directories, synced code")
      ->capture_default_str();
  cmd->add_option("--store", options->store_path,
                  "SQLite store file (default: <exp-dir>/swarm.sqlite)");
  cmd->add_option("--io-threads", options->io_threads, "HTTP I/O threads")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_option("--engine", options->engine_binary,
                  "ajet-engine binary (default: the one next to ajet-swarm)");
  cmd->add_option("--janitor-interval", options->janitor_interval_s,
                  "Seconds between janitor sweeps (idle episodes are reclaimed after their "
                  "discard_episode_timeout)")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 3600.0));
  auto max_body_mb = std::make_shared<double>(double(options->max_body_bytes >> 20));
  cmd->add_option("--max-body-mb", *max_body_mb,
                  "Largest request body (MiB; sync_train_code archives)")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 4096.0));
  auto max_json_mb = std::make_shared<double>(double(options->max_json_body_bytes >> 20));
  cmd->add_option("--max-json-mb", *max_json_mb,
                  "Largest JSON body (MiB; commands and OpenAI requests)")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 4096.0));
  auto body_memory_mb = std::make_shared<double>(double(options->max_body_memory_bytes >> 20));
  cmd->add_option(
         "--max-body-memory-mb", *body_memory_mb,
         "Request-body MiB all requests together may hold while read and until answered; a request "
         "beyond gets 503 + Retry-After before its body is read")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 1048576.0));
  cmd->add_option("--max-connections", options->max_connections,
                  "Open HTTP connections at most; at the cap the longest-idle keep-alive "
                  "connection is closed "
                  "for a new one (0: the open-files limit minus 64, at most 16384)")
      ->capture_default_str();
  auto backlog_mb = std::make_shared<double>(double(options->max_stream_backlog_bytes >> 20));
  cmd->add_option("--max-stream-backlog-mb", *backlog_mb,
                  "MiB a streamed answer may queue for a client that reads slower than the engine "
                  "generates; "
                  "beyond, the call is cancelled and its generation aborted")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 4096.0));
  cmd->add_option("--max-queued-prompts", options->max_queued_prompts,
                  "/v1 requests that may wait for the prompt pool; beyond, 503 + Retry-After")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--max-episode-calls", options->max_episode_calls,
                  "LLM calls one episode may make (each of n choices counts); more are refused "
                  "(413). 0: no limit")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(0), int64_t(1) << 40));
  auto max_episode_mb = std::make_shared<double>(double(options->max_episode_bytes >> 20));
  cmd->add_option("--max-episode-mb", *max_episode_mb,
                  "Bytes one episode's LLM calls may store (MiB; request and response bodies, "
                  "token arrays); a call "
                  "past it is refused (413). 0: no limit")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1048576.0));
  cmd->add_option("--max-request-token-entries", options->max_request_token_entries,
                  "Largest n × max_tokens × (1 + top_logprobs) of one OpenAI request (400 above). "
                  "0: no limit")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(0), int64_t(1) << 40));
  cmd->add_option("--engine-boot-timeout", options->engine_boot_timeout_s,
                  "Seconds the engine may take to start")
      ->capture_default_str();
  cmd->add_option(
         "--engine-ranks", options->engine_ranks,
         "Engine processes to start on this machine, each with ajet.engine.threads (or one per "
         "core) / N threads: data-parallel ranks that each train their part of every batch and "
         "each serve inference (--route)")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  cmd->add_option("--engine-at", options->engine_at,
                  "An engine replica on another host (tcp:HOST:PORT of an `ajet-engine serve "
                  "--elastic --listen tcp:...`; repeat for several): the front starts no engine, "
                  "forms these into one data-parallel group at start_engine, routes calls to them, "
                  "and re-forms the group when one dies or joins (POST /engines adds one later)");
  cmd->add_option("--trainer-at", options->trainer_at,
                  "A trainer rank on another host (tcp:HOST:PORT of an `ajet-engine serve "
                  "--elastic`; repeat for several): the steps train on these (one data-parallel "
                  "group), never routed to, and the --engine-at engines become inference replicas "
                  "that only serve: after every step the trainers' weights are pushed to them "
                  "(disaggregated training; docs/cluster.md)");
  cmd->add_option("--engine-token-file", options->engine_token_file,
                  "The --engine-at engines' shared secret (mode 0600; default: AJET_ENGINE_TOKEN)");
  cmd->add_option("--engine-group-timeout", options->engine_group_timeout_s,
                  "Seconds the --engine-at replicas wait for each other when the group forms, and "
                  "an all-reduce waits for a silent replica (a cut link) before the step fails and "
                  "the group re-forms without it")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 86400.0));
  cmd->add_option_function<std::string>(
         "--route",
         [options](const std::string& name) {
           options->route = engine_control::parse_route_policy(name);
         },
         "Which engine rank serves an LLM call: sticky (an episode's calls stay on the rank that "
         "served its first, placed on the least-loaded rank; the default), round_robin, or first "
         "(rank 0 only)")
      ->check(CLI::IsMember({"sticky", "round_robin", "first"}));
  cmd->add_option_function<std::string>(
         "--admission",
         [options](const std::string& name) { options->kv_admission = name == "kv"; },
         "How many episodes clients may hold at once: kv (the default) lowers the cap below "
         "ajet.rollout.max_env_worker while the engines' KV caches are nearly full or preempt, and "
         "raises it back as they empty; fixed: max_env_worker only")
      ->check(CLI::IsMember({"kv", "fixed"}));
  cmd->add_option("--peer", options->peers,
                  "A front this one may dial as an episode group's coordinator (http://host:port, "
                  "as clients name "
                  "it in group.coordinator_url; repeat for several). Any other coordinator needs "
                  "the admin token");
  cmd->add_flag(
      "--allow-keyless-episode-commands", options->allow_keyless_episode_commands,
      "Accept end/abort/prepare/commit_episode and resolve_episode_group without the episode's key "
      "(upstream clients send none); off: they need the key from claim_episode or the admin token");
  cmd->add_option(
         "--max-discard-episode-timeout", options->max_discard_episode_timeout_s,
         "Largest discard_episode_timeout a claim may ask for (seconds; more is refused with 400)")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 1e7));
  cmd->add_option("--max-claims-per-client", options->max_claims_per_client,
                  "Most episodes one client_uuid may hold claimed at once (0: half of "
                  "ajet.rollout.max_env_worker, "
                  "at least 1; -1: no bound)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(-1), int64_t(1) << 40));
  auto metadata_mb =
      std::make_shared<double>(double(options->max_episode_metadata_bytes) / double(1 << 20));
  cmd->add_option("--max-episode-metadata-mb", *metadata_mb,
                  "Largest workflow_output.metadata and log_metrics of an end_episode, each (MiB "
                  "serialized; kept "
                  "until the batch trains)")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 4096.0));
  cmd->add_option("--group-resolve-give-up", options->group_resolve_give_up_s,
                  "Seconds past its prepare deadline after which a participant's prepared episode "
                  "whose coordinator "
                  "gave no decision is aborted (logged as an error)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e7));
  cmd->callback(
      [options, max_body_mb, max_json_mb, body_memory_mb, backlog_mb, max_episode_mb, metadata_mb] {
        swarm::FrontOptions o = *options;
        o.max_body_bytes = size_t(*max_body_mb * double(1 << 20));
        o.max_json_body_bytes = size_t(*max_json_mb * double(1 << 20));
        o.max_body_memory_bytes = size_t(*body_memory_mb * double(1 << 20));
        o.max_stream_backlog_bytes = size_t(*backlog_mb * double(1 << 20));
        o.max_episode_bytes = size_t(*max_episode_mb * double(1 << 20));
        o.max_episode_metadata_bytes = size_t(*metadata_mb * double(1 << 20));
        for (std::string& peer : o.peers)
          peer = episodes::normalized_coordinator_url(peer, "--peer");
        run_start(std::move(o));
      });
});

}  // namespace
}  // namespace ajet::swarm_cli
