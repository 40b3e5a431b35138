// The LLM researcher against a scripted OpenAI-compatible endpoint: a real HTTP server on loopback
// whose /v1/chat/completions answers each call with the next scripted reply (content or an error
// status), standing in for a model. The proposer's checks are the subject: good proposals are used,
// out-of-space, repeated, malformed and missing ones fall back to the built-in search with a note.
#include <gtest/gtest.h>

#include <deque>
#include <filesystem>
#include <mutex>
#include <set>

#include <fmt/format.h>

#include "common/error.h"
#include "common/fs.h"
#include "http/response.h"
#include "http/router.h"
#include "http/server.h"
#include "research/llm_proposer.h"
#include "research/study.h"

namespace ajet::research {
namespace {
namespace fs = std::filesystem;

struct Scripted {
  int status = 200;
  std::string content;
};

// The stand-in model: replies in order; records every request body it got.
class ScriptedEndpoint {
 public:
  ScriptedEndpoint() {
    http::Router router;
    router.post("/v1/chat/completions", [this](http::Request request, http::Respond respond) {
      Scripted next;
      {
        std::lock_guard lock(mu_);
        requests_.push_back(parse_json(request.body, "request"));
        if (!script_.empty()) {
          next = script_.front();
          script_.pop_front();
        } else {
          next = {500, "script exhausted"};
        }
      }
      if (next.status != 200) {
        respond(http::error_response(next.status, next.content));
        return;
      }
      Json message = {{"role", "assistant"}, {"content", next.content}};
      respond(http::json_response(
          {{"id", "chatcmpl-1"},
           {"object", "chat.completion"},
           {"model", "scripted"},
           {"choices",
            Json::array({{{"index", 0}, {"message", message}, {"finish_reason", "stop"}}})}}));
    });
    server_ = std::make_unique<http::HttpServer>(http::ServerOptions{}, std::move(router));
    server_->start();
  }
  ~ScriptedEndpoint() { server_->stop(); }
  void push(int status, std::string content) {
    std::lock_guard lock(mu_);
    script_.push_back({status, std::move(content)});
  }
  LlmEndpoint endpoint() const {
    return {fmt::format("http://127.0.0.1:{}/v1", server_->port()), "sk-test", "scripted",
            std::chrono::seconds(30)};
  }
  std::vector<Json> requests() {
    std::lock_guard lock(mu_);
    return requests_;
  }

 private:
  std::mutex mu_;
  std::deque<Scripted> script_;
  std::vector<Json> requests_;
  std::unique_ptr<http::HttpServer> server_;
};

class LlmProposerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ajet_llm_proposer_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    write_file_atomic(
        dir_ / "base.yaml",
        "ajet:\n  model:\n    path: /no/model\n  trainer_common:\n    optim:\n      lr: 1.0e-4\n");
    study_ = parse_study(
        "question: which lr and kl?\n"
        "base: base.yaml\n"
        "objective: {metric: val/sampled_success, step: 8}\n"
        "search:\n"
        "  lr: {key: ajet.trainer_common.optim.lr, log_uniform: [1.0e-5, 1.0e-3]}\n"
        "  kl: {key: ajet.trainer_common.kl_loss_coef, choice: [0.0, 0.01]}\n"
        "budget: {trials: 8}\n",
        dir_ / "study.yaml", dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  ProposalRequest request(int64_t count) {
    ProposalRequest r;
    r.study = &study_;
    r.round = 2;
    r.count = count;
    TrialRow done;
    done.id = 1;
    done.name = "t001";
    done.params = {{"lr", 1e-4}, {"kl", 0.0}};
    done.status = kCompleted;
    r.trials.push_back(done);
    r.points.push_back({1, 8, 0.55});
    return r;
  }

  fs::path dir_;
  Study study_;
  ScriptedEndpoint model_;
  BuiltinProposer builtin_;
};

TEST_F(LlmProposerTest, GoodProposalsAreUsedAndTheModelSeesTheTrials) {
  model_.push(200,
              "Here you go:\n```json\n{\"candidates\": [{\"lr\": 3e-4, \"kl\": 0.01}, {\"lr\": "
              "2e-5, \"kl\": 0.0}],"
              " \"why\": \"bracket the base lr\"}\n```");
  LlmProposer p(model_.endpoint(), builtin_);
  std::vector<Params> got = p.propose(request(2));
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].at("lr"), 3e-4);
  EXPECT_EQ(got[0].at("kl"), 0.01);
  EXPECT_EQ(got[1].at("lr"), 2e-5);
  // The prompt carried the space and what t001 measured.
  std::string prompt = model_.requests().at(0)["messages"][1]["content"];
  EXPECT_NE(prompt.find("ajet.trainer_common.optim.lr"), std::string::npos);
  EXPECT_NE(prompt.find("t001: kl=0, lr=0.0001; completed; 8: 0.550"), std::string::npos) << prompt;
  EXPECT_EQ(model_.requests().at(0)["model"], "scripted");
  ASSERT_FALSE(p.notes().empty());
  EXPECT_NE(p.notes().back().find("bracket the base lr"), std::string::npos);
  // The model's reasons go to the controller (the round's decision), and the notes once each.
  EXPECT_EQ(p.rationale(), "bracket the base lr");
  EXPECT_EQ(p.take_notes(), p.notes());
  EXPECT_TRUE(p.take_notes().empty());
}

