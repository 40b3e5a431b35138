#include "engine_control/batch_runner.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>
#include <tuple>

#include "common/error.h"
#include "common/fs.h"
#include "common/log.h"
#include "engine_control/fan_out.h"
#include "episodes/model_context.h"
#include "episodes/verbose_log.h"
#include "rpc/client.h"
#include "store/store.h"
#include "tracking/episode_tracker.h"
#include "train_data/batch.h"
#include "train_data/dist_split.h"

namespace ajet::engine_control {

BatchRunner::BatchRunner(episodes::Registry& registry, store::Store& store,
                         episodes::VerboseLog& verbose, TrainerLink link)
    : registry_(registry),
      store_(store),
      verbose_(verbose),
      link_(std::move(link)),
      thread_([this] { run(); }) {}

BatchRunner::~BatchRunner() { stop(); }

void BatchRunner::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::optional<int64_t> BatchRunner::unsaved_version() {
  std::lock_guard<std::mutex> lock(save_mu_);
  if (trained_version_ < 0 || trained_version_ == saved_version_) return std::nullopt;
  return trained_version_;
}

void BatchRunner::notify() {
  {
    std::lock_guard<std::mutex> lock(save_mu_);  // a new engine session counts its versions afresh
    trained_version_ = -1;
    saved_version_ = -1;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    poked_ = true;
  }
  cv_.notify_all();
}

void BatchRunner::run() {
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (stopping_) return;
      if (registry_.engine_status() == episodes::EnginePhase::kOffline) {
        // wait_batch_ready returns at once while OFFLINE: sleep until start_engine pokes us.
        cv_.wait_for(lock, std::chrono::seconds(1), [&] { return stopping_ || poked_; });
        poked_ = false;
        continue;
      }
    }
    if (!registry_.wait_batch_ready(std::chrono::milliseconds(500))) continue;
    try {
      std::shared_ptr<const episodes::ModelContext> model = link_.model ? link_.model() : nullptr;
      if (!link_.engine || !link_.engine()) {
        // Booting or restarting: the batch waits (a restart returns it to collection anyway).
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait_for(lock, std::chrono::milliseconds(200), [&] { return stopping_; });
        continue;
      }
      episodes::Batch batch = registry_.take_batch();
      if (!model) {
        verbose_.add("batch",
                     fmt::format("batch {} taken but no model is loaded; it is not trained",
                                 batch.batch_id));
        continue;
      }
      const TrainSettings settings = link_.settings ? link_.settings() : TrainSettings{};
      train_on_engine(merge_batch(std::move(batch), *model, settings));
    } catch (const std::exception& e) {
      verbose_.add("batch", std::string("batch loop: ") + e.what());
    }
  }
}

void split_by_role(tracking::MergedEpisode& merged, const Json& metadata) {
  std::map<std::string, int64_t> trainable;
  for (const tracking::Sample& s : merged.samples) trainable[s.agent_name] += s.trainable ? 1 : 0;
  const auto roles = metadata.find("role_rewards");
  for (tracking::Sample& s : merged.samples) {
    if (roles != metadata.end() && roles->is_object()) {
      const auto r = roles->find(s.agent_name);
      if (r != roles->end() && r->is_number() && std::isfinite(r->get<double>()))
        s.reward = r->get<double>();
    }
    s.task_id += "@" + s.agent_name;
    s.episode_uuid += "@" + s.agent_name;
    const int64_t n = trainable[s.agent_name];
    s.weight = s.trainable && n > 0 ? 1.0 / double(n) : 0.0;
  }
}

std::optional<double> madness_reward(const std::vector<tracking::CallRecord>& calls, double reward,
                                     const MadnessPolicy& policy, BatchSamples& out) {
  bool mad = false;
  for (const tracking::CallRecord& c : calls) {
    if (!tracking::is_madness(c.finish_reason)) continue;
    mad = true;
    ++out.mad_calls[std::string(tracking::finish_reason_name(c.finish_reason))];
  }
  if (!mad) return reward;
  ++out.mad_episodes;
  switch (policy.action) {
    case MadnessAction::kDrop: ++out.mad_dropped; return std::nullopt;
    case MadnessAction::kPenalize: ++out.mad_penalized; return policy.reward;
    case MadnessAction::kKeep: break;
  }
  return reward;
}

