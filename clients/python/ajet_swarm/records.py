"""Dicts with attribute access, for the server's answers and for configs.

Upstream AgentJet returns pydantic objects (`stat.completed_tasks`, `es.episode_uuid`); this package
returns dict subclasses, so both `stat.completed_tasks` and `stat["completed_tasks"]` work, they
compare equal to plain dicts and serialise with `json.dumps`. Nested dicts (and dicts inside lists)
are wrapped too, so `job.config.ajet.rollout.num_repeat = 8` works on a config tree.
"""

from __future__ import annotations

import copy
from typing import Any, Dict


def wrap(value: Any) -> Any:
    """`value` with every dict (also inside lists and tuples) turned into an AttrDict."""
    if isinstance(value, AttrDict):
        return value
    if isinstance(value, dict):
        return AttrDict(value)
    if isinstance(value, list):
        return [wrap(v) for v in value]
    if isinstance(value, tuple):
        return [wrap(v) for v in value]
    return value


def unwrap(value: Any) -> Any:
    """A deep copy of `value` made of plain dicts and lists."""
    if isinstance(value, dict):
        return {k: unwrap(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [unwrap(v) for v in value]
    return copy.deepcopy(value)


class AttrDict(dict):
    """A dict whose keys are also attributes. Missing keys raise AttributeError (KeyError with [])."""

    _DEFAULTS: Dict[str, Any] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        for k, v in dict(*args, **kwargs).items():
            self[k] = v

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return self[name]
        except KeyError:
            pass
        if name in self._DEFAULTS:
            return wrap(copy.deepcopy(self._DEFAULTS[name]))
        raise AttributeError(f"{type(self).__name__} has no field {name!r} (fields: {', '.join(sorted(self))})")

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_"):
            object.__setattr__(self, name, value)
        else:
            self[name] = value

    def __delattr__(self, name: str) -> None:
        try:
            del self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, wrap(value))

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def update(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        for k, v in dict(*args, **kwargs).items():
            self[k] = v

    def __dir__(self):  # attribute completion in a REPL
        return list(super().__dir__()) + [k for k in self if isinstance(k, str)]

    def __deepcopy__(self, memo: Dict[int, Any]) -> "AttrDict":
        return type(self)({k: copy.deepcopy(v, memo) for k, v in self.items()})

    def __copy__(self) -> "AttrDict":
        return type(self)(self)

    def to_dict(self) -> Dict[str, Any]:
        """A deep copy made of plain dicts and lists (what gets written as YAML or JSON)."""
        return unwrap(self)

    def model_dump(self) -> Dict[str, Any]:
        """Upstream's pydantic spelling: every known field (defaults filled in) as plain data."""
        out = unwrap(self._DEFAULTS)
        out.update(unwrap(self))
        return out


class RolloutStat(AttrDict):
    """`get_current_batch_rollout_pool_information` (upstream CurrentBatchRolloutPoolInformation).
    A field the answer lacks reads as upstream's default (0, {}, None), so an empty RolloutStat (the
    server was unreachable) behaves like upstream's default object, and still equals {}."""

    _DEFAULTS: Dict[str, Any] = {
        "sample_collection_method": "",
        "completed_episodes": 0,
        "completed_episode_target": 0,
        "completed_tasks": 0,
        "completed_task_target": 0,
        "completed_non_dummy_tasks": 0,
        "completed_non_dummy_task_target": 0,
        "task_expected_num_repeat": 0,
        "completed_tasks_details": {},
        "completed_tasks_rewards": {},
        "completed_tasks_client_uuids": {},
        "running_episode_details": None,
        "engine_status": "",
        "global_step": 0,
        "booting_start_time": None,
        "training_model_path": "",
        "swarm_client_instruction": {"active_clients": []},
        # extensions of this server (docs/protocol.md)
        "completed_tasks_reward_stats": {},
        "backbone": "",
        "pool_size": 0,
        "registered_episodes": 0,
        "claimed_episodes": 0,
        "batch_ready": False,
        "batches_in_training": 0,
        "batches_recorded": 0,
        "active_clients": [],
        "eval_episodes": {},
    }


class EpisodeStatus(AttrDict):
    """One item of `get_episode_buffer` (upstream EpisodeStatus)."""

    _DEFAULTS: Dict[str, Any] = {
        "episode_uuid": "",
        "episode_status": "",
        "episode_type": "train",
        "openai_base_url": "",
        "openai_api_key": "",
        "client_uuid": "",
        "zmq_listen_result_addr": "",
        "latest_activity_timestamp": 0.0,
        "discard_episode_timeout": -1.0,
        "llm_call_count": 0,
        "debug_log": [],
        "optional_task_id": "",
    }
