"""Runs INSIDE a harness sandbox (bubblewrap, its own network namespace with loopback only): says it
started (the harness tells a sandbox that never started from an agent that failed), optionally relays
127.0.0.1:<port> to the harness's Unix socket (the only way out, to the front), then runs the command
and exits with its status. Standard library only; never imports ajet_swarm (it is not in the sandbox).

    python3 sandbox_entry.py [--relay-port P --relay-socket PATH] -- sh -c COMMAND
"""

import os
import select
import signal
import socket
import subprocess
import sys
import threading

STARTED = "ajet-sandbox: started"


def pump(a, b, on_data=None, stopped=lambda: False, poll=60.0):
    """Copies bytes both ways until either side closes or `stopped()` (checked every `poll` seconds),
    then closes both. `on_data(from_a, data)` sees each chunk before it is forwarded. The host's relay
    (sandbox.FrontRelay) uses it too, counting what goes through."""
    socks = [a, b]
    try:
        while not stopped():
            readable, _, _ = select.select(socks, [], [], poll)
            for s in readable:
                data = s.recv(65536)
                if not data:
                    return
                if on_data is not None:
                    on_data(s is a, data)
                (b if s is a else a).sendall(data)
    except OSError:
        return
    finally:
        for s in socks:
            try:
                s.close()
            except OSError:
                pass


def _serve(listener, socket_path):
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(socket_path)
        except OSError as e:
            sys.stderr.write(f"ajet-sandbox: relay socket {socket_path}: {e}\n")
            conn.close()
            upstream.close()
            continue
        threading.Thread(target=pump, args=(conn, upstream), daemon=True).start()


def main(argv):
    sep = argv.index("--")
    opts, command = argv[:sep], argv[sep + 1:]
    port = int(opts[opts.index("--relay-port") + 1]) if "--relay-port" in opts else 0
    if port:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))  # bound before the agent starts: its first call finds it
        listener.listen(64)
        path = opts[opts.index("--relay-socket") + 1]
        threading.Thread(target=_serve, args=(listener, path), daemon=True).start()
    sys.stderr.write(STARTED + "\n")
    sys.stderr.flush()
    child = subprocess.Popen(command)
    signal.signal(signal.SIGTERM, lambda *_: child.kill())
    status = child.wait()
    return status if status >= 0 else 128 - status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
