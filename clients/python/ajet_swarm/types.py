"""Plain data types of the swarm protocol (docs/protocol.md; upstream AgentJet field names)."""

from __future__ import annotations

import hashlib
import json
import math
import random
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Iterator, Optional, Union


@dataclass
class Task:
    """A task of the user's dataset (upstream `ajet.schema.task.Task`; every upstream keyword:
    `main_query`, `init_messages`, `task_id`, `env_type`, `metadata`). `task_id` defines the GRPO
    group of its episodes. Left out (None), it is derived from the content, "task-" + 16 hex digits
    of a SHA-1 over main_query, init_messages and env_type, so repeats of the same question form one
    group; with no content at all it stays "" (and end_episode refuses it, as upstream does)."""

    task_id: Optional[str] = None
    main_query: str = ""
    init_messages: list = field(default_factory=list)
    metadata: Dict[str, Any] = field(default_factory=dict)
    env_type: str = ""

    def __post_init__(self) -> None:
        if self.task_id is None:
            if self.main_query or self.init_messages:
                blob = json.dumps([self.main_query, self.init_messages, self.env_type], sort_keys=True,
                                  ensure_ascii=False, default=str)
                self.task_id = "task-" + hashlib.sha1(blob.encode("utf-8")).hexdigest()[:16]
            else:
                self.task_id = ""

    def model_dump(self) -> Dict[str, Any]:
        """Upstream's pydantic spelling of `dataclasses.asdict`."""
        return asdict(self)


@dataclass
class WorkflowOutput:
    """What an episode produced (upstream `ajet.schema.task.WorkflowOutput`): its reward (required
    by end_episode: a finite number) and optional success flag, metadata and metrics."""

    reward: Optional[float] = None
    is_success: Optional[bool] = None
    metadata: Dict[str, Any] = field(default_factory=dict)
    log_metrics: Dict[str, float] = field(default_factory=dict)

    def to_json(self, task_id: str) -> Dict[str, Any]:
        if self.reward is None:
            raise ValueError("WorkflowOutput.reward is required (a number)")
        if isinstance(self.reward, (list, tuple)):
            raise ValueError("WorkflowOutput.reward must be one number: step rewards (a list) are not supported "
                             "(as in upstream AgentJet)")
        reward = float(self.reward)
        if not math.isfinite(reward):  # json.dumps would send NaN, which no JSON parser takes
            raise ValueError(f"WorkflowOutput.reward must be a finite number, got {reward}")
        metadata = dict(self.metadata)
        metadata["task_id"] = task_id
        out: Dict[str, Any] = {"reward": reward, "metadata": metadata}
        if self.is_success is not None:
            out["is_success"] = bool(self.is_success)
        if self.log_metrics:
            out["log_metrics"] = dict(self.log_metrics)
        return out

    def model_dump(self) -> Dict[str, Any]:
        return asdict(self)

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

    current_task_id: str = ""
    ratio: float = 1.5
    expected_batch_size: Optional[int] = None
    expected_num_repeat: Optional[int] = None

    def to_json(self) -> Dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    def model_dump(self) -> Dict[str, Any]:
        return asdict(self)

    @staticmethod
    def coerce(value: Any) -> "ThrottlePolicy":
        """A ThrottlePolicy from itself, a dict with its fields, or any object with those attributes
        (upstream's pydantic SwarmThrottlePolicy)."""
        if isinstance(value, ThrottlePolicy):
            return value
        names = ("current_task_id", "ratio", "expected_batch_size", "expected_num_repeat")
        if isinstance(value, dict):
            fields = {k: value[k] for k in names if value.get(k) is not None}
        elif hasattr(value, "current_task_id"):
            fields = {k: getattr(value, k) for k in names if getattr(value, k, None) is not None}
        else:
            raise TypeError(f"throttle_policy: expected a SwarmThrottlePolicy, got {type(value).__name__}")
        return ThrottlePolicy(**fields)


