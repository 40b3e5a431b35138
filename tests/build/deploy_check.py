"""The deployment files (deploy/, docs/cluster.md) against the code: tests/build/deploy_check.sh runs it.

    python3 deploy_check.py SOURCE_DIR BIN_DIR

* YAML files parse (PyYAML); each Kubernetes object names apiVersion, kind and metadata.name, every
  container of a Deployment or Job requests resources, a Deployment's containers have a readiness and a
  liveness probe, and every probe's path is an open GET route of the front (src/swarm/route_table.cc).
  A ConfigMap's train.yaml parses too.
* Every command line that runs `ajet`, `ajet-swarm`, `ajet-engine`, `python3 -m ajet_swarm` or the
  example agent (examples/python_agent/agent.py) names subcommands and long flags the real program has,
  read from its `--help` (the binaries from BIN_DIR, the Python ones from SOURCE_DIR). Command lines are
  found in shell files (sbatch, .sh), systemd units (Exec*= lines), the Dockerfile (RUN lines), the
  container command + args of Kubernetes manifests, and docs/cluster.md (sh/bash blocks and inline code).
* Every train config the files hold is loaded by the real front (`ajet-swarm start --conf`, on a free
  loopback port, in a scratch directory): a key it does not know or a bad value fails.

Prints one line per problem, `FILE:LINE: what`, and exits 1 when there is any; DEPLOY_CHECK_VERBOSE=1
also prints every command line it checked.
"""

from __future__ import annotations

import difflib
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Tuple

try:
    import yaml
except ImportError:  # the shell wrapper says how to install it; this is the fallback message
    print("deploy_check: PyYAML is missing (Debian: python3-yaml; scripts/setup.sh --tests installs it)",
          file=sys.stderr)
    sys.exit(1)

ROOT, BIN = sys.argv[1], sys.argv[2]
problems: List[str] = []


def problem(where: str, what: str) -> None:
    problems.append(f"{where}: {what}")


# --- the programs and their --help -------------------------------------------------------------------

BINARIES = ("ajet", "ajet-swarm", "ajet-engine")
PY_ENV = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "clients", "python"), PYTHONDONTWRITEBYTECODE="1")


class Help:
    """What one (sub)command's --help says: its long flags and its subcommands."""

    def __init__(self, text: str):
        self.flags = set(re.findall(r"(?<![\w-])(--[A-Za-z0-9][\w-]*)", text))
        self.subcommands: set = set()
        self.needs_subcommand = False
        cli11 = re.search(r"^Subcommands:\n((?:  .*\n?)*)", text, re.M)
        if cli11:  # CLI11: "  name, alias    description" (descriptions may wrap onto indented lines)
            for line in cli11.group(1).splitlines():
                m = re.match(r"  ([a-z][\w-]*(?:, [a-z][\w-]*)*)\s{2,}", line)
                if m:
                    self.subcommands.update(n.strip() for n in m.group(1).split(","))
            usage = re.search(r"^Usage: .*$", text, re.M)
            self.needs_subcommand = bool(usage and re.search(r"(?<!\[)SUBCOMMAND(?!\])", usage.group(0)))
        usage = re.search(r"^usage: [\s\S]*?\n\n", text, re.M)
        if usage:  # argparse: "{a,b,c} ..." in the usage lines
            choice = re.search(r"\{([\w,-]+)\}", usage.group(0))
            if choice:
                self.subcommands.update(choice.group(1).split(","))
                self.needs_subcommand = True


_help_cache: Dict[Tuple[str, ...], Optional[Help]] = {}


def tool_argv(tool: str) -> List[str]:
    if tool in BINARIES:
        return [os.path.join(BIN, tool)]
    if tool == "ajet_swarm":
        return [sys.executable, "-m", "ajet_swarm"]
    return [sys.executable, os.path.join(ROOT, "examples", "python_agent", "agent.py")]


def help_of(tool: str, path: Tuple[str, ...]) -> Optional[Help]:
    key = (tool,) + path
    if key not in _help_cache:
        argv = tool_argv(tool) + list(path) + ["--help"]
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=PY_ENV, cwd=ROOT)
            text = out.stdout + out.stderr
            _help_cache[key] = Help(text) if out.returncode == 0 else None
            if out.returncode != 0:
                problems.append(f"deploy_check: `{' '.join(argv)}` failed ({out.returncode}): {text.strip()[:300]}")
        except (OSError, subprocess.TimeoutExpired) as e:
            _help_cache[key] = None
            problems.append(f"deploy_check: `{' '.join(argv)}` could not run: {e}")
    return _help_cache[key]


