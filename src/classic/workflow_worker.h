// Worker mode of a command workflow (ajet.rollout.user_workflow_mode: worker): a pool of long-lived
// processes of the command, each serving one episode at a time, so an agent pays its start-up (a
// Node or Python interpreter, its imports) once per worker instead of once per episode.
//
// Protocol (docs/classic.md): the worker starts under /bin/sh -c in the config's directory with
// AJET_WORKFLOW_MODE=worker; per episode, ajet writes one JSON line to its stdin,
//   {"base_url", "api_key", "model", "task", "episode_type", "sampling", "env_seed"}
// and the worker answers with one JSON line on stdout: the result, as a per-episode command's last
// line (a number, or {"reward", "is_success", "metadata", "log_metrics", "answer", "messages"}).
// Lines on stdout that are not JSON are copied to the stderr log. End of file on stdin: exit.
//
// A worker that exits, or answers nothing within user_workflow_timeout, fails its episode exactly
// as a broken per-episode command does (reward 0, the reason in the metadata) and is started again
// for the next episode. Workers are terminated when the workflow is destroyed. run() is called from
// many threads; each call holds one worker for the episode, waiting for a free one.
#pragma once

#include <memory>
#include <string>

#include "classic/workflow.h"

namespace ajet::classic {

std::unique_ptr<Workflow> make_worker_workflow(CommandWorkflowOptions options);

// The request line of one episode, without the newline.
std::string worker_request(const EpisodeContext& context);

}  // namespace ajet::classic
