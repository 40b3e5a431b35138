#!/usr/bin/env python3
"""Every task exactly once across crashes (issue 45): SIGKILLs at random moments during one classic
run and one swarm run, each against an uninterrupted run of the same config.

Classic: `ajet --conf examples/configs/calc.yaml` (the warmed-up tiny model of scripts/run.sh, a
checkpoint every 2 steps, STEPS steps). KILLS times: wait until the run is rolling, a random 0-8 s,
then SIGKILL a random one of the launcher (ajet), the front (ajet-swarm) or the engine (ajet-engine).
A killed launcher or front ends the run: it is continued with `ajet --resume`; a killed engine is
restarted by the front. Then `ajet ledger --json` must show 0 skipped and 0 duplicated tasks, and the
final held-out success (T=1 and greedy) is compared with the uninterrupted run's.

Swarm: `ajet-swarm start` with examples/configs/swarm_calc.yaml (a checkpoint every 2 steps) and
examples/python_agent (the client) running EPISODES calc episodes; KILLS times a random one of the
client, the front (restarted with --resume on the same port) or the engine. Every acknowledged
(stored finished) train episode must be trained exactly once or still wait for a batch at the end;
reward of the last quarter of episodes vs the uninterrupted run's.

"Back to rolling": seconds from the restart (a new ajet, a new front) or from the kill (the engine,
restarted by the front) until the front reports ENGINE.ROLLING again.

Prints a table and (not with --no-append) appends it with the date to docs/benchmarks.md.
Exit status 1 when a task was skipped or duplicated. Python 3 standard library only.

    bench/classic/fault_ledger.py [--kills 20] [--steps 30] [--episodes 384] [--seed 1] [--no-append]
      [--model exp/main/models/calc-sft] [--only classic|swarm]
"""
import argparse
import datetime
import json
import os
import random
import re
import signal
import sqlite3
import statistics
import subprocess
import sys
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(os.path.abspath(os.environ.get("AJET_BUILD_DIR") or os.path.join(REPO, "build")), "bin")
ROLLING = "ENGINE.ROLLING"


def log(msg):
    print(f"[fault_ledger {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def children(pid):
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(p) for p in f.read().split()]
    except OSError:
        pass
    return out


def program(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return os.path.basename(f.read().split(b"\0")[0].decode())
    except OSError:
        return ""


def child_named(pid, name):
    for c in children(pid):
        if program(c) == name:
            return c
    return 0


def engine_status(url):
    try:
        with urllib.request.urlopen(url + "/get_engine_status", timeout=2) as r:
            return json.loads(r.read()).get("engine_status", "")
    except Exception:  # noqa: BLE001 (down, starting, or answering an error: not rolling)
        return ""


def wait_rolling(url_of, deadline_s=300.0, still_running=lambda: True):
    """Seconds until url_of()'s front reports ROLLING (None: never within the deadline)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < deadline_s and still_running():
        url = url_of()
        if url and engine_status(url) == ROLLING:
            return time.monotonic() - t0
        time.sleep(0.05)
    return None


def new_engine(front_pid, killed, deadline_s=60.0):
    """Waits until the front runs an engine other than `killed`: until then it may still report
    ROLLING from before it noticed the kill."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < deadline_s:
        pid = child_named(front_pid, "ajet-engine")
        if pid not in (0, killed):
            return True
        time.sleep(0.02)
    return False


def front_url(exp):
    """The URL in the newest ready line of the classic run's swarm.log."""
    try:
        with open(os.path.join(exp, "swarm.log"), errors="replace") as f:
            urls = re.findall(r"ajet-swarm ready: (\S+)", f.read())
        return urls[-1] if urls else ""
    except OSError:
        return ""


def ledger(where, url=None):
    args = [os.path.join(BIN, "ajet"), "ledger", "--json"] + (["--url", url] if url else [where])
    return json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)


# ----------------------------------------------------------------------------- classic

