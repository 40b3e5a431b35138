#include "openai/openai_call.h"

#include <fmt/format.h>

#include "common/json.h"
#include "common/log.h"
#include "episodes/engine_state.h"
#include "http/response.h"
#include "openai/anthropic_messages.h"
#include "openai/openai_errors.h"
#include "rpc/messages.h"
#include "tracking/call_record.h"

namespace ajet::openai {

void LatestCall::set(std::string input, std::string output) {
  std::lock_guard<std::mutex> lock(mu_);
  has_ = true;
  input_ = std::move(input);
  output_ = std::move(output);
}

std::optional<Json> LatestCall::get() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!has_) return std::nullopt;
  auto parse = [](const std::string& s) {
    std::optional<Json> j = try_parse_json(s);
    return j ? std::move(*j) : Json(s);
  };
  return Json{{"input", parse(input_)}, {"output", parse(output_)}};
}

LlmCall::LlmCall(CallSetup setup, CallServices services, http::Respond respond)
    : setup_(std::move(setup)), services_(services), respond_(std::move(respond)) {
  ChoiceOptions options;
  options.tokenizer = setup_.model->tokenizer.get();
  options.stop = setup_.params.stop;
  options.chat = setup_.kind != CallSetup::Kind::kCompletion;
  options.parse_tools = setup_.parse_tools;
  options.generation_prompt_tail = setup_.generation_prompt_tail;
  const size_t n = size_t(setup_.params.n);
  choices_.reserve(n);
  for (size_t i = 0; i < n; ++i) choices_.emplace_back(options);
  closed_.assign(n, false);
  finals_.resize(n);
  text_offset_.assign(n, 0);
  prompt_tokens_ = int64_t(setup_.prompt.ids.size());
  if (setup_.params.stream)
    stream_ = std::make_shared<http::ChannelStream>(0, setup_.stream_backlog_bytes);
  if (setup_.kind == CallSetup::Kind::kResponses)
    responses_.emplace(new_response_id("msg_"), setup_.responses_tools);
}

void LlmCall::push(std::string chunk) {
  last_push_ = std::chrono::steady_clock::now();
  stream_->push(std::move(chunk));
}

bool LlmCall::done() {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_;
}

void LlmCall::heartbeat(std::chrono::steady_clock::duration idle) {
  std::lock_guard<std::mutex> lock(mu_);
  if (setup_.kind != CallSetup::Kind::kMessages || !streaming_ || finished_ || cancelled_.load())
    return;
  if (std::chrono::steady_clock::now() - last_push_ >= idle) push(anthropic_text_delta(""));
}

Heartbeats::Heartbeats(std::chrono::milliseconds period)
    : period_(period), thread_([this] { run(); }) {}

Heartbeats::~Heartbeats() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Heartbeats::add(std::weak_ptr<LlmCall> call) {
  std::lock_guard<std::mutex> lock(mu_);
  calls_.push_back(std::move(call));
}

void Heartbeats::run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, period_ / 4, [&] { return stopping_; })) {
    std::vector<std::shared_ptr<LlmCall>> live;
    std::erase_if(calls_, [&](const std::weak_ptr<LlmCall>& weak) {
      std::shared_ptr<LlmCall> call = weak.lock();
      if (!call || call->done()) return true;
      live.push_back(std::move(call));
      return false;
    });
    lock.unlock();
    for (const auto& call : live) call->heartbeat(period_);
    live.clear();  // the last owner may be here: release outside the lock
    lock.lock();
  }
}

