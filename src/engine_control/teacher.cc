#include "engine_control/teacher.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <mutex>
#include <thread>

#include "common/error.h"
#include "http/client.h"

namespace ajet::engine_control {

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr size_t kMaxErrors = 5;

}  // namespace

Json TeacherReport::to_json() const {
  Json j{{"samples", samples},
         {"failed", failed},
         {"tokens", tokens},
         {"reverse_kl", reverse_kl},
         {"seconds", seconds}};
  if (in_teacher_top_k >= 0) j["in_teacher_top_k"] = in_teacher_top_k;
  return j;
}

std::vector<float> parse_prompt_logprobs(const Json& answer, const std::vector<int32_t>& ids,
                                         int top_k, std::vector<int32_t>* top_ids,
                                         std::vector<float>* top_logprobs) {
  auto bad = [](const std::string& why) { invalid_argument("teacher answer: " + why); };
  if (!answer.is_object()) bad("not a JSON object");
  const auto choices = answer.find("choices");
  if (choices == answer.end() || !choices->is_array() || choices->empty())
    bad("no 'choices' (is base_url the teacher's /v1 root?)");
  const Json& choice = (*choices)[0];
  const auto lp = choice.is_object() ? choice.find("prompt_logprobs") : choice.end();
  if (!choice.is_object() || lp == choice.end() || !lp->is_array())
    bad("choices[0] has no 'prompt_logprobs' list: the teacher must serve vLLM's prompt_logprobs");
  if (lp->size() != ids.size()) {
    bad(
        fmt::format("choices[0].prompt_logprobs has {} entries for a prompt of {} tokens (the "
                    "teacher must share the student's tokenizer)",
                    lp->size(), ids.size()));
  }
  std::vector<float> out(ids.size(), kNaN);
  const size_t k = size_t(std::max(top_k, 0));
  if (k > 0) {
    top_ids->assign(ids.size() * k, -1);
    top_logprobs->assign(ids.size() * k, -std::numeric_limits<float>::infinity());
  }
  for (size_t p = 1; p < ids.size(); ++p) {
    const Json& entry = (*lp)[p];
    if (!entry.is_object()) bad(fmt::format("prompt_logprobs[{}] is not an object", p));
    const auto own = entry.find(std::to_string(ids[p]));
    if (own == entry.end()) {
      bad(fmt::format("prompt_logprobs[{}] has no entry for the prompt's token {}", p, ids[p]));
    }
    auto logprob_of = [&](const Json& v, const std::string& id) {
      const auto it = v.is_object() ? v.find("logprob") : v.end();
      if (it == v.end() || !it->is_number())
        bad(fmt::format("prompt_logprobs[{}][\"{}\"] has no number 'logprob'", p, id));
      const double x = it->get<double>();
      if (!std::isfinite(x) || x > 1e-4)
        bad(fmt::format("prompt_logprobs[{}][\"{}\"].logprob = {} is not a logprob", p, id, x));
      return static_cast<float>(std::min(x, 0.0));
    };
    out[p] = logprob_of(*own, own.key());
    if (k == 0) continue;
    // The alternatives by rank (1 = the teacher's first choice); the prompt's own token is among
    // them only when its rank is within k.
    std::vector<std::tuple<int64_t, int32_t, float>> ranked;
    for (auto it = entry.begin(); it != entry.end(); ++it) {
      const Json& v = it.value();
      int64_t rank = std::numeric_limits<int64_t>::max();
      if (v.is_object()) {
        if (auto r = v.find("rank"); r != v.end() && r->is_number_integer())
          rank = r->get<int64_t>();
      }
      int32_t id = -1;
      try {
        size_t used = 0;
        const long long parsed = std::stoll(it.key(), &used);
        if (used != it.key().size() || parsed < 0 || parsed > std::numeric_limits<int32_t>::max())
          throw std::invalid_argument("id");
        id = static_cast<int32_t>(parsed);
      } catch (const std::exception&) {
        bad(fmt::format("prompt_logprobs[{}] has the key \"{}\", not a token id", p,
                        it.key().substr(0, 32)));
      }
      ranked.emplace_back(rank, id, logprob_of(v, it.key()));
    }
    std::sort(ranked.begin(), ranked.end());
    size_t j = 0;
    for (const auto& [rank, id, logprob] : ranked) {
      if (j == k || rank > int64_t(k)) break;
      (*top_ids)[p * k + j] = id;
      (*top_logprobs)[p * k + j] = logprob;
      ++j;
    }
  }
  return out;
}

