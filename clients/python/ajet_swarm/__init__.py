"""AgentJet swarm client (standard library only).

    from ajet_swarm import SwarmClient, WorkflowOutput
    client = SwarmClient("http://127.0.0.1:10086")
    episode = client.begin_episode()
    ... run the agent with episode.base_url / episode.api_key (or episode.chat_client()) ...
    client.end_episode(task_id, episode.episode_uuid, WorkflowOutput(reward=1.0))

Upstream AgentJet scripts run after changing only their imports: every name they import from
`ajet.*` for a swarm client is exported here (docs/clients.md, "Switching from upstream").
"""

from .chat import ChatClient, accumulate_stream
from .client import (BOOTING, CANNOT_CONNECT, OFFLINE, ROLLING, ROLLING_POST, WEIGHT_EXPORTING, WEIGHT_SYNCING,
                     SwarmClient, admin_token_for, auto_train_with_dataset)
from .config_yaml import YamlError, from_yaml, to_yaml
from .errors import (ChatError, EpisodeGroupError, SwarmCommandError, SwarmConnectionError, SwarmError,
                     SwarmServerOfflineError, SwarmTimeoutError, WeightUpdatedHalfway)
from .job import AgentJetJob
from .multi_episode import MultiEpisode
from .records import AttrDict, EpisodeStatus, RolloutStat
from .stat import format_rollout_stat
from .task_reader import (AjetTaskReader, HuggingfaceDatRepo, JsonlDatasetFile, JsonlTaskReader, JsonlTrainingFp,
                          RandomDummyTaskReader, RouterTaskReader)
from .thread_executors import BoundedThreadPoolExecutor, PeriodicDrainThreadPoolExecutor, run_episodes_until_all_complete
from .types import (Episode, OpenaiBaseUrlAndApiKey, RetryPolicy, SwarmThrottlePolicy, Task, ThrottlePolicy,
                    WorkflowOutput)

__version__ = "0.1.0"

# Upstream's name of the pool-info type (ajet.tuner_lib.experimental.swarm_overwatch_utils).
CurrentBatchRolloutPoolInformation = RolloutStat

__all__ = [
    "SwarmClient", "admin_token_for", "ChatClient", "accumulate_stream", "Episode", "OpenaiBaseUrlAndApiKey", "Task", "WorkflowOutput",
    "ThrottlePolicy", "SwarmThrottlePolicy", "RetryPolicy", "SwarmError", "SwarmConnectionError", "SwarmCommandError",
    "SwarmServerOfflineError", "SwarmTimeoutError", "ChatError", "format_rollout_stat", "to_yaml", "from_yaml",
    "YamlError", "AgentJetJob", "AttrDict", "RolloutStat", "EpisodeStatus", "CurrentBatchRolloutPoolInformation",
    "RouterTaskReader", "AjetTaskReader", "HuggingfaceDatRepo", "JsonlDatasetFile", "JsonlTrainingFp",
    "JsonlTaskReader", "RandomDummyTaskReader", "PeriodicDrainThreadPoolExecutor", "BoundedThreadPoolExecutor",
    "run_episodes_until_all_complete", "auto_train_with_dataset", "OFFLINE", "BOOTING", "ROLLING", "ROLLING_POST",
    "WEIGHT_SYNCING", "WEIGHT_EXPORTING", "CANNOT_CONNECT", "MultiEpisode", "EpisodeGroupError",
    "WeightUpdatedHalfway",
]