void LlmCall::start(const std::shared_ptr<rpc::Client>& client) {
  if (setup_.client_cancel) {
    std::weak_ptr<LlmCall> weak = weak_from_this();
    setup_.client_cancel->on_cancel([weak] {
      if (auto self = weak.lock()) self->cancel();
    });
    if (cancelled_.load()) return;  // the client left before the engine was asked: generate nothing
  }
  const bool opens_at_once =
      setup_.kind == CallSetup::Kind::kMessages || setup_.kind == CallSetup::Kind::kResponses;
  if (opens_at_once && stream_ && client) {
    std::optional<http::Response> open;
    {
      std::lock_guard<std::mutex> lock(mu_);
      open = open_stream();
    }
    respond_(std::move(*open));
  }
  if (!client) {
    if (services_.metrics) services_.metrics->failed();
    respond_(error_answer(
        503, "The engine is not connected (it is starting or restarting); retry shortly.",
        "engine_unavailable"));
    return;
  }
  client_weak_ = client;
  client_raw_ = client.get();
  auto self = shared_from_this();
  uint64_t id = 0;
  try {
    id = client->start(rpc::encode_generate_request(setup_.generate),
                       [self](rpc::Frame&& frame) { self->on_frame(std::move(frame)); });
  } catch (const Error& e) {
    bool opened = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      opened = streaming_;
    }
    if (opened) {
      // The stream was answered already (Messages, Responses): a second answer would be dropped and
      // the client left waiting on an open stream. The error goes down the stream, which then
      // closes.
      on_error(e.code(), std::string("the engine is not reachable: ") + e.what());
      return;
    }
    if (services_.metrics) services_.metrics->failed();
    if (e.code() == ErrorCode::kResourceExhausted) {
      respond_(error_answer(
          413, std::string("The request is too large for the engine: ") + e.what(), "too_large"));
    } else {
      respond_(error_answer(503, std::string("The engine is not reachable: ") + e.what(),
                            "engine_unavailable"));
    }
    return;
  }
  request_id_.store(id);
  if (abort_wanted_.load() || cancelled_.load()) client->abort(id);
}

void LlmCall::on_frame(rpc::Frame&& frame) {
  try {
    switch (frame.kind) {
      case rpc::FrameKind::kReply: on_tokens(rpc::decode_tokens_event(frame)); break;
      case rpc::FrameKind::kDone: on_done(); break;
      case rpc::FrameKind::kError: {
        Error e = rpc::frame_error(frame);
        on_error(e.code(), e.what());
        break;
      }
      default: break;
    }
  } catch (const std::exception& e) {
    log().error("chat call {}: {}", setup_.meta.id, e.what());
    on_error(ErrorCode::kInternal,
             std::string("internal error while handling the engine's reply: ") + e.what());
  }
}

void LlmCall::abort_engine_request() {
  abort_wanted_.store(true);
  uint64_t id = request_id_.load();
  if (id != 0 && client_raw_ != nullptr)
    client_raw_->abort(id);  // inside a callback: the client is alive
}

void LlmCall::cancel() {
  cancelled_.store(true);
  uint64_t id = request_id_.load();
  if (id == 0) return;
  if (auto client = client_weak_.lock()) client->abort(id);
}

void LlmCall::on_tokens(const rpc::TokensEvent& e) {
  std::optional<http::Response> open;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_ || cancelled_.load()) return;
    if (e.sample < 0 || size_t(e.sample) >= choices_.size()) return;
    const size_t i = size_t(e.sample);
    if (policy_version_ < 0 && !e.policy_versions.empty()) {
      policy_version_ = e.policy_versions.front();
      setup_.meta.system_fingerprint = fmt::format("ajet-policy-{}", policy_version_);
    }
    ChoiceState& c = choices_[i];
    if (e.prompt_top_k >= 0 && prompt_scores_.prompt_top_k < 0) {
      prompt_scores_.prompt_top_k = e.prompt_top_k;
      prompt_scores_.prompt_ids = e.prompt_ids;
      prompt_scores_.prompt_logprobs = e.prompt_logprobs;
      prompt_scores_.prompt_ranks = e.prompt_ranks;
      prompt_scores_.prompt_top_ids = e.prompt_top_ids;
      prompt_scores_.prompt_top_logprobs = e.prompt_top_logprobs;
    }
    const bool was_stopped = c.stopped_by_string();
    c.add(e);
    if (c.stopped_by_string() && !was_stopped) {
      bool all = true;
      for (const auto& other : choices_) all = all && other.finished();
      if (all) abort_engine_request();  // nothing left that anyone will read
    }
    if (e.finish_reason == rpc::FinishReason::kAbort && !c.stopped_by_string())
      engine_aborted_ = true;
    if (!stream_ || engine_aborted_) return;
    if (!streaming_) open = open_stream();
    // A finished choice is closed (its last events: finish_reason, message_stop,
    // response.completed) by on_done, after the call is recorded: a client that read the end of its
    // answer finds it in the episode, even when it hangs up at once (Codex does). The stream opened
    // here is answered either way: an event that both starts and ends a choice (max_tokens 1, or a
    // stop token first) is the only one some calls get, and on_done answers only a stream it opens.
    if (!closed_[i] && !c.finished()) emit_delta(i, false);
  }
  if (open) respond_(std::move(*open));
}