TeacherReport fill_teacher_logprobs(rpc::TrainBatch& batch, const TeacherOptions& o) {
  const auto started = std::chrono::steady_clock::now();
  TeacherReport report;
  report.in_teacher_top_k = o.top_k > 0 ? 0 : -1;
  const size_t n = batch.token_ids.size();
  const size_t samples = batch.sample_offsets.empty() ? 0 : batch.sample_offsets.size() - 1;
  const size_t k = size_t(std::max(o.top_k, 0));
  batch.teacher_logprobs.assign(n, kNaN);
  batch.teacher_top_k = int32_t(k);
  batch.teacher_top_ids.assign(n * k, -1);
  batch.teacher_top_logprobs.assign(n * k, -std::numeric_limits<float>::infinity());
  report.samples = int64_t(samples);

  std::string base = o.base_url;
  while (!base.empty() && base.back() == '/') base.pop_back();
  http::Headers headers;
  if (!o.api_key.empty()) headers.set("Authorization", "Bearer " + o.api_key);
  http::ClientOptions client_options;
  client_options.timeout = std::chrono::milliseconds(int64_t(o.timeout_s * 1000));
  client_options.total_timeout = client_options.timeout;

  std::mutex mu;  // guards report.failed and report.errors
  std::atomic<size_t> next{0};
  auto work = [&] {
    std::unique_ptr<http::HttpClient> client;
    for (size_t s = next++; s < samples; s = next++) {
      const auto begin = size_t(batch.sample_offsets[s]), end = size_t(batch.sample_offsets[s + 1]);
      const std::vector<int32_t> ids(batch.token_ids.begin() + begin,
                                     batch.token_ids.begin() + end);
      try {
        if (ids.size() < 2) continue;  // nothing is predicted
        if (!client) client = std::make_unique<http::HttpClient>(base, client_options);
        Json body{{"prompt", ids}, {"max_tokens", 1}, {"temperature", 0}, {"prompt_logprobs", k}};
        if (!o.model.empty()) body["model"] = o.model;
        http::ClientResponse r = client->post_json(base + "/completions", body, headers);
        if (r.status != 200) {
          fail(ErrorCode::kUnavailable,
               fmt::format("HTTP {}: {}", r.status, r.body.substr(0, 300)));
        }
        std::vector<int32_t> top_ids;
        std::vector<float> top_logprobs;
        std::vector<float> t =
            parse_prompt_logprobs(r.json(), ids, int(k), &top_ids, &top_logprobs);
        std::copy(t.begin(), t.end(), batch.teacher_logprobs.begin() + begin);
        std::copy(top_ids.begin(), top_ids.end(), batch.teacher_top_ids.begin() + begin * k);
        std::copy(top_logprobs.begin(), top_logprobs.end(),
                  batch.teacher_top_logprobs.begin() + begin * k);
      } catch (const std::exception& e) {
        client.reset();  // a timed-out or broken connection is not reused
        std::lock_guard<std::mutex> lock(mu);
        ++report.failed;
        if (report.errors.size() < kMaxErrors)
          report.errors.push_back(fmt::format("sample {}: {}", s, e.what()));
      }
    }
  };
  const int threads = std::clamp<int>(o.concurrency, 1, std::max<int>(1, int(samples)));
  std::vector<std::thread> pool;
  for (int i = 1; i < threads; ++i) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();

  // The distance to the teacher under the behaviour policy, and how often the sampled token is
  // among the teacher's top k, over the trained tokens that have a teacher logprob.
  double kl = 0, in_top = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!batch.loss_mask[i] || std::isnan(batch.teacher_logprobs[i])) continue;
    ++report.tokens;
    kl += double(batch.logprobs[i]) - double(batch.teacher_logprobs[i]);
    for (size_t j = 0; j < k; ++j) {
      if (batch.teacher_top_ids[i * k + j] == batch.token_ids[i]) {
        in_top += 1;
        break;
      }
    }
  }
  if (report.tokens > 0) {
    report.reverse_kl = kl / double(report.tokens);
    if (k > 0) report.in_teacher_top_k = in_top / double(report.tokens);
  }
  // Samples whose every position failed carry no teacher at all: the trainer reads NaN as none.
  report.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return report;
}

}  // namespace ajet::engine_control
