#!/usr/bin/env python3
"""Disaggregated training (ajet-swarm start --trainer-at): what pushing the weights to the replicas costs.

The trainer (an `ajet-engine serve --elastic` in namespace h1) trains every step and is never routed to; the
inference replica (h2) only serves, and after every step the front has the trainer push its weights to it
(engine RPC open_push / push_weights: a c10d Gloo group over the veth pair; only the parameter sets whose
checksums differ travel; the replica swaps them in once its calls in flight ended). In one run:

  1. the `tiny` preset through the front, backbone async, a warm-up step and --steps measured steps: per
     step the push's wall time (from the front's verbose log) against the trainer's step_time_s;
  2. a Qwen2.5-0.5B shape (float32, 494,032,768 parameters; skipped with --smoke or under 14 GiB free):
     a. full fine-tuning, the replica loaded another initialisation (seed 2 vs 1): the first push, at
        start, sends every parameter (1.98 GB): seconds and GB/s against one TCP stream between the
        same namespaces; then a trainer on a third initialisation pushes everything again to the same
        replica, whose receive buffers exist by then (what every later push of full fine-tuning costs);
     b. LoRA (rank 8 on every linear layer), trainer and replica on the same base: the
        first push sends nothing but checksums; after one step, the adapters only: bytes and seconds,
        and the ratio to the full push.

What 2 cores can and cannot show: the trainer, the replica and the front share the same two cores, so a
push competes with decoding for them; the namespaces add veth hops, not a network. The push rate is memory
to memory through the kernel. Needs root (network namespaces); otherwise it exits 77 (ctest: skipped).

    bench/swarm/weight_push.py              # tiny steps + the 0.5B pushes
    bench/swarm/weight_push.py --smoke      # 1 tiny step, no 0.5B, appends nothing (< 2 min)

Prints the table and appends it, dated, to docs/benchmarks.md (not with --no-append or --smoke).
Python 3 standard library only.
"""
import argparse
import datetime
import os
import re
import secrets
import shutil
import signal
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import elastic_replicas as er  # noqa: E402  (Net, Engine, run_step, tcp_rate, helpers)

QWEN05B_BYTES = er.QWEN05B_PARAMS * 4