def classic_args(out, name, model, steps):
    return [os.path.join(BIN, "ajet"), "--conf", os.path.join(REPO, "examples/configs/calc.yaml"),
            "--exp-dir", out, "--set", f"ajet.experiment_name={name}", "--set", f"ajet.model.path={model}",
            "--set", f"ajet.trainer_common.total_training_steps={steps}",
            "--set", "ajet.trainer_common.max_training_seconds=100000",
            "--set", "ajet.trainer_common.save_freq=2", "--set", f"ajet.trainer_common.test_freq={steps}",
            "--set", "ajet.trainer_common.val_before_train=false"]


def final_validation(exp):
    recs = [json.loads(l) for l in open(os.path.join(exp, "metrics.jsonl")) if l.strip()]
    val = [r for r in recs if r.get("kind") == "validation"]
    return val[-1]["validation"] if val else {}


def classic_clean(out, model, steps):
    t0 = time.monotonic()
    with open(os.path.join(out, "clean.log"), "w") as f:
        subprocess.run(classic_args(out, "clean", model, steps), cwd=REPO, stdout=f, stderr=subprocess.STDOUT,
                       check=True)
    v = final_validation(os.path.join(out, "clean"))
    return {"seconds": time.monotonic() - t0, "sampled": v.get("sampled_success"), "greedy": v.get("greedy_success")}


def classic_faulted(out, model, steps, kills, rng):
    exp = os.path.join(out, "faulted")
    args = classic_args(out, "faulted", model, steps)
    attempt = [0]

    def spawn(resume):
        attempt[0] += 1
        f = open(os.path.join(out, f"faulted-{attempt[0]}.log"), "w")
        return subprocess.Popen(args + (["--resume"] if resume else []), cwd=REPO, stdout=f,
                                stderr=subprocess.STDOUT), time.monotonic()

    def launcher_rolling(proc):
        """Seconds from now until this attempt's ajet says its engine is rolling (None: it exited)."""
        t0 = time.monotonic()
        path = os.path.join(out, f"faulted-{attempt[0]}.log")
        while proc.poll() is None and time.monotonic() - t0 < 300:
            with open(path, errors="replace") as f:
                if "ajet: engine rolling after" in f.read():
                    return time.monotonic() - t0
            time.sleep(0.05)
        return None

    def ends(proc, seconds=180):
        """Waits for a launcher whose front died; one still running after `seconds` hangs: killed."""
        try:
            return proc.wait(seconds)
        except subprocess.TimeoutExpired:
            hung[0] += 1
            log(f"classic: ajet pid {proc.pid} still runs {seconds} s after its front died; killing it")
            proc.kill()
            return proc.wait()

    t_start = time.monotonic()
    ajet, _ = spawn(False)
    done = {"launcher": 0, "front": 0, "engine": 0}
    back, unexpected, hung = [], 0, [0]
    running = lambda: ajet.poll() is None  # noqa: E731
    launcher_rolling(ajet)
    while sum(done.values()) < kills and ajet.poll() is None:
        time.sleep(rng.uniform(0, 8))
        target = rng.choice(["launcher", "front", "engine"])
        front = child_named(ajet.pid, "ajet-swarm")
        pid = {"launcher": ajet.pid, "front": front, "engine": child_named(front, "ajet-engine") if front else 0}[target]
        if ajet.poll() is not None or pid == 0:
            continue
        os.kill(pid, signal.SIGKILL)
        t_kill = time.monotonic()
        done[target] += 1
        log(f"classic: kill {sum(done.values())}/{kills}: {target} (pid {pid})")
        if target == "engine":
            if new_engine(front, pid) and wait_rolling(lambda: front_url(exp), still_running=running) is not None:
                back.append(time.monotonic() - t_kill)
            continue
        ends(ajet)
        ajet, t_restart = spawn(True)
        if launcher_rolling(ajet) is not None:
            back.append(time.monotonic() - t_restart)
    while True:  # to the end; a run that fails by itself is continued too (and counted)
        if ajet.wait() == 0:
            break
        unexpected += 1
        log(f"classic: ajet exited with {ajet.returncode} by itself; --resume")
        if unexpected > 5:
            raise SystemExit("classic: the faulted run keeps failing; see " + out)
        ajet, _ = spawn(True)
    v = final_validation(exp)
    s = ledger(exp)["summary"]
    return {"seconds": time.monotonic() - t_start, "kills": done, "restarts": attempt[0] - 1, "back": back,
            "unexpected_exits": unexpected, "hung": hung[0], "sampled": v.get("sampled_success"), "greedy": v.get("greedy_success"),
            "skipped": s["skipped"], "duplicated": s["duplicated"], "redone": s["redone"], "trained": s["trained"],
            "dropped": s["dropped"]}


