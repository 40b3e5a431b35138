"""A small HTTP/1.1 transport on http.client: one keep-alive connection per thread and host.

Thread-safe because nothing is shared between threads: each thread gets its own connection. A
connection the server closed while it sat idle is retried once on a fresh one, but only when no
byte of the response arrived (so a request is never sent twice after the server answered it).
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import urllib.parse
import weakref
from dataclasses import dataclass
from typing import Any, Dict, Iterator, Optional, Tuple

from .errors import SwarmConnectionError

# Errors that mean "the kept-alive connection was dead before we used it" (upstream's list of
# "broken pipe", "connection reset", ... messages that make it refresh its client).
# Not BadStatusLine in general: that means some bytes of an answer came, so the request was served
# (a repeat could claim twice); RemoteDisconnected, its subclass, is the idle close.
_STALE_CONNECTION_ERRORS = (
    http.client.RemoteDisconnected,
    BrokenPipeError,
    ConnectionResetError,
    ConnectionAbortedError,
)


@dataclass
class Response:
    status: int
    headers: Dict[str, str]  # lower-case names
    body: bytes = b""

    def json(self) -> Any:
        """The body as JSON; None when it is not JSON, or nests deeper than Python's recursion limit
        (json.loads raises RecursionError there: callers then refuse the answer as not JSON)."""
        try:
            return json.loads(self.body.decode("utf-8")) if self.body else None
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            return None

    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def error_message(self) -> str:
        """The server's error text: OpenAI `error.message`, upstream `detail`/`error`, or the raw body."""
        data = self.json()
        if isinstance(data, dict):
            err = data.get("error")
            if isinstance(err, dict) and err.get("message"):
                return str(err["message"])
            if isinstance(err, str) and err:
                return err
            for key in ("detail", "fail_cause", "failure_reason", "message"):
                if data.get(key):
                    return str(data[key])
        return self.text()[:2000]