// The canonical order of a batch's episodes (ajet.deterministic): by task, reward, then every
// token of every call; what arrived first no longer matters. Episodes equal in all of it are
// interchangeable (their samples are the same).
void canonical_order(std::vector<episodes::FinishedEpisode>& episodes,
                     std::vector<std::vector<store::CallRow>>& rows) {
  std::vector<std::vector<int32_t>> tokens(episodes.size());
  for (size_t i = 0; i < episodes.size(); ++i) {
    for (const store::CallRow& r : rows[i]) {
      tokens[i].push_back(int32_t(r.prompt_ids.size()));
      tokens[i].insert(tokens[i].end(), r.prompt_ids.begin(), r.prompt_ids.end());
      tokens[i].push_back(int32_t(r.completion_ids.size()));
      tokens[i].insert(tokens[i].end(), r.completion_ids.begin(), r.completion_ids.end());
    }
  }
  std::vector<size_t> order(episodes.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const episodes::FinishedEpisode &x = episodes[a], &y = episodes[b];
    return std::tie(x.task_id, x.reward, tokens[a]) < std::tie(y.task_id, y.reward, tokens[b]);
  });
  std::vector<episodes::FinishedEpisode> sorted_episodes;
  std::vector<std::vector<store::CallRow>> sorted_rows;
  for (size_t i : order) {
    sorted_episodes.push_back(std::move(episodes[i]));
    sorted_rows.push_back(std::move(rows[i]));
  }
  episodes = std::move(sorted_episodes);
  rows = std::move(sorted_rows);
}

BatchSamples BatchRunner::merge_batch(episodes::Batch batch, const episodes::ModelContext& model,
                                      const TrainSettings& settings) {
  BatchSamples out;
  store_.flush().get();  // every call of these episodes was queued before their end_episode
  std::vector<std::vector<store::CallRow>> episode_rows;
  for (const episodes::FinishedEpisode& e : batch.episodes)
    episode_rows.push_back(store_.get_calls(e.episode_uuid));
  if (settings.deterministic) canonical_order(batch.episodes, episode_rows);
  for (size_t i = 0; i < batch.episodes.size(); ++i) {
    const episodes::FinishedEpisode& e = batch.episodes[i];
    std::vector<tracking::CallRecord> calls =
        tracking::calls_from_rows(episode_rows[i], model.format.get());
    if (calls.empty()) continue;  // an episode without LLM calls carries no tokens
    // A call a madness detector stopped marks the whole episode (ajet.rollout.madness.action).
    const std::optional<double> reward = madness_reward(calls, e.reward, settings.madness, out);
    if (!reward) continue;
    tracking::EpisodeInfo info{e.episode_uuid, e.task_id, *reward};
    tracking::MergedEpisode merged = tracking::merge_episode(info, calls, model.merge_options);
    if (settings.per_role_advantages) split_by_role(merged, e.metadata);
    out.totals.calls += merged.diagnostics.calls;
    out.totals.samples += merged.diagnostics.samples;
    out.totals.trainable_samples += merged.diagnostics.trainable_samples;
    out.totals.tokens_before += merged.diagnostics.tokens_before;
    out.totals.tokens_after += merged.diagnostics.tokens_after;
    for (auto& s : merged.samples) out.samples.push_back(std::move(s));
  }
  if (out.totals.tokens_after > 0) {
    out.totals.compression_ratio =
        double(out.totals.tokens_before) / double(out.totals.tokens_after);
  }
  out.batch = std::move(batch);
  return out;
}