std::optional<http::Response> LlmCall::open_stream() {
  streaming_ = true;
  std::weak_ptr<LlmCall> weak = weak_from_this();
  stream_->on_cancel([weak] {
    if (auto self = weak.lock()) self->cancel();
  });
  if (setup_.kind == CallSetup::Kind::kMessages) {
    push(anthropic_stream_open(setup_.meta, prompt_tokens_));
    return http::sse_response(stream_);
  }
  if (setup_.kind == CallSetup::Kind::kResponses) {
    push(responses_->open(setup_.meta, prompt_tokens_));
    return http::sse_response(stream_);
  }
  for (size_t i = 0; i < choices_.size(); ++i) {
    if (setup_.kind == CallSetup::Kind::kChat) {
      push(sse_data(chat_chunk_json(
          setup_.meta, int(i), Json{{"role", "assistant"}, {"content", ""}}, nullptr, nullptr)));
    }
  }
  return http::sse_response(stream_);
}

Json LlmCall::logprobs_for(size_t i, size_t begin, size_t end) {
  if (!setup_.params.logprobs || begin >= end) return nullptr;
  const text::Tokenizer& tok = *setup_.model->tokenizer;
  if (setup_.kind == CallSetup::Kind::kChat)
    return chat_logprobs_json(choices_[i], begin, end, tok);
  Json lp = completion_logprobs_json(choices_[i], begin, end, tok, text_offset_[i]);
  for (size_t t = begin; t < end; ++t)
    text_offset_[i] += tok.token_bytes(choices_[i].ids()[t]).size();
  return lp;
}

void LlmCall::push_delta(size_t i, const ChoiceDelta& d, Json finish_reason) {
  const bool has_tokens = d.token_end > d.token_begin;
  if (d.reasoning.empty() && d.content.empty() && finish_reason.is_null() &&
      !(has_tokens && setup_.params.logprobs)) {
    return;
  }
  if (setup_.kind == CallSetup::Kind::kMessages) {
    // Block 0 is the text; thinking is not streamed (it is in the non-streamed answer's blocks).
    if (!d.content.empty()) push(anthropic_text_delta(d.content));
    return;
  }
  if (setup_.kind == CallSetup::Kind::kResponses) {
    if (!d.content.empty()) push(responses_->text_delta(d.content));
    return;
  }
  Json logprobs = logprobs_for(i, d.token_begin, d.token_end);
  if (setup_.kind == CallSetup::Kind::kCompletion) {
    push(sse_data(completion_chunk_json(setup_.meta, int(i), d.content, std::move(finish_reason),
                                        std::move(logprobs))));
    return;
  }
  Json delta = Json::object();
  if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
  if (!d.content.empty() || d.reasoning.empty()) delta["content"] = d.content;
  if (!finish_reason.is_null() && d.content.empty() && d.reasoning.empty()) delta = Json::object();
  push(sse_data(chat_chunk_json(setup_.meta, int(i), std::move(delta), std::move(finish_reason),
                                std::move(logprobs))));
}

void LlmCall::emit_delta(size_t i, bool final) {
  push_delta(i, choices_[i].take_delta(final), nullptr);
}

const text::ParsedOutput& LlmCall::final_of(size_t i) {
  if (!finals_[i]) finals_[i] = choices_[i].final_output();
  return *finals_[i];
}

std::string LlmCall::answered_finish(size_t i, bool has_tool_calls) const {
  std::string finish = choices_[i].finish_reason(has_tool_calls);
  if (finish == "length" && !setup_.length_is_clients)
    return has_tool_calls ? "tool_calls" : "stop";
  return finish;
}

void LlmCall::close_choice(size_t i) {
  ChoiceState& c = choices_[i];
  ChoiceDelta d = c.take_delta(true);
  const text::ParsedOutput& out = final_of(i);
  const bool tools = !out.tool_calls.empty();
  if (setup_.kind != CallSetup::Kind::kCompletion && setup_.parse_tools) {
    // Content held back behind a <tool_call> comes now (as far as it continues what was sent).
    const std::string& sent = c.content_sent();
    if (out.content.size() > sent.size() && out.content.compare(0, sent.size(), sent) == 0) {
      d.content += out.content.substr(sent.size());
    }
  }
  push_delta(i, d, nullptr);
  if (setup_.kind == CallSetup::Kind::kMessages) {
    push(anthropic_stream_close(
        out, anthropic_stop_reason(answered_finish(i, tools), c.stopped_by_string()),
        c.matched_stop(), completion_tokens()));
    closed_[i] = true;
    return;
  }
  if (setup_.kind == CallSetup::Kind::kResponses) {
    push(responses_->close(setup_.meta, out, answered_finish(i, tools) == "length", prompt_tokens_,
                           completion_tokens()));
    closed_[i] = true;
    return;
  }
  if (tools) {
    push(sse_data(chat_chunk_json(setup_.meta, int(i),
                                  Json{{"tool_calls", tool_calls_json(out.tool_calls, true)}},
                                  nullptr, nullptr)));
  }
  ChoiceDelta none;
  push_delta(i, none, answered_finish(i, tools));
  closed_[i] = true;
}

