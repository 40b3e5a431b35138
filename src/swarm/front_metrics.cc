#include "swarm/front_metrics.h"

#include <sys/resource.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <vector>

#include "common/build_info.h"
#include "episodes/engine_state.h"

namespace ajet::swarm {

namespace {

using prometheus::Labels;
using prometheus::TextBuilder;
using prometheus::Type;

std::string metric_method(std::string_view method) {
  for (std::string_view known : {"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"}) {
    if (method == known) return std::string(method);
  }
  return "other";  // whatever a client sends, the label stays bounded
}

void one_sample(TextBuilder& out, std::string_view name, Type type, std::string_view help,
                double value) {
  out.family(name, type, help);
  out.sample({}, value);
}

// A number of the engine's status reply; nullopt when absent or not a number.
std::optional<double> engine_number(const Json& object, const char* key) {
  if (!object.is_object()) return std::nullopt;
  auto it = object.find(key);
  if (it == object.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

// The fields of /proc/self/stat after the command name (which may hold spaces and parentheses):
// [0] is field 3 (state), so field N of proc(5) is [N - 3].
std::vector<std::string> proc_stat_fields() {
  std::ifstream in("/proc/self/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t close = text.rfind(')');
  std::vector<std::string> fields;
  if (close == std::string::npos) return fields;
  std::istringstream rest(text.substr(close + 1));
  for (std::string f; rest >> f;) fields.push_back(f);
  return fields;
}

std::optional<double> boot_time_seconds() {
  std::ifstream in("/proc/stat");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("btime ", 0) == 0) return std::stod(line.substr(6));
  }
  return std::nullopt;
}

void write_proc_stat(TextBuilder& out, const std::vector<std::string>& stat, long ticks,
                     long page) {
  if (stat.size() <= 21 || ticks <= 0 || page <= 0) return;
  const double utime = std::stod(stat[14 - 3]);
  const double stime = std::stod(stat[15 - 3]);
  one_sample(out, "process_cpu_seconds_total", Type::kCounter,
             "User and system CPU time spent, in seconds.", (utime + stime) / double(ticks));
  one_sample(out, "process_resident_memory_bytes", Type::kGauge, "Resident memory size in bytes.",
             std::stod(stat[24 - 3]) * double(page));
  one_sample(out, "process_virtual_memory_bytes", Type::kGauge, "Virtual memory size in bytes.",
             std::stod(stat[23 - 3]));
  one_sample(out, "process_threads", Type::kGauge, "Threads of the process.",
             std::stod(stat[20 - 3]));
  if (std::optional<double> boot = boot_time_seconds()) {
    one_sample(out, "process_start_time_seconds", Type::kGauge,
               "Start time of the process since the Unix epoch, in seconds.",
               *boot + std::stod(stat[22 - 3]) / double(ticks));
  }
}

}  // namespace

void HttpMetrics::record(const http::RouteOutcome& outcome) {
  const std::string route(outcome.route);
  const double seconds = std::chrono::duration<double>(outcome.elapsed).count();
  std::lock_guard<std::mutex> lock(mu_);
  requests_[{route, metric_method(outcome.method), outcome.status}] += 1;
  auto it = durations_.find(route);
  if (it == durations_.end())
    it = durations_.emplace(route, prometheus::latency_buckets_seconds()).first;
  it->second.observe(seconds);
}

void HttpMetrics::write(TextBuilder& out, const http::ServerStats& server) const {
  std::map<std::tuple<std::string, std::string, int>, uint64_t> requests;
  std::map<std::string, prometheus::Histogram> durations;
  {
    std::lock_guard<std::mutex> lock(mu_);
    requests = requests_;
    durations = durations_;
  }
  out.family("ajet_http_requests_total", Type::kCounter,
             "HTTP requests answered, by route pattern (\"unmatched\" for a 404), method and "
             "status code.");
  for (const auto& [key, n] : requests) {
    const auto& [route, method, code] = key;
    out.sample({{"route", route}, {"method", method}, {"code", std::to_string(code)}}, double(n));
  }
  out.family("ajet_http_request_duration_seconds", Type::kHistogram,
             "Time from routing a request to handing its response to the server; for a streamed "
             "body, to its "
             "end.");
  for (const auto& [route, histogram] : durations) out.histogram({{"route", route}}, histogram);
  one_sample(out, "ajet_http_connections_open", Type::kGauge, "HTTP connections open now.",
             double(server.connections_open));
  one_sample(out, "ajet_http_connections_total", Type::kCounter, "HTTP connections accepted.",
             double(server.connections_accepted));
  one_sample(out, "ajet_http_connections_max", Type::kGauge,
             "The connection cap (--max-connections).", double(server.max_connections));
  one_sample(out, "ajet_http_connections_shed_total", Type::kCounter,
             "Idle (or slow-header) connections closed to make room at the connection cap.",
             double(server.connections_shed));
  one_sample(out, "ajet_http_connections_refused_total", Type::kCounter,
             "Connections answered 503 at the connection cap, nothing being idle.",
             double(server.connections_refused));
  one_sample(
      out, "ajet_http_requests_answered_at_head_total", Type::kCounter,
      "Requests answered from their header, their body never read (credentials, limits, no route).",
      double(server.answered_at_head));
  one_sample(out, "ajet_http_request_body_bytes_held", Type::kGauge,
             "Request-body bytes held now by requests read or waiting for their answer "
             "(--max-body-memory-mb).",
             double(server.body_bytes_held));
}

void write_build_info(TextBuilder& out) {
  const BuildInfo& b = build_info();
  out.family("ajet_build_info", Type::kGauge,
             "Always 1; the labels say which build runs (as GET /version).");
  out.sample({{"version", std::string(b.version)},
              {"git_commit", std::string(b.git_commit)},
              {"build_type", std::string(b.build_type)}},
             1);
}

void write_front_figures(TextBuilder& out, const FrontFigures& f) {
  const episodes::RegistryFigures& r = f.registry;
  out.family(
      "ajet_engine_status", Type::kGauge,
      "1 for the engine status the front reports (GET /get_engine_status), 0 for the others.");
  for (episodes::EnginePhase s :
       {episodes::EnginePhase::kOffline, episodes::EnginePhase::kBooting,
        episodes::EnginePhase::kRolling, episodes::EnginePhase::kRollingPost,
        episodes::EnginePhase::kWeightSyncing, episodes::EnginePhase::kWeightExporting}) {
    out.sample({{"status", std::string(episodes::engine_phase_name(s))}},
               s == r.engine_status ? 1 : 0);
  }
  one_sample(out, "ajet_global_step", Type::kGauge,
             "The training step the front is at (GET /get_engine_status).", double(r.global_step));

  out.family("ajet_episodes", Type::kGauge,
             "Live episodes by state: registered (in the pool, unclaimed), claimed, ending (its "
             "end being stored), "
             "prepared (waiting for its group's decision).");
  out.sample({{"state", "registered"}}, double(r.registered));
  out.sample({{"state", "claimed"}}, double(r.claimed));
  out.sample({{"state", "ending"}}, double(r.ending));
  out.sample({{"state", "prepared"}}, double(r.prepared));
  out.family("ajet_episodes_ended_total", Type::kCounter,
             "Claimed episodes that ended since the front started, by outcome (finished, aborted, "
             "reclaimed by "
             "the janitor, dropped by stop_engine) and episode type.");
  std::map<std::pair<std::string, std::string>, int64_t> ended;
  for (const char* outcome : {"finished", "aborted", "reclaimed", "dropped"}) {
    for (const char* type : {"train", "eval"})
      ended[{outcome, type}] = 0;  // every series from the start
  }
  for (const auto& [key, n] : r.ended) ended[key] = n;
  for (const auto& [key, n] : ended)
    out.sample({{"outcome", key.first}, {"type", key.second}}, double(n));
  out.family("ajet_episodes_aborted_total", Type::kCounter,
             "Claimed episodes their client aborted (abort_episode), by the cause it gave "
             "(\"unspecified\" when "
             "none; at most 32 distinct causes, later ones count as \"other\").");
  std::map<std::string, int64_t> aborted = r.aborted_by_cause;
  aborted.emplace("unspecified", 0);  // a series from the start
  for (const auto& [cause, n] : aborted) out.sample({{"cause", cause}}, double(n));

  one_sample(out, "ajet_batch_episodes", Type::kGauge,
             "Finished train episodes in the batch being collected.", double(r.batch_episodes));
  one_sample(out, "ajet_batch_episodes_target", Type::kGauge,
             "Episodes a full batch holds (train_batch_size * num_repeat).",
             double(r.batch_episode_target));
  one_sample(out, "ajet_batch_tasks", Type::kGauge,
             "Tasks of the batch being collected with num_repeat finished episodes.",
             double(r.batch_tasks));
  one_sample(out, "ajet_batch_non_dummy_tasks", Type::kGauge,
             "Of those tasks, the ones whose rewards differ (a GRPO signal).",
             double(r.batch_non_dummy_tasks));
  one_sample(out, "ajet_batch_tasks_target", Type::kGauge,
             "Tasks a full batch holds (train_batch_size).", double(r.batch_task_target));
  one_sample(out, "ajet_batch_ready", Type::kGauge, "1 while a full batch waits for the trainer.",
             r.batch_ready ? 1 : 0);
  one_sample(out, "ajet_batches_in_training", Type::kGauge,
             "Batches handed to the trainer and not finished.", double(r.batches_in_training));
  one_sample(out, "ajet_batches_recorded_total", Type::kCounter,
             "Batches the debug backbone recorded (it trains nothing).",
             double(r.batches_recorded));
  one_sample(out, "ajet_clients_active", Type::kGauge,
             "Swarm clients active within client_active_timeout.", double(r.active_clients));
  one_sample(out, "ajet_clients_agreed", Type::kGauge,
             "Active clients that called agree_sync_weight for this batch.",
             double(r.agreed_clients));

  one_sample(out, "ajet_llm_calls_in_flight", Type::kGauge, "LLM calls begun and not yet answered.",
             double(r.llm_calls_in_flight));
  out.family("ajet_llm_calls_total", Type::kCounter,
             "LLM calls of the OpenAI-compatible API: answered in full, or failed (the engine was "
             "not connected "
             "or could not generate). Calls refused before reaching the engine (a bad key or body, "
             "a status "
             "that takes no calls) count only in ajet_http_requests_total.");
  out.sample({{"outcome", "answered"}}, double(f.calls.answered));
  out.sample({{"outcome", "failed"}}, double(f.calls.failed));
  out.family("ajet_llm_call_duration_seconds", Type::kHistogram,
             "Duration of answered LLM calls, from the request's arrival to the answer's end.");
  out.histogram({}, f.calls.latency);
  one_sample(out, "ajet_prompt_tokens_total", Type::kCounter,
             "Prompt tokens of answered LLM calls (once per call: its choices share the prompt).",
             double(f.calls.prompt_tokens));
  one_sample(out, "ajet_completion_tokens_total", Type::kCounter,
             "Completion tokens of answered LLM calls, every choice counted.",
             double(f.calls.completion_tokens));

  one_sample(
      out, "ajet_work_pool_queued_tasks", Type::kGauge,
      "Tasks waiting for the front's work pool (store reads, archives, engine start and stop).",
      double(f.work_pool_queued));
  one_sample(out, "ajet_store_queued_writes", Type::kGauge,
             "Writes waiting for the store's writer thread.", double(f.store_queued_writes));
}

void write_replica_group_figures(TextBuilder& out, const Json& group) {
  out.family("ajet_replica_group_generation", Type::kGauge,
             "Times the front formed the group of its --engine-at replicas (0: not yet).");
  out.sample({}, group.value("generation", 0.0));
  const Json engines = group.value("engines", Json::array());
  auto per_slot = [&](const char* name, Type type, const char* help, auto value) {
    out.family(name, type, help);
    for (const Json& e : engines)
      out.sample({{"replica", std::to_string(e.value("slot", 0))}}, value(e));
  };
  per_slot("ajet_replica_member", Type::kGauge,
           "1 when the replica is a member of the current group (it trains and may serve).",
           [](const Json& e) { return e.value("state", "") == "member" ? 1.0 : 0.0; });
  per_slot("ajet_replica_serving", Type::kGauge,
           "1 when calls are routed to the replica now (a member that missed a heartbeat is not).",
           [](const Json& e) { return e.value("serving", false) ? 1.0 : 0.0; });
  per_slot("ajet_replica_lost_total", Type::kCounter,
           "Times the replica was marked gone (its connection closed or it missed three "
           "heartbeats).",
           [](const Json& e) { return e.value("lost", 0.0); });
  per_slot("ajet_replica_joins_total", Type::kCounter, "Group generations the replica joined.",
           [](const Json& e) { return e.value("joined", 0.0); });
}

void write_replica_figures(TextBuilder& out, engine_control::RoutePolicy policy,
                           const engine_control::RouterFigures& routed,
                           const std::vector<std::optional<Json>>& statuses) {
  out.family("ajet_route_policy", Type::kGauge,
             "How LLM calls are spread over the engine replicas (ajet-swarm start --route): 1 for "
             "the policy in use.");
  out.sample({{"policy", engine_control::route_policy_name(policy)}}, 1);
  one_sample(out, "ajet_route_sticky_calls_total", Type::kCounter,
             "LLM calls sent to the replica that served the episode's earlier calls.",
             double(routed.sticky_calls));
  out.family("ajet_route_episodes_total", Type::kCounter,
             "Episodes placed on a replica: new (its first call, on the least-loaded replica) or "
             "moved (its replica was gone).");
  out.sample({{"placement", "new"}}, double(routed.new_episodes));
  out.sample({{"placement", "moved"}}, double(routed.moved_episodes));
  one_sample(out, "ajet_route_unavailable_total", Type::kCounter,
             "LLM calls answered 503 because no engine replica was connected.",
             double(routed.unavailable));
  const size_t n = std::max(routed.replicas.size(), statuses.size());
  if (n == 0) return;
  out.family("ajet_replica_calls_total", Type::kCounter, "LLM calls routed to each replica.");
  for (size_t i = 0; i < n; ++i) {
    out.sample({{"replica", std::to_string(i)}},
               i < routed.replicas.size() ? double(routed.replicas[i].calls) : 0.0);
  }
  out.family("ajet_replica_sequences_in_flight", Type::kGauge,
             "Sequences this front sent to each replica whose call has not ended.");
  for (size_t i = 0; i < n; ++i) {
    out.sample({{"replica", std::to_string(i)}},
               i < routed.replicas.size() ? double(routed.replicas[i].in_flight) : 0.0);
  }
  out.family("ajet_replica_up", Type::kGauge,
             "1 when the replica answered its status call for this scrape.");
  for (size_t i = 0; i < statuses.size(); ++i)
    out.sample({{"replica", std::to_string(i)}}, statuses[i] ? 1 : 0);
  struct Counter {
    const char* key;
    const char* name;
    const char* help;
  };
  for (const Counter& c :
       {Counter{"tokens_prefix_cached", "ajet_replica_prefix_cache_hit_tokens_total",
                "Prompt tokens each replica did not compute: their keys and values were cached."},
        Counter{"tokens_computed", "ajet_replica_computed_tokens_total",
                "Tokens each replica ran through the model (prefill, recompute and decode)."},
        Counter{"tokens_generated", "ajet_replica_generated_tokens_total",
                "Tokens each replica sampled."}}) {
    out.family(c.name, Type::kCounter, c.help);
    for (size_t i = 0; i < statuses.size(); ++i) {
      if (!statuses[i] || !statuses[i]->contains("engine")) continue;
      if (std::optional<double> v = engine_number((*statuses[i])["engine"], c.key))
        out.sample({{"replica", std::to_string(i)}}, *v);
    }
  }
}

void write_admission_figures(TextBuilder& out, const engine_control::AdmissionFigures& f) {
  one_sample(out, "ajet_admission_cap", Type::kGauge,
             "Episodes clients may hold at once now (ajet-swarm start --admission kv): lowered "
             "under KV-cache pressure, never above the pool size. 0 before the first reading.",
             double(f.cap));
  one_sample(out, "ajet_admission_pool_size", Type::kGauge,
             "The pool size the cap stays under (ajet.rollout.max_env_worker).", double(f.ceiling));
  one_sample(out, "ajet_admission_kv_usage_ratio", Type::kGauge,
             "KV cache usage of the fullest replica at the last reading (0 to 1).", f.usage);
  out.family("ajet_admission_decisions_total", Type::kCounter,
             "The admission controller's readings: grow (usage low), trim (usage high or a "
             "preemption), hold.");
  out.sample({{"decision", "grow"}}, double(f.grows));
  out.sample({{"decision", "trim"}}, double(f.trims));
  out.sample({{"decision", "hold"}}, double(f.holds));
}

void write_engine_figures(TextBuilder& out, const std::optional<Json>& status) {
  one_sample(out, "ajet_engine_up", Type::kGauge,
             "1 when the engine answered its status call for this scrape; 0 when there is none "
             "(OFFLINE, booting) "
             "or it did not answer in time, and the ajet_engine_* figures are absent.",
             status ? 1 : 0);
  if (!status) return;
  const Json empty = Json::object();
  const Json& engine = status->contains("engine") ? (*status)["engine"] : empty;
  const Json& rpc = status->contains("rpc") ? (*status)["rpc"] : empty;
  auto gauge = [&](const Json& from, const char* key, const char* name, const char* help) {
    if (std::optional<double> v = engine_number(from, key))
      one_sample(out, name, Type::kGauge, help, *v);
  };
  auto counter = [&](const Json& from, const char* key, const char* name, const char* help) {
    if (std::optional<double> v = engine_number(from, key))
      one_sample(out, name, Type::kCounter, help, *v);
  };
  gauge(*status, "policy_version", "ajet_engine_policy_version",
        "The weights version the engine serves.");
  const std::optional<double> running = engine_number(engine, "running");
  const std::optional<double> waiting = engine_number(engine, "waiting");
  if (running && waiting) {
    out.family("ajet_engine_sequences", Type::kGauge,
               "Sequences in the engine: running (admitted, prefilling or decoding) or waiting "
               "(queued for cache "
               "blocks or a slot).");
    out.sample({{"state", "running"}}, *running);
    out.sample({{"state", "waiting"}}, *waiting);
  }
  const std::optional<double> free_blocks = engine_number(engine, "free_blocks");
  const std::optional<double> total_blocks = engine_number(engine, "total_blocks");
  if (free_blocks && total_blocks) {
    out.family("ajet_engine_kv_cache_blocks", Type::kGauge, "KV cache blocks used and free.");
    out.sample({{"state", "used"}}, *total_blocks - *free_blocks);
    out.sample({{"state", "free"}}, *free_blocks);
    one_sample(out, "ajet_engine_kv_cache_usage_ratio", Type::kGauge,
               "Fraction of KV cache blocks in use (0 to 1).",
               *total_blocks > 0 ? (*total_blocks - *free_blocks) / *total_blocks : 0.0);
  }
  gauge(engine, "block_size", "ajet_engine_kv_cache_block_tokens", "Tokens per KV cache block.");
  gauge(engine, "cached_blocks", "ajet_engine_prefix_cache_blocks",
        "KV cache blocks whose contents prefix caching can reuse now.");
  counter(engine, "tokens_generated", "ajet_engine_generated_tokens_total",
          "Tokens the engine sampled since it started (rate() gives tokens per second).");
  counter(engine, "tokens_computed", "ajet_engine_computed_tokens_total",
          "Tokens run through the model (prefill, recompute and decode) since the engine started.");
  counter(engine, "tokens_prefix_cached", "ajet_engine_prefix_cache_hit_tokens_total",
          "Prompt tokens not computed because their keys and values were in the prefix cache.");
  counter(engine, "steps", "ajet_engine_steps_total", "Engine scheduler steps (one batch each).");
  counter(engine, "preemptions", "ajet_engine_preemptions_total",
          "Sequences preempted (their cache blocks freed, recomputed later).");
  counter(engine, "madness_stops", "ajet_engine_madness_stops_total",
          "Samples a madness detector stopped early (ajet.rollout.madness: repetition, low "
          "entropy, garbage, language switch).");
  counter(engine, "requests_finished", "ajet_engine_requests_finished_total",
          "Generate requests the engine finished.");
  counter(rpc, "generate_requests", "ajet_engine_rpc_generate_requests_total",
          "Generate requests the engine received.");
  counter(rpc, "aborts", "ajet_engine_rpc_aborts_total", "Generate requests aborted by the front.");
  gauge(*status, "uptime_s", "ajet_engine_uptime_seconds",
        "Seconds since the engine process started serving.");
  // Named LoRA adapters (docs/training.md "Several adapters on one base"), one sample each.
  const Json adapters = status->value("adapters", Json::array());
  if (adapters.is_array() && !adapters.empty()) {
    struct Figure {
      const char* key;
      const char* name;
      Type type;
      const char* help;
    };
    for (const Figure& f :
         {Figure{"requests", "ajet_engine_adapter_requests_total", Type::kCounter,
                 "Generate requests that named the adapter since it was made."},
          Figure{"trained_steps", "ajet_engine_adapter_trained_steps", Type::kGauge,
                 "Train steps the adapter took part in (its own policy version)."},
          Figure{"bytes", "ajet_engine_adapter_bytes", Type::kGauge,
                 "Bytes of the adapter's A and B matrices."},
          Figure{"optimizer_bytes", "ajet_engine_adapter_optimizer_bytes", Type::kGauge,
                 "Bytes of the adapter's AdamW moments (0 before it trained)."},
          Figure{"resident", "ajet_engine_adapter_resident", Type::kGauge,
                 "1 while the adapter is in its slot, 0 while it is moved out to disk."},
          Figure{"evictions", "ajet_engine_adapter_evictions_total", Type::kCounter,
                 "Times the adapter was moved out under ajet.engine.adapter_memory_mb."},
          Figure{"loads", "ajet_engine_adapter_loads_total", Type::kCounter,
                 "Times the adapter came back from disk."}}) {
      out.family(f.name, f.type, f.help);
      for (const Json& a : adapters) {
        std::optional<double> v = engine_number(a, f.key);
        if (!v && a.contains(f.key) && a[f.key].is_boolean()) v = a[f.key].get<bool>() ? 1 : 0;
        if (v) out.sample({{"adapter", a.value("name", std::string())}}, *v);
      }
    }
    const Json memory = status->value("adapter_memory", Json::object());
    for (const Figure& f :
         {Figure{"resident_bytes", "ajet_engine_adapter_resident_bytes", Type::kGauge,
                 "Bytes of the adapters in their slots (weights, serving copies, AdamW moments)."},
          Figure{"budget_bytes", "ajet_engine_adapter_memory_budget_bytes", Type::kGauge,
                 "ajet.engine.adapter_memory_mb in bytes (0: no limit)."}}) {
      if (std::optional<double> v = engine_number(memory, f.key)) {
        out.family(f.name, f.type, f.help);
        out.sample({}, *v);
      }
    }
  }
}

void write_process_figures(TextBuilder& out) {
  const std::vector<std::string> stat = proc_stat_fields();
  const long ticks = ::sysconf(_SC_CLK_TCK);
  const long page = ::sysconf(_SC_PAGESIZE);
  // A field that does not parse leaves the rest of these families out (stod throws while computing
  // a value, before its family is started).
  try {
    write_proc_stat(out, stat, ticks, page);
  } catch (const std::exception&) {
  }
  std::error_code ec;
  size_t fds = 0;
  for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end;
       it.increment(ec))
    ++fds;
  if (!ec) one_sample(out, "process_open_fds", Type::kGauge, "Open file descriptors.", double(fds));
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    one_sample(out, "process_max_fds", Type::kGauge, "The limit on open file descriptors.",
               double(limit.rlim_cur));
  }
}

}  // namespace ajet::swarm