void record_train_step(const std::filesystem::path& dir, const Json& header,
                       const rpc::TrainBatch& request, const Json& reply, int64_t global_step,
                       int64_t batch_id) {
  std::filesystem::create_directories(dir);
  if (!std::filesystem::exists(dir / "record.json"))
    write_file_atomic(dir / "record.json", header.dump(2) + "\n");
  rpc::Frame frame = rpc::encode_train_batch(request);
  frame.id = 1;  // a request frame as the engine would read it
  const std::vector<std::byte> bytes = rpc::flatten(rpc::encode_frame(std::move(frame), {}));
  const std::string name = fmt::format("step_{:06d}", global_step + 1);
  write_file_atomic(dir / (name + ".batch"),
                    std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  write_file_atomic(
      dir / (name + ".json"),
      Json{{"step", global_step + 1}, {"batch_id", batch_id}, {"reply", reply}}.dump() + "\n");
}

rpc::TrainBatch build_train_batch(const BatchSamples& samples) {
  rpc::TrainBatch t;
  t.sample_offsets.push_back(0);
  // Calls on named adapters train those adapters (meta.adapters, one name per sample); the base
  // under them stays frozen, so calls of the same batch on the base alone train nothing.
  const bool adapters = std::any_of(samples.samples.begin(), samples.samples.end(),
                                    [](const tracking::Sample& s) { return !s.adapter.empty(); });
  Json adapter_of_sample = Json::array();
  int64_t base_samples = 0;
  for (const tracking::Sample& s : samples.samples) {
    if (!s.trainable || s.trained_tokens() == 0) continue;
    if (adapters && s.adapter.empty()) {
      ++base_samples;
      continue;
    }
    if (adapters) adapter_of_sample.push_back(s.adapter);
    const size_t n = s.token_ids.size();
    if (s.loss_mask.size() != n || s.logprobs.size() != n || s.policy_versions.size() != n) {
      fail(ErrorCode::kInternal,
           fmt::format("episode {} sample {}: per-token arrays differ in length", s.episode_uuid,
                       s.index));
    }
    t.token_ids.insert(t.token_ids.end(), s.token_ids.begin(), s.token_ids.end());
    t.loss_mask.insert(t.loss_mask.end(), s.loss_mask.begin(), s.loss_mask.end());
    for (size_t i = 0; i < n; ++i) {
      // The engine checks logprobs only where the mask is 1; elsewhere they mean nothing to it.
      t.logprobs.push_back(s.loss_mask[i] ? s.logprobs[i] : 0.0f);
      t.policy_versions.push_back(s.policy_versions[i]);
    }
    t.sample_offsets.push_back(int64_t(t.token_ids.size()));
    t.rewards.push_back(s.reward);
    t.weights.push_back(s.weight);
    t.task_ids.push_back(s.task_id);
    t.episode_uuids.push_back(s.episode_uuid);
  }
  if (t.rewards.empty()) {
    fail(ErrorCode::kFailedPrecondition,
         fmt::format("batch {}: none of its {} samples has a generated token to train on",
                     samples.batch.batch_id, samples.samples.size()));
  }
  t.meta = Json{{"batch_id", samples.batch.batch_id},
                {"global_step", samples.batch.global_step},
                {"episodes", samples.batch.episodes.size()},
                {"tokens_before_merge", samples.totals.tokens_before},
                {"compression_ratio", samples.totals.compression_ratio}};
  if (adapters) {
    t.meta["adapters"] = std::move(adapter_of_sample);
    t.meta["base_samples_left_out"] = base_samples;
  }
  return t;
}

namespace {

// split_train_batch on the request's samples, already converted, and its meta.
std::vector<rpc::TrainBatch> split_converted(const train_data::Batch& whole, const Json& meta,
                                             int world_size,
                                             const train_data::AdvantageOptions& advantage) {
  const std::vector<train_data::Batch> parts =
      train_data::split_batch(whole, world_size, advantage);
  std::vector<rpc::TrainBatch> out;
  for (size_t r = 0; r < parts.size(); ++r) {
    rpc::TrainBatch part = train_data::batch_to_rpc(parts[r]);
    part.meta = meta.is_object() ? meta : Json::object();
    part.meta["rank"] = r;
    part.meta["world_size"] = world_size;
    out.push_back(std::move(part));
  }
  return out;
}

}  // namespace

std::vector<rpc::TrainBatch> split_train_batch(const rpc::TrainBatch& request, int world_size,
                                               const train_data::AdvantageOptions& advantage) {
  return split_converted(train_data::batch_from_rpc(request), request.meta, world_size, advantage);
}

void whole_batch_metrics(const train_data::Batch& whole,
                         const train_data::AdvantageOptions& advantage,
                         const std::vector<Json>& replies, Json& metrics) {
  // Each rank's advantage means are over its trained samples: weighted by their counts, the
  // batch's.
  double samples = 0, mean = 0, abs_mean = 0;
  for (const Json& reply : replies) {
    const double n = reply.value("samples", 0.0);
    samples += n;
    mean += n * reply.value("advantage_mean", 0.0);
    abs_mean += n * reply.value("advantage_abs_mean", 0.0);
  }
  if (samples > 0) {
    metrics["advantage_mean"] = mean / samples;
    metrics["advantage_abs_mean"] = abs_mean / samples;
  }
  // Rewards and groups over every episode, as one rank reports them (the split may give a group's
  // episodes to several ranks, e.g. under REINFORCE++, whose ranks receive advantages, not
  // rewards).
  if (whole.has_advantages()) return;  // the caller's advantages: no rewards to report
  const train_data::EpisodeIndex episodes = train_data::index_episodes(whole);
  const train_data::AdvantageResult r =
      train_data::compute_advantages(episodes.rewards, episodes.groups, advantage);
  double reward_sum = 0;
  for (double x : episodes.rewards) reward_sum += x;
  metrics["reward_mean"] =
      episodes.rewards.empty() ? 0.0 : reward_sum / static_cast<double>(episodes.rewards.size());
  metrics["groups"] = r.groups;
  metrics["zero_variance_groups"] = r.zero_variance_groups;
}

Json BatchRunner::train_on_ranks(const std::vector<std::shared_ptr<rpc::Client>>& ranks,
                                 const rpc::TrainBatch& request, const TrainSettings& settings) {
  const int world = int(ranks.size());
  const train_data::Batch whole =
      train_data::batch_from_rpc(request);  // once, for the split and the metrics
  std::vector<rpc::TrainBatch> parts =
      split_converted(whole, request.meta, world, settings.advantage);
  // All at once: each call blocks until its rank finished the step, and the ranks only finish
  // together (their all-reduces wait for each other).
  std::vector<rpc::Frame> calls;
  for (int r = 0; r < world; ++r) calls.push_back(rpc::encode_train_batch(parts[size_t(r)]));
  const std::vector<CallOutcome> outcomes =
      call_all(ranks, std::move(calls), settings.train_timeout);
  std::vector<Json> replies(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    const CallOutcome& o = outcomes[size_t(r)];
    if (!o.ok)
      throw Error(o.code, fmt::format("data-parallel rank {} of {}: {}", r, world, o.error));
    replies[size_t(r)] = o.reply;
  }
  // Rank 0's reply (its loss terms are its share), with the batch's counts summed over the ranks
  // and its reward and advantage figures those of the whole batch.
  Json metrics = replies[0];
  Json per_rank = Json::array();
  for (const char* key :
       {"tokens", "trained_tokens", "packed_tokens", "samples", "dropped_samples"}) {
    int64_t sum = 0;
    for (const Json& reply : replies) sum += reply.value(key, int64_t(0));
    metrics[key] = sum;
  }
  whole_batch_metrics(whole, settings.advantage, replies, metrics);
  for (int r = 0; r < world; ++r) {
    const Json& reply = replies[size_t(r)];
    per_rank.push_back(Json{{"rank", r},
                            {"samples", reply.value("samples", int64_t(0))},
                            {"tokens", reply.value("tokens", int64_t(0))},
                            {"loss", reply.value("loss", Json(nullptr))},
                            {"step_time_s", reply.value("step_time_s", 0.0)},
                            {"policy_version", reply.value("policy_version", int64_t(-1))},
                            {"weights_checksum", reply.value("weights_checksum", Json(nullptr))}});
    if (reply.value("policy_version", int64_t(-1)) !=
        metrics.value("policy_version", int64_t(-1))) {
      verbose_.add("batch", fmt::format("data-parallel rank {} serves policy_version {}, rank 0 {}",
                                        r, reply.value("policy_version", int64_t(-1)),
                                        metrics.value("policy_version", int64_t(-1))));
    }
  }
  // Every rank applied the same all-reduced gradients to the same weights: their checksums must be
  // equal, bit for bit. A difference means the ranks now serve different policies.
  bool same = true;
  for (const Json& reply : replies)
    same = same && reply.value("weights_checksum", Json(nullptr)) ==
                       replies[0].value("weights_checksum", Json(nullptr));
  const Json checksum = replies[0].value("weights_checksum", Json(nullptr));
  if (!checksum.is_string()) {  // an engine that does not report it: nothing to compare
    metrics["data_parallel"] = Json{{"world_size", world}, {"ranks", per_rank}};
    return metrics;
  }
  if (same) {
    verbose_.add("batch", fmt::format("the {} data-parallel ranks hold the same weights "
                                      "(weights_checksum {})",
                                      world, checksum.get<std::string>()));
  } else {
    log().error("data-parallel ranks hold different weights after policy version {}: {}",
                metrics.value("policy_version", int64_t(-1)), per_rank.dump());
    verbose_.add("batch",
                 "ERROR: the data-parallel ranks hold different weights after this step "
                 "(weights_checksum differs); see data_parallel.ranks");
  }
  // A number, so that it is a metric (train/data_parallel/same_weights: 1 or 0).
  metrics["data_parallel"] =
      Json{{"world_size", world}, {"ranks", per_rank}, {"same_weights", same ? 1 : 0}};
  return metrics;
}

void BatchRunner::record_in_ledger(const episodes::Batch& b, int64_t version,
                                   const TrainSettings& settings,
                                   std::optional<std::string> failed) {
  store::LedgerBatch entry;
  entry.batch_id = b.batch_id;
  entry.step = version;
  entry.failed = std::move(failed);
  std::map<std::string, std::vector<double>> rewards;  // per task: its group's rewards
  for (const auto& e : b.episodes) {
    entry.trained.push_back({e.episode_uuid, e.task_id});
    rewards[e.task_id].push_back(e.reward);
  }
  for (const auto& e : b.left_out_stale) entry.stale.push_back({e.episode_uuid, e.task_id});
  if (settings.advantage.drop_zero_variance_groups) {
    for (const auto& [task, r] : rewards) {
      if (std::all_of(r.begin(), r.end(), [&](double x) { return x == r.front(); }))
        entry.zero_variance_tasks.push_back(task);
    }
  }
  try {
    store_.ledger_mark_batch(std::move(entry)).get();
  } catch (const std::exception& e) {
    log().error("batch {}: the task ledger could not be written: {}", b.batch_id, e.what());
    verbose_.add("batch", fmt::format("ERROR: batch {}: the task ledger could not be written: {}",
                                      b.batch_id, e.what()));
  }
}

void BatchRunner::reject_batch(const episodes::Batch& b, const Error& e) {
  verbose_.add("batch",
               fmt::format("batch {}: the engine rejected train_step: {}", b.batch_id, e.what()));
  record_in_ledger(b, b.global_step, link_.settings ? link_.settings() : TrainSettings{}, e.what());
  try {
    registry_.fail_batch(b.batch_id, e.code(), e.what());
  } catch (const Error&) {  // stopped or restarted meanwhile
  }
}

std::optional<Json> BatchRunner::train_elastic(const episodes::Batch& b, const std::string& merged,
                                               const rpc::TrainBatch& request,
                                               const TrainSettings& settings) {
  // A member that dies mid-step fails the step on every member (the survivors' all-reduce fails,
  // and they roll back to the weights before it); the group re-forms without it and the same
  // batch trains again, so no acknowledged episode is lost. Should the dead member have failed
  // only after the survivors finished the step, the re-formed group already serves the next
  // version: the step counts as trained.
  constexpr int kAttempts = 5;
  std::string last;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    std::unique_lock<std::mutex> hold;
    if (link_.hold_trainer) hold = link_.hold_trainer();
    std::vector<std::shared_ptr<rpc::Client>> ranks;
    int64_t before = -1;
    try {
      ranks = link_.train_ranks(attempt > 0);
      before = link_.group_version ? link_.group_version() : -1;
    } catch (const Error& e) {
      last = e.what();
      break;
    }
    if (attempt > 0 && before >= 0 && before == b.global_step + 1) {
      verbose_.add("batch",
                   fmt::format("batch {}: the re-formed group already serves policy_version "
                               "{}: the step had finished on the surviving replicas",
                               b.batch_id, before));
      return Json{{"policy_version", before}, {"recovered_after_replica_loss", true}};
    }
    verbose_.add("batch",
                 fmt::format("batch {} (step {}): {}; training on {} replica(s){}", b.batch_id,
                             b.global_step, merged, ranks.size(),
                             attempt > 0 ? fmt::format(" (attempt {})", attempt + 1) : ""));
    try {
      Json metrics;
      if (ranks.size() > 1) {
        metrics = train_on_ranks(ranks, request, settings);
      } else {
        metrics =
            ranks[0]->call(rpc::encode_train_batch(request), settings.train_timeout).done.body;
        if (!metrics.is_object()) metrics = Json::object();
      }
      if (link_.step_done) {
        link_.step_done(metrics.value("policy_version", before + 1),
                        metrics.value("weights_checksum", std::string()));
      }
      return metrics;
    } catch (const Error& e) {
      last = e.what();
      if (e.code() != ErrorCode::kUnavailable) {
        reject_batch(b, e);
        return std::nullopt;
      }
      verbose_.add("batch", fmt::format("batch {}: train_step failed on the replica group ({}); "
                                        "re-forming it and training the batch again",
                                        b.batch_id, e.what()));
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) break;
    }
  }
  verbose_.add("batch", fmt::format("batch {}: not trained: {}", b.batch_id, last));
  record_in_ledger(b, b.global_step, settings, last);
  try {
    registry_.fail_batch(b.batch_id, ErrorCode::kUnavailable, last);
  } catch (const Error&) {  // returned to collection when every replica went, or stopped
  }
  return std::nullopt;
}

