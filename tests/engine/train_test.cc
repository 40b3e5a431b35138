// The trainer methods of `ajet-engine serve` end to end: train_step over the RPC changes the served
// weights and bumps the policy version (backbones torch and async), bad batches get an error reply
// while the engine keeps serving, debug never trains, save -> a new process with --resume -> the
// next step gives bit-identical parameters and optimizer state to an uninterrupted run, and a LoRA
// checkpoint's model/ is the merged model that `ajet-engine generate` loads and names (issue 13).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <future>
#include <sstream>

#include "engine_process.h"
#include "train_helpers.h"

namespace ajet::engine {
namespace {

using namespace testing;
using std::chrono::seconds;

void expect_step_changes_served_weights(const std::string& backbone) {
  const fs::path checkpoints = process_dir() / ("ckpt_" + backbone);
  EngineProcess engine({"--conf", write_conf("train_" + backbone, backbone, checkpoints).string()},
                       micro_model_dir());
  rpc::Client client(engine.wait_ready());
  client.connect();
  const GenerateOutcome before = probe(client);
  expect_versions(before, 0);

  const rpc::TrainBatch batch = make_batch(1);
  const nlohmann::json m = call(client, rpc::encode_train_batch(batch));
  EXPECT_EQ(m["policy_version"], 1);
  EXPECT_EQ(m["trainer_policy_version"], 1);
  EXPECT_EQ(m["global_step"], 1);
  EXPECT_EQ(m["backbone"], backbone);
  EXPECT_EQ(m["tokens"], static_cast<int64_t>(batch.token_ids.size()));
  EXPECT_EQ(m["samples"], 4);
  for (const char* key : {"loss", "entropy", "grad_norm", "clip_fraction", "kl", "step_time_s"}) {
    ASSERT_TRUE(m.contains(key)) << key;
    EXPECT_TRUE(std::isfinite(m[key].get<double>())) << key;
  }
  EXPECT_GT(m["grad_norm"].get<double>(), 0.0);
  EXPECT_EQ(status_of(client)["policy_version"], 1);

  // Generation afterwards runs on the new weights and says so.
  const GenerateOutcome after = probe(client);
  expect_versions(after, 1);
  EXPECT_TRUE(logprobs_differ(before, after))
      << "one step at lr 0.01 left the greedy logprobs unchanged";

  // The saved weights differ from the initial ones; the checkpoint is named after the served
  // version.
  const nlohmann::json saved =
      call(client, method_frame(rpc::kMethodSaveCheckpoint, {{"front_cursor", {{"epoch", 0}}}}));
  EXPECT_EQ(saved["policy_version"], 1);
  const fs::path dir = saved["path"].get<std::string>();
  EXPECT_EQ(dir.filename(), "global_step_1");
  EXPECT_EQ(dir.parent_path(), fs::absolute(checkpoints).lexically_normal());
  EXPECT_NE(file_bytes(dir / "model" / "model.safetensors"),
            file_bytes(micro_model_dir() / "model.safetensors"));
}

TEST(EngineTrain, TrainStepUpdatesTheServedModel) { expect_step_changes_served_weights("torch"); }

TEST(EngineTrain, AsyncBackboneSwapsTrainedWeightsIn) {
  expect_step_changes_served_weights("async");
}

TEST(EngineTrain, AsyncTrainingLetsInflightGenerationFinish) {
  EngineProcess engine(
      {"--conf",
       write_conf("train_async_inflight", "async", process_dir() / "ckpt_inflight").string()},
      micro_model_dir());
  rpc::Client client(engine.wait_ready());
  client.connect();
  PendingGenerate pending = start_generate(client, greedy(prompt_of(8, 3), 200));
  pending.first_reply.wait();
  const nlohmann::json m = call(client, rpc::encode_train_batch(make_batch(2)));
  EXPECT_EQ(m["policy_version"], 1);
  const GenerateOutcome o = pending.outcome.get();
  ASSERT_TRUE(o.done);
  ASSERT_EQ(o.ids().size(), 200u);
  // Each token carries the version that produced it: 0 before the swap, 1 after, never back.
  int64_t last = 0;
  for (const auto& e : o.events) {
    for (int64_t v : e.policy_versions) {
      EXPECT_TRUE(v == 0 || v == 1) << v;
      EXPECT_GE(v, last);
      last = v;
    }
  }
}

TEST(EngineTrain, BadBatchesGetErrorsAndTheEngineKeepsServing) {
  EngineProcess engine(
      {"--conf", write_conf("train_bad", "torch", process_dir() / "ckpt_bad").string()},
      micro_model_dir());
  rpc::Client client(engine.wait_ready());
  client.connect();
  auto expect_invalid = [&](const rpc::TrainBatch& batch, const std::string& needle) {
    try {
      call(client, rpc::encode_train_batch(batch));
      ADD_FAILURE() << "accepted a batch that should fail with '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  rpc::TrainBatch b = make_batch(1);
  b.token_ids[7] = 259;  // == vocab size
  expect_invalid(b, "token_ids");
  b = make_batch(1);
  b.loss_mask.pop_back();
  expect_invalid(b, "loss_mask");
  b = make_batch(1);
  b.sample_offsets.back() -= 1;
  expect_invalid(b, "sample_offsets");
  b = make_batch(1);
  b.rewards.pop_back();
  expect_invalid(b, "rewards");
  b = make_batch(1);
  b.loss_mask[b.sample_offsets[1]] = 1;  // sample 1's first token: nothing predicts it
  expect_invalid(b, "loss_mask[0]");
  b = make_batch(1);
  b.logprobs[10] = 0.5f;  // a generated token's logprob above 0
  expect_invalid(b, "logprobs");
  try {
    call(client,
         method_frame(rpc::kMethodLoadCheckpoint, {{"dir", (process_dir() / "nowhere").string()}}));
    ADD_FAILURE() << "load_checkpoint of a missing directory succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound) << e.what();
  }

  // Nothing changed, and the engine still generates and trains.
  EXPECT_EQ(status_of(client)["policy_version"], 0);
  expect_versions(probe(client), 0);
  EXPECT_EQ(call(client, rpc::encode_train_batch(make_batch(1)))["policy_version"], 1);
}

TEST(EngineTrain, DebugBackboneNeverTrains) {
  EngineProcess engine(
      {"--conf", write_conf("train_debug", "debug", process_dir() / "ckpt_debug").string()},
      micro_model_dir());
  rpc::Client client(engine.wait_ready());
  client.connect();
  try {
    call(client, rpc::encode_train_batch(make_batch(1)));
    ADD_FAILURE() << "backbone debug trained";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition) << e.what();
  }
  expect_versions(probe(client), 0);
}

TEST(EngineTrain, ResumeContinuesExactly) {
  const fs::path run_a = process_dir() / "resume_a", run_b = process_dir() / "resume_b";
  fs::path after_one, after_two;
  {
    // Uninterrupted: step, save, step, save.
    EngineProcess engine({"--conf", write_conf("resume_a", "torch", run_a).string()},
                         micro_model_dir());
    rpc::Client client(engine.wait_ready());
    client.connect();
    call(client, rpc::encode_train_batch(make_batch(1)));
    after_one = call(client, method_frame(rpc::kMethodSaveCheckpoint,
                                          {{"front_cursor", {{"task", 4}}}}))["path"]
                    .get<std::string>();
    call(client, rpc::encode_train_batch(make_batch(2)));
    after_two = call(client, method_frame(rpc::kMethodSaveCheckpoint,
                                          {{"front_cursor", {{"task", 8}}}}))["path"]
                    .get<std::string>();
  }
  ASSERT_EQ(after_one.filename(), "global_step_1");
  ASSERT_EQ(after_two.filename(), "global_step_2");

  // A new process resumes from the first checkpoint and takes the second step.
  EngineProcess engine(
      {"--conf", write_conf("resume_b", "torch", run_b).string(), "--resume", after_one.string()},
      micro_model_dir());
  rpc::Client client(engine.wait_ready());
  client.connect();
  EXPECT_EQ(status_of(client)["policy_version"], 1);
  expect_versions(probe(client), 1);
  const nlohmann::json m = call(client, rpc::encode_train_batch(make_batch(2)));
  EXPECT_EQ(m["policy_version"], 2);
  EXPECT_EQ(m["global_step"], 2);
  const fs::path resumed =
      call(client, method_frame(rpc::kMethodSaveCheckpoint, {{"dir", run_b.string()}}))["path"]
          .get<std::string>();
  ASSERT_EQ(resumed.filename(), "global_step_2");
  EXPECT_EQ(file_bytes(resumed / "model" / "model.safetensors"),
            file_bytes(after_two / "model" / "model.safetensors"))
      << "the resumed step's weights differ from the uninterrupted run's";
  EXPECT_EQ(file_bytes(resumed / "optimizer.safetensors"),
            file_bytes(after_two / "optimizer.safetensors"));

  // load_checkpoint over the RPC: a base directory loads its latest, with the caller's cursor.
  const nlohmann::json loaded =
      call(client, method_frame(rpc::kMethodLoadCheckpoint, {{"dir", run_a.string()}}));
  EXPECT_EQ(loaded["policy_version"], 2);
  EXPECT_EQ(loaded["global_step"], 2);
  EXPECT_EQ(loaded["front_cursor"], nlohmann::json({{"task", 8}}));
  EXPECT_EQ(status_of(client)["policy_version"], 2);
}

TEST(EngineTrain, LoraCheckpointHoldsTheMergedModelAndResumes) {
  auto conf = [](const std::string& name, const fs::path& checkpoints) {
    return write_lora_conf(name, checkpoints).string();
  };
  fs::path saved;
  GenerateOutcome served;
  {
    EngineProcess engine({"--conf", conf("lora_a", process_dir() / "lora_a")}, micro_model_dir());
    rpc::Client client(engine.wait_ready());
    client.connect();
    const GenerateOutcome before = probe(client);
    call(client, rpc::encode_train_batch(make_batch(1)));
    served = probe(client);
    ASSERT_TRUE(logprobs_differ(before, served))
        << "one LoRA step at lr 0.05 left the greedy logprobs unchanged";
    saved = call(client, method_frame(rpc::kMethodSaveCheckpoint, nlohmann::json::object()))["path"]
                .get<std::string>();
  }
  for (const char* f : {"model/config.json", "model/model.safetensors", "model/tokenizer.json",
                        "model/ajet_merged_lora.json", "adapter/adapter_model.safetensors",
                        "adapter/adapter_config.json"}) {
    EXPECT_TRUE(fs::exists(saved / f)) << f;
  }
  EXPECT_NE(file_bytes(saved / "model" / "model.safetensors"),
            file_bytes(micro_model_dir() / "model.safetensors"))
      << "model/ of a LoRA checkpoint is the untrained base";

  // `generate --model …/model` runs the merged model and says so.
  const auto g =
      run_command(kEngineBinary + " generate --model " + quote(saved / "model") +
                  " --threads 1 --kv-cache-mb 8 --max-tokens 2 --temperature 0 --prompt hi");
  ASSERT_EQ(g.exit_code, 0) << g.out;
  EXPECT_NE(g.out.find("loaded merged model " + (saved / "model").string()), std::string::npos)
      << g.out;

  // A new process on the base resumes with the adapter and serves what the first one served.
  EngineProcess engine(
      {"--conf", conf("lora_b", process_dir() / "lora_b"), "--resume", saved.string()},
      micro_model_dir());
  rpc::Client client(engine.wait_ready());
  client.connect();
  EXPECT_EQ(status_of(client)["policy_version"], 1);
  EXPECT_FALSE(logprobs_differ(served, probe(client)));
  EXPECT_NE(engine.stderr_text().find("loaded base model (the trainer's"), std::string::npos)
      << engine.stderr_text();
}

}  // namespace
}  // namespace ajet::engine

namespace ajet::engine {
namespace {

// `method` on every client at once, client r as rank r of a group whose rank 0 serves the store on
// `port` of loopback: `common` plus rank, world_size, master and bind address. Replies by rank.
std::vector<nlohmann::json> meet(const std::vector<rpc::Client*>& clients, std::string_view method,
                                 const nlohmann::json& common, int64_t port) {
  const int world = int(clients.size());
  std::vector<std::future<nlohmann::json>> calls;
  for (int r = 0; r < world; ++r) {
    nlohmann::json body = common;
    body.update({{"rank", r},
                 {"world_size", world},
                 {"master_addr", "127.0.0.1"},
                 {"master_port", port},
                 {"bind_addr", "127.0.0.1"}});
    calls.push_back(std::async(std::launch::async, [&clients, method, body, r] {
      return call(*clients[size_t(r)], method_frame(method, body));
    }));
  }
  std::vector<nlohmann::json> replies;
  for (auto& c : calls) replies.push_back(c.get());
  return replies;
}

// join_group on `clients` at once (generation g, rank r = index), rank 0 serving the store.
std::vector<nlohmann::json> form_group(std::vector<rpc::Client*> clients, int64_t generation,
                                       int64_t policy_version, double timeout_s) {
  const int world = int(clients.size());
  int64_t port = 0;
  if (world > 1) {
    port = call(*clients[0],
                method_frame(rpc::kMethodOpenGroup,
                             {{"generation", generation}, {"timeout_s", timeout_s}}))["port"]
               .get<int64_t>();
  }
  return meet(
      clients, rpc::kMethodJoinGroup,
      {{"generation", generation}, {"timeout_s", timeout_s}, {"policy_version", policy_version}},
      port);
}

// An elastic group (ajet-engine serve --elastic, formed by the front over open_group/join_group):
// a fresh engine that joins takes the trained one's weights and optimizer state exactly (the next
// step leaves both with the same weights), and a step whose all-reduce fails (the peer never
// takes part) leaves the weights as they were before it.
TEST(EngineTrain, ElasticJoinerTakesTheGroupStateAndAFailedStepRollsBack) {
  const fs::path run = process_dir() / "elastic";
  const fs::path conf = write_conf("elastic", "torch", run);
  EngineProcess trained({"--conf", conf.string(), "--elastic"}, micro_model_dir());
  EngineProcess fresh({"--conf", conf.string(), "--elastic"}, micro_model_dir());
  rpc::Client a(trained.wait_ready()), b(fresh.wait_ready());
  a.connect();
  b.connect();
  EXPECT_EQ(call(a, rpc::encode_train_batch(make_batch(1)))["policy_version"], 1);

  std::vector<nlohmann::json> joined = form_group({&a, &b}, 1, 1, 60);
  ASSERT_EQ(joined.size(), 2u);
  EXPECT_EQ(joined[0]["weights_checksum"], joined[1]["weights_checksum"]);
  EXPECT_EQ(joined[1]["policy_version"], 1);
  EXPECT_EQ(joined[1]["global_step"], joined[0]["global_step"]);
  EXPECT_EQ(status_of(b)["policy_version"], 1);

  // One step on both (each its own half): Adam's moments must match for the weights to.
  rpc::TrainBatch whole = make_batch(2);
  auto half = [&](int part) {
    rpc::TrainBatch h;
    h.sample_offsets.push_back(0);
    for (int s = part * 2; s < part * 2 + 2; ++s) {
      for (int64_t t = whole.sample_offsets[size_t(s)]; t < whole.sample_offsets[size_t(s) + 1];
           ++t) {
        h.token_ids.push_back(whole.token_ids[size_t(t)]);
        h.loss_mask.push_back(whole.loss_mask[size_t(t)]);
        h.logprobs.push_back(whole.logprobs[size_t(t)]);
      }
      h.sample_offsets.push_back(int64_t(h.token_ids.size()));
      h.rewards.push_back(whole.rewards[size_t(s)]);
      h.task_ids.push_back(whole.task_ids[size_t(s)]);
      h.episode_uuids.push_back(whole.episode_uuids[size_t(s)]);
      h.weights.push_back(1.0);
    }
    return h;
  };
  auto step_a =
      std::async(std::launch::async, [&] { return call(a, rpc::encode_train_batch(half(0))); });
  const nlohmann::json step_b = call(b, rpc::encode_train_batch(half(1)));
  const nlohmann::json step_a_reply = step_a.get();
  EXPECT_EQ(step_a_reply["policy_version"], 2);
  EXPECT_EQ(step_a_reply["weights_checksum"], step_b["weights_checksum"]);

  // A new group whose second member never trains: a's all-reduce times out, and its weights and
  // policy version stay those before the step.
  joined = form_group({&a, &b}, 2, 2, 3);
  const nlohmann::json before = joined[0]["weights_checksum"];
  EXPECT_EQ(before, step_a_reply["weights_checksum"]);
  EXPECT_THROW(call(a, rpc::encode_train_batch(make_batch(3))), Error);
  EXPECT_EQ(status_of(a)["policy_version"], 2);
  joined = form_group({&a}, 3, 2, 60);
  EXPECT_EQ(joined[0]["weights_checksum"], before) << "the failed step was not rolled back";
  EXPECT_EQ(joined[0]["world_size"], 1);
}

}  // namespace
}  // namespace ajet::engine

namespace ajet::engine {
namespace {

// push_weights from `trainer` (rank 0, serving the store) to `replicas`, all at once.
std::vector<nlohmann::json> push(rpc::Client& trainer, std::vector<rpc::Client*> replicas,
                                 int64_t id) {
  const int64_t port = call(trainer, method_frame(rpc::kMethodOpenPush,
                                                  {{"push_id", id}, {"timeout_s", 60}}))["port"]
                           .get<int64_t>();
  std::vector<rpc::Client*> all = {&trainer};
  all.insert(all.end(), replicas.begin(), replicas.end());
  return meet(all, rpc::kMethodPushWeights, {{"push_id", id}, {"timeout_s", 60}}, port);
}

// Disaggregated training: a replica that never trains serves the trainer's weights after a push
// (the same checksum and the same greedy logprobs as the trainer), a first push sends every
// parameter, a push after a LoRA step only the adapters, and a push of what the replica holds
// sends nothing. A replica of another shape is refused with a message, and keeps serving.
TEST(EngineTrain, PushedWeightsReachAReplicaAndOnlyTheAdaptersTravel) {
  const fs::path conf = write_lora_conf("push", process_dir() / "push");
  EngineProcess trainer_process({"--conf", conf.string(), "--elastic"}, micro_model_dir());
  EngineProcess replica_process({"--conf", conf.string(), "--elastic"}, micro_model_dir());
  rpc::Client trainer(trainer_process.wait_ready()), replica(replica_process.wait_ready());
  trainer.connect();
  replica.connect();
  const GenerateOutcome base = probe(replica);
  EXPECT_EQ(call(trainer, rpc::encode_train_batch(make_batch(1)))["policy_version"], 1);
  const GenerateOutcome trained = probe(trainer);
  ASSERT_TRUE(logprobs_differ(base, trained));

  std::vector<nlohmann::json> r = push(trainer, {&replica}, 1);
  EXPECT_EQ(r[1]["weights_checksum"], r[0]["weights_checksum"]);
  EXPECT_EQ(r[1]["policy_version"], 1);
  EXPECT_EQ(status_of(replica)["policy_version"], 1);
  // The replica loaded the same base, so only the trained adapters differ.
  EXPECT_TRUE(r[0]["sent_trainable"].get<bool>());
  EXPECT_FALSE(r[0]["sent_frozen"].get<bool>());
  const int64_t adapter_bytes = r[0]["bytes"].get<int64_t>();
  EXPECT_GT(adapter_bytes, 0);
  EXPECT_FALSE(logprobs_differ(trained, probe(replica))) << "the replica serves other weights";

  // Nothing changed: nothing travels, and the version stays.
  r = push(trainer, {&replica}, 2);
  EXPECT_FALSE(r[0]["sent_trainable"].get<bool>());
  EXPECT_EQ(r[0]["bytes"], 0);
  EXPECT_EQ(r[1]["weights_checksum"], r[0]["weights_checksum"]);

  // Another step: the adapters again, the same size.
  EXPECT_EQ(call(trainer, rpc::encode_train_batch(make_batch(2)))["policy_version"], 2);
  r = push(trainer, {&replica}, 3);
  EXPECT_EQ(r[0]["bytes"], adapter_bytes);
  EXPECT_EQ(r[1]["policy_version"], 2);
  EXPECT_FALSE(logprobs_differ(probe(trainer), probe(replica)));

  // A replica without LoRA settings has other parameters: every rank refuses, naming why.
  const fs::path plain = write_conf("push_plain", "torch", process_dir() / "push_plain");
  EngineProcess other_process({"--conf", plain.string(), "--elastic"}, micro_model_dir());
  rpc::Client other(other_process.wait_ready());
  other.connect();
  try {
    push(trainer, {&other}, 4);
    ADD_FAILURE() << "a push to a replica of another shape succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("differ from the trainer's"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(status_of(other)["policy_version"], 0);
  EXPECT_FALSE(logprobs_differ(base, probe(other))) << "the refused replica changed its weights";
}

}  // namespace
}  // namespace ajet::engine
