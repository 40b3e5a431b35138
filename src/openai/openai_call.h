// One OpenAI request in flight (/v1/chat/completions, /v1/completions, or /v1/responses and
// Anthropic's /v1/messages over the chat pipeline: openai_responses.h, anthropic_messages.h): sends
// one `generate` to the engine (n samples sharing one prefill), turns its streamed `tokens` events
// into SSE chunks as they arrive (or one JSON body at the end), and records every choice as a
// tracked LLM call (the request and response bodies once per request, on its first choice's row).
//
// Threads: start() runs on a prompt-pool thread; engine events arrive on the RPC client's reader
// thread and are handled there directly (decoding a token and queueing a chunk never blocks: a push
// to the ChannelStream never waits, the store write is queued). The engine request is aborted when
// the client goes away: a hang-up (the request's CancelSignal, from an I/O thread, streamed or not,
// also before the first token) or a stream reader that fell stream_backlog_bytes behind (from the
// reader thread). Ownership: the RPC callback holds the call (shared_ptr) until the engine's final
// frame; the stream's cancel hook holds it weakly. The rpc::Client is never owned here (a weak_ptr
// for aborts from other threads; inside a callback the reader thread keeps the client alive).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "episodes/model_context.h"
#include "episodes/registry.h"
#include "http/message.h"
#include "http/stream.h"
#include "openai/call_metrics.h"
#include "openai/openai_choice.h"
#include "openai/openai_format.h"
#include "openai/openai_params.h"
#include "openai/openai_responses.h"
#include "rpc/client.h"
#include "tracking/episode_tracker.h"

namespace ajet::openai {

// The last LLM call, for POST /replay_latest_llm_call (request and response bodies as sent).
class LatestCall {
 public:
  void set(std::string input, std::string output);
  // {"input": <request>, "output": <response>}; nullopt before the first call.
  std::optional<Json> get() const;

 private:
  mutable std::mutex mu_;
  bool has_ = false;
  std::string input_;
  std::string output_;
};

struct CallSetup {
  enum class Kind { kChat, kCompletion, kMessages, kResponses } kind = Kind::kChat;
  std::shared_ptr<const episodes::ModelContext> model;
  std::shared_ptr<tracking::EpisodeTracker> tracker;
  std::vector<episodes::LlmCallTicket>
      tickets;  // one per choice (consecutive call indices: begin_llm_calls)
  std::shared_ptr<episodes::CallInFlight>
      in_flight;                        // ends the tickets' calls when the call object goes
  std::shared_ptr<void> replica_lease;  // the engine replica's count of this call, while it lives
  std::string agent_name;
  text::ChatRequest request;        // kChat: the parsed messages and tools
  tracking::RenderedPrompt prompt;  // ids, message spans, generation prompt start
  OpenAiParams params;
  rpc::GenerateRequest generate;  // prompt and stop ids included
  std::shared_ptr<http::CancelSignal>
      client_cancel;                      // the HTTP request's: fired when its client hangs up
  size_t stream_backlog_bytes = 8 << 20;  // a streamed answer's queue; beyond, it is cancelled
  std::string request_body;               // as received (POST /replay_latest_llm_call shows it)
  // What the episode stores, once, on the first choice's row: the request as received for chat and
  // completions, the converted chat body for Messages and Responses ("" : request_body).
  std::string stored_request_body;
  ResponseMeta meta;
  bool parse_tools = false;
  // Whether a cut by the generation limit is reported as one (chat "length", Messages "max_tokens",
  // Responses "incomplete"): only when the limit is the client's own, i.e. its max_tokens as sent,
  // or for chat and completions without max_tokens, the server's default (as vLLM does). A cut
  // by the per-turn cap below the client's max_tokens, or a Responses call without
  // max_output_tokens, ends as a normal turn ("stop", "end_turn", "completed"): CLI agents read the
  // other answer as their own limit and ask to continue (docs/protocol.md "The per-turn cap"). The
  // stored call keeps "length" either way.
  bool length_is_clients = true;
  ResponsesTools responses_tools;  // kResponses: the namespaces to name in function calls
  std::string generation_prompt_tail;
  double started_at = 0;  // unix seconds
  std::chrono::steady_clock::time_point started;
};

struct CallServices {
  episodes::Registry& registry;
  LatestCall& latest;
  CallMetrics* metrics = nullptr;  // GET /metrics totals; null: not counted
};

class LlmCall : public std::enable_shared_from_this<LlmCall> {
 public:
  LlmCall(CallSetup setup, CallServices services, http::Respond respond);