void BatchRunner::train_on_engine(BatchSamples samples) {
  const episodes::Batch& b = samples.batch;
  const TrainSettings settings = link_.settings ? link_.settings() : TrainSettings{};
  std::string merged =
      fmt::format("{} episodes -> {} samples, {} tokens after merging {} calls ({:.2f}x)",
                  b.episodes.size(), samples.totals.samples, samples.totals.tokens_after,
                  samples.totals.calls, samples.totals.compression_ratio);
  rpc::TrainBatch request;
  try {
    request = build_train_batch(samples);
  } catch (const Error& e) {
    record_in_ledger(b, b.global_step, settings, e.what());
    registry_.fail_batch(b.batch_id, e.code(), e.what());
    return;
  }
  std::optional<TeacherReport> teacher;
  if (settings.teacher) {
    teacher = fill_teacher_logprobs(request, *settings.teacher);
    std::string line = fmt::format(
        "batch {}: teacher answered for {} of {} samples in {:.2f} s ({} tokens, reverse KL "
        "{:.4f})",
        b.batch_id, teacher->samples - teacher->failed, teacher->samples, teacher->seconds,
        teacher->tokens, teacher->reverse_kl);
    if (!teacher->errors.empty()) line += "; first failure: " + teacher->errors.front();
    verbose_.add("batch", line);
    if (teacher->failed > 0) log().warn("{}", line);
  }
  Json metrics;
  if (link_.train_ranks) {
    std::optional<Json> trained = train_elastic(b, merged, request, settings);
    if (!trained) return;
    metrics = std::move(*trained);
  } else {
    std::shared_ptr<rpc::Client> engine = link_.engine ? link_.engine() : nullptr;
    if (!engine) {
      // The engine went away after take_batch: engine_restarting returned the batch to collection.
      verbose_.add(
          "batch",
          fmt::format("batch {} not trained: the engine is restarting; it is collected again",
                      b.batch_id));
      return;
    }
    std::vector<std::shared_ptr<rpc::Client>> ranks;
    if (link_.engine_ranks) ranks = link_.engine_ranks();
    if (std::any_of(ranks.begin(), ranks.end(), [](const auto& rank) { return !rank; }))
      ranks.clear();
    if (ranks.size() > 1) {
      verbose_.add("batch",
                   fmt::format("batch {} (step {}): {}; training on {} data-parallel ranks",
                               b.batch_id, b.global_step, merged, ranks.size()));
    } else {
      verbose_.add("batch", fmt::format("batch {} (step {}): {}; training on the engine",
                                        b.batch_id, b.global_step, merged));
    }
    try {
      if (ranks.size() > 1) {
        metrics = train_on_ranks(ranks, request, settings);
      } else {
        rpc::Client::CallResult r =
            engine->call(rpc::encode_train_batch(request), settings.train_timeout);
        metrics = r.done.body.is_object() ? r.done.body : Json::object();
      }
    } catch (const Error& e) {
      if (e.code() == ErrorCode::kUnavailable) {
        verbose_.add("batch", fmt::format("batch {}: train_step did not complete: {}", b.batch_id,
                                          e.what()));
        if (!engine->connected()) {
          // The engine died (or is dying): the supervisor restarts it, and the batch trains again
          // as it was. Failing it here would lose its episodes when this runs before the
          // supervisor noticed the exit.
          registry_.return_batch(b.batch_id);
          return;
        }
        try {  // a timeout
          registry_.fail_batch(b.batch_id, e.code(), e.what());
        } catch (const Error&) {  // already queued again by engine_restarting, or stopped
        }
        return;
      }
      reject_batch(b, e);
      return;
    }
  }
  const int64_t version = metrics.value("policy_version", int64_t(b.global_step + 1));
  record_in_ledger(b, version, settings, std::nullopt);
  {
    std::lock_guard<std::mutex> lock(save_mu_);
    trained_version_ = version;
  }
  if (!settings.record_dir.empty()) {
    try {
      record_train_step(settings.record_dir, settings.record_header, request, metrics,
                        b.global_step, b.batch_id);
    } catch (const std::exception& e) {  // the run goes on; the record misses this step
      verbose_.add("batch", fmt::format("batch {}: not recorded: {}", b.batch_id, e.what()));
      log().warn("batch {}: not recorded: {}", b.batch_id, e.what());
    }
  }
  if (teacher) metrics["distill"] = teacher->to_json();
  if (samples.mad_episodes > 0 || settings.madness_detection) {
    Json calls = Json::object();
    for (const auto& [kind, count] : samples.mad_calls) calls[kind] = count;
    metrics["madness"] = Json{{"episodes", samples.mad_episodes},
                              {"penalized", samples.mad_penalized},
                              {"dropped", samples.mad_dropped},
                              {"calls", std::move(calls)}};
  }
  metrics["merge"] = Json{{"calls", samples.totals.calls},
                          {"samples", samples.totals.samples},
                          {"tokens_before", samples.totals.tokens_before},
                          {"tokens_after", samples.totals.tokens_after},
                          {"compression_ratio", samples.totals.compression_ratio}};
  const bool torch = registry_.options().backbone == episodes::Backbone::kTorch;
  if (settings.save_freq > 0 && version % settings.save_freq == 0) {
    // torch: the engine's weights are exported before rollouts resume on them.
    if (torch) registry_.begin_weight_export();
    try {
      if (auto saved = save_checkpoint(fmt::format("save_freq {}", settings.save_freq))) {
        metrics["checkpoint"] = saved->dir.string();
      }
    } catch (const std::exception& e) {
      verbose_.add("batch", std::string("save_checkpoint failed: ") + e.what());
    }
    if (torch) registry_.end_weight_export();
  }
  try {
    registry_.finish_batch(b.batch_id, metrics);
  } catch (const Error& e) {  // stopped or restarted meanwhile
    verbose_.add("batch", fmt::format("batch {} trained, but the registry moved on: {}", b.batch_id,
                                      e.what()));
    return;
  }
  verbose_.add("batch",
               fmt::format("step {} done: policy_version {}, loss {}, {} trained tokens, {:.2f} s",
                           b.global_step, version, metrics.value("loss", Json(nullptr)).dump(),
                           metrics.value("trained_tokens", Json(nullptr)).dump(),
                           metrics.value("step_time_s", 0.0)));
}