void LlmCall::on_done() {
  std::optional<http::Response> answer;
  std::string body;
  bool aborted = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    aborted = engine_aborted_;
    if (!aborted) finished_ = true;
  }
  if (aborted) {
    // The engine ended the request itself (it is stopping): a retryable error, nothing recorded.
    on_error(ErrorCode::kUnavailable,
             "the engine stopped while generating (it is restarting or stopping); retry.");
    return;
  }
  if (cancelled_.load())
    return;  // the client went away: nothing was delivered, nothing is recorded
  int64_t completion = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < choices_.size(); ++i) final_of(i);
    body = response_json().dump(-1, ' ', false, Json::error_handler_t::replace);
    completion = completion_tokens();
  }
  // Recorded before the client can see the end of the answer: it may call end_episode at once, and
  // the registry only records calls of episodes that are still claimed. Counted then too, so a
  // client that read its answer finds it in GET /metrics.
  record(body);
  if (services_.metrics) {
    services_.metrics->answered(
        prompt_tokens_, completion,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - setup_.started).count());
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stream_) {
      if (!streaming_) answer = open_stream();
      for (size_t i = 0; i < choices_.size(); ++i) {
        if (!closed_[i]) close_choice(i);
      }
      const bool openai_sse =
          setup_.kind == CallSetup::Kind::kChat || setup_.kind == CallSetup::Kind::kCompletion;
      if (setup_.params.include_usage && openai_sse) {
        Json usage = usage_json(prompt_tokens_, completion_tokens());
        push(sse_data(usage_chunk_json(
            setup_.meta,
            setup_.kind == CallSetup::Kind::kChat ? "chat.completion.chunk" : "text_completion",
            std::move(usage))));
      }
      if (openai_sse) push("data: [DONE]\n\n");
      stream_->close();
    } else {
      http::Response r;
      r.status = 200;
      r.headers.add("Content-Type", "application/json");
      r.body = body;
      answer = std::move(r);
    }
  }
  if (answer) respond_(std::move(*answer));
}

int64_t LlmCall::completion_tokens() const {
  int64_t n = 0;
  for (const auto& c : choices_) n += int64_t(c.tokens());
  return n;
}

void LlmCall::on_error(ErrorCode code, const std::string& message) {
  std::optional<http::Response> answer;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    finished_ = true;
    if (cancelled_.load()) return;
    if (services_.metrics) services_.metrics->failed();
    const int status = code == ErrorCode::kInvalidArgument     ? 400
                       : code == ErrorCode::kResourceExhausted ? 413
                       : code == ErrorCode::kUnavailable       ? 503
                       : code == ErrorCode::kNotFound          ? 404  // e.g. an adapter removed
                                                               : 500;
    const std::string text = "The engine could not generate: " + message;
    if (streaming_ && setup_.kind == CallSetup::Kind::kMessages) {
      push(anthropic_stream_error(status == 503 ? "overloaded_error" : "api_error", text));
      stream_->close();
    } else if (streaming_ && setup_.kind == CallSetup::Kind::kResponses) {
      push(responses_->error(error_code_name(code), text));
      stream_->close();
    } else if (streaming_) {
      Json error = {{"error",
                     {{"message", text},
                      {"type", std::string(http::error_type_for(status))},
                      {"code", std::string(error_code_name(code))}}}};
      push(sse_data(error));
      push("data: [DONE]\n\n");
      stream_->close();
    } else {
      answer =
          error_answer(status, text, status == 503 ? "engine_unavailable" : error_code_name(code));
    }
  }
  if (answer) respond_(std::move(*answer));
}

http::Response LlmCall::error_answer(int status, const std::string& text,
                                     std::string_view code) const {
  if (setup_.kind == CallSetup::Kind::kMessages) return anthropic_error(status, text, 2);
  if (status == 503) return unavailable_response(text, 2);
  return openai_error(status, text, code);
}

