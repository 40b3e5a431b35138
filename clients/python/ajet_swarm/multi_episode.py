"""MultiEpisode: one rollout across several swarm servers (multi-model training, one server per model)
or several LoRA adapters of one server's engine (one adapter per model).
It claims one episode on each server, hands each agent the base URL and key of its model's server,
and ends the episodes on all servers or on none with the episode-group protocol of docs/protocol.md
("Episode groups across servers"): prepare on every member, commit on the coordinator (the first
member: its commit is the group's decision), then on the participants.

It never aborts a member once the coordinator committed. One MultiEpisode is one rollout at a time,
driven by one thread; run rollouts concurrently with one MultiEpisode each (they may share clients).
"""

from __future__ import annotations

import logging
import math
import threading
import uuid
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from .client import IN_PROGRESS, SwarmClient
from .errors import EpisodeGroupError, SwarmCommandError, SwarmConnectionError, SwarmError, WeightUpdatedHalfway
from .types import Episode, WorkflowOutput, task_id_of

logger = logging.getLogger("ajet_swarm")

ON_WEIGHT_UPDATE = ("abort", "keep")

# Where a group stands (MultiEpisode.state).
IDLE = "idle"  # not begun
OPEN = "open"  # claimed everywhere; agents run
PREPARED = "prepared"  # prepared everywhere; the coordinator has not committed
COMMITTED = "committed"  # the coordinator committed: the group is committed everywhere
ABORTED = "aborted"  # aborted everywhere (or never fully claimed)
UNKNOWN = "unknown"  # the coordinator's commit answer was lost: the servers settle it


class _Cancelled(Exception):
    """Raised from a claim's on_wait once another member's claim failed."""


