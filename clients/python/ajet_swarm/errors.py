"""Exceptions of the swarm client. Every message names the server, the endpoint and what went wrong."""

from __future__ import annotations

from typing import Any, Dict, Optional


class SwarmError(RuntimeError):
    """Base class of every error this package raises. A RuntimeError, as the errors of upstream
    AgentJet's SwarmClient are, so `except RuntimeError` in an upstream script catches them."""


class SwarmConnectionError(SwarmError):
    """The server could not be reached, or the connection broke (the engine status is then
    `ENGINE.CANNOT_CONNECT`)."""


class SwarmCommandError(SwarmError):
    """The server refused a command (HTTP 4xx/5xx or `success: false`)."""

    def __init__(self, message: str, status: Optional[int] = None, server_message: str = ""):
        super().__init__(message)
        self.status = status
        self.server_message = server_message


class SwarmServerOfflineError(SwarmError):
    """The engine went to `ENGINE.OFFLINE` while the client waited for another status (it was
    stopped, or it failed to boot: the message carries the server's status detail). Upstream's
    class of the same name."""


class SwarmTimeoutError(SwarmError, TimeoutError):
    """A wait (for an episode, for an engine status) passed its `max_wait`."""


class ChatError(SwarmError):
    """An OpenAI-compatible call failed; carries the OpenAI error fields."""

    def __init__(self, message: str, status: int = 0, type: str = "", code: Optional[str] = None):
        super().__init__(message)
        self.status = status
        self.type = type
        self.code = code


class EpisodeGroupError(SwarmError):
    """An episode group (MultiEpisode, one episode on each of several servers) could not end as one.
    `committed` says where the group stands: False — aborted on every member, nothing is trained;
    True — committed (the coordinator's commit is the group's decision) but a participant refused
    its commit; None — the coordinator's answer was lost and it could not be asked again: the servers
    settle the group among themselves (docs/protocol.md, "Episode groups across servers").
    `errors` maps each member's name to what went wrong there."""

    def __init__(self, message: str, group_id: str = "", committed: Optional[bool] = False,
                 errors: Optional[Dict[str, BaseException]] = None):
        super().__init__(message)
        self.group_id = group_id
        self.committed = committed
        self.errors = dict(errors or {})


class WeightUpdatedHalfway(EpisodeGroupError):
    """A server of the group trained (its `global_step` moved) between the claim and the end, so the
    rollout mixes policy versions; every member was aborted and the rollout should be redone
    (upstream AgentJet's examples raise an exception of this name). `changed` maps each such member's
    name to `{"server_url", "global_step_at_claim", "global_step"}` (None where the server did not
    say: it refused the end because it was syncing weights)."""

    def __init__(self, message: str, group_id: str = "", changed: Optional[Dict[str, Dict[str, Any]]] = None,
                 errors: Optional[Dict[str, BaseException]] = None):
        super().__init__(message, group_id, False, errors)
        self.changed = dict(changed or {})
