"""Exceptions of the swarm client. Every message names the server, the endpoint and what went wrong."""

from __future__ import annotations

from typing import Optional


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