class MultiEpisode:
    def __init__(self, members: Sequence[Tuple[Any, ...]], *, on_weight_update: str = "abort",
                 prepare_timeout: float = 60.0, coordinator_url: Optional[str] = None,
                 after_prepare: Optional[Callable[["MultiEpisode"], Any]] = None,
                 after_coordinator_commit: Optional[Callable[["MultiEpisode"], Any]] = None):
        """`members`: (SwarmClient, name) pairs, one per server; the name is the agent or model that
        uses the server (`endpoint(name)`, `end({name: output})`). The first is the coordinator. A
        member may be (SwarmClient, name, adapter): its episode's calls run on that LoRA adapter of the
        server's engine (GET /adapters). Several members may share a server (one adapter each); the
        group is all-or-nothing all the same, and each of them reports the task id "<task>@<name>" so
        that each adapter's GRPO groups stay its own.

        `on_weight_update`: "abort" (default) — a server that trained between the claim and the end
        makes end() abort every member and raise WeightUpdatedHalfway (redo the rollout, as upstream);
        "keep" — commit anyway (the server trains it off-policy within `ajet.async.max_staleness`).
        `prepare_timeout` (s): how long a prepared member waits for the commit before its server
        settles it alone. `coordinator_url`: the coordinator as the *other servers* reach it (default
        the first client's `server_url`, which is how this machine reaches it); each other server must
        list it with `ajet-swarm start --peer <coordinator_url>`.
        `after_prepare(self)` / `after_coordinator_commit(self)`: called after every member prepared /
        right after the coordinator committed (test hooks: a test kills the process there)."""
        pairs = list(members)
        if not pairs:
            raise ValueError("MultiEpisode needs at least one (SwarmClient, name) pair")
        self.members: List[Tuple[str, SwarmClient]] = []
        self.adapters: Dict[str, Optional[str]] = {}  # name -> the adapter its calls run on
        for i, pair in enumerate(pairs):
            if not isinstance(pair, (tuple, list)) or len(pair) not in (2, 3):
                raise ValueError(f"MultiEpisode members[{i}]: expected a (SwarmClient, name) pair or a (SwarmClient, "
                                 f"name, adapter) triple, got {pair!r}")
            client, name = pair[0], pair[1]
            adapter = pair[2] if len(pair) == 3 else None
            if adapter is not None and (not isinstance(adapter, str) or not adapter):
                raise ValueError(f"MultiEpisode members[{i}]: the adapter must be a non-empty string, got {adapter!r}")
            if not hasattr(client, "begin_episode") or not hasattr(client, "prepare_end_episode"):
                raise TypeError(f"MultiEpisode members[{i}]: {client!r} is not a SwarmClient")
            if not isinstance(name, str) or not name:
                raise ValueError(f"MultiEpisode members[{i}]: the name must be a non-empty string, got {name!r}")
            if name in self.names:
                raise ValueError(f"MultiEpisode members[{i}]: the name {name!r} is used twice")
            self.members.append((name, client))
            self.adapters[name] = adapter
        if on_weight_update not in ON_WEIGHT_UPDATE:
            raise ValueError(f"on_weight_update must be one of {ON_WEIGHT_UPDATE}, got {on_weight_update!r}")
        if not (isinstance(prepare_timeout, (int, float)) and math.isfinite(prepare_timeout)
                and 0 < prepare_timeout <= 86400):
            raise ValueError(f"prepare_timeout must be a number of seconds in (0, 86400], got {prepare_timeout!r}")
        self.on_weight_update = on_weight_update
        self.prepare_timeout = float(prepare_timeout)
        self.coordinator_url = (coordinator_url or self.members[0][1].server_url).rstrip("/")
        self.after_prepare = after_prepare
        self.after_coordinator_commit = after_coordinator_commit
        self.state = IDLE
        self.group_id = ""
        self.task: Any = None
        self.episodes: Dict[str, Episode] = {}  # name -> the claimed episode
        self.prepared: Dict[str, Dict[str, Any]] = {}  # name -> the prepare_end_episode answer

    @property
    def names(self) -> List[str]:
        return [name for name, _ in self.members]

    # ------------------------------------------------------------------ begin

    def begin(self, task: Any = None, discard_episode_timeout: float = 240, episode_type: str = "train",
              max_wait: Optional[float] = None, group_id: Optional[str] = None) -> "MultiEpisode":
        """Claims one episode on every server at once (SwarmClient.begin_episode's waits and
        arguments). If any claim fails, the others stop waiting, those claimed are aborted, and the
        failure is raised. `task` (optional) is the task end() reports when given none. Returns
        self, so `with MultiEpisode(...).begin(task) as group:` reads naturally."""
        if self.state in (OPEN, PREPARED):
            raise RuntimeError(f"episode group {self.group_id} is still open: end() or abort() it first")
        self.state, self.task, self.episodes, self.prepared = IDLE, task, {}, {}
        self.group_id = group_id or f"group-{uuid.uuid4()}"
        cancel = threading.Event()

        def stop_when_cancelled(_reason: str) -> None:
            if cancel.is_set():
                raise _Cancelled()

        def claim(client: SwarmClient, adapter: Optional[str]) -> Episode:
            try:
                extra = {"adapter": adapter} if adapter else {}
                return client.begin_episode(discard_episode_timeout, episode_type, max_wait=max_wait,
                                            on_wait=stop_when_cancelled, **extra)
            except BaseException:
                cancel.set()
                raise

        results = _in_parallel([(client, lambda c=client, a=self.adapters[name]: claim(c, a))
                                for name, client in self.members])
        claimed = {name: ep for (name, _), (ep, err) in zip(self.members, results) if err is None}
        errors = {name: err for (name, _), (_, err) in zip(self.members, results)
                  if err is not None and not isinstance(err, _Cancelled)}
        if errors:
            self.episodes, self.state = claimed, OPEN
            self._abort_members()
            name, first = next(iter(errors.items()))
            logger.warning("episode group %s: the claim on %s failed (%s); aborted the %d episode(s) claimed",
                           self.group_id, name, first, len(claimed))
            raise first
        self.episodes, self.state = claimed, OPEN
        return self

    def endpoint(self, name: str) -> Episode:
        """The episode claimed on `name`'s server: `base_url`, `api_key`, `episode_uuid`, `model`,
        `chat_client()`, `as_openai_sdk_client()` (an OpenaiBaseUrlAndApiKey)."""
        if name not in self.names:
            raise KeyError(f"no member named {name!r} (members: {', '.join(self.names)})")
        if name not in self.episodes:
            raise RuntimeError(f"episode group: begin() first ({name!r} has no episode)")
        return self.episodes[name]

    __getitem__ = endpoint

    # ------------------------------------------------------------------ end

    def end(self, rewards: Any, task: Any = None) -> bool:
        """Ends the group on every server or on none. `rewards`: one workflow output per member — a
        dict {name: output} or a list in member order; each a WorkflowOutput, a dict or a bare
        reward. `task` (default: the one given to begin) is the task id every member reports.

        Returns True when the group is committed. Raises WeightUpdatedHalfway (every member aborted)
        when a server trained meanwhile and `on_weight_update` is "abort"; EpisodeGroupError when a
        member refused (`.committed` False: every member aborted) or the coordinator's answer was
        lost (`.committed` None: the servers settle it)."""
        self._require(OPEN, "end")
        task_id = task_id_of(task if task is not None else self.task)
        outputs = self._outputs_in_member_order(rewards, task_id)
        self._prepare_all(task_id, outputs)
        if self.after_prepare is not None:
            self.after_prepare(self)
        self._commit_coordinator()
        if self.after_coordinator_commit is not None:
            self.after_coordinator_commit(self)
        self._commit_participants()
        return True

    def _prepare_all(self, task_id: str, outputs: List[Any]) -> None:
        """Steps 1-3: prepare every member in parallel; on a failure or a weight update, abort all."""
        coordinator = self.episodes[self.members[0][0]]

        def prepare(i: int, name: str, client: SwarmClient) -> Dict[str, Any]:
            # A participant's server asks the coordinator with the coordinator episode's key; one on the
            # coordinator's own server names no URL (that server settles it from its own records).
            participant = {} if i == 0 else {"coordinator_url": None if self._local(client) else self.coordinator_url,
                                              "coordinator_episode_uuid": coordinator.episode_uuid,
                                              "coordinator_episode_key": coordinator.api_key}
            return client.prepare_end_episode(self.member_task_id(name, task_id), self.episodes[name].episode_uuid,
                                              outputs[i], self.group_id, prepare_timeout=self.prepare_timeout,
                                              **participant)

        results = _in_parallel([(client, lambda i=i, n=name, c=client: prepare(i, n, c))
                                for i, (name, client) in enumerate(self.members)])
        self.prepared = {name: answer for (name, _), (answer, err) in zip(self.members, results) if err is None}
        errors = {name: err for (name, _), (_, err) in zip(self.members, results) if err is not None}
        if errors:
            self._abort_members()
            where = "; ".join(f"{name} ({self._url(name)}): {err}" for name, err in errors.items())
            syncing = {name: err for name, err in errors.items() if _is_weight_sync_refusal(err)}
            if syncing and len(syncing) == len(errors):
                changed = {name: {"server_url": self._url(name), "global_step_at_claim":
                                  self.episodes[name].global_step, "global_step": None} for name in syncing}
                raise WeightUpdatedHalfway(f"episode group {self.group_id}: a server was syncing weights ({where}); "
                                           "every member was aborted: redo the rollout", self.group_id, changed,
                                           errors)
            raise EpisodeGroupError(f"episode group {self.group_id}: prepare_end_episode failed on {where}; every "
                                    "member was aborted", self.group_id, False, errors) from next(iter(errors.values()))
        self.state = PREPARED
        changed = {name: {"server_url": self._url(name), "global_step_at_claim": a.get("global_step_at_claim"),
                          "global_step": a.get("global_step")}
                   for name, a in self.prepared.items() if a.get("weights_changed")}
        if not changed:
            return
        steps = ", ".join(f"{name} ({c['server_url']}) global_step {c['global_step_at_claim']} -> {c['global_step']}"
                          for name, c in changed.items())
        if self.on_weight_update == "keep":
            logger.info("episode group %s: weights changed during the rollout on %s; kept (on_weight_update='keep')",
                        self.group_id, steps)
            return
        self._abort_members()
        raise WeightUpdatedHalfway(f"episode group {self.group_id}: the weights changed during the rollout on {steps}; "
                                   "every member was aborted: redo the rollout", self.group_id, changed)

    def _commit_coordinator(self) -> None:
        """Step 4: the group's decision. A refusal aborts every member; a lost answer is asked again
        with resolve_episode_group (which aborts the episode if the commit had not landed)."""
        name, client = self.members[0]
        episode_uuid = self.episodes[name].episode_uuid
        try:
            client.commit_episode(episode_uuid)
            self.state = COMMITTED
            return
        except SwarmCommandError as e:
            # "already in progress": an earlier try of this very commit is being written; its outcome
            # is the coordinator's to tell (below), and aborting the members now could split the group.
            if e.status is not None and 400 <= e.status < 500 and IN_PROGRESS not in str(e):
                self._abort_members()
                raise EpisodeGroupError(f"episode group {self.group_id}: the coordinator {name} ({client.server_url}) "
                                        f"refused the commit: {e}; every member was aborted", self.group_id, False,
                                        {name: e}) from e
            lost: SwarmError = e
        except SwarmConnectionError as e:
            lost = e
        logger.warning("episode group %s: no answer to the coordinator's commit (%s); asking it for the decision",
                       self.group_id, lost)
        try:
            decision = client.resolve_episode_group(self.group_id, episode_uuid)
        except SwarmError as e:
            self.state = UNKNOWN
            raise EpisodeGroupError(f"episode group {self.group_id}: the coordinator {name} ({client.server_url}) did "
                                    f"not answer the commit ({lost}) nor the resolution ({e}); the participants ask it "
                                    f"themselves after prepare_timeout ({self.prepare_timeout:g} s) and commit or "
                                    "abort as it says", self.group_id, None, {name: e}) from e
        if decision == "committed":
            self.state = COMMITTED
            return
        if decision == "pending":  # still being written after every retry: its outcome is not known yet
            self.state = UNKNOWN
            raise EpisodeGroupError(f"episode group {self.group_id}: the coordinator {name} ({client.server_url}) is "
                                    f"still writing the commit; the participants ask it themselves after "
                                    f"prepare_timeout ({self.prepare_timeout:g} s) and commit or abort as it says",
                                    self.group_id, None, {name: lost})
        self._abort_members()
        raise EpisodeGroupError(f"episode group {self.group_id}: the coordinator's commit did not land ({lost}); it "
                                "is aborted now, and so is every member", self.group_id, False, {name: lost})

    def _commit_participants(self) -> None:
        """Step 5: commit the rest in parallel. commit_episode retries connection errors; a participant
        still unreachable commits by itself. A refusal here breaks the all-or-nothing rule: raised."""
        participants = self.members[1:]
        results = _in_parallel([(client, lambda n=name, c=client: c.commit_episode(self.episodes[n].episode_uuid))
                                for name, client in participants])
        refused: Dict[str, BaseException] = {}
        for (name, client), (_, err) in zip(participants, results):
            if err is None:
                continue
            if isinstance(err, SwarmCommandError) and err.status is not None and 400 <= err.status < 500:
                refused[name] = err
            else:
                logger.warning("episode group %s: participant %s (%s) did not confirm its commit (%s); it commits by "
                               "itself after prepare_timeout (%g s), asking the coordinator", self.group_id, name,
                               client.server_url, err, self.prepare_timeout)
        if refused:
            where = "; ".join(f"{name} ({self._url(name)}): {err}" for name, err in refused.items())
            raise EpisodeGroupError(f"episode group {self.group_id}: committed on the coordinator, but refused by "
                                    f"{where}", self.group_id, True, refused)

    # ------------------------------------------------------------------ abort

    def abort(self) -> bool:
        """Aborts every member (before the coordinator committed). True when every server confirmed;
        False when there is nothing to abort — not begun, or the coordinator already committed (then
        the group is committed everywhere and this logs a warning)."""
        if self.state == ABORTED:
            return True
        if self.state in (COMMITTED, UNKNOWN):
            logger.warning("episode group %s: abort() after the coordinator's commit (state %s): nothing aborted",
                           self.group_id, self.state)
            return False
        if self.state == IDLE:
            return False
        return self._abort_members()

    def __enter__(self) -> "MultiEpisode":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        if self.state in (OPEN, PREPARED):
            if exc_type is None:
                logger.warning("episode group %s: left the `with` block without end(); aborting it", self.group_id)
            self._abort_members()
        return False

    # ------------------------------------------------------------------ helpers

    def _abort_members(self) -> bool:
        members = [(name, client) for name, client in self.members if name in self.episodes]
        results = _in_parallel([(client, lambda n=name, c=client: c.abort_episode(self.episodes[n].episode_uuid))
                                for name, client in members])
        self.state = ABORTED
        return all(ok is True for ok, _ in results)

    def _require(self, state: str, what: str) -> None:
        if self.state != state:
            raise RuntimeError(f"episode group {self.group_id or '(not begun)'}: {what}() needs state {state!r}, "
                               f"it is {self.state!r}")

    def _local(self, client: SwarmClient) -> bool:
        return _same_server(client, self.members[0][1])

    def member_task_id(self, name: str, task_id: str) -> str:
        """The task id `name` reports: the group's, or "<task>@<name>" when another member shares its
        server (each adapter's GRPO groups and batch count stay its own)."""
        client = dict(self.members)[name]
        shared = sum(1 for _, c in self.members if _same_server(c, client)) > 1
        return f"{task_id}@{name}" if shared else task_id

    def _url(self, name: str) -> str:
        return dict(self.members)[name].server_url

    def _outputs_in_member_order(self, rewards: Any, task_id: str) -> List[Any]:
        if isinstance(rewards, Mapping):
            unknown = [k for k in rewards if k not in self.names]
            missing = [n for n in self.names if n not in rewards]
            if unknown or missing:
                raise ValueError(f"end(): one workflow output per member {self.names}; unknown {unknown}, missing "
                                 f"{missing}")
            outputs = [rewards[n] for n in self.names]
        elif isinstance(rewards, (list, tuple)):
            if len(rewards) != len(self.members):
                raise ValueError(f"end(): {len(rewards)} workflow outputs for {len(self.members)} members {self.names}")
            outputs = list(rewards)
        else:
            raise TypeError(f"end(): rewards must be a dict {{name: output}} or a list in member order "
                            f"{self.names}, got {type(rewards).__name__}")
        for name, output in zip(self.names, outputs):
            try:
                WorkflowOutput.coerce(output).to_json(task_id)
            except (TypeError, ValueError) as e:
                raise type(e)(f"end(): the workflow output of {name!r}: {e}") from e
        return outputs


