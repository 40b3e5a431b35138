// Named LoRA adapters on one engine's base (engine/adapters.h), end to end through `ajet-engine
// serve` and the C++ RPC client: adapters are created, listed, trained, saved, loaded and removed
// while the engine runs; a train_step trains each named adapter on its own samples and leaves the
// base and every other adapter bit-identical; requests of different adapters decoding in one batch
// give what each gives alone; a saved adapter loaded again gives the same outputs; bad input gets
// an error naming what is wrong while the engine keeps serving.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <future>
#include <iostream>
#include <map>
#include <thread>

#include "engine_process.h"
#include "train_helpers.h"

namespace ajet::engine {
namespace {

using namespace testing;

rpc::GenerateRequest greedy_on(const std::string& adapter, int salt = 42, int max_tokens = 6) {
  rpc::GenerateRequest r = greedy(prompt_of(10, salt), max_tokens);
  r.adapter = adapter;
  return r;
}

void expect_same(const GenerateOutcome& a, const GenerateOutcome& b, const std::string& what) {
  ASSERT_TRUE(a.done && b.done) << what;
  EXPECT_EQ(a.ids(), b.ids()) << what;
  const auto x = a.logprobs(0, true), y = b.logprobs(0, true);
  ASSERT_EQ(x.size(), y.size()) << what;
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], y[i], 1e-4) << what << " token " << i;
}

