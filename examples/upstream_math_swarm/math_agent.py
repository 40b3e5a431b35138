# -*- coding: utf-8 -*-
"""A swarm client written against upstream AgentJet's Python API, run on this project's server by
changing only its import block.

It uses the pieces an upstream math tutorial uses, in the same way: an AgentJetJob with the run's
settings, a RouterTaskReader over a JSONL file, and a PeriodicDrainThreadPoolExecutor that runs
GRPO_N episodes per task. Each episode is begin_episode (with a SwarmThrottlePolicy), one chat
completion, reward 1 when the
\\boxed{} number is the answer, then end_episode. It needs nothing beyond the standard library
(urllib for HTTP). Under upstream AgentJet the same file runs with the upstream import block
(commented below) in place of the ajet_swarm one.

    python3 examples/upstream_math_swarm/math_agent.py        # see README.md for the server it needs
"""

import json
import os
import re
import sys
import urllib.request
from textwrap import dedent

# ---- upstream's imports -------------------------------------------------------------------------
# from ajet.schema.task import Task, WorkflowOutput
# from ajet.copilot.job import AgentJetJob
# from ajet.task_reader import RouterTaskReader
# from ajet.utils.thread_executors import PeriodicDrainThreadPoolExecutor
# from ajet.tuner_lib.as_oai_baseurl_apikey import OpenaiBaseUrlAndApiKey
# from ajet.default_config.ajet_default import AjetTaskReader, JsonlDatasetFile, JsonlTrainingFp
# from ajet.tuner_lib.experimental.interchange_utils import SwarmThrottlePolicy
# from ajet.tuner_lib.experimental.swarm_client import SwarmClient
# ---- ... become (the package is found in clients/python when it is not installed) ------------
try:
    import ajet_swarm  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python"))
from ajet_swarm import Task, WorkflowOutput  # noqa: E402
from ajet_swarm import AgentJetJob  # noqa: E402
from ajet_swarm import RouterTaskReader  # noqa: E402
from ajet_swarm import PeriodicDrainThreadPoolExecutor  # noqa: E402
from ajet_swarm import OpenaiBaseUrlAndApiKey  # noqa: E402
from ajet_swarm import AjetTaskReader, JsonlDatasetFile, JsonlTrainingFp  # noqa: E402
from ajet_swarm import SwarmThrottlePolicy  # noqa: E402
from ajet_swarm import SwarmClient  # noqa: E402
# -------------------------------------------------------------------------------------------------

HERE = os.path.dirname(os.path.abspath(__file__))
GRPO_N = int(os.getenv("GRPO_N", "4"))  # grpo group size
NUM_EPOCH = int(os.getenv("NUM_EPOCH", "1"))
AJET_SWARM_URL = os.getenv("AJET_SWARM_URL", "http://localhost:10086")
REMOTE_MODEL_PATH = os.getenv("REMOTE_MODEL_PATH", "exp/examples/micro")
REMOTE_BATCH_SIZE = int(os.getenv("REMOTE_BATCH_SIZE", "4"))
REMOTE_ALLOCATE_GPU_PER_NODE = 1
DATASET = os.getenv("DATASET", os.path.join(HERE, "data", "train.jsonl"))


def main():
    tasks = RouterTaskReader(
        reader_type="jsonl_dataset_file",
        reader_config=AjetTaskReader(jsonl_dataset_file=JsonlDatasetFile(training=JsonlTrainingFp(file_path=DATASET))),
    )

    # The run's settings go to the server as an AgentJetJob, as an upstream script sends them.
    client = SwarmClient(AJET_SWARM_URL)
    job = AgentJetJob(
        experiment_name="math_swarm_grpo",
        algorithm="grpo",
        n_gpu=REMOTE_ALLOCATE_GPU_PER_NODE,
        model=REMOTE_MODEL_PATH,
        batch_size=REMOTE_BATCH_SIZE,
        num_repeat=GRPO_N,
        backbone=os.getenv("REMOTE_BACKBONE", "debug"),  # debug: inference only; torch trains
        max_env_worker=16,
        # README.md's micro model has 2048 positions
        max_prompt_length=1536, max_response_length=256, max_model_len=2048, max_response_length_in_one_turn=64,
    )
    job.config.ajet.engine = {"threads": 2, "kv_cache_memory_mb": 128}  # this project's engine settings
    client.auto_sync_train_config_and_start_engine(job)

    def one_episode(task):
        # The throttle keeps this client from claiming far ahead of the batch the server collects.
        throttle = SwarmThrottlePolicy(current_task_id=task.task_id, expected_batch_size=REMOTE_BATCH_SIZE,
                                       expected_num_repeat=GRPO_N)
        episode_uuid, endpoint = client.begin_episode(discard_episode_timeout=60, throttle_policy=throttle)
        output = solve(task, endpoint)
        client.end_episode(task, episode_uuid, output)
        return output.reward

    rewards = []
    pool = PeriodicDrainThreadPoolExecutor(workers=GRPO_N * REMOTE_BATCH_SIZE, max_parallel=8, auto_retry=True)
    for _ in range(NUM_EPOCH):
        for task in tasks.generate_training_tasks():
            for _ in range(GRPO_N):  # one GRPO group per task
                _, finished = pool.submit_with_periodic_drain(fn=one_episode, task=task)
                rewards += finished
    rewards += pool.drain()
    pool.shutdown()

    client.print_rollout_stat()
    print(json.dumps({"episodes": len(rewards), "mean_reward": sum(rewards) / max(1, len(rewards)),
                      "global_step": client.get_global_step()}))


SYSTEM = dedent("""\
    Solve the arithmetic word problem. Think step by step, then write the final number as \\boxed{N}.""")


def solve(task: Task, endpoint: OpenaiBaseUrlAndApiKey) -> WorkflowOutput:
    """One chat call through the episode's endpoint; reward 1 when the boxed number is the answer."""
    body = {"model": "any", "messages": [{"role": "system", "content": SYSTEM},
                                         {"role": "user", "content": task.main_query}]}
    request = urllib.request.Request(
        f"{endpoint.base_url}/chat/completions", data=json.dumps(body).encode(), method="POST",
        headers={"Authorization": f"Bearer {endpoint.api_key}", "Content-Type": "application/json",
                 "Connection": "close"},
    )
    with urllib.request.urlopen(request, timeout=300) as response:
        answer = json.loads(response.read())["choices"][0]["message"]["content"] or ""
    expected = task.metadata["answer"].split("####")[-1].strip()
    boxed = re.search(r"\\boxed\{([^}]*)\}", answer)
    correct = boxed is not None and boxed.group(1).strip() == expected
    return WorkflowOutput(reward=1.0 if correct else 0.0, metadata={"final_answer": answer})


if __name__ == "__main__":
    main()