# --- command lines -----------------------------------------------------------------------------------

SEPARATORS = {";", "&&", "||", "|", "&", "(", ")", "`", "{", "}", "then", "do", "else", "exec"}


def shell_words(text: str) -> List[str]:
    """Words of a shell command line, quotes removed, operators as words; a comment ends the line. A
    quoted string is part of one word (an echo's message stays one word), so a command inside "$(...)"
    is not looked into."""
    words: List[str] = []
    for raw in re.findall(r"""\$\(|&&|\|\||[;|&()`]|(?:"(?:[^"\\]|\\.)*"|'[^']*'|[^\s;|&()`"'])+""", text):
        if raw.startswith("#"):
            break
        words.append("(" if raw == "$(" else raw.replace('"', "").replace("'", ""))
    return words


PREFIXES = {"exec", "env", "nice", "nohup", "timeout", "sudo", "time", "command", "srun", "xargs"}


def command_position(words: List[str], i: int) -> bool:
    """Whether words[i] is where a command starts (not a flag's value such as cmake --target ajet)."""
    if i == 0:
        return True
    prev = words[i - 1]
    return (prev in SEPARATORS or prev in PREFIXES or prev.isdigit()
            or re.fullmatch(r"[A-Za-z_]\w*=\S*", prev) is not None)


def tool_at(words: List[str], i: int) -> Tuple[Optional[str], int]:
    """The tool word i starts, and the index of its first argument."""
    w = words[i]
    base = w.rstrip("/").split("/")[-1].strip("{}$")
    folder = w.rstrip("/").rsplit("/", 1)[0] if "/" in w else ""
    # a program's path: bare, ./x, .../bin/x or $VAR/x (not kubectl's deploy/ajet-swarm)
    program_path = folder in ("", ".") or folder.endswith("bin") or folder.startswith("$")
    if base in BINARIES and program_path and command_position(words, i):
        return base, i + 1
    if w == "-m" and i + 1 < len(words) and words[i + 1] == "ajet_swarm":
        return "ajet_swarm", i + 2
    if w.endswith("python_agent/agent.py"):
        return "agent.py", i + 1
    return None, i


def check_words(words: List[str], where: str) -> int:
    """Checks every tool invocation among the words; returns how many it checked."""
    checked = 0
    i = 0
    while i < len(words):
        tool, j = tool_at(words, i)
        if tool is None:
            i += 1
            continue
        args = []
        while j < len(words) and words[j] not in SEPARATORS:
            args.append(words[j])
            j += 1
        i = j
        if not args:
            continue  # the name alone (prose, `which ajet`)
        checked += 1
        if os.environ.get("DEPLOY_CHECK_VERBOSE"):
            print(f"{where}: {tool} {' '.join(args)}")
        check_invocation(tool, args, where)
    return checked


def check_invocation(tool: str, args: List[str], where: str) -> None:
    path: Tuple[str, ...] = ()
    current = help_of(tool, path)
    if current is None:
        return
    found: List[str] = []
    for a in args:
        if a.startswith("--"):
            flag = a.split("=", 1)[0]
            if re.fullmatch(r"--[A-Za-z0-9][\w-]*", flag) and flag not in current.flags:
                name = " ".join(("python3 -m ajet_swarm" if tool == "ajet_swarm" else tool,) + path)
                close = difflib.get_close_matches(flag, sorted(current.flags), n=2)
                hint = f"did you mean {' or '.join(close)}?" if close else f"it has {' '.join(sorted(current.flags))}"
                found.append(f"`{name}` has no flag {flag} ({hint})")
        elif a in current.subcommands:
            path = path + (a,)
            current = help_of(tool, path)
            if current is None:
                return
    if current.needs_subcommand and not any(a in ("--help", "-h", "--version") for a in args):
        name = " ".join((tool,) + path)
        found = [f"`{name} {' '.join(args)}`: names no subcommand of {name} "
                 f"(it has: {', '.join(sorted(current.subcommands))})"]
    for f in found:
        problem(where, f)


