"""The agents the harness runs (ajet_swarm/harness.py): the stock CLIs' templates (the command, the
environment and the config files each needs against the front, as docs/agents.md describes) and the
`command` template's placeholders. Writes only into the sandbox's HOME; never starts anything.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass
from typing import Dict, List, Tuple

TEMPLATES = ("command", "claude-code", "codex", "qwen-code")
PLACEHOLDERS = re.compile(r"\{(prompt|task_file|model|base_url|api_key)\}")


@dataclass
class AgentContext:
    base_url: str        # inside the sandbox, .../v1
    api_key: str
    model: str
    prompt: str
    task_file: str       # inside the sandbox
    home: str            # host path of the sandbox's HOME (for config files)


def default_npm_bin() -> str:
    cache = os.environ.get("AJET_NPM_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "agentjet", "node")
    return os.path.join(cache, "node_modules", ".bin")


def agent_command(template: str, command: str, args: List[str], ctx: AgentContext) -> Tuple[str, Dict[str, str]]:
    """The shell command and the extra environment of the configured agent. The stock CLIs get what
    docs/agents.md says each needs; `command` gets the placeholders filled in (shell-quoted)."""
    extra_args = " ".join(shlex.quote(a) for a in args)
    root = ctx.base_url[:-3] if ctx.base_url.endswith("/v1") else ctx.base_url
    if template == "command":
        values = {"prompt": ctx.prompt, "task_file": ctx.task_file, "model": ctx.model, "base_url": ctx.base_url,
                  "api_key": ctx.api_key}
        return PLACEHOLDERS.sub(lambda m: shlex.quote(values[m.group(1)]), command), {}
    prompt = shlex.quote(ctx.prompt)
    if template == "claude-code":
        env = {"ANTHROPIC_BASE_URL": root, "ANTHROPIC_API_KEY": ctx.api_key,
               "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1",
               "DISABLE_ERROR_REPORTING": "1"}
        return f"claude -p {prompt} --output-format json {extra_args or '--allowedTools Bash,Read,Edit,Write'}", env
    if template == "codex":
        # Codex runs exec_command in a bubblewrap sandbox of its own, which cannot nest in ours
        # (no capabilities, no user namespaces here): our sandbox is the boundary, so its own is off.
        codex_home = os.path.join(ctx.home, ".codex")
        os.makedirs(codex_home, exist_ok=True)
        with open(os.path.join(codex_home, "config.toml"), "w") as f:
            # A JSON string is a TOML basic string (for these: no control characters).
            f.write(f'model = {json.dumps(ctx.model)}\nmodel_provider = "ajet"\ncheck_for_update_on_startup = false\n'
                    'sandbox_mode = "danger-full-access"\napproval_policy = "never"\n\n'
                    "[analytics]\nenabled = false\n\n"
                    f'[model_providers.ajet]\nname = "AgentJet"\nbase_url = {json.dumps(ctx.base_url)}\n'
                    'env_key = "AJET_EPISODE_KEY"\nwire_api = "responses"\n')
        env = {"CODEX_HOME": "/home/agent/.codex", "AJET_EPISODE_KEY": ctx.api_key}
        return f"codex exec --skip-git-repo-check {extra_args} {prompt}", env
    # qwen-code
    qwen_home = os.path.join(ctx.home, ".qwen")
    os.makedirs(qwen_home, exist_ok=True)
    with open(os.path.join(qwen_home, "settings.json"), "w") as f:
        json.dump({"memory": {"enableManagedAutoMemory": False}}, f)
    return f"qwen -p {prompt} --output-format json {extra_args}", {}
