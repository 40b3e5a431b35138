"""`python3 -m ajet_swarm harness` end to end (ctest python_harness, label e2e): the real ajet-swarm with
ajet-echo-engine, the harness as a real process, `command` agents in bubblewrap sandboxes making a
tool round trip through the relay, verifier rewards; the sandbox reaches nothing but the front;
cgroup limits; nothing left behind; infra failures aborted with their cause (counted in /metrics);
a SIGKILLed harness reaped by the next one; the stock CLI templates when the npm cache has them.
Every wait is on an observable event (a file, a process exit) with a generous deadline.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

from swarm_fixture import SOURCE_DIR, SwarmServer, config_yaml, eventually, tokenizer_fixture

sys.path.insert(0, os.path.join(SOURCE_DIR, "clients", "python"))
from ajet_swarm import SwarmClient  # noqa: E402

MARKER = "ajet-secret-42"

# A stdlib agent: one tool call on cue (the echo engine answers the last user message, so a prompt
# holding a <tool_call> block is a tool call), runs it, sends the result, writes the final answer;
# then probes the network (a host port that is not the front).
AGENT = r'''
import json, os, socket, sys, urllib.request
base, key = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
task = json.load(open(os.environ["AJET_TASK_FILE"]))
tools = [{"type": "function", "function": {"name": "read_file", "description": "read a file",
          "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]
def chat(messages):
    body = {"model": os.environ["OPENAI_MODEL"], "messages": messages, "tools": tools}
    req = urllib.request.Request(base + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=120).read())["choices"][0]["message"]
messages = [{"role": "user", "content": task["prompt"]}]
reply = chat(messages)
messages.append(reply)
for call in reply.get("tool_calls") or []:
    path = json.loads(call["function"]["arguments"])["path"]
    messages.append({"role": "tool", "tool_call_id": call["id"], "content": open(path).read()})
final = chat(messages)
open("answer.txt", "w").write(final.get("content") or "")
probe = socket.socket()
probe.settimeout(5)
result = probe.connect_ex(("127.0.0.1", int(task["probe_port"])))
open("probe.txt", "w").write(str(result))
'''

# Reward 1 when the tool's result came back and the probe failed, 0.25 when the probe connected.
VERIFY = r'''
import json
answer, probe = open("answer.txt").read(), int(open("probe.txt").read())
ok = "ajet-secret-42" in answer
print(json.dumps({"reward": (1.0 if probe != 0 else 0.25) if ok else 0.0, "is_success": ok,
                  "metadata": {"probe": probe}}))
'''

TOOL_PROMPT = '<tool_call>\n{"name": "read_file", "arguments": {"path": "data.txt"}}\n</tool_call>'


def npm_bin():
    """node_modules/.bin with the stock CLIs, or None (the test skips loudly, as stock_cli_test)."""
    if shutil.which("node") is None:
        return None
    r = subprocess.run(["bash", os.path.join(SOURCE_DIR, "scripts", "npm-deps.sh")], capture_output=True, text=True)
    last = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
    return os.path.join(last, ".bin") if r.returncode == 0 and os.path.isdir(last) else None


class HarnessUnitTest(unittest.TestCase):
    """The pure parts: the verifier's verdict, the placeholders, the config's checks."""

    def test_extra_binds_are_mounted_after_the_work_dir_and_tmp(self):
        # An agent dir under /work (or /tmp) on the host must not be hidden by the sandbox's own /work
        # bind (or its /tmp tmpfs): bwrap mounts in argument order.
        from ajet_swarm.sandbox import Limits, Sandbox, SandboxSpec
        root = tempfile.mkdtemp(prefix="ajet_harness_argv_")
        self.addCleanup(shutil.rmtree, root, True)
        binds = ["/work/some/agent", "/tmp/an/agent"]
        argv = Sandbox(SandboxSpec("s", root, Limits(), ("127.0.0.1", 1), 1, ro_binds=binds), None)._bwrap_argv(
            "agent", "true", with_relay=False)
        last_cover = max(i for i, a in enumerate(argv) if a in ("/work", "/tmp") and argv[i - 1] in (self.work_dir(root), "--tmpfs"))
        for b in binds:
            self.assertGreater(argv.index(b), last_cover, argv)

    @staticmethod
    def work_dir(root):
        return os.path.join(root, "work")

    def test_verifier_verdicts(self):
        from ajet_swarm.harness import verifier_verdict
        self.assertEqual(verifier_verdict(0, False, True, "").reward, 1.0)
        self.assertEqual(verifier_verdict(1, False, True, "FAILED").reward, 0.0)
        v = verifier_verdict(1, False, True, 'log\n{"reward": 0.5, "is_success": false, "metadata": {"k": 1}}\n\n')
        self.assertEqual((v.reward, v.is_success, v.metadata, v.abort_cause), (0.5, False, {"k": 1}, ""))
        for status, out, cause in [(None, "", "verifier_timeout"), (137, "", "verifier_crashed"),
                                   (127, "", "verifier_crashed"), (0, '{"reward": "x"}', "verifier_crashed"),
                                   (0, '{"reward": true}', "verifier_crashed"), (0, '{"score": 1}', "verifier_crashed"),
                                   (0, '{"reward": NaN}', "verifier_crashed")]:
            self.assertEqual(verifier_verdict(status, status is None, True, out).abort_cause, cause, (status, out))
        self.assertEqual(verifier_verdict(0, False, False, "").abort_cause, "sandbox_start_failed")

    def test_placeholders_are_shell_quoted_and_other_braces_left_alone(self):
        from ajet_swarm.harness_agents import AgentContext, agent_command
        ctx = AgentContext(base_url="http://127.0.0.1:1/v1", api_key="sk-1", model="m", prompt="it's $(rm -rf /)",
                           task_file="/ajet/task.json", home="/nonexistent")
        command, env = agent_command("command", "run {prompt} --key {api_key} | awk '{print $1}' {unknown}", [], ctx)
        self.assertEqual(command, "run 'it'\"'\"'s $(rm -rf /)' --key sk-1 | awk '{print $1}' {unknown}")
        self.assertEqual(env, {})

    def test_config_refuses_unknown_keys_and_bad_values(self):
        from ajet_swarm.harness import HarnessConfig
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d, True)
        with open(os.path.join(d, "t.jsonl"), "w") as f:
            f.write('{"task_id": "a", "prompt": "p"}\n')
        good = {"tasks": "t.jsonl", "agent": {"command": "true"}, "verifier": {"command": "true"}}
        self.assertEqual(HarnessConfig.from_dict(good, d).tasks, os.path.join(d, "t.jsonl"))
        for bad, message in [({**good, "concurency": 2}, "unknown key 'concurency'"),
                             ({**good, "agent": {"command": "x", "timeot": 1}}, "unknown key 'agent.timeot'"),
                             ({**good, "agent": {"template": "aider"}}, "agent.template must be one of"),
                             ({**good, "concurrency": 0}, "concurrency must be"),
                             ({**good, "verifier": {}}, "verifier.command is required"),
                             ({**good, "tasks": "missing.jsonl"}, "no such file")]:
            with self.assertRaisesRegex(ValueError, message):
                HarnessConfig.from_dict(bad, d)


    def test_the_documented_config_is_valid_and_names_every_key(self):
        import dataclasses
        import re
        from ajet_swarm.config_yaml import from_yaml
        from ajet_swarm.harness import HarnessConfig
        with open(os.path.join(SOURCE_DIR, "docs", "agents.md")) as f:
            doc = f.read()
        section = doc[doc.index("## Harness for CLI agents"):]
        raw = from_yaml(re.search(r"```yaml\n(.*?)```", section, re.S).group(1))
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d, True)
        with open(os.path.join(d, "tasks.jsonl"), "w") as f:
            f.write('{"task_id": "a", "prompt": "p"}\n')
        HarnessConfig.from_dict(raw, d)
        documented = {k for k, v in raw.items() if not isinstance(v, dict) or k == "sampling"}
        documented |= {(k if k == "sandbox" else k + "_") + s for k, v in raw.items()
                       if isinstance(v, dict) and k != "sampling" for s in v}
        documented = {n[len("sandbox"):] if n.startswith("sandbox") else n for n in documented}
        self.assertEqual(documented, {f.name for f in dataclasses.fields(HarnessConfig)})


class HarnessTestBase(unittest.TestCase):
    def setUp(self):
        if shutil.which("bwrap") is None:
            self.skipTest("SKIPPED: bubblewrap (bwrap) is not installed (scripts/setup.sh installs it)")
        self.server = SwarmServer()
        self.addCleanup(self.server.stop)
        self.client = SwarmClient(self.server.url, verbose=False)
        self.client.auto_sync_train_config_and_start_engine(
            config_yaml(tokenizer_fixture(), batch=100, repeat=2, pool=8, max_model_len=200000).replace(
                "max_prompt_length: 256", "max_prompt_length: 180000").replace(
                "max_response_length: 256", "max_response_length: 16384").replace(
                "max_response_length_in_one_turn: 256", "max_response_length_in_one_turn: 16384"), max_wait=120)
        self.dir = tempfile.mkdtemp(prefix="ajet_harness_test_")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.state = os.path.join(self.dir, "state")
        self.gate = os.path.join(self.dir, "gate")
        os.makedirs(self.gate)
        # A host port that is not the front: the sandbox must not reach it.
        self.probe = socket.socket()
        self.probe.bind(("127.0.0.1", 0))
        self.probe.listen(8)
        self.probe.setblocking(False)
        self.addCleanup(self.probe.close)
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait(30)

    def task(self, task_id, **extra):
        files = {"agent.py": AGENT, "verify.py": VERIFY, "data.txt": MARKER + "\n"}
        files.update(extra.pop("files", {}))
        return {"task_id": task_id, "prompt": TOOL_PROMPT, "probe_port": self.probe.getsockname()[1], "files": files,
                **extra}

    def write_config(self, tasks, agent_command, verifier="python3 verify.py", agent_extra=None, **over):
        with open(os.path.join(self.dir, "tasks.jsonl"), "w") as f:
            for t in tasks:
                f.write(json.dumps(t) + "\n")
        sandbox = {"state_dir": self.state, "memory_mb": 1024, "pids": 256, "cpus": 1.5, "headroom": 10,
                   "ro_binds": [self.gate]}
        sandbox.update(over.pop("sandbox", {}))
        conf = {"swarm_url": self.server.url, "tasks": os.path.join(self.dir, "tasks.jsonl"),
                "concurrency": over.pop("concurrency", 2), "repeat": over.pop("repeat", 1),
                "agent": {"command": agent_command, "timeout": over.pop("agent_timeout", 120), **(agent_extra or {})},
                "verifier": {"command": verifier, "timeout": over.pop("verifier_timeout", 60)},
                "sandbox": sandbox, **over}
        path = os.path.join(self.dir, "harness.yaml")
        with open(path, "w") as f:
            json.dump(conf, f)  # JSON is YAML (flow style)
        return path

    def start_harness(self, conf, **env_over):
        env = dict(os.environ, PYTHONPATH=os.path.join(SOURCE_DIR, "clients", "python"), **env_over)
        p = subprocess.Popen([sys.executable, "-m", "ajet_swarm", "harness", "--conf", conf],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        self.procs.append(p)
        return p

    def finish(self, p, timeout=300):
        out, _ = p.communicate(timeout=timeout)
        self.assertEqual(p.returncode, 0, out)
        lines = [ln for ln in out.splitlines() if ln.startswith('{"harness_summary"')]
        self.assertTrue(lines, out)
        with open(os.path.join(self.state, "summary.json")) as f:
            return json.loads(lines[-1])["harness_summary"], json.load(f), out

    def metrics(self):
        with urllib.request.urlopen(self.server.url + "/metrics", timeout=30) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def aborted(self, cause):
        return self.metrics().get(f'ajet_episodes_aborted_total{{cause="{cause}"}}', 0.0)

    def assert_nothing_left(self):
        self.assertEqual(glob.glob(os.path.join(self.state, "sandboxes", "*")), [])
        self.assertEqual(glob.glob(os.path.join(self.state, "journal", "*")), [])
        # This harness's cgroups only (ajet_harness/<sha1 of its state dir>): other harnesses may run.
        tag = hashlib.sha1(os.path.realpath(self.state).encode()).hexdigest()[:12]
        left = glob.glob(f"/sys/fs/cgroup/*/ajet_harness/{tag}")
        self.assertEqual(left, [], "sandbox cgroups left behind")
        procs = []
        for cmd in glob.glob("/proc/[0-9]*/cmdline"):
            try:
                with open(cmd, "rb") as f:
                    if self.state.encode() in f.read():
                        procs.append(cmd)
            except OSError:
                pass
        self.assertEqual(procs, [], "sandbox processes left behind")
        self.assertEqual(self.metrics().get('ajet_episodes{state="claimed"}'), 0.0, "an episode stays claimed")

    def symlink_repo(self):
        """A plain directory (copied, not cloned) whose `out` links to a host dir outside the sandbox."""
        repo = os.path.join(self.dir, "symlink_repo")
        os.makedirs(repo)
        os.symlink(self.gate, os.path.join(repo, "out"))
        return repo

    def wait_started(self, n, timeout=120):
        ok = eventually(lambda: len(glob.glob(os.path.join(self.state, "sandboxes", "*", "work", "started"))) >= n,
                        timeout)
        self.assertTrue(ok, f"{n} sandboxes did not start")


class HarnessCommandAgentTest(HarnessTestBase):
    def test_episodes_complete_in_sandboxes_through_the_relay(self):
        gate = os.path.join(self.gate, "go")
        agent = f"touch started; while [ ! -e {gate} ]; do sleep 0.05; done; python3 agent.py"
        # t2's data.txt comes from a git repository cloned in as the work dir.
        repo = os.path.join(self.dir, "repo")
        os.makedirs(repo)
        with open(os.path.join(repo, "data.txt"), "w") as f:
            f.write(MARKER + " from the repo\n")
        for git in (["init", "-q"], ["add", "data.txt"],
                    ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "data"]):
            subprocess.run(["git", "-C", repo] + git, check=True, capture_output=True)
        from_repo = self.task("t2", repo=repo)
        del from_repo["files"]["data.txt"]
        conf = self.write_config([self.task("t1"), from_repo], agent, repeat=2)
        p = self.start_harness(conf)
        self.wait_started(2)
        # Exactly `concurrency` sandboxes run, each in its cgroups with the limits set.
        journals = glob.glob(os.path.join(self.state, "journal", "*.json"))
        self.assertEqual(len(journals), 2)
        for j in journals:
            with open(j) as f:
                record = json.load(f)
            memory, pids, cpu = record["cgroups"]
            with open(os.path.join(memory, "memory.limit_in_bytes")) as f:
                self.assertEqual(int(f.read()), 1024 * 1024 * 1024)
            with open(os.path.join(pids, "pids.max")) as f:
                self.assertEqual(f.read().strip(), "256")
            with open(os.path.join(cpu, "cpu.cfs_quota_us")) as f:
                self.assertEqual(int(f.read()), 150000)
            with open(os.path.join(pids, "cgroup.procs")) as f:
                self.assertTrue(f.read().split(), "the sandbox's processes are in its cgroup")
            self.assertTrue(record["episode_uuid"] and record["episode_key"])
        open(gate, "w").close()
        summary, full, out = self.finish(p)
        self.assertEqual(summary["ended"], 4, out)
        self.assertEqual(summary["aborted"], {}, out)
        self.assertEqual(summary["mean_reward"], 1.0, "tool result came back; the probe port was unreachable\n" + out)
        for line in full["episodes"]:
            self.assertGreaterEqual(line["model_requests"], 2, "a tool round trip is two calls")
        with self.assertRaises(BlockingIOError):
            self.probe.accept()  # nothing from a sandbox ever reached it
        self.assertEqual(self.metrics()['ajet_episodes_ended_total{outcome="finished",type="train"}'], 4.0)
        self.assert_nothing_left()

    def test_infra_failures_abort_with_their_cause(self):
        crash = {"verify.py": "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"}
        hang = {"verify.py": "import time\ntime.sleep(1000)\n"}
        tasks = [self.task("ok"),
                 self.task("die", files={"agent.py": "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"}),
                 self.task("crash", files=crash),
                 self.task("hang", files=hang),
                 self.task("bad_json", files={"verify.py": "print('{\"reward\": oops')\n"}),
                 self.task("no_repo", repo=os.path.join(self.dir, "missing")),
                 self.task("escape", files={"../outside.txt": "x"}),
                 self.task("symlink", repo=self.symlink_repo(), files={"out/x.txt": "x"}),
                 # 2 GiB touched against memory_mb 1024: the cgroup's OOM killer ends it.
                 self.task("oom", files={"agent.py": "x = b'x' * (2048 << 20)\n"})]
        conf = self.write_config(tasks, "python3 agent.py", verifier_timeout=10, concurrency=3)
        before = self.metrics()
        summary, full, out = self.finish(self.start_harness(conf))
        self.assertEqual(summary["ended"], 1, out)
        self.assertEqual(summary["aborted"], {"agent_died_before_first_call": 2, "verifier_crashed": 2,
                                              "verifier_timeout": 1, "sandbox_start_failed": 3}, out)
        self.assertEqual(os.listdir(self.gate), [], "a task file written through the repo's symlink")
        self.assertFalse(os.path.exists(os.path.join(self.state, "sandboxes", "outside.txt")))
        by_task = {line["task_id"]: line for line in full["episodes"]}
        self.assertEqual(by_task["die"]["abort_cause"], "agent_died_before_first_call")
        self.assertEqual(by_task["oom"]["abort_cause"], "agent_died_before_first_call")
        self.assertEqual(by_task["oom"]["agent_exit"], 128 + signal.SIGKILL, "killed by the OOM killer")
        self.assertEqual(by_task["hang"]["abort_cause"], "verifier_timeout")
        self.assertEqual(by_task["no_repo"]["abort_cause"], "sandbox_start_failed")
        after = self.metrics()
        for cause, n in summary["aborted"].items():
            key = f'ajet_episodes_aborted_total{{cause="{cause}"}}'
            self.assertEqual(after.get(key, 0) - before.get(key, 0), n, key)
        self.assertEqual(after['ajet_episodes_ended_total{outcome="aborted",type="train"}'], 8.0)
        self.assert_nothing_left()

    def test_a_state_dir_deeper_than_a_socket_path_holds(self):
        # A Unix socket's path holds at most 107 bytes; the relay's lives in the state dir.
        self.state = os.path.join(self.dir, *(["a_directory_name_of_forty_characters_xxx"] * 4), "state")
        self.assertGreater(len(self.state), 160)
        summary, _, out = self.finish(self.start_harness(self.write_config([self.task("deep")], "python3 agent.py")))
        self.assertEqual(summary, {"ended": 1, "aborted": {}, "mean_reward": 1.0}, out)
        self.assert_nothing_left()

    def test_an_agent_timeout_after_its_calls_is_its_own_outcome(self):
        # The verifier runs as usual and sees the timeout; reward 1 only when it did.
        verify = ("import os\nok = 'ajet-secret-42' in open('answer.txt').read()\n"
                  "print('{\"reward\": %d}' % (ok and os.environ['AJET_AGENT_TIMED_OUT'] == '1'\n"
                  "                           and os.environ['AJET_AGENT_EXIT'] == ''))\n")
        conf = self.write_config([self.task("slow", files={"verify.py": verify})], "python3 agent.py; sleep 1000",
                                 agent_timeout=15)
        summary, full, out = self.finish(self.start_harness(conf))
        self.assertEqual(summary, {"ended": 1, "aborted": {}, "mean_reward": 1.0}, out)
        self.assert_nothing_left()

    def test_a_sigkilled_harness_is_reaped_by_the_next(self):
        gate = os.path.join(self.gate, "go")
        agent = f"touch started; python3 agent.py; while [ ! -e {gate} ]; do sleep 0.05; done"
        conf = self.write_config([self.task("t1"), self.task("t2")], agent)
        p = self.start_harness(conf)
        self.wait_started(2)
        os.kill(p.pid, signal.SIGKILL)
        p.wait(30)
        p.stdout.close()
        journals = glob.glob(os.path.join(self.state, "journal", "*.json"))
        self.assertEqual(len(journals), 2)
        # bwrap --die-with-parent: the sandboxes die with the harness; their cgroups stay for the reaper.
        cgroups = []
        for j in journals:
            with open(j) as f:
                cgroups += json.load(f)["cgroups"]

        def procs():
            out = []
            for c in cgroups:
                with open(os.path.join(c, "cgroup.procs")) as f:
                    out += f.read().split()
            return out
        self.assertTrue(eventually(lambda: not procs(), 60), procs())
        self.assertEqual(self.metrics()['ajet_episodes{state="claimed"}'], 2.0)
        # The next harness (the tasks now pass the gate at once) reaps the two first.
        open(gate, "w").close()
        summary, full, out = self.finish(self.start_harness(conf))
        self.assertEqual(summary["aborted"], {"harness_restart": 2}, out)
        self.assertEqual(summary["ended"], 2, out)
        self.assertEqual(self.aborted("harness_restart"), 2.0)
        self.assert_nothing_left()


    def test_without_cgroups_it_says_so_once_and_uses_rlimits(self):
        conf = self.write_config([self.task("t1")], "python3 agent.py", repeat=2,
                                 sandbox={"cgroup_root": os.path.join(self.dir, "no-cgroups")})
        summary, full, out = self.finish(self.start_harness(conf))
        self.assertEqual(summary["ended"], 2, out)
        self.assertEqual(summary["mean_reward"], 1.0, out)
        self.assertEqual(out.count("cgroups unavailable"), 1, out)
        self.assert_nothing_left()

    def test_a_stopped_harness_aborts_its_episodes(self):
        gate = os.path.join(self.gate, "go")
        agent = f"touch started; python3 agent.py; while [ ! -e {gate} ]; do sleep 0.05; done"
        p = self.start_harness(self.write_config([self.task("t1"), self.task("t2")], agent, repeat=2))
        self.wait_started(2)
        p.send_signal(signal.SIGTERM)
        summary, full, out = self.finish(p)
        self.assertEqual(summary, {"ended": 0, "aborted": {"harness_stopped": 2}, "mean_reward": None}, out)
        self.assertEqual(self.aborted("harness_stopped"), 2.0)
        self.assert_nothing_left()


class HarnessStockCliTest(HarnessTestBase):
    def setUp(self):
        self.bin = npm_bin()
        if self.bin is None:
            self.skipTest("SKIPPED: node/npm or the registry unavailable: the stock CLIs are not installed "
                          "(scripts/npm-deps.sh)")
        super().setUp()

    def run_cli(self, template, prompt, files=None, args=None):
        task = {"task_id": template, "prompt": prompt, "files": files or {}}
        conf = self.write_config([task], "", verifier="grep -q ajet-tool-42 /ajet/out/agent.stdout",
                                 concurrency=1, agent_timeout=300,
                                 agent_extra={"template": template, "npm_bin": self.bin, **({"args": args} if args else {})})
        # The default cache is elsewhere: only agent.npm_bin finds the CLIs.
        summary, full, out = self.finish(self.start_harness(conf, AJET_NPM_CACHE=os.path.join(self.dir, "none")),
                                         timeout=600)
        self.assertEqual(summary["ended"], 1, out)
        self.assertEqual(summary["mean_reward"], 1.0, out)
        self.assertGreaterEqual(full["episodes"][0]["model_requests"], 2, out)
        # Tracked and merged: the tool round trip's calls are in the episode, one conversation, one sample.
        uuid = full["episodes"][0]["episode_uuid"]
        with urllib.request.urlopen(f"{self.server.url}/episodes/{uuid}", timeout=30) as r:
            episode = json.loads(r.read())
        self.assertGreaterEqual(len(episode["calls"]), 2, out)
        self.assertEqual(len(episode["samples"]), 1, out)
        self.assert_nothing_left()

    @staticmethod
    def tool_call(name, arguments):
        return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"

    def test_claude_code(self):
        self.run_cli("claude-code", self.tool_call("Bash", {"command": "echo ajet-tool-$((6*7))",
                                                            "description": "marker"}))

    def test_codex(self):
        self.run_cli("codex", self.tool_call("exec_command", {"cmd": "echo ajet-tool-$((6*7))"}))

    def test_qwen_code(self):
        self.run_cli("qwen-code", self.tool_call("read_file", {"file_path": "/work/hello.txt"}),
                     files={"hello.txt": "ajet-tool-42\n"})


if __name__ == "__main__":
    unittest.main()
