// What the classic launcher posts to its front (POST /log_metrics) besides what the front records
// itself from each batch: the launcher's own per-step numbers and every validation, as metric names
// (docs/operations.md "Metrics" lists them). A cocktail's per-task numbers are `<name>@<task>`.
// Pure functions: the launcher sends the result.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "classic/markdown_tables.h"
#include "common/json.h"

namespace ajet::classic {

// From a metrics.jsonl train record: rollout/llm_calls, rollout/completion_tokens, rollout/failed,
// rollout/termination/<kind>, workflow/<log_metrics name>, timing/{rollout_s, train_wait_s,
// launcher_step_s}, perf/rollout_tokens_per_s, progress/epoch, sampling/{gen_batches, groups,
// informative_groups}, and per cocktail task rollout/{share, tasks_per_batch, tasks, episodes,
// reward_mean, success_rate}@<task>. `with_success_rate`: also rollout/success_rate (success:
// is_success, else reward >= 1) — for steps where no episode reported is_success, so the front
// wrote none.
Json train_step_metrics(const Json& record, bool with_success_rate);

// From a metrics.jsonl validation record and its pass tables ("all" first, then each cocktail
// task): val/{greedy_success, greedy_reward, sampled_success, tasks, pass_at_<val_pass_n>} from the
// record, and val/{pass_at_1, _2, _4, _8, all_success_tasks, pass_n_tasks, reward_mean, reward_std}
// from each table; a cocktail task's names end in @<task>.
Json validation_metrics(const Json& record,
                        const std::vector<std::pair<std::string, PassTable>>& tables);

// `text` as a piece of a metric name: characters outside [A-Za-z0-9_.:-] become '_' (at most 64).
std::string metric_piece(const std::string& text);

}  // namespace ajet::classic
