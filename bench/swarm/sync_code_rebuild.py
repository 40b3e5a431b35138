#!/usr/bin/env python3
"""How long `sync_train_code` + `start_engine` take to rebuild the engine: (A) the first upload of this
repository (cold: every file compiles) against (B) the same tree uploaded again with one line of
src/engine/runtime.cc changed, on one `ajet-swarm` front, through the Python client as a user would.
Each upload unpacks into a new directory with an empty build directory; with ccache on the PATH the
front builds through it (docs/swarm-server.md), so B recompiles one file and links. Prints a table and
appends it with the date to docs/benchmarks.md.

    bench/swarm/sync_code_rebuild.py
"""
import argparse
import datetime
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(os.environ.get("AJET_BUILD_DIR", os.path.join(REPO, "build")), "bin")
sys.path.insert(0, os.path.join(REPO, "clients", "python"))
from ajet_swarm import SwarmClient  # noqa: E402


def run(*argv, **kw):
    subprocess.run(argv, check=True, **kw)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def timed_start(client):
    t0 = time.monotonic()
    client.start_engine(wait=True, max_wait=7200)
    seconds = time.monotonic() - t0
    _, info = client.get_engine_status()
    detail = info.get("engine_status_detail", "")
    if "built from the synced code" not in detail:
        raise SystemExit(f"sync_code_rebuild: the engine did not come from the synced code: {detail}")
    client.stop_engine(wait=True, max_wait=600)
    return seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--no-append", action="store_true", help="print the table without adding it to docs/benchmarks.md")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="ajet-sync-bench-")
    src = os.path.join(tmp, "src")
    run("git", "clone", "-q", "--local", "--no-hardlinks", REPO, src)
    # A tiny model for the engine to load once built (the tokenizer of the built-in tasks, micro preset).
    run(os.path.join(BIN, "ajet"), "tasks", "corpus", "--out", os.path.join(tmp, "corpus.txt"))
    run(os.path.join(BIN, "ajet"), "tokenizer", "train", "--corpus", os.path.join(tmp, "corpus.txt"),
        "--vocab-size", "1024", "--out", os.path.join(tmp, "tok"), stdout=subprocess.DEVNULL)
    model = os.path.join(tmp, "model")
    run(os.path.join(BIN, "ajet"), "model", "init", "--preset", "micro", "--tokenizer", os.path.join(tmp, "tok"),
        "--out", model, stdout=subprocess.DEVNULL)
    port = free_port()
    log = open(os.path.join(tmp, "swarm.log"), "w")
    front = subprocess.Popen([os.path.join(BIN, "ajet-swarm"), "start", "--port", str(port), "--exp-dir",
                              os.path.join(tmp, "exp"), "--fresh"], stdout=log, stderr=subprocess.STDOUT)
    ccache = shutil.which("ccache") is not None
    try:
        client = SwarmClient(f"http://127.0.0.1:{port}")
        client.wait_for_server(max_wait=60)
        client.sync_train_config(f"ajet:\n  backbone: debug\n  model: {{path: {model}}}\n"
                                 "  engine: {threads: 2, kv_cache_memory_mb: 64}\n")
        client.sync_train_code_from_dir(src)
        cold = timed_start(client)
        with open(os.path.join(src, "src", "engine", "runtime.cc"), "a") as f:
            f.write(f"\nnamespace {{ [[maybe_unused]] int sync_bench_marker() {{ return {int(time.time())}; }} }}\n")
        client.sync_train_code_from_dir(src)
        warm = timed_start(client)
    finally:
        front.terminate()
        front.wait(timeout=60)
        log.close()
    rows = [("A: first upload (every file compiles)", cold), ("B: one line of src/engine/runtime.cc changed", warm)]
    lines = [f"### sync_train_code rebuild: first upload vs a one-line change ({datetime.date.today().isoformat()})", "",
             "`bench/swarm/sync_code_rebuild.py`: this repository uploaded with the Python client's "
             "`sync_train_code_from_dir`, then `start_engine` until ENGINE.ROLLING (cmake configure, build of "
             f"`ajet-engine`, engine start on a micro model); 2 cores; ccache on the PATH: {'yes' if ccache else 'no'}.", "",
             "| upload | seconds to ENGINE.ROLLING |", "|---|---|"]
    lines += [f"| {name} | {s:.0f} |" for name, s in rows]
    lines += ["", f"One-line change / first upload: {warm / cold:.2f} ({cold / warm:.1f}x faster)."]
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_append:
        with open(os.path.join(REPO, "docs", "benchmarks.md"), "a") as f:
            f.write("\n" + text)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