// The error of a call that must fail, with its code.
Error error_of(rpc::Client& client, rpc::Frame request) {
  try {
    client.call(std::move(request), std::chrono::seconds(120));
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "the call succeeded";
  return Error(ErrorCode::kInternal, "");
}

nlohmann::json names_of(rpc::Client& client) {
  nlohmann::json names = nlohmann::json::array();
  const nlohmann::json list =
      call(client, method_frame(rpc::kMethodAdapters, nlohmann::json::object()));
  for (const auto& a : list["adapters"]) names.push_back(a["name"]);
  return names;
}

// Prints the engine's stderr when the test failed.
struct DumpOnFailure {
  EngineProcess& e;
  ~DumpOnFailure() {
    if (::testing::Test::HasFailure()) std::cerr << "engine stderr:\n" << e.stderr_text() << "\n";
  }
};

rpc::TrainBatch batch_for(const std::vector<std::string>& adapters, int salt) {
  rpc::TrainBatch b = make_batch(salt);
  b.meta["adapters"] = adapters;
  return b;
}

TEST(EngineAdapters, ServeTrainSaveLoadAndRemoveWhileRunning) {
  const fs::path dir = process_dir() / "adapters";
  EngineProcess engine({"--conf", write_conf("adapters", "torch", dir / "ckpt", "0.05").string()},
                       micro_model_dir());
  rpc::Client client(engine.wait_ready());
  client.connect();
  DumpOnFailure dump{engine};
  EXPECT_EQ(names_of(client), nlohmann::json::array());
  const GenerateOutcome base = generate(client, greedy_on(""));
  ASSERT_TRUE(base.done);

  // An adapter nobody made: not found, naming what is served.
  GenerateOutcome missing = generate(client, greedy_on("a"));
  ASSERT_TRUE(missing.error);
  EXPECT_EQ(missing.error->code(), ErrorCode::kNotFound);
  EXPECT_NE(std::string(missing.error->what()).find("no adapter 'a' (served: none)"),
            std::string::npos)
      << missing.error->what();

  const nlohmann::json a = call(
      client, method_frame(rpc::kMethodAdapterCreate, {{"name", "a"}, {"rank", 4}, {"alpha", 8}}));
  EXPECT_EQ(a["slot"], 0);
  EXPECT_EQ(a["rank"], 4);
  const nlohmann::json b = call(
      client, method_frame(rpc::kMethodAdapterCreate,
                           {{"name", "b"}, {"rank", 2}, {"target_modules", {"q_proj", "v_proj"}}}));
  EXPECT_EQ(b["slot"], 1);
  EXPECT_EQ(names_of(client), nlohmann::json({"a", "b"}));
  EXPECT_EQ(status_of(client)["adapters"].size(), 2u);

  // Refusals name the problem; nothing changes.
  EXPECT_EQ(error_of(client, method_frame(rpc::kMethodAdapterCreate, {{"name", "a"}})).code(),
            ErrorCode::kFailedPrecondition);
  const Error bad_name =
      error_of(client, method_frame(rpc::kMethodAdapterCreate, {{"name", "a b"}}));
  EXPECT_EQ(bad_name.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(std::string(bad_name.what()).find("'name' may hold only"), std::string::npos);
  const Error bad_target = error_of(
      client, method_frame(rpc::kMethodAdapterCreate, {{"name", "c"}, {"target_modules", {"qq"}}}));
  EXPECT_NE(std::string(bad_target.what()).find("qq"), std::string::npos) << bad_target.what();
  EXPECT_EQ(error_of(client, method_frame(rpc::kMethodAdapterCreate, {{"name", "c"}, {"rank", 0}}))
                .code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(names_of(client), nlohmann::json({"a", "b"}));

  // Fresh adapters (B = 0) start as the base.
  expect_same(generate(client, greedy_on("a")), base, "fresh a");
  expect_same(generate(client, greedy_on("b")), base, "fresh b");

  // A step on a's samples only: a changes; the base and b stay bit-identical.
  call(client,
       method_frame(rpc::kMethodAdapterSave, {{"name", "b"}, {"dir", (dir / "b0").string()}}));
  const nlohmann::json m =
      call(client, rpc::encode_train_batch(batch_for({"a", "a", "a", "a"}, 1)));
  EXPECT_EQ(m["policy_version"], 1);
  EXPECT_EQ(m["samples"], 4);
  ASSERT_TRUE(m["adapters"].contains("a"));
  EXPECT_FALSE(m["adapters"].contains("b"));
  EXPECT_EQ(m["adapters"]["a"]["trained_steps"], 1);
  EXPECT_GT(m["adapters"]["a"]["grad_norm"].get<double>(), 0.0);
  const GenerateOutcome a1 = generate(client, greedy_on("a"));
  expect_versions(a1, 1);
  EXPECT_TRUE(logprobs_differ(a1, base)) << "a step at lr 0.05 left adapter a unchanged";
  expect_same(generate(client, greedy_on("")), base, "base after a's step");
  expect_same(generate(client, greedy_on("b")), base, "b after a's step");
  call(client,
       method_frame(rpc::kMethodAdapterSave, {{"name", "b"}, {"dir", (dir / "b1").string()}}));
  EXPECT_EQ(file_bytes(dir / "b0" / "adapter_model.safetensors"),
            file_bytes(dir / "b1" / "adapter_model.safetensors"));

  // One step over both: each trains with its own trainer, its GRPO groups over its own samples
  // (make_batch's groups are samples 0-1 and 2-3).
  const nlohmann::json m2 =
      call(client, rpc::encode_train_batch(batch_for({"a", "a", "b", "b"}, 2)));
  EXPECT_EQ(m2["adapters"]["a"]["trained_steps"], 2);
  EXPECT_EQ(m2["adapters"]["b"]["trained_steps"], 1);
  EXPECT_EQ(m2["samples"], 4);
  const GenerateOutcome a2 = generate(client, greedy_on("a"));
  const GenerateOutcome b2 = generate(client, greedy_on("b"));
  EXPECT_TRUE(logprobs_differ(b2, base)) << "b's step left it unchanged";

  // Mixed decode: a, b and the base in the same batches give what each gave alone.
  std::vector<PendingGenerate> pending;
  const std::vector<std::string> order = {"a", "", "b", "a", "b", ""};
  for (const std::string& name : order) pending.push_back(start_generate(client, greedy_on(name)));
  for (size_t i = 0; i < order.size(); ++i) {
    const GenerateOutcome o = pending[i].outcome.get();
    expect_same(o, order[i] == "a" ? a2 : order[i] == "b" ? b2 : base, "mixed '" + order[i] + "'");
  }

  // Save -> load under another name -> the same outputs.
  const nlohmann::json saved =
      call(client,
           method_frame(rpc::kMethodAdapterSave, {{"name", "a"}, {"dir", (dir / "a2").string()}}));
  EXPECT_TRUE(fs::exists(fs::path(saved["path"].get<std::string>()) / "adapter_config.json"));
  const nlohmann::json loaded =
      call(client, method_frame(rpc::kMethodAdapterCreate,
                                {{"name", "a-copy"}, {"path", (dir / "a2").string()}}));
  EXPECT_EQ(loaded["rank"], 4);
  expect_same(generate(client, greedy_on("a-copy")), a2, "a loaded from its save");

  // Training without naming adapters, or naming an unknown one, is refused; nothing changes.
  EXPECT_EQ(error_of(client, rpc::encode_train_batch(make_batch(3))).code(),
            ErrorCode::kFailedPrecondition);
  const Error unknown =
      error_of(client, rpc::encode_train_batch(batch_for({"a", "zz", "a", "a"}, 3)));
  EXPECT_EQ(unknown.code(), ErrorCode::kNotFound);
  EXPECT_NE(std::string(unknown.what()).find("no adapter 'zz'"), std::string::npos);
  EXPECT_EQ(status_of(client)["policy_version"], 2);
  expect_same(generate(client, greedy_on("a")), a2, "a after refused steps");

  // Removed: refused from then on, its slot reused by the next adapter.
  call(client, method_frame(rpc::kMethodAdapterRemove, {{"name", "a"}}));
  EXPECT_EQ(names_of(client), nlohmann::json({"a-copy", "b"}));
  GenerateOutcome gone = generate(client, greedy_on("a"));
  ASSERT_TRUE(gone.error);
  EXPECT_EQ(gone.error->code(), ErrorCode::kNotFound);
  const nlohmann::json c = call(client, method_frame(rpc::kMethodAdapterCreate, {{"name", "c"}}));
  EXPECT_EQ(c["slot"], 0);
  expect_same(generate(client, greedy_on("c")), base, "fresh c in a's old slot");
  expect_same(generate(client, greedy_on("a-copy")), a2, "a-copy after a's removal");
}

nlohmann::json entry_of(rpc::Client& client, const std::string& name) {
  const nlohmann::json listed =
      call(client, method_frame(rpc::kMethodAdapters, nlohmann::json::object()));
  for (const auto& a : listed.at("adapters")) {
    if (a["name"] == name) return a;
  }
  ADD_FAILURE() << "no adapter " << name;
  return nlohmann::json::object();
}

// Under a memory budget that holds two trained adapters, four are served: the least recently used
// move out to disk and come back when a request, a train step or a save needs them. No request
// fails while its adapter is out, every adapter answers as it did in its slot, and an adapter that
// moved out between two train steps takes its second step exactly as one that never moved
// (weights and AdamW state come back bit for bit).
TEST(EngineAdapters, AdaptersBeyondTheMemoryBudgetMoveOutAndComeBackWithNoFailedCall) {
  const fs::path dir = process_dir() / "adapters_budget";
  const nlohmann::json twin_spec = {{"rank", 4}, {"alpha", 8}, {"seed", 11}};
  auto create = [](rpc::Client& client, const std::string& name, nlohmann::json spec) {
    spec["name"] = name;
    return call(client, method_frame(rpc::kMethodAdapterCreate, spec));
  };
  // The reference: the same adapter's two steps on an engine without a budget.
  int64_t bytes = 0;
  GenerateOutcome twin_after_two;
  nlohmann::json twin_step2;
  {
    EngineProcess engine(
        {"--conf", write_conf("adapters_free", "torch", dir / "free", "0.05").string()},
        micro_model_dir());
    rpc::Client client(engine.wait_ready());
    client.connect();
    bytes = create(client, "twin", twin_spec)["bytes"].get<int64_t>();
    call(client, rpc::encode_train_batch(batch_for({"twin", "twin", "twin", "twin"}, 1)));
    twin_step2 =
        call(client, rpc::encode_train_batch(batch_for({"twin", "twin", "twin", "twin"}, 2)));
    twin_after_two = generate(client, greedy_on("twin"));
    ASSERT_TRUE(twin_after_two.done);
  }
  ASSERT_GT(bytes, 0);
  // A trained adapter holds 4x its A and B (its own copy, the copy in its slot, two moments).
  const double budget_mb = double(9 * bytes) / (1024.0 * 1024.0);
  EngineProcess engine(
      {"--conf", write_conf("adapters_budget", "torch", dir / "ckpt", "0.05",
                            fmt::format("    adapter_memory_mb: {:.9f}\n", budget_mb))
                     .string()},
      micro_model_dir());
  rpc::Client client(engine.wait_ready());
  client.connect();
  DumpOnFailure dump{engine};
  const std::vector<std::string> names = {"a", "b", "c", "d"};
  for (size_t i = 0; i < names.size(); ++i) {
    nlohmann::json spec = twin_spec;
    spec["seed"] = 11 + int(i);
    create(client, names[i], spec);
  }
  // a takes the twin's first step; the others a step each, which moves a out.
  call(client, rpc::encode_train_batch(batch_for({"a", "a", "a", "a"}, 1)));
  for (size_t i = 1; i < names.size(); ++i) {
    const std::string& n = names[i];
    call(client, rpc::encode_train_batch(batch_for({n, n, n, n}, 3 + int(i))));
  }
  nlohmann::json listed =
      call(client, method_frame(rpc::kMethodAdapters, nlohmann::json::object()));
  const int64_t budget = listed["adapter_memory"]["budget_bytes"].get<int64_t>();
  EXPECT_EQ(budget, int64_t(budget_mb * 1024 * 1024));
  EXPECT_LE(listed["adapter_memory"]["resident_bytes"].get<int64_t>(), budget) << listed.dump();
  EXPECT_GT(listed["adapter_memory"]["evictions"].get<int64_t>(), 0) << listed.dump();
  EXPECT_FALSE(entry_of(client, "a")["resident"].get<bool>()) << listed.dump();
  EXPECT_EQ(entry_of(client, "a")["trained_steps"], 1);  // known while it is out

  // Each answers as it does in its slot, however often it moves in and out.
  std::map<std::string, GenerateOutcome> ref;
  for (const std::string& n : names) {
    ref[n] = generate(client, greedy_on(n));
    ASSERT_TRUE(ref[n].done) << n << ": " << (ref[n].error ? ref[n].error->what() : "");
  }
  // 24 requests at once over all four: two fit; the others wait for their adapter, never fail.
  std::vector<PendingGenerate> pending;
  std::vector<std::string> order;
  for (int round = 0; round < 6; ++round) {
    for (size_t i = 0; i < names.size(); ++i) order.push_back(names[(i + round) % names.size()]);
  }
  for (const std::string& n : order) pending.push_back(start_generate(client, greedy_on(n)));
  for (size_t i = 0; i < order.size(); ++i) {
    const GenerateOutcome o = pending[i].outcome.get();
    ASSERT_FALSE(o.error) << order[i] << ": " << o.error->what();
    expect_same(o, ref[order[i]], "concurrent '" + order[i] + "'");
  }
  // While all four were in use the set went over its budget; once they ended, it is back under.
  for (int i = 0; i < 600; ++i) {
    listed = call(client, method_frame(rpc::kMethodAdapters, nlohmann::json::object()));
    if (listed["adapter_memory"]["resident_bytes"].get<int64_t>() <= budget) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // an observable state
  }
  EXPECT_LE(listed["adapter_memory"]["resident_bytes"].get<int64_t>(), budget) << listed.dump();
  EXPECT_GT(listed["adapter_memory"]["loads"].get<int64_t>(), 0) << listed.dump();

  // a's second step, after it moved out and back: the twin's second step to the bit.
  for (const std::string& n : {"b", "c", "d"}) generate(client, greedy_on(n));  // a goes out
  EXPECT_FALSE(entry_of(client, "a")["resident"].get<bool>());
  // An explicit move out (the admin's): d was the last used, so it is in; then it is not.
  ASSERT_TRUE(entry_of(client, "d")["resident"].get<bool>());
  const nlohmann::json evicted =
      call(client, method_frame(rpc::kMethodAdapterEvict, {{"name", "d"}}));
  EXPECT_FALSE(evicted["resident"].get<bool>()) << evicted.dump();
  EXPECT_EQ(error_of(client, method_frame(rpc::kMethodAdapterEvict, {{"name", "zz"}})).code(),
            ErrorCode::kNotFound);
  expect_same(generate(client, greedy_on("d")), ref["d"], "d after an explicit move out");
  const nlohmann::json a_step2 =
      call(client, rpc::encode_train_batch(batch_for({"a", "a", "a", "a"}, 2)));
  EXPECT_EQ(a_step2["adapters"]["a"]["trained_steps"], 2);
  EXPECT_EQ(a_step2["adapters"]["a"]["grad_norm"], twin_step2["adapters"]["twin"]["grad_norm"]);
  EXPECT_EQ(a_step2["adapters"]["a"]["loss"], twin_step2["adapters"]["twin"]["loss"]);
  const GenerateOutcome a_after_two = generate(client, greedy_on("a"));
  ASSERT_TRUE(a_after_two.done);
  EXPECT_EQ(a_after_two.ids(), twin_after_two.ids());
  EXPECT_EQ(a_after_two.logprobs(0, true), twin_after_two.logprobs(0, true));
  ref["a"] = a_after_two;

  // A checkpoint holds every adapter, out or in, with its trainer state; one loaded from it goes on
  // from its step count.
  const nlohmann::json saved =
      call(client, method_frame(rpc::kMethodSaveCheckpoint, nlohmann::json::object()));
  const fs::path adapters_dir = saved["adapters_path"].get<std::string>();
  for (const std::string& n : names) {
    EXPECT_TRUE(fs::exists(adapters_dir / n / "adapter_model.safetensors")) << n;
    EXPECT_TRUE(fs::exists(adapters_dir / n / "trainer_state.json")) << n;
  }
  const nlohmann::json again = create(client, "a-again", {{"path", (adapters_dir / "a").string()}});
  EXPECT_EQ(again["trained_steps"], 2);
  expect_same(generate(client, greedy_on("a-again")), a_after_two, "a loaded from the checkpoint");

  // Removing an adapter that is out frees its files; the rest keep serving.
  const std::string out_name = [&] {
    const nlohmann::json now =
        call(client, method_frame(rpc::kMethodAdapters, nlohmann::json::object()));
    for (const auto& a : now.at("adapters"))
      if (!a["resident"].get<bool>()) return a["name"].get<std::string>();
    return std::string();
  }();
  ASSERT_FALSE(out_name.empty());
  call(client, method_frame(rpc::kMethodAdapterRemove, {{"name", out_name}}));
  GenerateOutcome gone = generate(client, greedy_on(out_name));
  ASSERT_TRUE(gone.error);
  EXPECT_EQ(gone.error->code(), ErrorCode::kNotFound);
  for (const std::string& n : names) {
    if (n != out_name) expect_same(generate(client, greedy_on(n)), ref[n], "after the removal");
  }
}

}  // namespace
}  // namespace ajet::engine
