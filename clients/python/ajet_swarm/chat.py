"""A tiny OpenAI-compatible chat client on the standard library, so an agent needs no pip install.

    chat = ChatClient(episode.base_url, episode.api_key)
    message = chat.chat(messages, tools=tools, temperature=0.7)   # {"role", "content", "tool_calls"?}
    for chunk in chat.stream(messages):                             # ChatCompletionChunk dicts
        ...

Only what agents need: /chat/completions, streaming (SSE), tools, and retries of the answers the
swarm server marks retryable (409/503 with Retry-After, e.g. while weights sync).
"""

from __future__ import annotations

import json
import time
from typing import Any, Dict, Iterator, List, Optional

from ._http import Transport, retry_after_seconds
from .errors import ChatError, SwarmConnectionError

_RETRYABLE = (409, 429, 503)


class ChatClient:
    def __init__(self, base_url: str, api_key: str, model: str = "agentjet", timeout: float = 300.0,
                 max_retries: int = 2, agent_name: Optional[str] = None):
        """`base_url` ends in /v1 (as begin_episode returns it). `timeout` bounds each socket wait (for
        a stream: the gap between two chunks). `agent_name` names this agent in a multi-agent episode."""
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.model = model
        self.max_retries = max_retries
        self.agent_name = agent_name
        self._http = Transport(self.base_url, timeout=timeout, user_agent="ajet-swarm-python-chat")

    def _headers(self) -> Dict[str, str]:
        h = {"Authorization": f"Bearer {self.api_key}"}
        if self.agent_name:
            h["X-Agent-Name"] = self.agent_name
        return h

    def _body(self, messages: List[Dict[str, Any]], tools: Optional[List[Dict[str, Any]]],
              params: Dict[str, Any]) -> Dict[str, Any]:
        body: Dict[str, Any] = {"model": params.pop("model", self.model), "messages": messages}
        if tools:
            body["tools"] = tools
        body.update(params)
        return body

    def create(self, messages: List[Dict[str, Any]], tools: Optional[List[Dict[str, Any]]] = None,
               **params: Any) -> Dict[str, Any]:
        """POST /chat/completions (non-streaming); returns the ChatCompletion dict."""
        body = self._body(messages, tools, params)
        body.pop("stream", None)
        for attempt in range(self.max_retries + 1):
            resp = self._http.post_json("/chat/completions", body, self._headers())
            if resp.status == 200:
                data = resp.json()
                if not isinstance(data, dict) or "choices" not in data:
                    raise ChatError(f"chat completion: the server's answer is not a ChatCompletion: {resp.text()[:500]}",
                                    resp.status)
                return data
            if resp.status in _RETRYABLE and attempt < self.max_retries:
                time.sleep(retry_after_seconds(resp, 1.0))
                continue
            raise _chat_error(resp)
        raise AssertionError("unreachable")

    def chat(self, messages: List[Dict[str, Any]], tools: Optional[List[Dict[str, Any]]] = None,
             **params: Any) -> Dict[str, Any]:
        """The assistant message of the first choice: {"role", "content", "tool_calls"?, ...}."""
        return self.create(messages, tools, **params)["choices"][0]["message"]

    def stream(self, messages: List[Dict[str, Any]], tools: Optional[List[Dict[str, Any]]] = None,
               **params: Any) -> Iterator[Dict[str, Any]]:
        """POST /chat/completions with stream=true; yields each ChatCompletionChunk dict as it arrives."""
        body = self._body(messages, tools, params)
        body["stream"] = True
        for attempt in range(self.max_retries + 1):
            resp, events = self._http.stream_sse("/chat/completions", body, self._headers())
            if events is not None and resp.status == 200:
                for data in events:
                    if data.strip() == "[DONE]":
                        return
                    try:
                        chunk = json.loads(data)
                    except (json.JSONDecodeError, RecursionError) as e:  # RecursionError: nested too deep
                        raise ChatError(f"chat stream: an event is not JSON: {data[:200]!r}") from e
                    if isinstance(chunk, dict) and "error" in chunk:
                        err = chunk["error"] if isinstance(chunk["error"], dict) else {"message": str(chunk["error"])}
                        raise ChatError(f"chat stream: {err.get('message')}", 0, err.get("type", ""), err.get("code"))
                    yield chunk
                raise SwarmConnectionError("chat stream: the server closed the stream before data: [DONE]")
            if events is not None:
                for _ in events:  # drain and close an unexpected event stream
                    pass
            if resp.status in _RETRYABLE and attempt < self.max_retries:
                time.sleep(retry_after_seconds(resp, 1.0))
                continue
            raise _chat_error(resp)

    def stream_message(self, messages: List[Dict[str, Any]], tools: Optional[List[Dict[str, Any]]] = None,
                       **params: Any) -> Dict[str, Any]:
        """Streams and assembles the first choice's message (content and tool_calls) from the deltas."""
        return accumulate_stream(self.stream(messages, tools, **params))


def accumulate_stream(chunks: Iterator[Dict[str, Any]], index: int = 0) -> Dict[str, Any]:
    """Joins the deltas of choice `index` into one message, as the OpenAI SDKs do."""
    message: Dict[str, Any] = {"role": "assistant", "content": None}
    calls: Dict[int, Dict[str, Any]] = {}
    for chunk in chunks:
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != index:
                continue
            delta = choice.get("delta") or {}
            if delta.get("content"):
                message["content"] = (message["content"] or "") + delta["content"]
            if delta.get("reasoning_content"):
                message["reasoning_content"] = message.get("reasoning_content", "") + delta["reasoning_content"]
            for tc in delta.get("tool_calls") or []:
                slot = calls.setdefault(tc.get("index", 0), {"id": "", "type": "function",
                                                             "function": {"name": "", "arguments": ""}})
                if tc.get("id"):
                    slot["id"] = tc["id"]
                fn = tc.get("function") or {}
                slot["function"]["name"] += fn.get("name") or ""
                slot["function"]["arguments"] += fn.get("arguments") or ""
            if choice.get("finish_reason"):
                message["finish_reason"] = choice["finish_reason"]
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message


def _chat_error(resp: Any) -> ChatError:
    data = resp.json()
    err = data.get("error") if isinstance(data, dict) else None
    if isinstance(err, dict):
        return ChatError(f"chat completion failed ({resp.status}): {err.get('message')}", resp.status,
                         err.get("type", ""), err.get("code"))
    return ChatError(f"chat completion failed ({resp.status}): {resp.text()[:500]}", resp.status)
