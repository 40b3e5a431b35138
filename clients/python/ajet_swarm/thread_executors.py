"""Thread pools that pace a swarm client's rollouts (upstream `ajet.utils.thread_executors`).

The usual client loop submits `batch_size x num_repeat` rollouts, waits for all of them ("drains"),
then submits the next lot, so one client never runs far ahead of the server's batches:

    executor = PeriodicDrainThreadPoolExecutor(workers=GRPO_N * REMOTE_BATCH_SIZE, max_parallel=64)
    for task in dataset.generate_training_tasks():
        for _ in range(GRPO_N):
            future, drained_results = executor.submit_with_periodic_drain(fn=rollout, task=task)
            if drained_results:          # a lot just finished: its results, in submission order
                swarm_worker.agree_sync_weight()
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, List, Optional, Tuple

logger = logging.getLogger("ajet_swarm")


class PeriodicDrainThreadPoolExecutor:
    """Upstream's executor. `workers`: how many submissions form one lot (a drain happens before the
    submission that starts the next lot); `max_parallel` (default `workers`): threads running at
    once; `auto_retry`: a call that raises is logged and run again until it returns (as upstream,
    after `retry_delay` seconds, default 1 s, where upstream retries at once);
    `block_first_run`: the first submit returns only after its call finished (upstream's option).

    `submit_with_periodic_drain(fn, *args, **kwargs)` returns `(future, drained_results)`:
    `drained_results` is the list of the previous lot's results (in submission order; calls that
    raised are logged and left out) when this submission started a new lot, else []."""

    def __init__(self, workers: int = 100, max_parallel: Optional[int] = None, auto_retry: bool = True,
                 block_first_run: bool = False, retry_delay: float = 1.0):
        if workers < 1:
            raise ValueError("PeriodicDrainThreadPoolExecutor: workers must be >= 1")
        self._max_workers = workers
        self._max_parallel = max_parallel if max_parallel else workers
        self._executor = ThreadPoolExecutor(max_workers=self._max_parallel)
        self._submitted_count = 0
        self._auto_retry = auto_retry
        self._retry_delay = retry_delay
        self._slow_first_run = block_first_run
        self.current_futures: List[Future] = []

    def _retrying(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        while True:
            try:
                return fn(*args, **kwargs)
            except Exception as e:  # upstream: log and run the episode again
                logger.exception("[PeriodicDrainThreadPoolExecutor] %s raised %s: %s; running it again",
                                 getattr(fn, "__name__", "the call"), type(e).__name__, e)
                if self._retry_delay > 0:
                    time.sleep(self._retry_delay)

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future:
        """Submits one call (retried until it succeeds when auto_retry)."""
        if self._auto_retry:
            future = self._executor.submit(self._retrying, fn, *args, **kwargs)
        else:
            future = self._executor.submit(fn, *args, **kwargs)
        if self._slow_first_run:
            self._slow_first_run = False
            try:
                future.result()
            except Exception as e:
                logger.exception("[PeriodicDrainThreadPoolExecutor] the first run failed: %s", e)
        return future

    def submit_with_periodic_drain(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Tuple[Future, List[Any]]:
        """Submits one call; every `workers` submissions, first waits for all calls in flight."""
        results: List[Any] = []
        if self._submitted_count > 0 and self._submitted_count % self._max_workers == 0:
            results = self.drain()
        self._submitted_count += 1
        future = self.submit(fn, *args, **kwargs)
        self.current_futures.append(future)
        return future, results

    def drain(self) -> List[Any]:
        """Waits for every call submitted since the last drain; their results (failures left out)."""
        results: List[Any] = []
        for future in self.current_futures:
            try:
                results.append(future.result())
            except Exception as e:
                logger.exception("[PeriodicDrainThreadPoolExecutor] a call failed: %s", e)
        self.current_futures = []
        return results

    def shutdown(self, wait: bool = True) -> None:
        self._executor.shutdown(wait=wait)

    def __enter__(self) -> "PeriodicDrainThreadPoolExecutor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown(wait=True)


class BoundedThreadPoolExecutor:
    """A thread pool whose submit blocks while `max_queue_size` calls are pending (upstream's)."""

    def __init__(self, max_workers: int, max_queue_size: int = 100):
        self.executor = ThreadPoolExecutor(max_workers=max_workers)
        self.semaphore = threading.Semaphore(max_queue_size)

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future:
        self.semaphore.acquire()

        def wrapped(*a: Any, **kw: Any) -> Any:
            try:
                return fn(*a, **kw)
            finally:
                self.semaphore.release()

        return self.executor.submit(wrapped, *args, **kwargs)

    def shutdown(self, wait: bool = True) -> None:
        self.executor.shutdown(wait=wait)


def run_episodes_until_all_complete(tasks: List[Any], func: Callable[[Any], Any], max_workers: Optional[int] = None,
                                    auto_retry: bool = True, retry_delay: float = 1.0) -> List[Any]:
    """Runs `func(task)` for every task in a thread pool and returns the results in order (upstream's
    older pacing helper; with auto_retry a call that raises is logged and run again)."""
    if not tasks:
        return []
    max_workers = max_workers or len(tasks)
    executor = BoundedThreadPoolExecutor(max_workers=max_workers, max_queue_size=max_workers)

    def retrying(task: Any) -> Any:
        while True:
            try:
                return func(task)
            except Exception as e:
                logger.exception("[run_episodes_until_all_complete] error executing episode: %s; retrying", e)
                if retry_delay > 0:
                    time.sleep(retry_delay)

    futures = [executor.submit(retrying if auto_retry else func, task) for task in tasks]
    executor.shutdown(wait=True)
    return [f.result() for f in futures]