def _same_server(a: SwarmClient, b: SwarmClient) -> bool:
    """Two members on one server (several adapters of one engine)."""
    return a is b or a.server_url.rstrip("/") == b.server_url.rstrip("/")


def _in_parallel(calls: Sequence[Tuple[SwarmClient, Callable[[], Any]]]) -> List[Tuple[Any, Optional[BaseException]]]:
    """Runs each call, the first in this thread and the others in threads of their own (each closes
    its connection to its client when done); (result, None) or (None, exception) per call, in order."""
    results: List[Tuple[Any, Optional[BaseException]]] = [(None, None)] * len(calls)

    def run(i: int) -> None:
        try:
            results[i] = (calls[i][1](), None)
        except Exception as e:  # reported to the caller
            results[i] = (None, e)

    def run_in_thread(i: int) -> None:
        try:
            run(i)
        finally:
            calls[i][0]._http.close()

    threads = [threading.Thread(target=run_in_thread, args=(i,), daemon=True, name=f"ajet-swarm-group-{i}")
               for i in range(1, len(calls))]
    for t in threads:
        t.start()
    try:
        if calls:
            run(0)
    finally:
        for t in threads:
            t.join()
    return results


def _is_weight_sync_refusal(err: BaseException) -> bool:
    message = str(getattr(err, "server_message", "") or err)
    return isinstance(err, SwarmCommandError) and ("WEIGHT_SYNCING" in message or "WEIGHT_EXPORTING" in message)
