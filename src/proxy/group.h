// One application request's life in the proxy: N episodes of the training front answer it, a
// judge scores the N answers, one answer goes back to the application and the N episodes end with
// the judge's rewards as one GRPO group (or are all aborted, never half a group). Blocking: it runs
// on a worker thread of its own (the N upstream calls on N more), never on an HTTP I/O thread.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "client/swarm_client.h"
#include "http/message.h"
#include "proxy/api.h"
#include "proxy/judge.h"
#include "proxy/stats.h"

namespace ajet::proxy {

// Which of the N answers goes back: the judge's best (the application waits for all N and the
// judge), or the first that completes (the judge runs after the application has its answer).
enum class ReturnPolicy { kBest, kFirst };

struct GroupOptions {
  int n = 4;  // answers (episodes) per request: the GRPO group size
  ReturnPolicy policy = ReturnPolicy::kBest;
  double discard_episode_timeout = 900;  // seconds the front keeps an idle claimed episode
  std::chrono::milliseconds claim_timeout{600'000};     // waiting for N episodes (a train step)
  std::chrono::milliseconds upstream_timeout{600'000};  // one answer, 503 retries included
  // A streamed request still waiting after this long gets its event stream (status 200) at once
  // and an SSE comment line every period until its answer follows in it; an error after that is
  // the stream's last event in the API's shape. 0: no heartbeat (the stream starts with the
  // answer).
  std::chrono::milliseconds stream_heartbeat{10'000};
};

// What a group shares with every other: the front's client, the judge, the statistics. Claims of
// one group happen under claim_mu, so groups never hold part of their N while waiting for the rest.
struct GroupDeps {
  client::SwarmClient* front = nullptr;
  Judge* judge = nullptr;
  ProxyStats* stats = nullptr;
  std::mutex claim_mu;
};

// Runs the group of `request` (its body forwarded byte for byte as `raw_body`) to its end and
// calls `respond` exactly once, as soon as the answer to return is known:
//   1. claim N train episodes (task id: the application's, else a fresh "proxy-<uuid>");
//   2. send the request to each episode's base URL at once, keeping each answer's bytes;
//   3. first policy: the first well-formed answer goes back now;
//   4. all N well-formed: the judge scores them (a failure drops the group);
//   5. best policy: the answer with the highest reward goes back (ties: the one ready first);
//   6. the N episodes end with their rewards, or, when anything failed, are all aborted.
// The application always gets an answer when at least one episode answered well-formed, whatever
// the judge did; otherwise the front's own error (or a 502/503 in the API's shape). A streamed
// request that waits past options.stream_heartbeat gets that answer (or error) in a stream opened
// earlier, after SSE comment lines.
void run_group(const AppRequest& request, const std::string& raw_body, const GroupOptions& options,
               GroupDeps& deps, http::Respond respond);

}  // namespace ajet::proxy