def logical_lines(text: str) -> List[Tuple[int, str]]:
    """(first line number, text) with backslash continuations joined."""
    out: List[Tuple[int, str]] = []
    start, buf = 0, ""
    for n, line in enumerate(text.splitlines(), 1):
        if not buf:
            start = n
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        out.append((start, buf + line))
        buf = ""
    if buf:
        out.append((start, buf))
    return out


# --- files -------------------------------------------------------------------------------------------

configs: List[Tuple[str, str]] = []  # (where, train config YAML text)
invocations = 0


def check_shell_text(text: str, rel: str, line_offset: int = 0) -> None:
    global invocations
    for n, line in logical_lines(text):
        invocations += check_words(shell_words(line), f"{rel}:{n + line_offset}")


def check_unit(text: str, rel: str) -> None:
    global invocations
    for n, line in logical_lines(text):
        m = re.match(r"\s*Exec\w+=[-@:+!]*(.*)", line)
        if m:
            invocations += check_words(shell_words(m.group(1)), f"{rel}:{n}")


def check_dockerfile(text: str, rel: str) -> None:
    for n, line in logical_lines(text):
        m = re.match(r"\s*RUN\s+(.*)", line)
        if m:
            check_shell_text(m.group(1), rel, n - 1)


def line_of(text: str, name: str) -> int:
    """The line of the first `name: NAME` (a whole value)."""
    m = re.search(r"name:\s*" + re.escape(name) + r"\s*$", text, re.M)
    return text.count("\n", 0, m.start()) + 1 if m else 1


OPEN_GET_ROUTES = None


def open_get_routes() -> set:
    global OPEN_GET_ROUTES
    if OPEN_GET_ROUTES is None:
        table = open(os.path.join(ROOT, "src", "swarm", "route_table.cc")).read()
        OPEN_GET_ROUTES = set(re.findall(r'Route\{"GET",\s*"([^"]+)",\s*"\w+",\s*RouteAuth::kNone', table))
    return OPEN_GET_ROUTES


def containers_of(doc: dict) -> List[dict]:
    spec = (((doc.get("spec") or {}).get("template") or {}).get("spec") or {})
    return list(spec.get("initContainers") or []) + list(spec.get("containers") or [])


def check_yaml(text: str, rel: str) -> None:
    global invocations
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        problem(rel, f"not valid YAML: {e}")
        return
    for doc in docs:
        if not isinstance(doc, dict) or not all(k in doc for k in ("apiVersion", "kind", "metadata")):
            problem(rel, "a document without apiVersion, kind and metadata (not a Kubernetes object)")
            continue
        kind, name = doc["kind"], (doc["metadata"] or {}).get("name")
        where = f"{rel}:{line_of(text, str(name))}"
        if not name:
            problem(rel, f"a {kind} without metadata.name")
        if kind == "ConfigMap":
            for key, value in (doc.get("data") or {}).items():
                if key.endswith((".yaml", ".yml")):
                    try:
                        yaml.safe_load(value)
                    except yaml.YAMLError as e:
                        problem(where, f"ConfigMap {name} key {key}: not valid YAML: {e}")
                    if re.search(r"^ajet:", value, re.M):
                        configs.append((f"{rel} (ConfigMap {name}, {key})", value))
        for c in containers_of(doc):
            cwhere = f"{rel}:{line_of(text, str(c.get('name')))}"
            words = [str(w) for w in (c.get("command") or []) + (c.get("args") or [])]
            if len(words) >= 3 and words[0].split("/")[-1] in ("sh", "bash") and words[1] == "-c":
                for n, line in logical_lines(words[2]):
                    invocations += check_words(shell_words(line), cwhere)
            else:
                invocations += check_words(words, cwhere)
            if not ((c.get("resources") or {}).get("requests")):
                problem(cwhere, f"{kind} {name}, container {c.get('name')}: no resources.requests")
            if kind == "Deployment" and not c in ((doc["spec"]["template"]["spec"].get("initContainers")) or []):
                for probe in ("readinessProbe", "livenessProbe"):
                    if probe not in c:
                        problem(cwhere, f"{kind} {name}, container {c.get('name')}: no {probe}")
            for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
                get = (c.get(probe) or {}).get("httpGet")
                if get and get.get("path") not in open_get_routes():
                    problem(cwhere, f"{probe} path {get.get('path')} is not an open GET route of the front "
                                    f"(src/swarm/route_table.cc: {', '.join(sorted(open_get_routes()))})")