  // Sends the engine request; any failure to send answers the client at once (503 + Retry-After).
  // A streamed Messages or Responses call opens its stream first (message_start / response.created,
  // and an empty text block, at once).
  void start(const std::shared_ptr<rpc::Client>& client);
  // A streamed Messages call that sent nothing for `idle` sends an empty text_delta, so that idle
  // watchdogs (Claude Code's) do not abort a long prefill or a queued request. Any thread.
  void heartbeat(std::chrono::steady_clock::duration idle);
  bool done();  // answered or failed (the heartbeat thread drops it then)

 private:
  void on_frame(rpc::Frame&& frame);
  void on_tokens(const rpc::TokensEvent& event);
  void on_done();
  void on_error(ErrorCode code, const std::string& message);
  void push(std::string chunk);  // onto the stream, noting the time (mu_ held)
  void cancel();                 // the HTTP client went away (I/O thread, or the reader thread)
  void abort_engine_request();   // from a callback: stop strings made the rest useless
  // The helpers below need mu_ held.
  std::optional<http::Response> open_stream();  // first event: the SSE response + role chunks
  void emit_delta(size_t index, bool final);
  void push_delta(size_t index, const ChoiceDelta& delta, Json finish_reason);
  void close_choice(size_t index);
  Json logprobs_for(size_t index, size_t begin, size_t end);
  const text::ParsedOutput& final_of(size_t index);
  // The finish the client reads (see CallSetup::limit_is_clients).
  std::string answered_finish(size_t index, bool has_tool_calls) const;
  Json response_json() const;  // the whole answer as a non-streamed body (finals_ filled)
  // A non-streamed error in this endpoint's shape (Anthropic's for Messages; 503: Retry-After 2).
  http::Response error_answer(int status, const std::string& text, std::string_view code) const;
  int64_t completion_tokens() const;
  // After the answer went out: the registry (store) and the tracker get every choice.
  void record(const std::string& response_body);

  CallSetup setup_;
  CallServices services_;
  http::Respond respond_;
  std::shared_ptr<http::ChannelStream> stream_;
  std::weak_ptr<rpc::Client> client_weak_;
  rpc::Client* client_raw_ = nullptr;  // valid inside reply callbacks only
  std::atomic<uint64_t> request_id_{0};
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> abort_wanted_{false};

  std::mutex mu_;  // the fields below (callbacks are serial, but start() and callbacks may overlap)
  std::vector<ChoiceState> choices_;
  std::vector<bool> closed_;
  std::vector<std::optional<text::ParsedOutput>> finals_;
  std::vector<size_t>
      text_offset_;  // completions: bytes of text sent per choice (logprobs offsets)
  bool streaming_ = false;
  bool finished_ = false;
  bool engine_aborted_ = false;  // a choice ended with `abort` that we did not ask for
  int64_t prompt_tokens_ = 0;
  rpc::TokensEvent prompt_scores_;  // prompt_top_k >= 0 once the engine sent prompt_logprobs
  int64_t policy_version_ = -1;
  std::chrono::steady_clock::time_point last_push_{};
  std::optional<ResponsesEvents>
      responses_;  // kResponses: the stream's item ids and sequence numbers
};

// Calls heartbeat() on each registered call every `period` from a thread of its own, until the call
// is done or gone. Owned by the OpenAI routes.
class Heartbeats {
 public:
  explicit Heartbeats(std::chrono::milliseconds period);
  ~Heartbeats();  // stops and joins
  Heartbeats(const Heartbeats&) = delete;
  Heartbeats& operator=(const Heartbeats&) = delete;
  void add(std::weak_ptr<LlmCall> call);

 private:
  void run();
  std::chrono::milliseconds period_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::weak_ptr<LlmCall>> calls_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace ajet::openai
