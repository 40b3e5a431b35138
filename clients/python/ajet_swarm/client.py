"""SwarmClient: the command API of an AgentJet swarm server (docs/protocol.md), with upstream AgentJet's
method names and its self-healing behaviour (reference 2.10): claims wait and retry while the engine
is not rolling or the pool is empty, episodes that outlived their time are aborted instead of
ended, a batch-boundary race (`WEIGHT_SYNCING`) is logged and dropped, and an unreachable server
reads as `ENGINE.CANNOT_CONNECT`.

Thread-safe: any number of threads may claim, chat and end episodes through one client.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
import time
import uuid
from typing import Any, Callable, Dict, Optional, TextIO, Tuple

from . import code_sync, config_yaml
from ._http import Response, Transport
from .errors import (SwarmCommandError, SwarmConnectionError, SwarmError, SwarmServerOfflineError,
                     SwarmTimeoutError)
from .stat import format_rollout_stat
from .throttle import RecentTasks, decide_and_remember
from .types import Episode, RetryPolicy, ThrottlePolicy, WorkflowOutput, task_id_of

logger = logging.getLogger("ajet_swarm")

OFFLINE = "ENGINE.OFFLINE"
BOOTING = "ENGINE.BOOTING"
ROLLING = "ENGINE.ROLLING"
ROLLING_POST = "ENGINE.ROLLING_POST"
WEIGHT_SYNCING = "ENGINE.WEIGHT_SYNCING"
WEIGHT_EXPORTING = "ENGINE.WEIGHT_EXPORTING"
CANNOT_CONNECT = "ENGINE.CANNOT_CONNECT"

GENERAL_TIMEOUT = 30.0  # seconds per socket wait (upstream)
ENGINE_COMMAND_TIMEOUT = 600.0  # start_engine / stop_engine (upstream)
MAX_EPISODE_TIME_FACTOR = 8  # an episode older than 8 x discard_episode_timeout is aborted, not ended
_RECORD_GRACE = 10.0  # seconds an expired record is kept (upstream CLEAN_RECORD_TIMEOUT)


class SwarmClient:
    def __init__(self, server_url: str, *, admin_token: Optional[str] = None, client_uuid: Optional[str] = None,
                 timeout: float = GENERAL_TIMEOUT, retry: Optional[RetryPolicy] = None, verbose: bool = True):
        """`server_url` is the address this machine dials ("http://10.0.0.5:10086"); episode base URLs
        are rewritten to it (NAT-safe). `admin_token` (default $AJET_ADMIN_TOKEN) is sent with the
        commands that change the server."""
        self.server_url = server_url.rstrip("/")
        if "://" not in self.server_url:
            self.server_url = "http://" + self.server_url
        self.admin_token = admin_token if admin_token is not None else os.environ.get("AJET_ADMIN_TOKEN") or None
        self.client_uuid = client_uuid or str(uuid.uuid4())
        self.retry = retry or RetryPolicy()
        self.verbose = verbose
        self._http = Transport(self.server_url, timeout=timeout)
        self._lock = threading.Lock()  # guards the dicts below
        self._claim_lock = threading.Lock()  # serialises claims under a throttle policy (upstream)
        self._expire_at: Dict[str, float] = {}  # episode_uuid -> when the client gives up on it
        self._recent_tasks = RecentTasks()
        self._last_log: Dict[str, float] = {}
        self._last_wait_report: Dict[str, Tuple[str, float]] = {}  # what -> (reason, when) last reported
        self._last_connect_error = ""

    # ------------------------------------------------------------------ episodes

    def begin_episode(self, discard_episode_timeout: float = 240, episode_type: str = "train",
                      throttle_policy: Optional[ThrottlePolicy] = None, max_wait: Optional[float] = None,
                      on_wait: Optional[Callable[[str], None]] = None) -> Episode:
        """Claims an episode, waiting while the engine is not ROLLING or the pool is empty (forever,
        or up to `max_wait` seconds: SwarmTimeoutError). Raises SwarmServerOfflineError when the
        engine goes OFFLINE during the wait after having been seen in another status.

        `discard_episode_timeout`: the server reclaims the episode after this many idle seconds.
        `episode_type`: "train" (trained on) or "eval" (recorded for metrics only).
        `on_wait(reason)` is called before each wait (progress reporting). Whatever `verbose` says, a
        wait is never silent: its reason is logged when it changes and every `retry.wait_report` s."""
        if episode_type not in ("train", "eval"):
            raise ValueError(f"episode_type must be 'train' or 'eval', got {episode_type!r}")
        if discard_episode_timeout <= 0:
            raise ValueError("discard_episode_timeout must be positive (seconds)")
        deadline = None if max_wait is None else time.monotonic() + max_wait
        seen_not_offline = False
        delay = 0.0
        while True:
            if delay > 0:
                self._sleep_until(delay, deadline, "an episode to claim")
            try:
                if throttle_policy is not None and episode_type == "train":
                    with self._claim_lock:
                        reason = decide_and_remember(throttle_policy, self.get_rollout_stat(), self.client_uuid,
                                                     self._recent_tasks)
                        if reason is not None:
                            self._log(f"throttle: {reason}")
                            delay = self.retry.throttle
                            continue
                        claimed = self._claim(discard_episode_timeout, episode_type, throttle_policy)
                else:
                    claimed = self._claim(discard_episode_timeout, episode_type, None)
            except SwarmConnectionError as e:
                self._report_wait("claim", f"waiting for the swarm server: {e}", logging.WARNING)
                delay = self.retry.engine_busy
                continue
            if isinstance(claimed, Episode):
                if self.verbose:
                    self._log(f"claimed episode {claimed.episode_uuid}")
                return claimed
            fail_cause = claimed
            if on_wait is not None:
                on_wait(fail_cause)
            status = _status_in(fail_cause)
            if status is not None:
                # "Engine not ready. Current status: [ENGINE.X]. ...": poll until the engine rolls.
                if status == OFFLINE and seen_not_offline:
                    raise SwarmServerOfflineError(
                        f"the engine at {self.server_url} went to ENGINE.OFFLINE while this client waited to claim "
                        "an episode (stop_engine was called, or the engine failed)")
                seen_not_offline = seen_not_offline or status != OFFLINE
                hint = " (no engine started yet: start it with `python3 -m ajet_swarm start --conf FILE`)" \
                    if status == OFFLINE else ""
                self._report_wait("claim", f"waiting for the engine: status {status}, an episode can be claimed "
                                           f"in ENGINE.ROLLING{hint}")
                delay = self.retry.status_poll
            elif fail_cause.startswith("No available episodes"):
                seen_not_offline = True
                self._report_wait("claim", f"waiting for a free episode: {fail_cause}")
                delay = self.retry.empty_pool
            else:
                self._report_wait("claim", f"claim_episode failed: {fail_cause}; retrying", logging.WARNING)
                delay = self.retry.engine_busy

    def _claim(self, discard_episode_timeout: float, episode_type: str,
               throttle_policy: Optional[ThrottlePolicy]):
        """One POST /claim_episode: an Episode, or the fail_cause string."""
        body: Dict[str, Any] = {"client_uuid": self.client_uuid, "episode_type": episode_type,
                                "discard_episode_timeout": float(discard_episode_timeout)}
        if throttle_policy is not None:
            body["throttle_policy"] = throttle_policy.to_json()
        resp = self._http.post_json("/claim_episode", body)
        data = self._json_or_raise(resp, "claim_episode")
        if not data.get("success"):
            return str(data.get("fail_cause") or "claim_episode failed without a fail_cause")
        episode_uuid = data["episode_uuid"]
        with self._lock:
            now = time.monotonic()
            self._expire_at[episode_uuid] = now + MAX_EPISODE_TIME_FACTOR * discard_episode_timeout
            for old in [u for u, t in self._expire_at.items() if t < now - _RECORD_GRACE]:
                del self._expire_at[old]
        return Episode(episode_uuid=episode_uuid, base_url=self.rewrite_base_url(data["openai_base_url"]),
                       api_key=data["openai_api_key"], client_uuid=self.client_uuid, episode_type=episode_type)

    def rewrite_base_url(self, base_url: str) -> str:
        """Replaces scheme://host:port of the server's base_url with the address this client dialled."""
        return re.sub(r"^https?://[^/]+", lambda _: self.server_url, base_url)

    def end_episode(self, task: Any, episode_uuid: str, workflow_output: Any) -> bool:
        """Reports the episode's result. `task` is a Task, a dict with task_id, or the task id itself
        (it defines the GRPO group); `workflow_output` a WorkflowOutput, a dict or a bare reward.
        True when the server stored it. False when it was dropped: the episode outlived
        8 x discard_episode_timeout (it is aborted instead) or the engine had already moved on to
        WEIGHT_SYNCING (an expected race at batch boundaries; logged). Other refusals raise
        SwarmCommandError naming the server's reason."""
        if not episode_uuid:
            raise ValueError("end_episode: episode_uuid is empty")
        task_id = task_id_of(task)
        output = WorkflowOutput.coerce(workflow_output)
        with self._lock:
            expire = self._expire_at.pop(episode_uuid, None)
        if expire is not None and time.monotonic() > expire:
            logger.warning("episode %s outlived %d x discard_episode_timeout; aborting it instead of ending it "
                           "(claim with a larger discard_episode_timeout)", episode_uuid, MAX_EPISODE_TIME_FACTOR)
            self.abort_episode(episode_uuid)
            return False
        body = {"client_uuid": self.client_uuid, "episode_uuid": episode_uuid, "task_id": task_id,
                "workflow_output": output.to_json(task_id)}
        resp = self._post_with_retries("/end_episode", body, self.retry.end_episode_attempts)
        if resp.status == 200:
            data = resp.json() or {}
            if data.get("success", True):
                if self.verbose:
                    self._log(f"ended episode {episode_uuid} (task {task_id}, reward {output.reward:g})")
                return True
        message = resp.error_message()
        if "WEIGHT_SYNCING" in message or "WEIGHT_EXPORTING" in message:
            logger.warning("end_episode %s: the engine already moved on to a weight update; the episode is dropped "
                           "(expected at batch boundaries): %s", episode_uuid, message)
            return False
        raise SwarmCommandError(f"end_episode {episode_uuid} refused by {self.server_url} ({resp.status}): {message}",
                                resp.status, message)

    def abort_episode(self, episode_uuid: str) -> bool:
        """Discards the episode's calls and returns its slot to the pool. Never raises for server or
        network errors (they are logged); True when the server confirmed."""
        if not episode_uuid:
            return False
        with self._lock:
            self._expire_at.pop(episode_uuid, None)
        body = {"client_uuid": self.client_uuid, "episode_uuid": episode_uuid, "task_id": "",
                "workflow_output": {"reward": 0.0, "metadata": {"task_id": ""}}}
        try:
            resp = self._post_with_retries("/abort_episode", body, 2)
        except SwarmConnectionError as e:
            logger.error("abort_episode %s: %s", episode_uuid, e)
            return False
        if resp.status == 200:
            if self.verbose:
                self._log(f"aborted episode {episode_uuid}")
            return True
        logger.error("abort_episode %s refused (%d): %s", episode_uuid, resp.status, resp.error_message())
        return False

    def can_continue_episode(self, episode_uuid: str) -> bool:
        """True while the episode is claimed by this client and the engine serves chat calls."""
        if not episode_uuid:
            return False
        try:
            resp = self._http.post_json("/can_continue_episode",
                                        {"client_uuid": self.client_uuid, "episode_uuid": episode_uuid}, timeout=10)
        except SwarmConnectionError as e:
            logger.error("can_continue_episode: %s", e)
            return False
        data = resp.json() if resp.status == 200 else None
        return bool(isinstance(data, dict) and data.get("can_continue"))

    def get_episode_buffer(self) -> list:
        """Every live episode's status object (registered and claimed)."""
        return self._json_or_raise(self._http.post_json("/get_episode_buffer", {}), "get_episode_buffer").get(
            "buffer", [])

    # ------------------------------------------------------------------ engine

    def get_engine_status(self) -> Tuple[str, Dict[str, Any]]:
        """(status, body) with body {"engine_status", "engine_status_detail", "global_step"};
        ("ENGINE.CANNOT_CONNECT", {}) when the server cannot be reached."""
        try:
            resp = self._http.request("GET", "/get_engine_status", timeout=10)
        except SwarmConnectionError as e:
            self._last_connect_error = str(e)
            self._log(f"get_engine_status: {e}", logging.WARNING)
            return CANNOT_CONNECT, {}
        data = resp.json()
        if resp.status != 200 or not isinstance(data, dict):
            self._log(f"get_engine_status: HTTP {resp.status}: {resp.text()[:200]}", logging.WARNING)
            return CANNOT_CONNECT, {}
        return str(data.get("engine_status", "unknown")), data

    def sync_train_config(self, config: Any) -> Dict[str, Any]:
        """Sends the train config (YAML text, a .yaml path, or a dict) to the server. Only in
        ENGINE.OFFLINE; the server validates it and names a bad key (SwarmCommandError)."""
        text = config_yaml.config_text(config)
        data = self._json_or_raise(self._post_admin("/sync_train_config", {"yaml_as_string": text}),
                                   "sync_train_config")
        for w in data.get("warnings") or []:
            logger.warning("sync_train_config: %s", w)
        self._log("synced the train config")
        return data

    def sync_train_code_from_dir(self, directory: str) -> Dict[str, Any]:
        """Zips the version-controlled files of a source tree (work-tree contents, like `git archive`
        of what is on disk) and uploads them; the next start_engine builds and runs that tree."""
        archive = code_sync.zip_tree(directory)
        headers = {"Content-Type": "application/zip", **self._admin_headers()}
        resp = self._http.request("POST", "/sync_train_code", archive, headers, timeout=ENGINE_COMMAND_TIMEOUT)
        data = self._json_or_raise(resp, "sync_train_code")
        self._log(f"synced train code ({len(archive)} bytes): {data.get('message', '')}")
        return data

    def start_engine(self, wait: bool = True, max_wait: Optional[float] = None) -> Dict[str, Any]:
        """Starts the engine (only in ENGINE.OFFLINE with a synced config) and, with `wait`, blocks
        until ENGINE.ROLLING. A failed boot raises SwarmServerOfflineError with the server's detail."""
        data = self._json_or_raise(self._post_admin("/start_engine", {}, ENGINE_COMMAND_TIMEOUT), "start_engine")
        self._log(f"start_engine accepted (pid {data.get('pid', '?')})")
        if wait:
            self.wait_for_status(ROLLING, max_wait=max_wait, started=True)
        return data

    def stop_engine(self, wait: bool = True, max_wait: Optional[float] = None) -> None:
        """Stops the engine (from any status) and, with `wait`, blocks until ENGINE.OFFLINE."""
        status, _ = self.get_engine_status()
        if status == OFFLINE:
            self._log("engine already OFFLINE")
            return
        self._json_or_raise(self._post_admin("/stop_engine", {}, ENGINE_COMMAND_TIMEOUT), "stop_engine")
        if wait:
            self.wait_for_status(OFFLINE, max_wait=max_wait)

    def auto_sync_train_config_and_start_engine(self, config: Any, force_restart: bool = False,
                                                max_wait: Optional[float] = None) -> str:
        """Idempotent start: OFFLINE → sync the config and start, waiting for ROLLING; ROLLING or
        ROLLING_POST → nothing (a running engine keeps its config: use force_restart); BOOTING,
        WEIGHT_SYNCING, WEIGHT_EXPORTING → wait for ROLLING; unreachable → one retry after
        `retry.cannot_connect_retry` s, then SwarmConnectionError. Returns the status found first."""
        if force_restart:
            logger.warning("force_restart: stopping the engine at %s", self.server_url)
            self.stop_engine(wait=True, max_wait=max_wait)
        status, _ = self.get_engine_status()
        if status == CANNOT_CONNECT:
            time.sleep(self.retry.cannot_connect_retry)
            status, _ = self.get_engine_status()
            if status == CANNOT_CONNECT:
                raise SwarmConnectionError(f"cannot reach the swarm server at {self.server_url}: "
                                           f"{self._last_connect_error}")
        if status == OFFLINE:
            self._log("engine OFFLINE: syncing the train config and starting it")
            self.sync_train_config(config)
            self.start_engine(wait=True, max_wait=max_wait)
        elif status in (ROLLING, ROLLING_POST):
            self._log(f"engine already {status}: nothing to do")
        elif status in (BOOTING, WEIGHT_SYNCING, WEIGHT_EXPORTING):
            self._log(f"engine {status}: waiting for ENGINE.ROLLING")
            self.wait_for_status(ROLLING, max_wait=max_wait, started=True)
        else:
            raise SwarmError(f"cannot sync the train config or start the engine in status {status}")
        self._log(f"monitor: ajet-swarm overwatch --swarm-url {self.server_url}")
        return status

    def wait_for_status(self, desired: str, max_wait: Optional[float] = None, started: bool = False) -> Dict[str, Any]:
        """Polls until the engine status is `desired`. Raises SwarmServerOfflineError when waiting for
        another status and the engine is (or falls back to) OFFLINE after having been started
        (`started`) or seen in another status; SwarmTimeoutError after `max_wait` seconds."""
        deadline = None if max_wait is None else time.monotonic() + max_wait
        seen_not_offline = started
        while True:
            status, info = self.get_engine_status()
            if status == desired:
                return info
            if status not in (OFFLINE, CANNOT_CONNECT):
                seen_not_offline = True
            elif status == OFFLINE and seen_not_offline and desired != OFFLINE:
                raise SwarmServerOfflineError(
                    f"the engine at {self.server_url} went to ENGINE.OFFLINE while waiting for {desired}: "
                    f"{info.get('engine_status_detail') or 'no detail (stopped, or failed to boot: see the server log)'}")
            detail = info.get("engine_status_detail") if info else self._last_connect_error
            self._report_wait("status", f"waiting for the engine: status {status}, want {desired}"
                                        + (f" ({detail})" if detail else ""))
            self._sleep_until(self.retry.status_poll, deadline, desired)

    def wait_for_server(self, max_wait: Optional[float] = 60.0) -> None:
        """Polls until the server answers (a server started a moment ago may not listen yet), saying
        why every `retry.wait_report` s; SwarmConnectionError after `max_wait` seconds (None: forever)."""
        deadline = None if max_wait is None else time.monotonic() + max_wait
        while True:
            try:
                self._http.request("GET", "/get_engine_status", timeout=10)
                return
            except SwarmConnectionError as e:
                self._last_connect_error = str(e)
                if deadline is not None and time.monotonic() >= deadline:
                    raise SwarmConnectionError(f"the swarm server at {self.server_url} did not answer within "
                                               f"{max_wait:g} s: {e}") from e
                self._report_wait("server", f"waiting for the swarm server at {self.server_url}: {e}")
            self._sleep_until(self.retry.status_poll, None, "the swarm server")

    # ------------------------------------------------------------------ pool, weights, logs

    def get_rollout_stat(self) -> Dict[str, Any]:
        """The current batch's rollout pool information (upstream field names; {} when unreachable)."""
        try:
            resp = self._http.request("GET", "/get_current_batch_rollout_pool_information", timeout=10)
        except SwarmConnectionError as e:
            self._log(f"get_rollout_stat: {e}", logging.WARNING)
            return {}
        data = resp.json()
        return data if resp.status == 200 and isinstance(data, dict) else {}

    def print_rollout_stat(self, file: Optional[TextIO] = None) -> None:
        (file or sys.stdout).write(format_rollout_stat(self.get_rollout_stat(), self.server_url))

    def agree_sync_weight(self, retry: bool = True, max_wait: Optional[float] = None) -> bool:
        """Tells the server this client is ready for a weight update (agree-based batch triggers).
        The server refuses until this client finished a rewarded episode since the last update; with
        `retry` the call repeats every `retry.agree_sync_weight` s until accepted (or `max_wait`)."""
        deadline = None if max_wait is None else time.monotonic() + max_wait
        while True:
            try:
                resp = self._http.post_json("/agree_sync_weight", {"client_uuid": self.client_uuid})
                data = self._json_or_raise(resp, "agree_sync_weight")
                if data.get("success"):
                    self._log("agreed to sync weights")
                    return True
                reason = data.get("failure_reason", "")
            except SwarmConnectionError as e:
                reason = str(e)
            if not retry:
                self._log(f"agree_sync_weight refused: {reason}")
                return False
            self._log(f"agree_sync_weight refused ({reason}); retrying")
            self._sleep_until(self.retry.agree_sync_weight, deadline, "agree_sync_weight")

    def get_verbose_logs(self) -> list:
        return self._json_or_raise(self._http.request("GET", "/get_verbose_logs"), "get_verbose_logs").get(
            "entries", [])

    def replay_latest_llm_call(self) -> Dict[str, Any]:
        return self._json_or_raise(self._post_admin("/replay_latest_llm_call", {}), "replay_latest_llm_call")

    def health(self) -> bool:
        try:
            return self._http.request("GET", "/health", timeout=10).status == 200
        except SwarmConnectionError:
            return False

    def close(self) -> None:
        self._http.close()

    # ------------------------------------------------------------------ helpers

    def _admin_headers(self) -> Dict[str, str]:
        return {"Authorization": f"Bearer {self.admin_token}"} if self.admin_token else {}

    def _post_admin(self, path: str, body: Any, timeout: Optional[float] = None) -> Response:
        return self._http.post_json(path, body, self._admin_headers(), timeout)

    def _post_with_retries(self, path: str, body: Any, attempts: int) -> Response:
        """POSTs an idempotent command, retrying connection failures and 5xx answers."""
        last: Optional[Exception] = None
        for attempt in range(max(1, attempts)):
            if attempt:
                time.sleep(self.retry.delay(min(self.retry.engine_busy, 0.5 * 2 ** attempt)))
            try:
                resp = self._http.post_json(path, body)
            except SwarmConnectionError as e:
                last = e
                self._log(f"{path}: {e}; retrying", logging.WARNING)
                continue
            if resp.status >= 500 and attempt + 1 < attempts:
                last = SwarmCommandError(f"{path}: HTTP {resp.status}: {resp.error_message()}", resp.status)
                continue
            return resp
        assert last is not None
        raise last

    def _json_or_raise(self, resp: Response, what: str) -> Dict[str, Any]:
        data = resp.json()
        if resp.status != 200 or not isinstance(data, dict):
            message = resp.error_message()
            raise SwarmCommandError(f"{what} refused by {self.server_url} ({resp.status}): {message}",
                                    resp.status, message)
        if data.get("success") is False and "fail_cause" not in data and "failure_reason" not in data:
            message = str(data.get("error") or data.get("message") or data)
            raise SwarmCommandError(f"{what} failed on {self.server_url}: {message}", resp.status, message)
        return data

    def _sleep_until(self, seconds: float, deadline: Optional[float], what: str) -> None:
        seconds = self.retry.delay(seconds)
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise SwarmTimeoutError(f"gave up waiting for {what} at {self.server_url} (max_wait passed)")
            seconds = min(seconds, left)
        time.sleep(seconds)

    def _report_wait(self, what: str, reason: str, level: int = logging.INFO) -> None:
        """Says why a wait (`what`: "claim", "status", ...) goes on: when the reason changes and then every
        `retry.wait_report` s. Not silenced by `verbose`, and raised to WARNING when the logger would
        drop INFO (an agent that never configured logging still sees why it waits)."""
        now = time.monotonic()
        with self._lock:
            last = self._last_wait_report.get(what)
            if last is not None and last[0] == reason and now - last[1] < self.retry.wait_report:
                return
            self._last_wait_report[what] = (reason, now)
        if not logger.isEnabledFor(level):
            level = logging.WARNING
        logger.log(level, "%s", reason)

    def _log(self, message: str, level: int = logging.INFO) -> None:
        """Logs, dropping a repeat of the same line within one second (upstream logger_info)."""
        if level <= logging.INFO and not self.verbose:
            return
        now = time.monotonic()
        with self._lock:
            if now - self._last_log.get(message, -10.0) < 1.0:
                return
            self._last_log[message] = now
            if len(self._last_log) > 256:
                self._last_log = {k: t for k, t in self._last_log.items() if now - t < 1.0}
        logger.log(level, "%s", message)



def _status_in(fail_cause: str) -> Optional[str]:
    """The ENGINE.* status named in brackets in a claim's fail_cause, if any."""
    m = re.search(r"\[(ENGINE\.[A-Z_]+)\]", fail_cause)
    return m.group(1) if m else None
