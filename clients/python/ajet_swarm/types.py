"""Plain data types of the swarm protocol (docs/protocol.md; upstream AgentJet field names)."""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Iterator, Optional, Union


@dataclass
class Task:
    """A task of the user's dataset. `task_id` defines the GRPO group of its episodes."""

    task_id: str
    main_query: str = ""
    init_messages: list = field(default_factory=list)
    metadata: Dict[str, Any] = field(default_factory=dict)


@dataclass
class WorkflowOutput:
    """What an episode produced: its reward (required) and optional success flag and metrics."""

    reward: float
    is_success: Optional[bool] = None
    metadata: Dict[str, Any] = field(default_factory=dict)
    log_metrics: Dict[str, float] = field(default_factory=dict)

    def to_json(self, task_id: str) -> Dict[str, Any]:
        if self.reward is None:
            raise ValueError("WorkflowOutput.reward is required (a number)")
        metadata = dict(self.metadata)
        metadata["task_id"] = task_id
        out: Dict[str, Any] = {"reward": float(self.reward), "metadata": metadata}
        if self.is_success is not None:
            out["is_success"] = bool(self.is_success)
        if self.log_metrics:
            out["log_metrics"] = dict(self.log_metrics)
        return out

    @staticmethod
    def coerce(value: Union["WorkflowOutput", Dict[str, Any], float, int]) -> "WorkflowOutput":
        """Accepts a WorkflowOutput, a dict with its fields, or a bare reward."""
        if isinstance(value, WorkflowOutput):
            return value
        if isinstance(value, bool):
            raise TypeError("workflow_output: a bool is not a reward; pass WorkflowOutput(reward=..., is_success=...)")
        if isinstance(value, (int, float)):
            return WorkflowOutput(reward=float(value))
        if isinstance(value, dict):
            if "reward" not in value:
                raise ValueError("workflow_output dict needs a 'reward'")
            return WorkflowOutput(
                reward=value["reward"],
                is_success=value.get("is_success"),
                metadata=dict(value.get("metadata") or {}),
                log_metrics=dict(value.get("log_metrics") or {}),
            )
        # Duck typing for upstream's pydantic WorkflowOutput.
        if hasattr(value, "reward"):
            return WorkflowOutput(
                reward=getattr(value, "reward"),
                is_success=getattr(value, "is_success", None),
                metadata=dict(getattr(value, "metadata", None) or {}),
                log_metrics=dict(getattr(value, "log_metrics", None) or {}),
            )
        raise TypeError(f"workflow_output: expected WorkflowOutput, dict or number, got {type(value).__name__}")


def task_id_of(task: Any) -> str:
    """The task id of a Task, a dict with `task_id`, an object with `.task_id`, or a string."""
    if isinstance(task, str):
        tid = task
    elif isinstance(task, dict):
        tid = task.get("task_id", "")
    else:
        tid = getattr(task, "task_id", "")
    if not isinstance(tid, str) or not tid:
        raise ValueError(f"task.task_id must be a non-empty string (got {tid!r})")
    return tid


@dataclass
class ThrottlePolicy:
    """Cocktail training: keeps this client's share of distinct tasks in a batch near
    `expected_batch_size * ratio` (upstream SwarmThrottlePolicy). Sizes left as None are taken from
    the server's pool info (`completed_task_target`, `task_expected_num_repeat`)."""

    current_task_id: str
    ratio: float = 1.5
    expected_batch_size: Optional[int] = None
    expected_num_repeat: Optional[int] = None

    def to_json(self) -> Dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass
class RetryPolicy:
    """How long the client waits between attempts (seconds). Upstream waits 15 s when the engine is
    busy or an error occurred and 2 s when the pool is empty or a throttle applies; this server
    answers fast and says what to wait for, so the defaults are shorter. A ±`jitter` fraction spreads
    many clients' retries apart."""

    status_poll: float = 1.0  # while waiting for an engine status (upstream 1 s poll, 5 s wait loop)
    engine_busy: float = 3.0  # a claim refused for an unexpected reason, or an HTTP error (upstream 15 s)
    empty_pool: float = 0.5  # "No available episodes to claim." (upstream 2 s)
    throttle: float = 2.0  # the throttle policy says wait (upstream 2 s)
    agree_sync_weight: float = 2.0  # agree_sync_weight refused (upstream 2 s)
    end_episode_attempts: int = 5  # end_episode is retried on connection errors (it is idempotent)
    cannot_connect_retry: float = 4.0  # auto_sync_train_config_and_start_engine, once (upstream 16 s)
    wait_report: float = 5.0  # a wait that goes on says why at least this often (never silently)
    jitter: float = 0.1

    def delay(self, seconds: float) -> float:
        if seconds <= 0 or self.jitter <= 0:
            return max(0.0, seconds)
        return seconds * random.uniform(1.0 - self.jitter, 1.0 + self.jitter)


@dataclass
class Episode:
    """A claimed episode: give `base_url` and `api_key` to any OpenAI client. Unpacks like upstream's
    `(episode_uuid, api_baseurl_key)` tuple: `episode_uuid, api = client.begin_episode()`."""

    episode_uuid: str
    base_url: str
    api_key: str
    client_uuid: str = ""
    episode_type: str = "train"
    model: str = "agentjet"

    def __iter__(self) -> Iterator[Any]:
        yield self.episode_uuid
        yield self

    def chat_client(self, **kwargs: Any) -> "ChatClient":  # noqa: F821 (defined in chat.py)
        from .chat import ChatClient

        return ChatClient(self.base_url, self.api_key, model=kwargs.pop("model", self.model), **kwargs)

    def as_raw_openai_sdk_client(self) -> Any:
        """An `openai.OpenAI` client for this episode (needs the `openai` package)."""
        import openai  # optional dependency

        return openai.OpenAI(base_url=self.base_url, api_key=self.api_key)