def log(msg):
    print(f"[weight_push {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Front(er.Front):
    """`ajet-swarm start --trainer-at T --engine-at R`, the config synced and the engines ready."""

    def __init__(self, ctx, trainer, replica, conf_text, name):
        super().__init__(ctx, [], conf_text, name, at=["--trainer-at", trainer.address, "--engine-at", replica.address])

    def pushes(self):
        """Every push line of the verbose log: (why, what, MB, wall s, wait s)."""
        out = []
        for e in self.entries():
            m = re.match(r"weight push \d+ \((.*?)\): policy_version -?\d+ to (\d+) of (\d+) inference replica\(s\): "
                         r"(every parameter|the trained parameters|nothing sent)(?:, ([0-9.]+) MB)?.*?; ([0-9.]+) s, "
                         r"of it ([0-9.]+) s waiting", e["message"])
            if m:
                out.append({"why": m.group(1), "ok": m.group(2) == m.group(3), "what": m.group(4),
                            "mb": float(m.group(5) or 0), "s": float(m.group(6)), "wait": float(m.group(7))})
        return out


def conf_text(model, a, ckpt, backbone, lora=""):
    text = er.config_yaml(model, a.batch, a.repeat, ckpt).replace("backbone: torch", f"backbone: {backbone}")
    return text + lora


def tiny(ctx, net, a):
    model = er.tiny_model(ctx)
    text, conf = conf_text(model, a, os.path.join(ctx.tmp, "ckpt"), "async"), os.path.join(ctx.tmp, "tiny.yaml")
    open(conf, "w").write(text)
    trainer = er.Engine(ctx, model, conf, net.hosts[1][2], net.hosts[1][0], "trainer")
    replica = er.Engine(ctx, model, conf, net.hosts[2][2], net.hosts[2][0], "replica")
    front = Front(ctx, trainer, replica, text, "tiny")
    steps = [er.run_step(front, a, s) for s in range(-int(not a.smoke), a.steps)][int(not a.smoke):]
    if any(s is None for s in steps):
        raise SystemExit(f"weight_push: a tiny step did not train; see {front.log_path}")
    pushes = [p for p in front.pushes() if p["why"].startswith("step to")][-len(steps):]
    log(f"tiny: steps {steps}; pushes {pushes}")
    if len(pushes) < len(steps) or not all(p["ok"] and p["what"] != "nothing sent" for p in pushes):
        raise SystemExit(f"weight_push: a step's weights did not reach the replica: {pushes}; see {front.log_path}")
    for p in (trainer.proc, replica.proc, front.proc):
        er.stop(p, signal.SIGKILL)
    return {"steps": [s[0] for s in steps], "pushes": pushes}


def big(ctx, net, a):
    avail = int(re.search(r"MemAvailable:\s+(\d+)", open("/proc/meminfo").read()).group(1)) / 2**20
    if avail < 14:
        return {"skipped": f"skipped: {avail:.1f} GiB of memory available, it needs 14"}
    base = os.path.join(ctx.tmp, "qwen05b")
    for seed in (1, 2, 3):
        er.sh(os.path.join(ctx.bin, "ajet-engine"), "model", "init", "--preset", "qwen2.5-0.5b", "--dtype", "float32",
              "--tokenizer", ctx.tokenizer, "--out", f"{base}-{seed}", "--seed", str(seed), "--threads", "2")
    r = {"tcp": er.tcp_rate(net)}
    # a. Full fine-tuning, different initialisations: the first push sends everything.
    text = conf_text(f"{base}-1", a, os.path.join(ctx.tmp, "ckpt-full"), "async")
    conf = os.path.join(ctx.tmp, "full.yaml")
    open(conf, "w").write(text)
    trainer = er.Engine(ctx, f"{base}-1", conf, net.hosts[1][2], net.hosts[1][0], "q-trainer")
    replica = er.Engine(ctx, f"{base}-2", conf, net.hosts[2][2], net.hosts[2][0], "q-replica")
    front = Front(ctx, trainer, replica, text, "full")
    r["full"] = front.pushes()[0]
    for key, what in (("received", "received in"), ("compare", "checksums compared"), ("transfer", "transfer"),
                      ("verify", "verified")):
        r["full"][key] = replica.log_value(rf"weight push \d+: serving .*?{what} ([0-9.]+) s")
    log(f"full: {r['full']}")
    # A second full push into the same replica, from a trainer on a third initialisation: its receive
    # buffers are there already (the steady state of full fine-tuning, where every step sends all).
    for p in (trainer.proc, front.proc):
        er.stop(p, signal.SIGKILL)
    trainer = er.Engine(ctx, f"{base}-3", conf, net.hosts[1][2], net.hosts[1][0], "q-trainer3")
    front = Front(ctx, trainer, replica, text, "full2")
    r["full2"] = front.pushes()[0]
    r["full2"]["transfer"] = [float(m) for m in re.findall(r"weight push \d+: serving .*?transfer ([0-9.]+) s",
                                                            open(replica.err).read())][-1]
    log(f"full, buffers reused: {r['full2']}")
    for p in (trainer.proc, replica.proc, front.proc):
        er.stop(p, signal.SIGKILL)
    # b. LoRA on the same base: checksums only, then the adapters after a step.
    lora = "  lora:\n    lora_rank: 8\n    lora_alpha: 16\n"
    small = argparse.Namespace(batch=1, repeat=2, turns=1, max_tokens=4)  # one step: 2 short episodes
    text = conf_text(f"{base}-1", small, os.path.join(ctx.tmp, "ckpt-lora"), "async", lora)
    conf = os.path.join(ctx.tmp, "lora.yaml")
    open(conf, "w").write(text)
    trainer = er.Engine(ctx, f"{base}-1", conf, net.hosts[1][2], net.hosts[1][0], "l-trainer")
    replica = er.Engine(ctx, f"{base}-1", conf, net.hosts[2][2], net.hosts[2][0], "l-replica")
    front = Front(ctx, trainer, replica, text, "lora")
    step = er.run_step(front, small, 0, wait_s=900)
    if step is None:
        raise SystemExit(f"weight_push: the LoRA step did not train; see {front.log_path}")
    pushes = front.pushes()
    r["lora_first"], r["lora_step"] = pushes[0], pushes[-1]
    r["lora_train_s"] = step[0]
    log(f"lora: {pushes}")
    for p in (trainer.proc, replica.proc, front.proc):
        er.stop(p, signal.SIGKILL)
    return r


def report(a, r, load_start, took):
    t, b = r["tiny"], r["big"]
    push_s = statistics.median(p["s"] for p in t["pushes"]) if t["pushes"] else float("nan")
    step_s = statistics.median(t["steps"])
    rows = [("tiny: trainer step (median)", f"{step_s:.3f} s", f"{len(t['steps'])} steps, backbone async"),
            ("tiny: push after each step (median)", f"{push_s:.3f} s ({push_s / step_s:.2f}x the step)",
             f"{t['pushes'][0]['mb'] if t['pushes'] else 0:.1f} MB each ({t['pushes'][0]['what'] if t['pushes'] else '-'}); "
             f"range {min(p['s'] for p in t['pushes']):.3f}-{max(p['s'] for p in t['pushes']):.3f} s")]
    if "skipped" in b:
        rows.append(("Qwen2.5-0.5B shape pushes", b["skipped"], ""))
    else:
        f, l1, ls = b["full"], b["lora_first"], b["lora_step"]
        rows += [("0.5B full push (another initialisation)", f"{f['s']:.2f} s for {f['mb'] / 1e3:.2f} GB = "
                  f"{f['mb'] / 1e3 / f['s']:.2f} GB/s", f"one TCP stream h1 -> h2: {b['tcp']:.2f} GB/s "
                  f"({f['mb'] / 1e3 / f['s'] / b['tcp']:.2f}x of it); on the replica: checksums compared "
                  f"{f['compare']:.2f} s, the transfer into memory touched for the first time {f['transfer']:.2f} s "
                  f"({f['mb'] / 1e3 / f['transfer']:.2f} GB/s), the received weights verified {f['verify']:.2f} s, "
                  f"the swap {f['wait']:.2f} s"),
                 ("0.5B full push again, receive buffers already there", f"{b['full2']['s']:.2f} s = "
                  f"{b['full2']['mb'] / 1e3 / b['full2']['s']:.2f} GB/s ({f['s'] / b['full2']['s']:.1f}x faster than "
                  "the first)", f"the transfer {b['full2']['transfer']:.2f} s "
                  f"({b['full2']['mb'] / 1e3 / b['full2']['transfer']:.2f} GB/s): every later push of a full "
                  "fine-tuning run"),
                 ("0.5B LoRA, same base, nothing trained yet", f"{l1['s']:.2f} s, {l1['what']}",
                  "checksums of the base and the adapters on each side, nothing else"),
                 ("0.5B LoRA push after a step", f"{ls['s']:.2f} s for {ls['mb']:.1f} MB "
                  f"({ls['s'] / f['s']:.2f}x the full push's time)",
                  f"the adapters only (the base's checksum is remembered); the step itself {b['lora_train_s']:.1f} s")]
    text = "\n".join([
        f"## Disaggregated training: weight push after each step (bench/swarm/weight_push.py), "
        f"{datetime.date.today().isoformat()}", "",
        f"`bench/swarm/weight_push.py{' --smoke' if a.smoke else ''}`: `ajet-swarm start --trainer-at` (trainer in "
        "namespace h1) `--engine-at` (inference replica in h2), 1 engine thread each; a tiny step is "
        f"{a.batch} tasks x {a.repeat} episodes of {a.turns} chat calls (max_tokens {a.max_tokens}). Push times "
        "are the front's (open_push, the group, checksums, the transfer, the replica's check and swap). Machine: "
        f"{os.cpu_count()} cores ({er.cpu_model()}), load average {load_start:.2f} at the start; took {took:.0f} s. "
        "The trainer, the replica and the front share the two cores, and the namespaces add veth hops, not a "
        "network: the rates are memory to memory through the kernel.", "",
        "| measure | value | detail |", "|---|---|---|", *[f"| {m} | {v} | {w} |" for m, v, w in rows]])
    print(text)
    if not a.no_append and not a.smoke:
        with open(os.path.join(er.REPO, "docs", "benchmarks.md"), "a") as fh:
            fh.write("\n" + text + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=3, help="measured tiny steps after a warm-up (default 3)")
    ap.add_argument("--batch", type=int, default=4, help="ajet.data.train_batch_size (default 4)")
    ap.add_argument("--repeat", type=int, default=4, help="ajet.rollout.num_repeat (default 4)")
    ap.add_argument("--turns", type=int, default=2, help="chat calls per episode (default 2)")
    ap.add_argument("--max-tokens", type=int, default=48, help="max_tokens of each call (default 48)")
    ap.add_argument("--no-big", action="store_true", help="skip the Qwen2.5-0.5B pushes")
    ap.add_argument("--smoke", action="store_true", help="1 tiny step of 2x2 episodes, no 0.5B; appends nothing")
    ap.add_argument("--no-append", action="store_true", help="print the table only")
    a = ap.parse_args()
    if a.smoke:
        a.steps, a.batch, a.repeat, a.no_big = 1, 2, 2, True
    ctx = argparse.Namespace(bin=os.path.join(er.BUILD, "bin"))
    er.require_netns("weight_push", ctx)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    load_start, t_start = os.getloadavg()[0], time.monotonic()
    net, ok, ctx.tmp = None, False, tempfile.mkdtemp(prefix="ajet-push-")
    ctx.token_file = os.path.join(ctx.tmp, "engine.token")
    with open(os.open(ctx.token_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write(secrets.token_urlsafe(32) + "\n")
    try:
        net = er.Net(os.getpid(), 3, prefix="ajwp")  # not `ajel`: elastic_replicas.py removes those it thinks stale
        r = {"tiny": tiny(ctx, net, a)}
        r["big"] = {"skipped": "skipped (--no-big)"} if a.no_big else big(ctx, net, a)
        ok = True
    finally:
        for p in er.PROCS:
            er.stop(p, signal.SIGKILL)
        if net:
            net.cleanup()
        if ok:
            shutil.rmtree(ctx.tmp, ignore_errors=True)
        else:
            log(f"failed: the logs are kept in {ctx.tmp}")
    report(a, r, load_start, time.monotonic() - t_start)


if __name__ == "__main__":
    main()