def check_markdown(text: str, rel: str) -> None:
    """Shell blocks line by line; inline code spans (which may wrap) paragraph by paragraph."""
    global invocations
    in_block, lang, block_start, block = False, "", 0, []
    para: List[Tuple[int, str]] = []

    def flush_paragraph() -> None:
        global invocations
        joined = "\n".join(line for _, line in para)
        for m in re.finditer(r"`([^`]+)`", joined):
            n = para[0][0] + joined.count("\n", 0, m.start())
            invocations += check_words(shell_words(m.group(1).replace("\n", " ")), f"{rel}:{n}")
        para.clear()

    for n, line in enumerate(text.splitlines(), 1):
        fence = re.match(r"\s*```(\w*)", line)
        if fence and not in_block:
            flush_paragraph()
            in_block, lang, block_start, block = True, fence.group(1), n, []
            continue
        if fence and in_block:
            in_block = False
            if lang in ("sh", "bash", "shell", "console"):
                check_shell_text("\n".join(block), rel, block_start)
            continue
        if in_block:
            block.append(line)
        elif line.strip():
            para.append((n, line))
        else:
            flush_paragraph()
    flush_paragraph()


def check_config(where: str, text: str) -> None:
    """Loads the config with the real front: ajet-swarm start --conf, then stopped at its ready line."""
    with tempfile.TemporaryDirectory(prefix="ajet-deploy-check-") as tmp:
        conf = os.path.join(tmp, "train.yaml")
        with open(conf, "w") as f:
            f.write(text)
        argv = [os.path.join(BIN, "ajet-swarm"), "start", "--port", "0", "--exp-dir", os.path.join(tmp, "exp"),
                "--conf", conf]
        env = {k: v for k, v in os.environ.items() if k not in ("AJET_ADMIN_TOKEN",)}
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        lines: List[str] = []
        deadline = time.time() + 60
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("ajet-swarm ready:") or time.time() > deadline:
                break
        proc.send_signal(signal.SIGTERM)
        try:
            rest, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            rest, _ = proc.communicate()
        lines += (rest or "").splitlines()
        ready = any(l.startswith("ajet-swarm ready:") for l in lines)
        # The model directory is the one the deployment mounts, not one of this machine.
        warnings = [l for l in lines if re.search(r"\bwarn(ing)?\b", l, re.I) and (conf in l or "ajet." in l)
                    and not re.search(r"ajet.model.path .* is not a directory on this machine", l)]
        if not ready:
            problem(where, "the front refused the train config: " + " | ".join(lines[-5:]))
        for w in warnings:
            problem(where, f"the front warns about the train config: {w}")


def main() -> int:
    files = subprocess.run(["git", "-C", ROOT, "ls-files", "--cached", "--others", "--exclude-standard",
                            "deploy", "docs/cluster.md"], capture_output=True, text=True).stdout.split()
    if not files:  # not a git checkout
        files = [os.path.relpath(os.path.join(d, f), ROOT) for d, _, fs in os.walk(os.path.join(ROOT, "deploy"))
                 for f in fs] + ["docs/cluster.md"]
    files = sorted(f for f in set(files) if os.path.isfile(os.path.join(ROOT, f)))
    for rel in files:
        text = open(os.path.join(ROOT, rel)).read()
        name = os.path.basename(rel)
        if name.endswith((".sh", ".sbatch")):
            check_shell_text(text, rel)
        elif name.endswith((".yaml", ".yml")):
            check_yaml(text, rel)
        elif name.endswith(".service"):
            check_unit(text, rel)
        elif name == "Dockerfile":
            check_dockerfile(text, rel)
        elif name.endswith(".md"):
            check_markdown(text, rel)
        elif name.endswith((".env.example", ".dockerignore")):
            for n, line in enumerate(text.splitlines(), 1):
                if name.endswith(".env.example") and line.strip() and not line.startswith("#") \
                        and not re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", line):
                    problem(f"{rel}:{n}", f"not a KEY=VALUE line: {line}")
        else:
            problem(rel, "no check knows this kind of file (tests/build/deploy_check.py)")
    for where, text in configs:
        check_config(where, text)
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(f"deploy_check: {len(problems)} problem(s) in {len(files)} files", file=sys.stderr)
        return 1
    print(f"deploy_check: {len(files)} files, {invocations} command lines checked against --help, "
          f"{len(configs)} train config(s) loaded by the front")
    return 0


if __name__ == "__main__":
    sys.exit(main())