Json LlmCall::response_json() const {
  if (setup_.kind == CallSetup::Kind::kMessages) {
    const ChoiceState& c = choices_[0];
    const text::ParsedOutput& out = *finals_[0];
    return anthropic_message_json(
        setup_.meta, out,
        anthropic_stop_reason(answered_finish(0, !out.tool_calls.empty()), c.stopped_by_string()),
        c.matched_stop(), prompt_tokens_, completion_tokens());
  }
  if (setup_.kind == CallSetup::Kind::kResponses) {
    const text::ParsedOutput& out = *finals_[0];
    return responses_json(setup_.meta, &out, responses_->items(out),
                          answered_finish(0, !out.tool_calls.empty()) == "length", prompt_tokens_,
                          completion_tokens(), setup_.responses_tools);
  }
  Json choices = Json::array();
  const text::Tokenizer& tok = *setup_.model->tokenizer;
  const Json prompt_logprobs =
      prompt_scores_.prompt_top_k >= 0 ? prompt_logprobs_json(prompt_scores_, tok) : Json();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const ChoiceState& c = choices_[i];
    const text::ParsedOutput& out = *finals_[i];
    Json logprobs = nullptr;
    if (setup_.kind == CallSetup::Kind::kChat) {
      if (setup_.params.logprobs) logprobs = chat_logprobs_json(c, 0, c.tokens(), tok);
      choices.push_back({{"index", i},
                         {"message", chat_message_json(out)},
                         {"logprobs", std::move(logprobs)},
                         {"finish_reason", answered_finish(i, !out.tool_calls.empty())}});
    } else {
      if (setup_.params.logprobs) logprobs = completion_logprobs_json(c, 0, c.tokens(), tok, 0);
      choices.push_back({{"index", i},
                         {"text", out.content},
                         {"logprobs", std::move(logprobs)},
                         {"finish_reason", answered_finish(i, false)}});
    }
    if (setup_.params.prompt_logprobs >= 0) choices.back()["prompt_logprobs"] = prompt_logprobs;
  }
  Json j = {
      {"id", setup_.meta.id},
      {"object", setup_.kind == CallSetup::Kind::kChat ? "chat.completion" : "text_completion"},
      {"created", setup_.meta.created},
      {"model", setup_.meta.model},
      {"choices", std::move(choices)},
      {"usage", usage_json(prompt_tokens_, completion_tokens())}};
  if (!setup_.meta.system_fingerprint.empty())
    j["system_fingerprint"] = setup_.meta.system_fingerprint;
  return j;
}

void LlmCall::record(const std::string& response_body) {
  const double finished_at = episodes::system_clock_seconds();
  const double latency_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - setup_.started)
          .count();
  services_.latest.set(setup_.request_body, response_body);
  // The bodies go once, on the first choice's row; the other choices' rows name it (bodies_from),
  // and the tracker keeps neither (it renders and merges from the parsed request and the tokens).
  std::optional<int64_t> holder;  // the call_index of the row with the bodies
  for (size_t i = 0; i < choices_.size() && i < setup_.tickets.size(); ++i) {
    const ChoiceState& c = choices_[i];
    tracking::CallRecord rec;
    rec.episode_uuid = setup_.tickets[i].episode_uuid;
    rec.agent_name = setup_.agent_name;
    rec.adapter = setup_.generate.adapter;
    rec.call_index = setup_.tickets[i].call_index;
    rec.request = setup_.request;
    rec.prompt_ids = setup_.prompt.ids;
    rec.message_spans = setup_.prompt.message_spans;
    rec.generation_prompt_begin = setup_.prompt.generation_prompt_begin;
    rec.render_notes = setup_.prompt.notes;
    rec.completion_ids = c.ids();
    rec.logprobs = c.logprobs();
    rec.raw_logprobs = c.raw_logprobs();
    rec.policy_versions = c.policy_versions();
    rec.finish_reason = c.tracking_finish();
    rec.latency_ms = latency_ms;
    rec.started_at = setup_.started_at;
    rec.finished_at = finished_at;
    try {
      tracking::validate_call(rec);
      store::CallRow row = tracking::to_call_row(rec);
      if (!holder) {
        holder = rec.call_index;
        row.request_json = setup_.stored_request_body.empty()
                               ? std::move(setup_.request_body)
                               : std::move(setup_.stored_request_body);
        row.response_json = response_body;
      } else {
        row.bodies_from = holder;
      }
      if (!services_.registry.record_llm_call(std::move(row)))
        continue;  // the episode ended meanwhile
      setup_.tracker->record(std::move(rec));
    } catch (const std::exception& e) {
      log().error("episode {} call {}: not recorded: {}", setup_.tickets[i].episode_uuid,
                  setup_.tickets[i].call_index, e.what());
    }
  }
}

}  // namespace ajet::openai