// A reply whose candidates were all dropped has no rationale to record (the built-in search chose
// the round), and a long or multi-line "why" is cut to one bounded line.
TEST_F(LlmProposerTest, TheRationaleBelongsToUsedCandidatesAndIsBounded) {
  model_.push(200, "{\"candidates\": [{\"lr\": 0.5, \"kl\": 0.0}], \"why\": \"go big\"}");
  model_.push(200,
              "{\"candidates\": [{\"lr\": 3e-4, \"kl\": 0.01}], \"why\": \"line one\\nline two " +
                  std::string(2 * kMaxRationaleBytes, 'x') + "\"}");
  model_.push(200, "{\"candidates\": [{\"lr\": 2e-4, \"kl\": 0.01}]}");
  LlmProposer p(model_.endpoint(), builtin_);
  p.propose(request(1));
  EXPECT_EQ(p.rationale(), "");
  p.propose(request(1));
  EXPECT_EQ(p.rationale().rfind("line one line two xxx", 0), 0u) << p.rationale();
  EXPECT_LE(p.rationale().size(), kMaxRationaleBytes + 4);
  p.propose(request(1));
  EXPECT_EQ(p.rationale(),
            "");  // this reply said nothing: the earlier reasons are not carried over
}

TEST_F(LlmProposerTest,
       OutOfSpaceRepeatedAndExtraCandidatesAreDroppedAndTheRestComesFromTheBuiltInSearch) {
  model_.push(200,
              "{\"candidates\": ["
              "{\"lr\": 0.5, \"kl\": 0.0},"             // outside [1e-5, 1e-3]
              "{\"lr\": 1e-4, \"kl\": 0.0},"            // t001 again
              "{\"lr\": 1e-4, \"kl\": 0.02},"           // not a choice
              "{\"lr\": 1e-4},"                         // kl missing
              "{\"lr\": 1e-4, \"kl\": 0.0, \"x\": 1},"  // unknown name
              "\"lr=1e-4\","                            // not an object
              "{\"lr\": 5e-4, \"kl\": 0.01},"           // the only good one
              "{\"lr\": 5e-4, \"kl\": 0.01}"            // repeated within the reply
              "]}");
  LlmProposer p(model_.endpoint(), builtin_);
  std::vector<Params> got = p.propose(request(3));
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].at("lr"), 5e-4);
  std::set<Params> distinct(got.begin(), got.end());
  EXPECT_EQ(distinct.size(), 3u);
  for (const Params& c : got) {
    EXPECT_NO_THROW(check_params(study_, c));
    EXPECT_NE(c, (Params{{"lr", 1e-4}, {"kl", 0.0}}));
  }
  std::string notes;
  for (const auto& n : p.notes()) notes += n + "\n";
  EXPECT_NE(notes.find("candidate 1: "), std::string::npos) << notes;
  EXPECT_NE(notes.find("candidate 2: kl=0, lr=0.0001 was tried already"), std::string::npos)
      << notes;
  EXPECT_NE(notes.find("candidate 6: not an object"), std::string::npos) << notes;
  EXPECT_NE(notes.find("candidate 8: kl=0.01, lr=0.0005 repeats an earlier candidate"),
            std::string::npos)
      << notes;
  EXPECT_NE(notes.find("2 of 3 candidate(s) from the built-in search"), std::string::npos) << notes;
}

