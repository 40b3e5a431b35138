"""The client-side throttle of cocktail training (upstream `_check_throttle_policy`, reference 2.8).

Several clients with different task sets share one batch. Before claiming a train episode for
`current_task_id`, a client looks at the server's pool and holds back a *new* task while it already
has `expected_batch_size * ratio` distinct tasks of its own in the batch, so one fast client cannot
fill the batch with its tasks alone. A task that is already in the batch (its next repeat) is never
held back: GRPO groups must fill up.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Dict, Optional, Set, Tuple

from .types import ThrottlePolicy

TASK_BASED_METHOD = "rollout_until_finish_enough_tasks"


@dataclass
class ThrottleDecision:
    throttle: bool
    reason: str = ""


def resolved_sizes(policy: ThrottlePolicy, pool: Dict[str, Any]) -> Tuple[int, int]:
    """(expected_batch_size, expected_num_repeat), filling unset ones from the pool info."""
    batch = policy.expected_batch_size
    repeat = policy.expected_num_repeat
    if batch is None:
        batch = int(pool.get("completed_task_target") or 0)
    if repeat is None:
        repeat = int(pool.get("task_expected_num_repeat") or 0)
    if batch <= 0 or repeat <= 0:
        raise ValueError("throttle policy: expected_batch_size and expected_num_repeat must be positive "
                         f"(got {batch} and {repeat}; the server's pool info did not supply them)")
    return batch, repeat


def check_throttle(policy: ThrottlePolicy, pool: Dict[str, Any], client_uuid: str,
                   recently_seen: "RecentTasks") -> ThrottleDecision:
    """Decides whether to hold back a claim for `policy.current_task_id` given the pool info."""
    task = policy.current_task_id
    if not task:
        raise ValueError("throttle policy: current_task_id must be set")
    method = pool.get("sample_collection_method")
    if method and method != TASK_BASED_METHOD:
        raise ValueError(f"throttle policy needs ajet.swarm_mode_sample_collection_method = {TASK_BASED_METHOD} "
                         f"(the server uses {method})")
    batch, repeat = resolved_sizes(policy, pool)

    mine: Set[str] = set()  # tasks with an episode of this client (completed or running)
    alien: Set[str] = set()  # tasks with an episode of another client
    counts: Dict[str, int] = {}
    for task_id, clients in (pool.get("completed_tasks_client_uuids") or {}).items():
        for c in clients or []:
            counts[task_id] = counts.get(task_id, 0) + 1
            (mine if c == client_uuid else alien).add(task_id)
    running = pool.get("running_episode_details") or {}
    for detail in running.values():
        task_id = (detail or {}).get("optional_task_id") or ""
        if not task_id:
            continue
        counts[task_id] = counts.get(task_id, 0) + 1
        (mine if (detail or {}).get("client_uuid") == client_uuid else alien).add(task_id)

    if not running:
        finished = sum(1 for n in counts.values() if n >= repeat)
        if finished < batch:
            return ThrottleDecision(False)
    if task in recently_seen or task in mine or task in alien:
        return ThrottleDecision(False)
    own_unique = len(mine - alien)
    limit = batch * policy.ratio
    if own_unique >= limit:
        return ThrottleDecision(True, f"this client already has {own_unique} distinct tasks in the batch "
                                      f"(limit {limit:g} = expected_batch_size {batch} x ratio {policy.ratio:g}); "
                                      f"holding back task {task!r}")
    return ThrottleDecision(False)


class RecentTasks:
    """The task ids this client started recently (upstream keeps batch x repeat x 3 of them)."""

    def __init__(self) -> None:
        self._ids: "OrderedDict[str, None]" = OrderedDict()

    def __contains__(self, task_id: object) -> bool:
        return task_id in self._ids

    def remember(self, task_id: str, batch: int, repeat: int) -> None:
        self._ids[task_id] = None
        self._ids.move_to_end(task_id)
        cap = max(1, batch * repeat * 3)
        while len(self._ids) > cap:
            self._ids.popitem(last=False)


def decide_and_remember(policy: ThrottlePolicy, pool: Dict[str, Any], client_uuid: str,
                        recent: RecentTasks) -> Optional[str]:
    """None when the claim may go ahead (the task is then remembered), else the reason to wait."""
    decision = check_throttle(policy, pool, client_uuid, recent)
    if decision.throttle:
        return decision.reason
    batch, repeat = resolved_sizes(policy, pool)
    recent.remember(policy.current_task_id, batch, repeat)
    return None
