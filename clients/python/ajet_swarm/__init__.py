"""AgentJet swarm client (standard library only).

    from ajet_swarm import SwarmClient, WorkflowOutput
    client = SwarmClient("http://127.0.0.1:10086")
    episode = client.begin_episode()
    ... run the agent with episode.base_url / episode.api_key (or episode.chat_client()) ...
    client.end_episode(task_id, episode.episode_uuid, WorkflowOutput(reward=1.0))
"""

from .chat import ChatClient, accumulate_stream
from .client import (BOOTING, CANNOT_CONNECT, OFFLINE, ROLLING, ROLLING_POST, WEIGHT_EXPORTING, WEIGHT_SYNCING,
                     SwarmClient)
from .config_yaml import to_yaml
from .errors import (ChatError, SwarmCommandError, SwarmConnectionError, SwarmError, SwarmServerOfflineError,
                     SwarmTimeoutError)
from .stat import format_rollout_stat
from .types import Episode, RetryPolicy, Task, ThrottlePolicy, WorkflowOutput

__version__ = "0.1.0"

__all__ = [
    "SwarmClient", "ChatClient", "accumulate_stream", "Episode", "Task", "WorkflowOutput", "ThrottlePolicy",
    "RetryPolicy", "SwarmError", "SwarmConnectionError", "SwarmCommandError", "SwarmServerOfflineError",
    "SwarmTimeoutError", "ChatError", "format_rollout_stat", "to_yaml", "OFFLINE", "BOOTING", "ROLLING",
    "ROLLING_POST", "WEIGHT_SYNCING", "WEIGHT_EXPORTING", "CANNOT_CONNECT",
]