# ----------------------------------------------------------------------------- swarm

def swarm_yaml(out, name, model):
    text = open(os.path.join(REPO, "examples/configs/swarm_calc.yaml")).read()
    text = text.replace("model: {path: exp/main/models/calc-sft}", f"model: {{path: {model}}}")
    text = text.replace("  trainer_common:\n", "  trainer_common:\n    save_freq: 2\n", 1)
    text = text.replace("ajet:\n", f"ajet:\n  experiment_name: {name}\n", 1)
    path = os.path.join(out, name + ".yaml")
    with open(path, "w") as f:
        f.write(text)
    return path


class Swarm:
    def __init__(self, out, name, model, port):
        self.out, self.name, self.port = out, name, port
        self.dir = os.path.join(out, name)
        self.url = f"http://127.0.0.1:{port}"
        self.conf = swarm_yaml(out, name, model)
        self.front = self.agent = None
        self.fronts = 0

    def start_front(self, resume):
        self.fronts += 1
        f = open(os.path.join(self.out, f"{self.name}-front-{self.fronts}.log"), "w")
        self.front = subprocess.Popen([os.path.join(BIN, "ajet-swarm"), "start", "--port", str(self.port),
                                       "--exp-dir", self.dir, "--resume" if resume else "--fresh"],
                                      cwd=REPO, stdout=f, stderr=subprocess.STDOUT)

    def start_engine(self):
        env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "clients", "python"))
        subprocess.run([sys.executable, "-m", "ajet_swarm", "--swarm-url", self.url, "start", "--conf", self.conf],
                       cwd=REPO, env=env, check=True, capture_output=True)

    def acked(self):
        db = sqlite3.connect(f"file:{os.path.join(self.dir, 'swarm.sqlite')}?mode=ro", uri=True, timeout=30)
        try:
            return db.execute("SELECT count(*) FROM episodes WHERE status = 'finished' AND episode_type = 'train'"
                              ).fetchone()[0]
        finally:
            db.close()

    def start_agent(self, episodes, seed):
        f = open(os.path.join(self.out, f"{self.name}-agent.jsonl"), "a")
        self.agent = subprocess.Popen(
            [sys.executable, os.path.join(REPO, "examples/python_agent/agent.py"), "--swarm-url", self.url,
             "--ajet", os.path.join(BIN, "ajet"), "--generate", "256", "--seed", str(seed), "--episodes",
             str(episodes), "--repeat", "4", "--parallel", "16"], cwd=REPO, stdout=f,
            stderr=open(os.path.join(self.out, f"{self.name}-agent.log"), "a"))

    def check(self):
        """Every acknowledged train episode: trained once, twice, still waiting, or lost."""
        db = sqlite3.connect(f"file:{os.path.join(self.dir, 'swarm.sqlite')}?mode=ro", uri=True, timeout=30)
        try:
            rows = db.execute(
                "SELECT e.uuid, e.reward, e.ended_at, b.status, l.consumed FROM episodes e "
                "LEFT JOIN batches b ON b.id = e.batch_id LEFT JOIN ledger l ON l.key = 'episode:' || e.uuid "
                "WHERE e.status = 'finished' AND e.episode_type = 'train' ORDER BY e.ended_at").fetchall()
        finally:
            db.close()
        once = twice = waiting = lost = 0
        for _, _, _, batch, consumed in rows:
            if consumed == 1:
                once += 1
            elif consumed and consumed > 1:
                twice += 1
            elif batch in (None, "taken", "rolled_back"):
                waiting += 1
            else:
                lost += 1
        rewards = [r[1] for r in rows]
        q = max(1, len(rewards) // 4)
        return {"acked": len(rows), "once": once, "twice": twice, "waiting": waiting, "lost": lost,
                "last_quarter": statistics.mean(rewards[-q:]) if rewards else None,
                "first_quarter": statistics.mean(rewards[:q]) if rewards else None}

    def stop(self):
        for p in (self.agent, self.front):
            if p and p.poll() is None:
                p.send_signal(signal.SIGINT)
                try:
                    p.wait(60)
                except subprocess.TimeoutExpired:
                    p.kill()


def swarm_run(out, model, episodes, kills, rng, seed, name, port):
    s = Swarm(out, name, model, port)
    t0 = time.monotonic()
    s.start_front(False)
    wait_status_url = lambda: s.url  # noqa: E731
    while engine_status(s.url) == "":
        time.sleep(0.1)
    s.start_engine()
    wait_rolling(wait_status_url)
    s.start_agent(episodes, seed)
    done = {"client": 0, "front": 0, "engine": 0}
    back, crashes = [], [0]

    def client_running():
        """The client runs; one that gave up by itself (examples/python_agent does on a chat call
        the dying front cut) with episodes left is started again for them, and counted."""
        if s.agent.poll() is None:
            return True
        left = episodes - s.acked()
        if s.agent.returncode == 0 or left <= 0 or crashes[0] >= 20:
            return False
        crashes[0] += 1
        log(f"swarm: the client exited with {s.agent.returncode}; starting it again for {left} episodes")
        s.start_agent(left, seed + 100 + crashes[0])
        return True

    while sum(done.values()) < kills and client_running():
        time.sleep(rng.uniform(0, 8))
        target = rng.choice(["client", "front", "engine"])
        pid = {"client": s.agent.pid, "front": s.front.pid, "engine": child_named(s.front.pid, "ajet-engine")}[target]
        if s.agent.poll() is not None or pid == 0:
            continue
        os.kill(pid, signal.SIGKILL)
        t_kill = time.monotonic()
        done[target] += 1
        log(f"swarm: kill {sum(done.values())}/{kills}: {target} (pid {pid})")
        if target == "client":
            s.agent.wait()
            left = episodes - s.acked()
            if left > 0:
                s.start_agent(left, seed + sum(done.values()))
        elif target == "front":
            s.front.wait()
            s.start_front(True)
            t_restart = time.monotonic()
            if wait_rolling(wait_status_url) is not None:
                back.append(time.monotonic() - t_restart)
        elif new_engine(s.front.pid, pid) and wait_rolling(wait_status_url) is not None:
            back.append(time.monotonic() - t_kill)
    while client_running():
        s.agent.wait()
    wait_rolling(wait_status_url, 120)
    summary = ledger(None, s.url)["summary"]
    result = s.check()  # before the stop, which abandons the batch being collected
    s.stop()
    result.update({"seconds": time.monotonic() - t0, "kills": done, "back": back, "client_exits": crashes[0],
                   "skipped": summary["skipped"], "duplicated": summary["duplicated"], "redone": summary["redone"],
                   "restarts": done["client"] + done["front"]})
    return result


# ----------------------------------------------------------------------------- report

def pct(x):
    return "-" if x is None else f"{100 * x:.1f} %"


def report(c, c0, w, w0, args):
    lines = [f"## {datetime.date.today().isoformat()}: every task exactly once across SIGKILLs "
             "(`bench/classic/fault_ledger.py`)", "",
             f"{args.kills} SIGKILLs at random moments (0-8 s after the run was rolling again; target drawn among "
             "the launcher or client, the front and the engine) in one classic run "
             f"(`examples/configs/calc.yaml`, {args.steps} steps, a checkpoint every 2) and one swarm run "
             f"(`swarm_calc.yaml` + `examples/python_agent`, {args.episodes} episodes, a checkpoint every 2), "
             f"each beside an uninterrupted run of the same config; seed {args.seed}, 2 cores shared with "
             "other builds.", "",
             "| Run | Kills (launcher or client / front / engine) | Restarts | Skipped | Duplicated | Redone rows |"
             " Back to rolling, max (median) | Result vs uninterrupted | Wall time vs uninterrupted |",
             "|---|---|---|---|---|---|---|---|---|"]
    if c:
        k = c["kills"]
        back = f"{max(c['back']):.1f} s ({statistics.median(c['back']):.1f} s)" if c["back"] else "-"
        lines.append(
            f"| classic | {k['launcher']} / {k['front']} / {k['engine']} | {c['restarts']} | **{c['skipped']}** | "
            f"**{c['duplicated']}** | {c['redone']} | {back} | held-out T=1 {pct(c['sampled'])} vs {pct(c0['sampled'])}, "
            f"greedy {pct(c['greedy'])} vs {pct(c0['greedy'])} | {c['seconds']:.0f} vs {c0['seconds']:.0f} s |")
    if w:
        k = w["kills"]
        back = f"{max(w['back']):.1f} s ({statistics.median(w['back']):.1f} s)" if w["back"] else "-"
        lines.append(
            f"| swarm | {k['client']} / {k['front']} / {k['engine']} | {w['restarts']} | **{max(w['skipped'], w['lost'])}** | "
            f"**{max(w['duplicated'], w['twice'])}** | {w['redone']} | {back} | reward of the last quarter of episodes "
            f"{w['last_quarter']:.3f} vs {w0['last_quarter']:.3f} (first quarter {w['first_quarter']:.3f} vs "
            f"{w0['first_quarter']:.3f}) | {w['seconds']:.0f} vs {w0['seconds']:.0f} s |")
    if w:
        lines += ["", f"Swarm: {w['acked']} acknowledged train episodes: {w['once']} trained once, {w['twice']} twice, "
                      f"{w['waiting']} waiting for a batch at the end, {w['lost']} lost; the client exited by itself "
                      f"{w['client_exits']} times (a chat call the killed front cut) and was started again."]
    if c:
        lines += [f"Classic: {c['trained']} task rows trained, {c['dropped']} dropped (zero-variance groups, repeats "
                  f"within a step), {c['unexpected_exits']} exits not caused by a kill, {c['hung']} launchers "
                  "still running 180 s after their front died (killed)."]
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kills", type=int, default=20)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--episodes", type=int, default=384)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--model", default=os.path.join(REPO, "exp/main/models/calc-sft"))
    p.add_argument("--only", choices=["classic", "swarm"])
    p.add_argument("--port", type=int, default=10193)
    p.add_argument("--no-append", action="store_true")
    args = p.parse_args()
    model = os.path.abspath(args.model)
    if not os.path.isdir(model):
        raise SystemExit(f"fault_ledger: no model at {model} (scripts/run.sh makes it; or pass --model)")
    out = os.path.join(REPO, "exp", "bench", "fault_ledger", time.strftime("%Y%m%d_%H%M%S"))
    os.makedirs(out)
    log(f"outputs in {out}")
    rng = random.Random(args.seed)
    c = c0 = w = w0 = None
    if args.only in (None, "classic"):
        log("classic: uninterrupted run")
        c0 = classic_clean(out, model, args.steps)
        log("classic: faulted run")
        c = classic_faulted(out, model, args.steps, args.kills, rng)
    if args.only in (None, "swarm"):
        log("swarm: uninterrupted run")
        w0 = swarm_run(out, model, args.episodes, 0, rng, args.seed, "swarm-clean", args.port)
        log("swarm: faulted run")
        w = swarm_run(out, model, args.episodes, args.kills, rng, args.seed, "swarm-faulted", args.port + 1)
    text = report(c, c0, w, w0, args)
    print(text)
    with open(os.path.join(out, "result.json"), "w") as f:
        json.dump({"classic": c, "classic_clean": c0, "swarm": w, "swarm_clean": w0}, f, indent=1)
    if not args.no_append:
        with open(os.path.join(REPO, "docs", "benchmarks.md"), "a") as f:
            f.write("\n" + text)
    bad = (c and (c["skipped"] or c["duplicated"])) or (w and (w["skipped"] or w["duplicated"] or w["lost"] or w["twice"]))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