TEST_F(LlmProposerTest, MalformedRepliesAndErrorsFallBackWithANote) {
  model_.push(200, "I think lr 3e-4 is best.");                       // no JSON
  model_.push(200, "{\"candidates\": [{\"lr\": 3e-4, \"kl\": 0.0}");  // cut off
  model_.push(200, "{\"ideas\": []}");                                // wrong shape
  model_.push(400, "bad request");                                    // an error status
  model_.push(200, "");                                               // empty
  LlmProposer p(model_.endpoint(), builtin_);
  for (int i = 0; i < 5; ++i) {
    std::vector<Params> got = p.propose(request(2));
    ASSERT_EQ(got.size(), 2u) << "call " << i;
    for (const Params& c : got) EXPECT_NO_THROW(check_params(study_, c));
  }
  std::string notes;
  for (const auto& n : p.notes()) notes += n + "\n";
  EXPECT_NE(notes.find("holds no JSON object"), std::string::npos) << notes;
  EXPECT_NE(notes.find("no \"candidates\" array"), std::string::npos) << notes;
  EXPECT_NE(notes.find("no answer"), std::string::npos) << notes;
  EXPECT_NE(notes.find("an empty reply"), std::string::npos) << notes;
}

TEST_F(LlmProposerTest, AnUnreachableEndpointFallsBackEverywhere) {
  LlmEndpoint gone = model_.endpoint();
  gone.base_url = "http://127.0.0.1:1/v1";
  LlmProposer p(gone, builtin_);
  EXPECT_EQ(p.propose(request(2)).size(), 2u);
  EXPECT_EQ(p.hypotheses(study_), builtin_.hypotheses(study_));
  EXPECT_FALSE(p.conclusion_prose({"best: t002"}).has_value());
  EXPECT_EQ(p.notes().size(), 4u);  // three "no answer" lines and the round's built-in fill
}

TEST_F(LlmProposerTest, HypothesesAndProseAreBoundedAndMarked) {
  std::string many = "{\"hypotheses\": [";
  for (int i = 0; i < 20; ++i) many += fmt::format("{}\"h{} line\\nbreak\"", i ? "," : "", i);
  model_.push(200, many + ", 7]}");
  model_.push(200, std::string(10000, 'x'));
  LlmProposer p(model_.endpoint(), builtin_);
  std::vector<std::string> h = p.hypotheses(study_);
  ASSERT_EQ(h.size(), kMaxHypotheses);
  EXPECT_EQ(h[0], "(LLM) h0 line break");
  std::optional<std::string> prose = p.conclusion_prose({"best: t002 at 0.8"});
  ASSERT_TRUE(prose.has_value());
  EXPECT_LE(prose->size(), kMaxProseBytes + 8);
  std::string prompt = model_.requests().at(1)["messages"][1]["content"];
  EXPECT_NE(prompt.find("best: t002 at 0.8"), std::string::npos);
}

TEST(LlmReply, FindsTheObjectAndSaysWhyWhenThereIsNone) {
  std::string why;
  EXPECT_TRUE(json_object_in_reply("{\"a\": 1}", &why).has_value());
  EXPECT_EQ((*json_object_in_reply("```json\n{\"a\": [1, {\"b\": 2}]}\n```", &why))["a"][1]["b"],
            2);
  EXPECT_FALSE(json_object_in_reply("no braces", &why));
  EXPECT_NE(why.find("no JSON object"), std::string::npos);
  EXPECT_FALSE(json_object_in_reply("{\"a\": 1} and {\"b\": 2}", &why));
  EXPECT_NE(why.find("not valid JSON"), std::string::npos);
  EXPECT_FALSE(json_object_in_reply(std::string(kMaxLlmReplyBytes + 1, '{'), &why));
  EXPECT_NE(why.find("at most"), std::string::npos);
  std::string deep(100, '[');
  EXPECT_FALSE(json_object_in_reply("{\"a\": " + deep + "}", &why));
}

}  // namespace
}  // namespace ajet::research