@dataclass
class Endpoint:
    scheme: str
    host: str
    port: int
    prefix: str  # "" or "/some/prefix" (no trailing slash)

    @staticmethod
    def parse(url: str) -> "Endpoint":
        if "://" not in url:
            url = "http://" + url
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise ValueError(f"unsupported URL scheme {parts.scheme!r} in {url!r} (use http:// or https://)")
        if not parts.hostname:
            raise ValueError(f"URL {url!r} has no host")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return Endpoint(parts.scheme, parts.hostname, port, parts.path.rstrip("/"))

    def origin(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"


class Transport:
    """Requests against one server. `timeout` is per socket operation (connect, each read)."""

    def __init__(self, url: str, timeout: float = 30.0, user_agent: str = "ajet-swarm-python"):
        self.endpoint = Endpoint.parse(url)
        self.timeout = timeout
        self.user_agent = user_agent
        self._local = threading.local()
        self._all_lock = threading.Lock()
        # (owning thread, connection) of each thread's keep-alive connection. A thread's connection
        # outlives the thread in its thread-local; it is closed when the next connection is made after
        # the thread ended, so clients that start a thread per episode keep one socket per live thread.
        self._all: list = []

    def __del__(self) -> None:
        if hasattr(self, "_all_lock"):  # not when __init__ raised (a malformed URL)
            self.close_all()

    def close_all(self) -> None:
        """Closes every thread's connection (a thread that sends again opens a new one)."""
        with self._all_lock:
            owned, self._all = self._all, []
        for _, conn in owned:
            _close_quietly(conn)

    def _connection(self, timeout: float) -> Tuple[http.client.HTTPConnection, bool]:
        conn = getattr(self._local, "conn", None)
        reused = conn is not None
        if conn is None:
            cls = http.client.HTTPSConnection if self.endpoint.scheme == "https" else http.client.HTTPConnection
            conn = cls(self.endpoint.host, self.endpoint.port, timeout=timeout)
            self._local.conn = conn
            ended = []
            with self._all_lock:
                kept = []
                for owner, c in self._all:
                    thread = owner()
                    (kept if thread is not None and thread.is_alive() else ended).append((owner, c))
                kept.append((weakref.ref(threading.current_thread()), conn))
                self._all = kept
            for _, c in ended:
                _close_quietly(c)
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        return conn, reused

    def close(self) -> None:
        """Closes this thread's connection (other threads keep theirs)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
            self._forget(conn)

    def _forget(self, conn: http.client.HTTPConnection) -> None:
        with self._all_lock:
            self._all = [(owner, c) for owner, c in self._all if c is not conn]

    def request(self, method: str, path: str, body: Optional[bytes] = None,
                headers: Optional[Dict[str, str]] = None, timeout: Optional[float] = None) -> Response:
        """Sends one request and reads the whole response. Raises SwarmConnectionError when the server
        cannot be reached or the connection breaks; any HTTP status is returned, not raised."""
        resp = self._send(method, path, body, headers, timeout)
        try:
            data = resp.read()
        except (OSError, http.client.HTTPException) as e:
            self.close()
            raise SwarmConnectionError(f"{method} {self.url(path)}: the connection broke while reading: {e}") from e
        result = Response(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)
        if resp.will_close:
            self.close()
        return result

    def post_json(self, path: str, payload: Any, headers: Optional[Dict[str, str]] = None,
                  timeout: Optional[float] = None) -> Response:
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        return self.request("POST", path, json.dumps(payload).encode("utf-8"), h, timeout)

    def stream_sse(self, path: str, payload: Any, headers: Optional[Dict[str, str]] = None,
                   timeout: Optional[float] = None) -> Tuple[Response, Optional[Iterator[str]]]:
        """POSTs JSON and, when the answer is `text/event-stream`, returns an iterator over the `data:`
        payloads as they arrive (the connection is closed when the iterator finishes or is dropped).
        Otherwise returns the whole response and None."""
        h = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        h.update(headers or {})
        resp = self._send("POST", path, json.dumps(payload).encode("utf-8"), h, timeout)
        headers_out = {k.lower(): v for k, v in resp.getheaders()}
        if not headers_out.get("content-type", "").startswith("text/event-stream"):
            return self._finish_plain(resp, headers_out), None
        # This thread's connection now belongs to the stream; the next request opens a new one.
        conn = self._local.conn
        self._local.conn = None
        self._forget(conn)  # the stream closes it; it may be read on after this thread ended
        events = _sse_events(resp, conn)
        # A generator dropped before its first next() never runs its finally: close the connection then.
        weakref.finalize(events, _close_quietly, conn)
        return Response(resp.status, headers_out), events

    def url(self, path: str) -> str:
        return self.endpoint.origin() + self.endpoint.prefix + path

    def _finish_plain(self, resp: http.client.HTTPResponse, headers: Dict[str, str]) -> Response:
        try:
            data = resp.read()
        except (OSError, http.client.HTTPException) as e:
            self.close()
            raise SwarmConnectionError(f"reading from {self.endpoint.origin()}: {e}") from e
        if resp.will_close:
            self.close()
        return Response(resp.status, headers, data)

    def _send(self, method: str, path: str, body: Optional[bytes], headers: Optional[Dict[str, str]],
              timeout: Optional[float]) -> http.client.HTTPResponse:
        h = {"User-Agent": self.user_agent, "Accept-Encoding": "identity"}
        h.update(headers or {})
        target = self.endpoint.prefix + path
        t = self.timeout if timeout is None else timeout
        for attempt in (0, 1):
            conn, reused = self._connection(t)
            try:
                conn.request(method, target, body=body, headers=h)
                return conn.getresponse()
            except _STALE_CONNECTION_ERRORS as e:
                self.close()
                if reused and attempt == 0:
                    continue  # the server had closed the idle connection: nothing was processed
                raise SwarmConnectionError(f"{method} {self.url(path)}: {_describe(e)}") from e
            except (OSError, http.client.HTTPException) as e:
                self.close()
                raise SwarmConnectionError(f"{method} {self.url(path)}: {_describe(e)}") from e
        raise AssertionError("unreachable")


def _close_quietly(conn: http.client.HTTPConnection) -> None:
    try:
        conn.close()
    except Exception:
        pass


def _describe(e: BaseException) -> str:
    if isinstance(e, socket.timeout) or isinstance(e, TimeoutError):
        return "timed out"
    if isinstance(e, ConnectionRefusedError):
        return "connection refused (is the server running?)"
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def _sse_events(resp: http.client.HTTPResponse, conn: http.client.HTTPConnection) -> Iterator[str]:
    """Yields the `data:` payload of each server-sent event (multi-line data joined by newlines)."""
    data_lines = []
    try:
        while True:
            try:
                raw = resp.readline()
            except (OSError, http.client.HTTPException) as e:
                raise SwarmConnectionError(f"the event stream broke: {_describe(e)}") from e
            if not raw:
                break
            line = raw.decode("utf-8").rstrip("\r\n")
            if line == "":
                if data_lines:
                    yield "\n".join(data_lines)
                    data_lines = []
                continue
            if line.startswith(":"):
                continue  # comment / keep-alive
            name, _, value = line.partition(":")
            if value.startswith(" "):
                value = value[1:]
            if name == "data":
                data_lines.append(value)
        if data_lines:
            yield "\n".join(data_lines)
    finally:
        conn.close()


def retry_after_seconds(resp: Response, default: float) -> float:
    """The server's `Retry-After` (seconds) or `default`."""
    value = resp.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else default
    except ValueError:
        return default
