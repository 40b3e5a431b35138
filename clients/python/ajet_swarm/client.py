"""SwarmClient: the command API of an AgentJet swarm server (docs/protocol.md), with upstream AgentJet's
method names, signatures and self-healing behaviour (reference 2.10): claims wait and retry while
the engine is not rolling or the pool is empty, episodes that outlived their time are aborted
instead of ended, a batch-boundary race (`WEIGHT_SYNCING`) is logged and dropped, and an
unreachable server reads as `ENGINE.CANNOT_CONNECT`. An upstream swarm script runs after changing
only its imports (docs/clients.md, "Switching from upstream").

Thread-safe: any number of threads may claim, chat and end episodes through one client.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
import time
import urllib.parse
import uuid
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, TextIO, Tuple, Union

from . import autostart, code_sync, config_yaml
from ._http import Response, Transport
from .errors import (SwarmCommandError, SwarmConnectionError, SwarmError, SwarmServerOfflineError,
                     SwarmTimeoutError)
from .records import EpisodeStatus, RolloutStat
from .stat import format_rollout_stat
from .throttle import TASK_BASED_METHOD, RecentTasks, decide_and_remember
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
# The server's refusal of an end or commit while an earlier one of the same episode is being written.
IN_PROGRESS = "already in progress"
AGREE_METHODS = ("rollout_until_any_client_agree_sync_weight", "rollout_until_all_clients_agree_sync_weight")
_SYNC_STATUSES = (WEIGHT_SYNCING, WEIGHT_EXPORTING)
# The statuses every step passes through (a batch closing, the weights syncing): waiting on them is
# routine, not worth a warning unless it stalls (_report_wait).
ROUTINE_STATUSES = (ROLLING, ROLLING_POST, WEIGHT_SYNCING, WEIGHT_EXPORTING)


_ABORT_CAUSE = re.compile(r"[a-z0-9_]{1,48}")


def _normalized_url(url: str) -> str:
    url = url.rstrip("/")
    return url if "://" in url else "http://" + url


def admin_token_for(server_url: str) -> Optional[str]:
    """The admin token for the server at `server_url`: its entry in $AJET_ADMIN_TOKENS ("URL=TOKEN"
    pairs separated by commas or whitespace, for servers with tokens of their own), else
    $AJET_ADMIN_TOKEN, else None. A malformed entry raises ValueError naming it (never a token)."""
    url, found = _normalized_url(server_url), None
    for index, entry in enumerate(re.split(r"[,\s]+", os.environ.get("AJET_ADMIN_TOKENS", "").strip()), start=1):
        if not entry:
            continue
        which = f"AJET_ADMIN_TOKENS: entry {index}"
        if not entry.startswith(("http://", "https://")):
            raise ValueError(f"{which} does not start with http:// or https:// (expected URL=TOKEN)")
        target, eq, token = entry.partition("=")
        if not eq or not token:
            raise ValueError(f"{which} ({target}) has no =TOKEN")
        if found is None and _normalized_url(target) == url:
            found = token
    return found if found is not None else os.environ.get("AJET_ADMIN_TOKEN") or None


class SwarmClient:
    def __init__(self, server_url: str, verbose: bool = True, agentjet_job: Any = None,
                 auto_start_swarm_server: bool = False, *, admin_token: Optional[str] = None,
                 client_uuid: Optional[str] = None, timeout: float = GENERAL_TIMEOUT,
                 retry: Optional[RetryPolicy] = None, swarm_server_args: Optional[Sequence[str]] = None,
                 swarm_server_timeout: float = 60.0):
        """`server_url` is the address this machine dials ("http://10.0.0.5:10086"); episode base URLs
        are rewritten to it (NAT-safe). The first four parameters are upstream's:

        * `verbose`: log each claim / end / abort (waits are reported either way);
        * `agentjet_job`: the AgentJetJob the engine runs (also remembered by sync_train_config);
          begin_episode with a throttle policy and agree_sync_weight check its
          `swarm_mode_sample_collection_method` and refuse a method they do not work with;
        * `auto_start_swarm_server`: for a loopback URL with a port, start `ajet-swarm start --port
          <port>` unless a server already answers /health there (ajet_swarm/autostart.py: binary
          from $AJET_SWARM_BIN, PATH, or <repo>/build/bin; `swarm_server_args` are appended, and
          `swarm_server_timeout` bounds the wait for its ready line). The process, if one was
          started, is `self.swarm_server_process`.

        Extras of this package (keyword-only): `admin_token` (default: this URL's entry in
        $AJET_ADMIN_TOKENS, else $AJET_ADMIN_TOKEN; see admin_token_for) is sent with
        the commands that change the server; `client_uuid` (default a fresh uuid4); `timeout` per
        socket wait; `retry` (RetryPolicy) the waits between attempts."""
        self.server_url = _normalized_url(server_url)
        self.admin_token = admin_token if admin_token is not None else admin_token_for(self.server_url)
        self._engine_run: Optional[str] = None  # follow_engine_run
        self.client_uuid = client_uuid or str(uuid.uuid4())
        self.retry = retry or RetryPolicy()
        self.verbose = verbose
        self._agentjet_job = agentjet_job
        self._http = Transport(self.server_url, timeout=timeout)
        self._lock = threading.Lock()  # guards the dicts below
        self._claim_lock = threading.Lock()  # serialises claims under a throttle policy (upstream)
        self._expire_at: Dict[str, float] = {}  # episode_uuid -> when the client gives up on it
        # episode_uuid -> its key (the claim's openai_api_key): the episode commands send it, since the
        # server binds end/abort/prepare/commit to the episode (docs/protocol.md "Command API").
        self._keys: Dict[str, str] = {}
        self._recent_tasks = RecentTasks()
        self._last_log: Dict[str, float] = {}
        self._last_wait_report: Dict[str, Tuple[str, float]] = {}  # what -> (reason, when) last reported
        self._wait_since: Dict[str, float] = {}  # what -> when the wait going on began
        self._last_connect_error = ""
        # Batch boundaries as observed (add_entering_weight_sync_callback, agree_sync_weight).
        self._obs_lock = threading.Lock()
        self._obs_status: Optional[str] = None
        self._obs_step: Optional[int] = None
        self._obs_batches: Optional[int] = None
        self._sync_callbacks: List[Callable[[], Any]] = []
        self._watcher: Optional[threading.Thread] = None
        self._watch_stop = threading.Event()
        self.swarm_server_process = None
        if auto_start_swarm_server:
            self.swarm_server_process = autostart.start_local_server(
                self.server_url, self.health, swarm_server_args, swarm_server_timeout, log=self.logger_info)

    @property
    def agentjet_job(self) -> Any:
        """The AgentJetJob given to the constructor or last synced (None if neither)."""
        return self._agentjet_job

    # ------------------------------------------------------------------ episodes

    def begin_episode(self, discard_episode_timeout: float = 240, episode_type: str = "train",
                      throttle_policy: Any = None, max_wait: Optional[float] = None,
                      on_wait: Optional[Callable[[str], None]] = None,
                      adapter: Optional[str] = None) -> Episode:
        """Claims an episode, waiting while the engine is not ROLLING or the pool is empty (forever,
        or up to `max_wait` seconds: SwarmTimeoutError). Raises SwarmServerOfflineError when the
        engine goes OFFLINE during the wait after having been seen in another status.

        `discard_episode_timeout`: the server reclaims the episode after this many idle seconds.
        `episode_type`: "train" (trained on) or "eval" (recorded for metrics only).
        `throttle_policy`: a SwarmThrottlePolicy / ThrottlePolicy (or anything with its fields).
        `adapter`: a LoRA adapter of the server's engine (GET /adapters) that the episode's calls
        use unless their "model" names one; the calls then train that adapter.
        `on_wait(reason)` is called before each wait (progress reporting; an exception it raises
        ends the wait, MultiEpisode's way to cancel a claim). Whatever `verbose` says, a
        wait is never silent: its reason is logged when it changes and every `retry.wait_report` s.

        Returns an Episode: an OpenaiBaseUrlAndApiKey (`base_url`, `api_key`, `model`,
        `episode_uuid`) that unpacks as upstream's `(episode_uuid, api_baseurl_key)`."""
        if throttle_policy is not None:
            throttle_policy = ThrottlePolicy.coerce(throttle_policy)
            if episode_type == "train":  # eval claims are never throttled
                self._check_job_method((TASK_BASED_METHOD,), "a throttle policy")
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
                        stat = self.get_rollout_stat()
                        if not stat:  # unreachable or an HTTP error (logged): wait as for a failed claim
                            raise SwarmConnectionError("the rollout pool information could not be read")
                        reason = decide_and_remember(throttle_policy, stat, self.client_uuid, self._recent_tasks)
                        if reason is not None:
                            self._log(f"throttle: {reason}")
                            delay = self.retry.throttle
                            continue
                        claimed = self._claim(discard_episode_timeout, episode_type, throttle_policy,
                                              adapter)
                else:
                    claimed = self._claim(discard_episode_timeout, episode_type, None, adapter)
            except SwarmConnectionError as e:
                self._report_wait("claim", f"waiting for the swarm server: {e}", logging.WARNING)
                if on_wait is not None:
                    on_wait(f"cannot connect: {e}")
                delay = self.retry.engine_busy
                continue
            except SwarmCommandError as e:
                if e.status < 500:
                    raise  # the request itself is wrong: repeating it cannot help
                # A server error or a proxy's 502/503: transient, as upstream retries it.
                self._report_wait("claim", f"claim_episode failed: {e}; retrying", logging.WARNING)
                if on_wait is not None:
                    on_wait(str(e))
                delay = self.retry.engine_busy
                continue
            if isinstance(claimed, Episode):
                self._wait_over("claim")
                if self.verbose:
                    self._log(f"claimed episode {claimed.episode_uuid}")
                return claimed
            fail_cause = claimed
            if on_wait is not None:
                on_wait(fail_cause)
            status = _status_in(fail_cause)
            if status is not None:
                # "Engine not ready. Current status: [ENGINE.X]. ...": poll until the engine rolls.
                if status == OFFLINE and (seen_not_offline or self._engine_run):
                    # Following an engine (follow_engine_run): it was started, so OFFLINE means it is gone.
                    raise SwarmServerOfflineError(
                        f"the engine at {self.server_url} went to ENGINE.OFFLINE while this client waited to claim "
                        "an episode (stop_engine was called, or the engine failed)")
                seen_not_offline = seen_not_offline or status != OFFLINE
                hint = " (no engine started yet: start it with `python3 -m ajet_swarm start --conf FILE`)" \
                    if status == OFFLINE else ""
                if status == ROLLING:  # ready, but held back (e.g. async max_staleness): the server says why
                    self._report_wait("claim", f"waiting to claim: {fail_cause}", routine=True)
                else:
                    self._report_wait("claim", f"waiting for the engine: status {status}, an episode can be "
                                               f"claimed in ENGINE.ROLLING{hint}", routine=status in ROUTINE_STATUSES)
                delay = self.retry.status_poll
            elif fail_cause.startswith("No available episodes"):
                seen_not_offline = True
                self._report_wait("claim", f"waiting for a free episode: {fail_cause}", routine=True)
                delay = self.retry.empty_pool
            else:
                self._report_wait("claim", f"claim_episode failed: {fail_cause}; retrying", logging.WARNING)
                delay = self.retry.engine_busy

    def _claim(self, discard_episode_timeout: float, episode_type: str,
               throttle_policy: Optional[ThrottlePolicy], adapter: Optional[str] = None):
        """One POST /claim_episode: an Episode, or the fail_cause string."""
        body: Dict[str, Any] = {"client_uuid": self.client_uuid, "episode_type": episode_type,
                                "discard_episode_timeout": float(discard_episode_timeout)}
        if adapter:
            body["adapter"] = adapter
        if throttle_policy is not None:
            body["throttle_policy"] = throttle_policy.to_json()
        if self._engine_run:
            body["engine_run"] = self._engine_run
        resp = self._http.post_json("/claim_episode", body)
        if resp.status == 409:
            raise SwarmServerOfflineError(f"the engine at {self.server_url} is no longer the one this client "
                                          f"follows: {resp.error_message()}")
        data = self._json_or_raise(resp, "claim_episode")
        if not data.get("success"):
            return str(data.get("fail_cause") or "claim_episode failed without a fail_cause")
        episode_uuid = data["episode_uuid"]
        with self._lock:
            now = time.monotonic()
            self._expire_at[episode_uuid] = now + MAX_EPISODE_TIME_FACTOR * discard_episode_timeout
            self._keys[episode_uuid] = str(data.get("openai_api_key") or "")
            for old in [u for u, t in self._expire_at.items() if t < now - _RECORD_GRACE]:
                del self._expire_at[old]  # long reclaimed by the server: its key is no use either
                self._keys.pop(old, None)
        step = data.get("global_step")  # ext: the step the episode starts under
        return Episode(episode_uuid=episode_uuid, base_url=self.rewrite_base_url(data["openai_base_url"]),
                       api_key=data["openai_api_key"], client_uuid=self.client_uuid, episode_type=episode_type,
                       global_step=step if isinstance(step, int) and not isinstance(step, bool) else None)

    def follow_engine_run(self, engine_run: Optional[str]) -> None:
        """Claims from now on name this engine (start_engine's "engine_run"): once another client's
        start_engine has replaced it, begin_episode raises SwarmServerOfflineError instead of claiming
        from the new engine, and so it does when it finds the front OFFLINE (the engine was stopped or
        gave up). None: any engine (the default), and OFFLINE is waited out until some engine starts."""
        self._engine_run = engine_run or None

    def rewrite_base_url(self, base_url: str) -> str:
        """Replaces scheme://host:port of the server's base_url with the address this client dialled."""
        return re.sub(r"^https?://[^/]+", lambda _: self.server_url, base_url)

    def end_episode(self, task: Any, episode_uuid: str, workflow_output: Any, declare_client_active: bool = True, *,
                    episode_key: Optional[str] = None) -> bool:
        """Reports the episode's result. `task` is a Task, a dict with task_id, or the task id itself
        (it defines the GRPO group); `workflow_output` a WorkflowOutput, a dict or a bare reward
        (as upstream, a WorkflowOutput's `metadata["task_id"]` is set to the task id).
        `declare_client_active` (upstream's, default True): a train episode ended this way makes
        this client *active* for the agree-based batch triggers.
        True when the server stored it (upstream returns None). False when it was dropped: the
        episode outlived 8 x discard_episode_timeout (it is aborted instead) or the engine had
        already moved on to WEIGHT_SYNCING (an expected race at batch boundaries; logged). Other
        refusals raise SwarmCommandError (a RuntimeError) naming the server's reason.

        The request carries the episode's key (`episode_key`, default: the one this client's claim got;
        pass it for an episode another SwarmClient object claimed)."""
        if not episode_uuid:
            raise ValueError("end_episode: episode_uuid is empty")
        task_id = task_id_of(task)
        output = WorkflowOutput.coerce(workflow_output)
        metadata = getattr(workflow_output, "metadata", None)
        if isinstance(metadata, dict):
            metadata["task_id"] = task_id
        workflow_json = output.to_json(task_id)  # raises for a bad reward before anything is forgotten
        with self._lock:
            expire = self._expire_at.pop(episode_uuid, None)
        if expire is not None and time.monotonic() > expire:
            logger.warning("episode %s outlived %d x discard_episode_timeout; aborting it instead of ending it "
                           "(claim with a larger discard_episode_timeout)", episode_uuid, MAX_EPISODE_TIME_FACTOR)
            self.abort_episode(episode_uuid, declare_client_active, episode_key=episode_key)
            return False
        body = {"client_uuid": self.client_uuid, "episode_uuid": episode_uuid, "task_id": task_id,
                "workflow_output": workflow_json, "declare_client_active": bool(declare_client_active)}
        resp = self._post_with_retries("/end_episode", body, self.retry.end_episode_attempts,
                                       self._episode_headers(episode_uuid, episode_key))
        if resp.status == 200:
            data = resp.json() or {}
            if data.get("success", True):
                if self.verbose:
                    self._log(f"ended episode {episode_uuid} (task {task_id}, reward {output.reward:g})")
                self._forget_key(episode_uuid)
                return True
        message = resp.error_message()
        if "WEIGHT_SYNCING" in message or "WEIGHT_EXPORTING" in message:
            # The batch closed while this episode ran: part of every weight sync, not a problem.
            logger.info("end_episode %s: the engine already moved on to a weight update; the episode is dropped "
                        "(expected at batch boundaries): %s", episode_uuid, message)
            return False
        raise SwarmCommandError(f"end_episode {episode_uuid} refused by {self.server_url} ({resp.status}): {message}",
                                resp.status, message)

    def abort_episode(self, episode_uuid: str, declare_client_active: bool = True, *,
                      episode_key: Optional[str] = None, cause: Optional[str] = None) -> bool:
        """Discards the episode's calls and returns its slot to the pool. `declare_client_active`
        (upstream's, default True): aborting a train episode still makes this client *active* for
        the agree-based batch triggers. `cause` (ext, [a-z0-9_]{1,48}, e.g. "verifier_timeout"):
        why, counted by cause in the front's /metrics (absent: "unspecified"); a malformed one
        raises ValueError. Never raises for server or network errors (they are logged); True when
        the server confirmed (upstream returns None)."""
        if cause is not None and not _ABORT_CAUSE.fullmatch(cause):
            raise ValueError(f"abort_episode: cause must match [a-z0-9_]{{1,48}}, got {cause!r}")
        if not episode_uuid:
            return False
        with self._lock:
            self._expire_at.pop(episode_uuid, None)
        body = {"client_uuid": self.client_uuid, "episode_uuid": episode_uuid, "task_id": "",
                "workflow_output": {"reward": 0.0, "metadata": {"task_id": ""}},
                "declare_client_active": bool(declare_client_active)}
        if cause is not None:
            body["cause"] = cause
        try:
            resp = self._post_with_retries("/abort_episode", body, 2, self._episode_headers(episode_uuid, episode_key))
        except SwarmConnectionError as e:
            logger.error("abort_episode %s: %s", episode_uuid, e)
            return False
        if resp.status == 200:
            if self.verbose:
                self._log(f"aborted episode {episode_uuid}" + (f" ({cause})" if cause else ""))
            self._forget_key(episode_uuid)
            return True
        logger.error("abort_episode %s refused (%d): %s", episode_uuid, resp.status, resp.error_message())
        return False

    # ------------------------------------------------------------------ episode groups (ext)

    def prepare_end_episode(self, task: Any, episode_uuid: str, workflow_output: Any, group_id: str,
                            coordinator_url: Optional[str] = None, coordinator_episode_uuid: Optional[str] = None,
                            prepare_timeout: float = 60, declare_client_active: bool = True, *,
                            coordinator_episode_key: Optional[str] = None,
                            episode_key: Optional[str] = None) -> Dict[str, Any]:
        """Phase one of ending an episode that belongs to an episode group spanning several servers
        (docs/protocol.md, "Episode groups across servers"; MultiEpisode drives the whole protocol).
        The same arguments as end_episode plus the group: `group_id` (the same on every member), and
        on a participant `coordinator_url` (the coordinator as *that server* reaches it; that server
        must list it with `ajet-swarm start --peer`; None when the coordinator episode is on this same
        server, as for two adapters of one engine), `coordinator_episode_uuid` and
        `coordinator_episode_key` (the coordinator episode's api_key; its server asks the coordinator
        with it). The episode then neither counts nor takes chat calls until commit_episode; the
        server settles it by itself `prepare_timeout` s later.

        Returns the server's answer: `global_step_at_claim`, `global_step`, `weights_changed`,
        `oldest_policy_version`. A refusal raises SwarmCommandError (those of end_episode, a weight
        sync included); connection errors are retried (a repeat answers the same)."""
        if not episode_uuid:
            raise ValueError("prepare_end_episode: episode_uuid is empty")
        if not group_id:
            raise ValueError("prepare_end_episode: group_id is empty")
        task_id = task_id_of(task)
        output = WorkflowOutput.coerce(workflow_output)
        metadata = getattr(workflow_output, "metadata", None)
        if isinstance(metadata, dict):
            metadata["task_id"] = task_id
        group: Dict[str, Any] = {"group_id": group_id, "prepare_timeout": float(prepare_timeout)}
        if coordinator_url:
            group["coordinator_url"] = coordinator_url.rstrip("/")
        if coordinator_url or coordinator_episode_uuid:  # a participant; without a URL, on this same server
            group["coordinator_episode_uuid"] = coordinator_episode_uuid or ""
            group["coordinator_episode_key"] = coordinator_episode_key or self._key_of(coordinator_episode_uuid or "")
        body = {"client_uuid": self.client_uuid, "episode_uuid": episode_uuid, "task_id": task_id,
                "workflow_output": output.to_json(task_id), "declare_client_active": bool(declare_client_active),
                "group": group}
        resp = self._post_with_retries("/prepare_end_episode", body, self.retry.end_episode_attempts,
                                       self._episode_headers(episode_uuid, episode_key))
        data = self._json_or_raise(resp, f"prepare_end_episode {episode_uuid}")
        if self.verbose:
            self._log(f"prepared episode {episode_uuid} (group {group_id}, task {task_id}, reward {output.reward:g})")
        return data

    def commit_episode(self, episode_uuid: str, *, episode_key: Optional[str] = None) -> bool:
        """Phase two: the prepared episode counts from now on, exactly as if end_episode had ended it.
        True when the server stored the commit (also for a repeat). A refusal (not prepared, aborted
        meanwhile, another client's, unknown) raises SwarmCommandError; connection errors are retried
        and, when they persist, raise SwarmConnectionError (the commit may or may not have landed)."""
        if not episode_uuid:
            raise ValueError("commit_episode: episode_uuid is empty")
        body = {"client_uuid": self.client_uuid, "episode_uuid": episode_uuid}
        resp = self._post_with_retries("/commit_episode", body, self.retry.end_episode_attempts,
                                       self._episode_headers(episode_uuid, episode_key))
        self._json_or_raise(resp, f"commit_episode {episode_uuid}")
        with self._lock:
            self._expire_at.pop(episode_uuid, None)
        # Kept: a participant's front may still ask this (coordinator) episode with it, and a lost
        # commit answer is resolved with it; dropped with the claim records once long expired.
        if self.verbose:
            self._log(f"committed episode {episode_uuid}")
        return True

    def resolve_episode_group(self, group_id: str, episode_uuid: str, *, episode_key: Optional[str] = None) -> str:
        """Asks this server, as the group's coordinator, for the decision on `episode_uuid`:
        "committed", or "aborted" (an episode not committed yet is aborted by this very call, so the
        answer is final). What a participant's janitor asks; a client asks it when it lost the answer
        of its coordinator commit. The server's "pending" (the commit is being written to its store
        right now) is asked again, up to `retry.end_episode_attempts` times a second apart, then
        returned as "pending". Refusals raise SwarmCommandError, lasting connection errors
        SwarmConnectionError. Sends the episode's key (`episode_key`, default the one this client's
        claim got): the server aborts with this call, so it is bound to the episode."""
        if not group_id or not episode_uuid:
            raise ValueError("resolve_episode_group: group_id and episode_uuid are required")
        for attempt in range(max(1, self.retry.end_episode_attempts)):
            if attempt > 0:
                time.sleep(self.retry.delay(1.0))
            resp = self._post_with_retries("/resolve_episode_group",
                                           {"group_id": group_id, "episode_uuid": episode_uuid},
                                           self.retry.end_episode_attempts,
                                           self._episode_headers(episode_uuid, episode_key))
            decision = self._json_or_raise(resp, f"resolve_episode_group {group_id}").get("decision")
            if decision != "pending":
                break
        if decision not in ("committed", "aborted", "pending"):
            raise SwarmCommandError(f"resolve_episode_group {group_id} on {self.server_url}: unexpected decision "
                                    f"{decision!r}", resp.status, str(decision))
        return decision

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

    def get_episode_buffer(self) -> List[EpisodeStatus]:
        """Every live episode's status (registered and claimed): EpisodeStatus objects, dicts with
        attribute access (`es.episode_uuid` as upstream, or `es["episode_uuid"]`). Other clients'
        episode and client ids are pseudonyms unless this client has the admin token."""
        items = self._json_or_raise(self._post_admin("/get_episode_buffer", {"client_uuid": self.client_uuid}),
                                    "get_episode_buffer").get("buffer", [])
        return [EpisodeStatus(x) for x in items if isinstance(x, dict)]

    # ------------------------------------------------------------------ engine

    def get_engine_status(self) -> Tuple[str, Dict[str, Any]]:
        """(status, body) with body {"engine_status", "engine_status_detail", "global_step"};
        ("ENGINE.CANNOT_CONNECT", {}) when the server cannot be reached."""
        try:
            resp = self._http.request("GET", "/get_engine_status", timeout=10)
        except SwarmConnectionError as e:
            self._last_connect_error = str(e)
            self._log(f"get_engine_status: {e}", logging.WARNING)
            self._observe(CANNOT_CONNECT, None, None)  # the next answer re-reads the baseline
            return CANNOT_CONNECT, {}
        data = resp.json()
        if resp.status != 200 or not isinstance(data, dict):
            self._log(f"get_engine_status: HTTP {resp.status}: {resp.text()[:200]}", logging.WARNING)
            self._observe(CANNOT_CONNECT, None, None)
            return CANNOT_CONNECT, {}
        status = str(data.get("engine_status", "unknown"))
        self._observe(status, data.get("global_step"), None)
        return status, data

    def get_global_step(self) -> int:
        """The policy version the engine serves (`global_step` of get_engine_status; 0 when unreachable)."""
        _, info = self.get_engine_status()
        try:
            return int(info.get("global_step") or 0)
        except (TypeError, ValueError):
            return 0

    def server_experiment_dir(self) -> Optional[str]:
        """The server's absolute experiment directory (set by start_engine; None before it). As
        upstream, "saved_experiments" when the server cannot be asked (logged)."""
        try:
            resp = self._http.request("GET", "/get_server_experiment_dir", timeout=10)
            data = self._json_or_raise(resp, "get_server_experiment_dir")
        except SwarmError as e:
            logger.warning("server_experiment_dir: %s; answering 'saved_experiments' (upstream's fallback)", e)
            return "saved_experiments"
        return data.get("server_experiment_dir")

    def sync_train_config(self, config: Any) -> Dict[str, Any]:
        """Sends the train config (YAML text, a .yaml path, or a dict) to the server. Only in
        ENGINE.OFFLINE; the server validates it and names a bad key (SwarmCommandError). An
        AgentJetJob (upstream's or ajet_swarm's) sends `job.config.to_dict()` and is remembered
        for the throttle and agree checks, as upstream does."""
        if not isinstance(config, (str, bytes, dict, os.PathLike)):
            self._agentjet_job = config
        text = config_yaml.config_text(config)
        body = {"yaml_as_string": text}
        source = config_yaml.config_source(config)
        if source is not None:  # the server names the file in its warnings, not "sync_train_config yaml_as_string"
            body["source"] = source
        data = self._json_or_raise(self._post_admin("/sync_train_config", body), "sync_train_config")
        warnings = [str(w) for w in data.get("warnings") or []]
        if len(warnings) == 1:
            logger.warning("sync_train_config: %s", warnings[0])
        elif warnings:  # an upstream AgentJetJob tree draws dozens: one record, every line kept
            logger.warning("sync_train_config: %d warnings from the server (unused upstream keys are ignored):\n  %s",
                           len(warnings), "\n  ".join(warnings))
        self._log("synced the train config")
        return data

    def sync_train_code_from_dir(self, directory: str) -> Dict[str, Any]:
        """Zips the version-controlled files of a source tree (work-tree contents, like `git archive`
        of what is on disk) and uploads them; the next start_engine builds and runs that tree."""
        return self._upload_code(code_sync.zip_tree(directory))

    def sync_train_code(self, zip_file_path: str) -> Dict[str, Any]:
        """Uploads a zip archive (upstream's signature): POST /sync_train_code with the file's bytes as
        `application/zip`. This server wants a zip of this project's source tree (a CMakeLists.txt at
        its root or under one top directory); the next start_engine builds and runs it. Only in
        ENGINE.OFFLINE. FileNotFoundError when the file is missing; the server's refusal raises
        SwarmCommandError."""
        if not os.path.isfile(zip_file_path):
            raise FileNotFoundError(f"Training code zip file does not exist: {zip_file_path}")
        with open(zip_file_path, "rb") as f:
            archive = f.read()
        return self._upload_code(archive)

    def _upload_code(self, archive: bytes) -> Dict[str, Any]:
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

    def stop_engine(self, wait: bool = True, max_wait: Optional[float] = None,
                    engine_run: Optional[str] = None) -> None:
        """Stops the engine (from any status) and, with `wait`, blocks until ENGINE.OFFLINE. With
        `engine_run` (start_engine's answer names it) only that engine: when another start_engine
        replaced it since, the server refuses (SwarmCommandError) and leaves the running one alone."""
        status, _ = self.get_engine_status()
        if status == OFFLINE:
            self._log("engine already OFFLINE")
            return
        body = {"engine_run": engine_run} if engine_run else {}
        self._json_or_raise(self._post_admin("/stop_engine", body, ENGINE_COMMAND_TIMEOUT), "stop_engine")
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
        elif getattr(config, "ensure_new_experiment", False):
            logger.warning("ensure_new_experiment is set to True, but force_restart is not set! A running engine "
                           "continues the experiment on the current model version.")
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

    def wait_for_status(self, desired: Union[str, Iterable[str]], max_wait: Optional[float] = None,
                        started: bool = False) -> Dict[str, Any]:
        """Polls until the engine status is `desired` (one status or several). Raises
        SwarmServerOfflineError when waiting for another status and the engine is (or falls back to)
        OFFLINE after having been started (`started`) or seen in another status; SwarmTimeoutError
        after `max_wait` seconds."""
        wanted = [desired] if isinstance(desired, str) else list(desired)
        if not wanted:
            raise ValueError("wait_for_status: no status to wait for")
        desired = wanted[0] if len(wanted) == 1 else " or ".join(wanted)
        deadline = None if max_wait is None else time.monotonic() + max_wait
        seen_not_offline = started
        while True:
            status, info = self.get_engine_status()
            if status in wanted:
                self._wait_over("status")
                return info
            if status not in (OFFLINE, CANNOT_CONNECT):
                seen_not_offline = True
            elif status == OFFLINE and seen_not_offline and OFFLINE not in wanted:
                raise SwarmServerOfflineError(
                    f"the engine at {self.server_url} went to ENGINE.OFFLINE while waiting for {desired}: "
                    f"{info.get('engine_status_detail') or 'no detail (stopped, or failed to boot: see the server log)'}")
            detail = info.get("engine_status_detail") if info else self._last_connect_error
            self._report_wait("status", f"waiting for the engine: status {status}, want {desired}"
                                        + (f" ({detail})" if detail else ""), routine=status in ROUTINE_STATUSES)
            self._sleep_until(self.retry.status_poll, deadline, desired)

    def _wait_until_status_change_to(self, desired_status: Optional[str] = None,
                                     desired_status_list: Optional[Iterable[str]] = None, verbose: bool = True,
                                     max_wait: Optional[float] = None) -> None:
        """Upstream's (private, but called by its cocktail runner) wait: blocks until the engine status
        is `desired_status` or one of `desired_status_list`; SwarmServerOfflineError when the engine
        goes OFFLINE after it was seen in another status and OFFLINE is not wanted."""
        wanted = [desired_status] if desired_status is not None else list(desired_status_list or [])
        if not wanted:
            raise ValueError("Must specify desired_status or non-empty desired_status_list")
        if verbose:
            self.logger_info(f"Polling engine status until {wanted}...")
        self.wait_for_status(wanted, max_wait=max_wait)
        if verbose:
            self.logger_info(f"Engine status is one of {wanted}.")

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

    def get_rollout_stat(self) -> RolloutStat:
        """The current batch's rollout pool information: a RolloutStat, a dict with attribute access
        (`stat.completed_tasks`, as upstream's CurrentBatchRolloutPoolInformation, or
        `stat["completed_tasks"]`); fields the server did not send read as upstream's defaults. An
        empty RolloutStat (== {}) when the server is unreachable (logged), as upstream answers its
        default object."""
        return self._fetch_pool(report=True)

    def _fetch_pool(self, report: bool) -> RolloutStat:
        try:
            # Naming this client shows its own ids (the throttle tells its tasks from others'); the admin
            # token shows every id. Anyone else's are pseudonyms (docs/protocol.md).
            resp = self._http.request("GET", "/get_current_batch_rollout_pool_information?client_uuid="
                                      + urllib.parse.quote(self.client_uuid, safe=""),
                                      headers=self._admin_headers(), timeout=10)
        except SwarmConnectionError as e:
            if report:
                self._log(f"get_rollout_stat: {e}", logging.WARNING)
            self._observe(CANNOT_CONNECT, None, None)  # the next answer re-reads the baseline
            return RolloutStat()
        data = resp.json()
        if resp.status != 200 or not isinstance(data, dict):
            if report:
                self._log(f"get_rollout_stat: HTTP {resp.status}: {resp.error_message()[:200]}", logging.WARNING)
            self._observe(CANNOT_CONNECT, None, None)
            return RolloutStat()
        stat = RolloutStat(data)
        if isinstance(data.get("engine_status"), str):
            self._observe(data["engine_status"], data.get("global_step"), data.get("batches_recorded"))
        return stat

    def print_rollout_stat(self, file: Optional[TextIO] = None) -> None:
        (file or sys.stdout).write(format_rollout_stat(self.get_rollout_stat(), self.server_url))

    def agree_sync_weight(self, retry: bool = True, max_wait: Optional[float] = None, wait: bool = True) -> bool:
        """Tells the server this client is ready for a weight update (the agree-based batch triggers
        rollout_until_any/all_client(s)_agree_sync_weight), then, as upstream, blocks until the batch
        boundary can be seen (`wait=False`: return right after the server accepted).

        The server refuses until this client ended (or aborted) a train episode with
        declare_client_active since the last boundary; with `retry` the call repeats every
        `retry.agree_sync_weight` s until accepted. Before each attempt the engine status is read:
        OFFLINE, BOOTING, WEIGHT_SYNCING or WEIGHT_EXPORTING → False (the agreement would be reset;
        upstream likewise gives up outside ROLLING / ROLLING_POST).

        The boundary counts as seen, comparing each poll (every `retry.status_poll` s) of the pool
        info with the one read just before the agreement was sent, when any of these holds:
        the status is not ENGINE.ROLLING (ROLLING_POST, WEIGHT_SYNCING, WEIGHT_EXPORTING: the torch
        backbone); `global_step` grew (async: a batch was trained); `batches_recorded` grew (debug:
        the batch was recorded); `completed_episodes` dropped (the batch was taken); or the pool
        info lists this client as active but no longer agreeing (the server clears every agreement
        when a batch closes). Each backbone produces at least one of these once the trigger fires,
        so the wait ends; it lasts as long as the trigger waits for other clients.
        Returns True then, False if the engine goes OFFLINE first. `max_wait` (seconds, default
        none) bounds the whole call: SwarmTimeoutError."""
        self._check_job_method(AGREE_METHODS, "agree_sync_weight")
        deadline = None if max_wait is None else time.monotonic() + max_wait
        while True:
            status, _ = self.get_engine_status()
            if status in (OFFLINE, BOOTING, WEIGHT_SYNCING, WEIGHT_EXPORTING):
                # Mid weight sync the boundary this agreement was for is already under way: no problem.
                logger.log(logging.INFO if status in (WEIGHT_SYNCING, WEIGHT_EXPORTING) else logging.WARNING,
                           "agree_sync_weight: the engine is %s, abandoning the agreement (the server resets "
                           "agreements at a batch boundary anyway)", status)
                return False
            baseline = self._fetch_pool(report=False)
            method = baseline.get("sample_collection_method")
            if isinstance(method, str) and method and method not in AGREE_METHODS:
                # The server's batch trigger never waits for agreements: every retry would be refused.
                raise ValueError(f"agree_sync_weight: the server at {self.server_url} runs "
                                 f"swarm_mode_sample_collection_method {method}; agreements apply only to "
                                 f"{' / '.join(AGREE_METHODS)}")
            if not wait:
                baseline = RolloutStat()
            try:
                resp = self._http.post_json("/agree_sync_weight", {"client_uuid": self.client_uuid})
                data = self._json_or_raise(resp, "agree_sync_weight")
                if data.get("success"):
                    self._log("agree_sync_weight: registered with the server")
                    if not wait:
                        return True
                    return self._wait_for_batch_boundary(baseline, deadline)
                reason = data.get("failure_reason", "")
            except SwarmConnectionError as e:
                reason = str(e)
            if not retry:
                self._log(f"agree_sync_weight refused: {reason}")
                return False
            self._report_wait("agree", f"agree_sync_weight refused ({reason}); retrying")
            self._sleep_until(self.retry.agree_sync_weight, deadline, "agree_sync_weight")

    def _wait_for_batch_boundary(self, baseline: Dict[str, Any], deadline: Optional[float]) -> bool:
        """The wait of agree_sync_weight after acceptance (the rule is in its docstring)."""
        while True:
            pool = self._fetch_pool(report=False)
            if pool:
                reason = self._boundary_reason(baseline, pool)
                if reason == OFFLINE:
                    logger.warning("agree_sync_weight: the engine went to ENGINE.OFFLINE before the weight update")
                    return False
                if reason:
                    self._wait_over("agree")
                    self._log(f"agree_sync_weight: batch boundary seen ({reason})")
                    return True
                self._report_wait("agree", "agree_sync_weight: agreed; waiting for the batch boundary (the trigger "
                                           f"{pool.get('sample_collection_method', '?')} has not fired yet)",
                                  routine=True)
            self._sleep_until(self.retry.status_poll, deadline, "the batch boundary after agree_sync_weight")

    def _boundary_reason(self, before: Dict[str, Any], now: Dict[str, Any]) -> str:
        status = now.get("engine_status")
        if status == OFFLINE:
            return OFFLINE
        if status in (ROLLING_POST, WEIGHT_SYNCING, WEIGHT_EXPORTING):
            return f"status {status}"

        def grew(key: str) -> bool:
            a, b = before.get(key), now.get(key)
            return isinstance(a, (int, float)) and isinstance(b, (int, float)) and b > a

        if grew("global_step"):
            return f"global_step {before.get('global_step')} -> {now.get('global_step')}"
        if grew("batches_recorded"):
            return f"batches_recorded {before.get('batches_recorded')} -> {now.get('batches_recorded')}"
        a, b = before.get("completed_episodes"), now.get("completed_episodes")
        if isinstance(a, int) and isinstance(b, int) and b < a:
            return f"completed_episodes {a} -> {b} (the batch was taken)"
        if self._agreement_in(now) is False:
            return "this client's agreement was cleared"
        return ""

    def _agreement_in(self, pool: Dict[str, Any]) -> Optional[bool]:
        """Whether the pool info lists this client as agreeing; None when it does not list this client
        (absent is not "cleared": an idle client also drops out of the list after 600 s)."""
        lists = []
        if isinstance(pool.get("active_clients"), list):
            lists.append((pool["active_clients"], "agreed_sync_weight"))
        instruction = pool.get("swarm_client_instruction")
        if isinstance(instruction, dict) and isinstance(instruction.get("active_clients"), list):
            lists.append((instruction["active_clients"], "allowed_sync_weight"))
        for clients, key in lists:
            for c in clients:
                if isinstance(c, dict) and c.get("client_uuid") == self.client_uuid and key in c:
                    return bool(c[key])
        return None

    # ------------------------------------------------------------------ batch-boundary callbacks

    def add_entering_weight_sync_callback(self, callback: Callable[[], Any]) -> None:
        """Calls `callback()` once per batch boundary this client observes (upstream: once per fresh
        entry into ENGINE.WEIGHT_SYNCING). Registering one starts a background thread that reads the
        pool info every `retry.status_poll` s (until close()); the client's own status and pool reads
        count as observations too. A boundary is, between two observations:

        * the status entered ENGINE.WEIGHT_SYNCING (or WEIGHT_EXPORTING) from any other status — the
          torch backbone, as upstream;
        * `global_step` grew while the previous observation was not in a weight-sync status — the
          async backbone (its status stays ROLLING), or a torch sync that fell between two polls
          (a sync seen entering does not fire again when its step lands);
        * the pool info's `batches_recorded` grew — the debug backbone (nothing trains, the step
          stays).

        At most one call per observation; observations after OFFLINE, BOOTING or an unreachable
        server only re-read the baseline (an engine (re)start is not a boundary). Callbacks run in
        the observing thread; exceptions are logged."""
        with self._obs_lock:
            self._sync_callbacks.append(callback)
        self._ensure_watcher()

    def _ensure_watcher(self) -> None:
        with self._obs_lock:
            if self._watcher is not None and self._watcher.is_alive():
                return
            self._watch_stop.clear()
            self._watcher = threading.Thread(target=self._watch_loop, daemon=True,
                                             name=f"ajet-swarm-watch-{self.client_uuid[:8]}")
            watcher = self._watcher
        watcher.start()

    def _watch_loop(self) -> None:
        try:
            while not self._watch_stop.is_set():
                try:
                    self._fetch_pool(report=False)
                except Exception as e:  # never let the watcher die
                    self._log(f"batch-boundary watcher: {type(e).__name__}: {e}", logging.WARNING)
                self._watch_stop.wait(max(0.01, self.retry.status_poll))
        finally:
            self._http.close()

    def _observe(self, status: str, global_step: Any, batches_recorded: Any) -> None:
        """Feeds one observation (status, global_step, batches_recorded or None) to the boundary rule."""
        step = global_step if isinstance(global_step, int) and not isinstance(global_step, bool) else None
        batches = batches_recorded if isinstance(batches_recorded, int) and not isinstance(batches_recorded, bool) \
            else None
        with self._obs_lock:
            prev = self._obs_status
            fire = False
            if prev is not None and prev not in (OFFLINE, BOOTING, CANNOT_CONNECT) and \
                    status not in (OFFLINE, BOOTING, CANNOT_CONNECT):
                if status in _SYNC_STATUSES and prev not in _SYNC_STATUSES:
                    fire = True
                if step is not None and self._obs_step is not None and step > self._obs_step \
                        and prev not in _SYNC_STATUSES:
                    fire = True
                if batches is not None and self._obs_batches is not None and batches > self._obs_batches:
                    fire = True
            self._obs_status = status
            if step is not None:
                self._obs_step = step
            if batches is not None:
                self._obs_batches = batches
            callbacks = list(self._sync_callbacks) if fire else []
        for cb in callbacks:
            try:
                cb()
            except Exception as e:
                logger.exception("entering-weight-sync callback %r raised %s: %s", cb, type(e).__name__, e)

    # ------------------------------------------------------------------ several servers

    @staticmethod
    def async_and_start_multi_engine(client_job_pairs: Sequence[Tuple["SwarmClient", Any]],
                                     force_restart: bool = False) -> List[str]:
        """Runs auto_sync_train_config_and_start_engine(job, force_restart) for every (client, job)
        pair at once, one thread each (multi-model training: one server per model). Returns the
        status each found, in order; if any failed, raises SwarmError naming every failed server
        (after all threads finished)."""
        pairs = list(client_job_pairs)
        results: List[Optional[str]] = [None] * len(pairs)
        errors: List[Tuple[str, BaseException]] = []
        lock = threading.Lock()

        def worker(i: int, client: "SwarmClient", job: Any) -> None:
            try:
                results[i] = client.auto_sync_train_config_and_start_engine(job, force_restart=force_restart)
            except Exception as e:
                logger.exception("starting the engine on %s failed: %s", client.server_url, e)
                with lock:
                    errors.append((client.server_url, e))

        threads = [threading.Thread(target=worker, args=(i, c, j), daemon=True,
                                    name=f"ajet-swarm-start-{i}") for i, (c, j) in enumerate(pairs)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise SwarmError(f"Failed to start {len(errors)} engine(s): "
                             + "; ".join(f"{url}: {type(e).__name__}: {e}" for url, e in errors))
        return [r or "" for r in results]

    def get_verbose_logs(self) -> list:
        return self._json_or_raise(self._http.request("GET", "/get_verbose_logs"), "get_verbose_logs").get(
            "entries", [])

    def log_metrics(self, step: int, metrics: Dict[str, float]) -> Dict[str, Any]:
        """POST /log_metrics (admin token): each name -> number at `step` into the server's metrics
        table (the dashboard at /ui/, GET /metrics_history) and its TensorBoard file. Names are
        [A-Za-z0-9_./@:-] ("name@task" for a task's series); a bad name or value raises
        SwarmCommandError with the server's message."""
        return self._json_or_raise(self._post_admin("/log_metrics", {"step": step, "metrics": metrics}),
                                   "log_metrics")

    def get_metrics_history(self, names: Optional[Sequence[str]] = None, after_step: int = -1) -> Dict[str, Any]:
        """GET /metrics_history (admin token): without names the index {"names": [{name, points,
        last_step}], "global_step"}; with names (at most 32) {"series": {name: [[step, value,
        unix_time], ...]}} for the steps after `after_step`."""
        path = "/metrics_history"
        if names:
            path += "?" + urllib.parse.urlencode({"name": ",".join(names), "after_step": after_step})
        return self._json_or_raise(self._http.request("GET", path, headers=self._admin_headers()),
                                   "metrics_history")

    def replay_latest_llm_call(self) -> Dict[str, Any]:
        return self._json_or_raise(self._post_admin("/replay_latest_llm_call", {}), "replay_latest_llm_call")

    def health(self) -> bool:
        try:
            return self._http.request("GET", "/health", timeout=10).status == 200
        except SwarmConnectionError:
            return False

    def close(self) -> None:
        """Closes this thread's connection and stops the batch-boundary watcher (if one runs)."""
        self._watch_stop.set()
        self._http.close()

    def logger_info(self, message: str) -> None:
        """Logs `message` at INFO on the `ajet_swarm` logger, dropping a repeat of the same line within
        one second (upstream's helper; not silenced by `verbose`)."""
        self._log(message, logging.INFO, force=True)

    def _check_job_method(self, allowed: Sequence[str], what: str) -> None:
        """Upstream asserts that the remembered AgentJetJob's collection method suits `what`."""
        job = self._agentjet_job
        if job is None:
            return
        method = getattr(job, "swarm_mode_sample_collection_method", None)
        if method is None:
            config = getattr(job, "config", None)
            try:
                method = config["ajet"]["swarm_mode_sample_collection_method"]  # type: ignore[index]
            except (TypeError, KeyError):
                method = None
        if method and method not in allowed:
            raise ValueError(f"{what} needs ajet.swarm_mode_sample_collection_method in {list(allowed)}, but the "
                             f"AgentJetJob of this client uses {method!r}")

    # ------------------------------------------------------------------ helpers

    def _admin_headers(self) -> Dict[str, str]:
        return {"Authorization": f"Bearer {self.admin_token}"} if self.admin_token else {}

    def _post_admin(self, path: str, body: Any, timeout: Optional[float] = None) -> Response:
        return self._http.post_json(path, body, self._admin_headers(), timeout)

    def _key_of(self, episode_uuid: str) -> str:
        with self._lock:
            return self._keys.get(episode_uuid, "")

    def _forget_key(self, episode_uuid: str) -> None:
        with self._lock:
            self._keys.pop(episode_uuid, None)

    def _episode_headers(self, episode_uuid: str, episode_key: Optional[str] = None) -> Dict[str, str]:
        """The episode commands' credential: the episode's key (given, or the one this client's claim
        got), else the admin token, else nothing (a server started --allow-keyless-episode-commands)."""
        key = episode_key or self._key_of(episode_uuid)
        return {"Authorization": f"Bearer {key}"} if key else self._admin_headers()

    def _post_with_retries(self, path: str, body: Any, attempts: int,
                           headers: Optional[Dict[str, str]] = None) -> Response:
        """POSTs an idempotent command, retrying connection failures and 5xx answers. After a lost
        answer, the server's 400 "an end or commit is already in progress" means the lost attempt is
        still being written: asked again, its repeat then gets the outcome."""
        last: Optional[Exception] = None
        lost = False
        for attempt in range(max(1, attempts)):
            if attempt:
                time.sleep(self.retry.delay(min(self.retry.engine_busy, 0.5 * 2 ** attempt)))
            try:
                resp = self._http.post_json(path, body, headers)
            except SwarmConnectionError as e:
                last = e
                lost = True
                self._log(f"{path}: {e}; retrying", logging.WARNING)
                continue
            if resp.status >= 500 and attempt + 1 < attempts:
                last = SwarmCommandError(f"{path}: HTTP {resp.status}: {resp.error_message()}", resp.status)
                continue
            if (lost and resp.status == 400 and attempt + 1 < attempts
                    and IN_PROGRESS in resp.error_message()):
                last = SwarmCommandError(f"{path}: {resp.error_message()}", resp.status, resp.error_message())
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

    def _report_wait(self, what: str, reason: str, level: int = logging.INFO, routine: bool = False) -> None:
        """Says why a wait (`what`: "claim", "status", ...) goes on: when the reason changes and then every
        `retry.wait_report` s. Not silenced by `verbose`. Where the logger drops INFO (an agent that
        never configured logging), a wait that needs the user (no engine, a booting one, no server, an
        error) is raised to WARNING at once; a `routine` one (a weight sync, a full pool, a claim held
        back: part of every step) only once it has gone on for `retry.stall_warning` s."""
        now = time.monotonic()
        with self._lock:
            since = self._wait_since.setdefault(what, now)
            last = self._last_wait_report.get(what)
            if last is not None and last[0] == reason and now - last[1] < self.retry.wait_report:
                return
            self._last_wait_report[what] = (reason, now)
        if not logger.isEnabledFor(level):
            if routine and now - since < self.retry.stall_warning:
                return
            if routine:
                reason += f" (waiting for {now - since:.0f} s)"
            level = logging.WARNING
        logger.log(level, "%s", reason)

    def _wait_over(self, what: str) -> None:
        """The wait `what` ended: the next one starts its clock (and its first report) afresh."""
        with self._lock:
            self._wait_since.pop(what, None)
            self._last_wait_report.pop(what, None)

    def _log(self, message: str, level: int = logging.INFO, force: bool = False) -> None:
        """Logs, dropping a repeat of the same line within one second (upstream logger_info); INFO
        lines only when `verbose` (or `force`)."""
        if level <= logging.INFO and not self.verbose and not force:
            return
        now = time.monotonic()
        with self._lock:
            if now - self._last_log.get(message, -10.0) < 1.0:
                return
            self._last_log[message] = now
            if len(self._last_log) > 256:
                self._last_log = {k: t for k, t in self._last_log.items() if now - t < 1.0}
        logger.log(level, "%s", message)


def auto_train_with_dataset(dataset: Any, swarm_worker: SwarmClient, execute_agent: Callable[[Any, Any], Any],
                            local_grpo_n: int = 2, remote_batch_size: int = 8) -> None:
    """Upstream's one-call training loop: for every task of `dataset.generate_training_tasks()`, run
    `local_grpo_n` rollouts (claim, `execute_agent(task, api_baseurl_key)` → WorkflowOutput, end),
    paced by a PeriodicDrainThreadPoolExecutor of `remote_batch_size x local_grpo_n` (64 threads at
    most, failed rollouts retried)."""
    from .thread_executors import PeriodicDrainThreadPoolExecutor

    def rollout(task: Any) -> Any:
        episode_uuid, api_baseurl_key = swarm_worker.begin_episode()
        workflow_output = execute_agent(task, api_baseurl_key)
        swarm_worker.end_episode(task, episode_uuid, workflow_output)
        swarm_worker.print_rollout_stat()
        return getattr(workflow_output, "reward", None)

    executor = PeriodicDrainThreadPoolExecutor(workers=remote_batch_size * local_grpo_n, max_parallel=64,
                                               auto_retry=True)
    for task in dataset.generate_training_tasks():
        for _ in range(local_grpo_n):
            executor.submit_with_periodic_drain(rollout, task)
    executor.drain()
    executor.shutdown(wait=True)


def _status_in(fail_cause: str) -> Optional[str]:
    """The ENGINE.* status named in brackets in a claim's fail_cause, if any."""
    m = re.search(r"\[(ENGINE\.[A-Z_]+)\]", fail_cause)
    return m.group(1) if m else None
