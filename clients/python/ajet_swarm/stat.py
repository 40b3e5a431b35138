"""A condensed, plain-text view of the rollout pool (upstream print_rollout_stat); the full live
view is `ajet-swarm overwatch`."""

from __future__ import annotations

from typing import Any, Dict, List

_METHOD_ROWS = [
    ("rollout_until_finish_enough_episodes", "Completed episodes", "completed_episodes", "completed_episode_target"),
    ("rollout_until_finish_enough_tasks", "Completed tasks", "completed_tasks", "completed_task_target"),
    ("rollout_until_finish_enough_non_dummy_tasks", "Completed non-dummy tasks", "completed_non_dummy_tasks",
     "completed_non_dummy_task_target"),
]


def format_rollout_stat(info: Dict[str, Any], server_url: str = "") -> str:
    if not info:
        return f"Swarm rollout pool: no information (server {server_url or '?'} unreachable?)\n"
    method = info.get("sample_collection_method", "")
    lines: List[str] = [
        f"Swarm rollout pool  [{info.get('engine_status', '?')}, global step {info.get('global_step', '?')}]"]
    for key, label, cur, target in _METHOD_ROWS:
        mark = "  (chosen)" if key == method else ""
        lines.append(f"  {label + ':':<28}{info.get(cur, 0)} / {info.get(target, 0)}{mark}")
    details: Dict[str, list] = info.get("completed_tasks_details") or {}
    per_task = [len(v) for v in details.values()]
    avg = sum(per_task) / len(per_task) if per_task else 0.0
    lines.append(f"  {'Average episodes per task:':<28}{avg:.2f} / {info.get('task_expected_num_repeat', 0)}")
    lines.append(f"  {'Running episodes:':<28}{len(info.get('running_episode_details') or {})}")
    if method.endswith("agree_sync_weight"):
        clients = info.get("active_clients") or []
        agreed = sum(1 for c in clients if c.get("agreed_sync_weight"))
        lines.append(f"  {'Clients agreeing to sync:':<28}{agreed} / {len(clients)}  (chosen)")
    if details:
        tasks = "  ".join(f"{t} ({len(v)})" for t, v in sorted(details.items(), key=lambda kv: -len(kv[1]))[:20])
        lines.append(f"  Tasks (episodes): {tasks}")
    if server_url:
        lines.append(f"  Details: ajet-swarm overwatch --swarm-url {server_url}")
    return "\n".join(lines) + "\n"
