"""`python -m ajet_swarm COMMAND --swarm-url URL`: status, pool, start (with --conf), stop, sync-code DIR;
`python -m ajet_swarm harness --conf harness.yaml` runs a CLI agent in sandboxes (docs/agents.md)."""

from __future__ import annotations

import argparse
import json
import logging
import sys

from .client import SwarmClient
from .errors import SwarmError


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ajet_swarm", description=__doc__)
    parser.add_argument("--swarm-url", default="http://127.0.0.1:10086")
    parser.add_argument("--admin-token", default=None, help="default: $AJET_ADMIN_TOKEN")
    parser.add_argument("--wait-server", type=float, default=60.0, metavar="SECONDS",
                        help="wait this long for the server to answer first (one started a moment ago may not "
                             "listen yet; default 60)")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("status", help="print the engine status as JSON")
    sub.add_parser("pool", help="print the rollout pool summary")
    start = sub.add_parser("start", help="sync a config (if OFFLINE) and start the engine; idempotent")
    start.add_argument("--conf", required=True, help="train config YAML")
    start.add_argument("--force-restart", action="store_true")
    sub.add_parser("stop", help="stop the engine")
    code = sub.add_parser("sync-code", help="upload the version-controlled files of a source tree")
    code.add_argument("dir")
    harness = sub.add_parser("harness", help="run a CLI agent on tasks, one sandbox per episode (docs/agents.md)")
    harness.add_argument("--conf", required=True, help="harness config YAML (its swarm_url wins over --swarm-url)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if args.command == "harness":
        from . import harness as harness_module
        try:
            return harness_module.main(args.conf)
        except (SwarmError, RuntimeError, OSError, ValueError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
    client = SwarmClient(args.swarm_url, admin_token=args.admin_token)
    try:
        if args.command != "status":
            client.wait_for_server(args.wait_server)
        if args.command == "status":
            status, info = client.get_engine_status()
            print(json.dumps(info or {"engine_status": status}))
            return 0 if info else 1
        if args.command == "pool":
            client.print_rollout_stat()
        elif args.command == "start":
            client.auto_sync_train_config_and_start_engine(args.conf, force_restart=args.force_restart)
        elif args.command == "stop":
            client.stop_engine()
        elif args.command == "sync-code":
            print(json.dumps(client.sync_train_code_from_dir(args.dir)))
    except (SwarmError, RuntimeError, OSError, ValueError) as e:
        # SwarmError: the server's answer; RuntimeError: sync-code's tree checks (not a git work
        # tree, no CMakeLists.txt); OSError: an unreadable --conf; ValueError: a bad argument.
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