std::optional<BatchRunner::SavedCheckpoint> BatchRunner::save_checkpoint(const std::string& why) {
  std::lock_guard<std::mutex> lock(save_mu_);
  if (trained_version_ < 0 || trained_version_ == saved_version_) return std::nullopt;
  std::shared_ptr<rpc::Client> engine = link_.engine ? link_.engine() : nullptr;
  if (!engine) return std::nullopt;
  const TrainSettings settings = link_.settings ? link_.settings() : TrainSettings{};
  rpc::Frame request;
  request.kind = rpc::FrameKind::kRequest;
  request.method = std::string(rpc::kMethodSaveCheckpoint);
  request.body = Json::object();
  if (!settings.checkpoint_dir.empty()) request.body["dir"] = settings.checkpoint_dir.string();
  request.body["front_cursor"] =
      Json{{"global_step", registry_.global_step()}, {"policy_version", trained_version_}};
  rpc::Client::CallResult r = engine->call(std::move(request), settings.train_timeout);
  const std::filesystem::path path = r.done.body.value("path", std::string());
  saved_version_ = r.done.body.value("policy_version", trained_version_);
  verbose_.add("batch", fmt::format("checkpoint ({}): policy_version {} saved in {}", why,
                                    saved_version_, path.string()));
  if (!path.empty() && link_.checkpoint_saved) link_.checkpoint_saved(path);
  return SavedCheckpoint{path, saved_version_};
}

}  // namespace ajet::engine_control