class SwarmThrottlePolicy(ThrottlePolicy):
    """Upstream's name (`ajet.tuner_lib.experimental.interchange_utils.SwarmThrottlePolicy`): the same
    fields and defaults (`ratio=1.5`, `expected_batch_size`, `expected_num_repeat`,
    `current_task_id`); pass them as keywords, as upstream's pydantic model requires."""


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
    # A routine wait (a weight sync, a full pool) is a WARNING where INFO is not shown only after this long.
    stall_warning: float = 30.0
    jitter: float = 0.1

    def delay(self, seconds: float) -> float:
        if seconds <= 0 or self.jitter <= 0:
            return max(0.0, seconds)
        return seconds * random.uniform(1.0 - self.jitter, 1.0 + self.jitter)


@dataclass
class OpenaiBaseUrlAndApiKey:
    """Where an agent sends its OpenAI-compatible calls for one episode (upstream
    `ajet.tuner_lib.as_oai_baseurl_apikey.OpenaiBaseUrlAndApiKey`): `base_url` (ends in /v1),
    `api_key` (the episode key), `model` (a placeholder the server ignores) and `episode_uuid`."""

    base_url: str = ""
    api_key: str = ""
    model: str = "reserved_field"
    episode_uuid: str = ""

    def chat_client(self, **kwargs: Any) -> "ChatClient":  # noqa: F821 (defined in chat.py)
        """The standard-library chat helper (ajet_swarm.ChatClient) for this episode."""
        from .chat import ChatClient

        return ChatClient(self.base_url, self.api_key, model=kwargs.pop("model", self.model), **kwargs)

    def as_raw_openai_sdk_client(self, *args: Any, **kwargs: Any) -> Any:
        """An `openai.AsyncOpenAI` client for this episode, as upstream returns (needs the `openai`
        package). For a synchronous `openai.OpenAI` use as_openai_sdk_client()."""
        openai = _optional_import("openai", "as_raw_openai_sdk_client", "pip install openai")
        return openai.AsyncOpenAI(api_key=self.api_key, base_url=self.base_url, **kwargs)

    def as_openai_sdk_client(self, **kwargs: Any) -> Any:
        """A synchronous `openai.OpenAI` client for this episode (needs the `openai` package)."""
        openai = _optional_import("openai", "as_openai_sdk_client", "pip install openai")
        return openai.OpenAI(api_key=self.api_key, base_url=self.base_url, **kwargs)

    def as_agentscope_model(self, *args: Any, **kwargs: Any) -> Any:
        """An AgentScope chat model that calls this episode: `agentscope.model.OpenAIChatModel`
        (this server speaks OpenAI's protocol; upstream builds a DashScopeChatModel). Needs the
        `agentscope` package; keyword arguments go to the model (e.g. `stream=False`)."""
        _optional_import("agentscope", "as_agentscope_model", "pip install agentscope")
        try:
            from agentscope.model import OpenAIChatModel  # type: ignore
        except ImportError as e:
            raise ImportError("as_agentscope_model needs agentscope >= 1.0 (agentscope.model.OpenAIChatModel): "
                              f"{e}") from e
        client_args = dict(kwargs.pop("client_args", None) or {})
        client_args.setdefault("base_url", self.base_url)
        return OpenAIChatModel(kwargs.pop("model_name", "AgentJet-Model"), api_key=self.api_key,
                               client_args=client_args, **kwargs)


def _optional_import(module: str, what: str, hint: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"{what}() needs the '{module}' package, which is not installed ({hint}); "
                          f"ajet_swarm itself uses the standard library only: {e}") from e


@dataclass
class Episode(OpenaiBaseUrlAndApiKey):
    """A claimed episode (what begin_episode returns): an OpenaiBaseUrlAndApiKey that also knows its
    client, its type and the `global_step` it was claimed under. Unpacks like upstream's
    `(episode_uuid, api_baseurl_key)` tuple:
    `episode_uuid, api_baseurl_key = client.begin_episode()`."""

    client_uuid: str = ""
    episode_type: str = "train"
    global_step: Optional[int] = None  # the server's step at claim (ext; None from a server without it)

    def __iter__(self) -> Iterator[Any]:
        yield self.episode_uuid
        yield self
