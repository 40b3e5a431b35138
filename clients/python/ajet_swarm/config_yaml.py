"""Train configs for sync_train_config: YAML text as given, or a dict written as block YAML; and a
small YAML reader for config files (AgentJetJob's base YAML, build_job_from_yaml).

Standard library only. The writer emits every string JSON-quoted (a JSON string is a valid YAML
double-quoted scalar), which the server's YAML loader reads back exactly. The reader covers what
config files use: block mappings and sequences, flow `{...}` / `[...]` collections, plain, single-
and double-quoted scalars, `|` and `>` block scalars, comments and a leading `---`; it reads
scalars as PyYAML does (YAML 1.1 booleans yes/no/on/off, `~`/null, ints, floats, .inf/.nan).
Anchors, aliases, tags and multi-document streams are refused with a message naming the line.
"""

from __future__ import annotations

import json
import math
import os
import re
from typing import Any, Dict, List, Optional, Tuple

_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")


def to_yaml(config: Dict[str, Any]) -> str:
    """Block-style YAML for a dict of dicts, lists and scalars."""
    if not isinstance(config, dict):
        raise TypeError(f"train config must be a dict, got {type(config).__name__}")
    lines: List[str] = []
    _mapping(config, 0, lines)
    return "\n".join(lines) + "\n"


def _key(k: Any) -> str:
    if not isinstance(k, str):
        raise TypeError(f"train config keys must be strings, got {k!r}")
    # YAML 1.1 reads these words as booleans or null in any of their cases (True, ON, Null ...).
    reserved = k.lower() in ("true", "false", "null", "yes", "no", "on", "off", "~", "y", "n")
    return k if _PLAIN_KEY.fullmatch(k) and not reserved else json.dumps(k)


def _scalar(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return ".nan"
        if math.isinf(v):
            return ".inf" if v > 0 else "-.inf"
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    raise TypeError(f"train config value {v!r} of type {type(v).__name__} cannot be written as YAML")


def _mapping(d: Dict[str, Any], indent: int, lines: List[str]) -> None:
    pad = " " * indent
    for k, v in d.items():
        if isinstance(v, dict) and v:
            lines.append(f"{pad}{_key(k)}:")
            _mapping(v, indent + 2, lines)
        elif isinstance(v, (list, tuple)) and v:
            lines.append(f"{pad}{_key(k)}:")
            _sequence(list(v), indent + 2, lines)
        elif isinstance(v, dict):
            lines.append(f"{pad}{_key(k)}: {{}}")
        elif isinstance(v, (list, tuple)):
            lines.append(f"{pad}{_key(k)}: []")
        else:
            lines.append(f"{pad}{_key(k)}: {_scalar(v)}")


def _sequence(items: List[Any], indent: int, lines: List[str]) -> None:
    pad = " " * indent
    for v in items:
        if isinstance(v, dict) and v:
            sub: List[str] = []
            _mapping(v, indent + 2, sub)
            lines.append(pad + "- " + sub[0].lstrip())
            lines.extend(sub[1:])
        elif isinstance(v, (list, tuple)) and v:
            lines.append(pad + "-")
            _sequence(list(v), indent + 2, lines)
        else:
            lines.append(pad + "- " + ("{}" if isinstance(v, dict) else "[]" if isinstance(v, (list, tuple)) else _scalar(v)))


def config_source(config: Any) -> Optional[str]:
    """The file `config_text(config)` reads verbatim (a path, or one line naming a .yaml file), for the
    server to name in its warnings with the file's own line numbers; None for text made here."""
    if isinstance(config, os.PathLike):
        return os.fspath(config)
    if isinstance(config, str) and "\n" not in config and config.strip().endswith((".yaml", ".yml")) \
            and ":" not in config:
        return config.strip()
    return None


def config_text(config: Any) -> str:
    """The YAML text of `config`: a YAML string, a path to a YAML file, a dict, or an object with
    `to_yaml()` / `to_dict()` / `.config.to_dict()` (upstream's AgentJetJob)."""
    if isinstance(config, os.PathLike):
        with open(config, encoding="utf-8") as f:
            return f.read()
    if isinstance(config, bytes):
        return config.decode("utf-8")
    if isinstance(config, str):
        if "\n" not in config and config.strip().endswith((".yaml", ".yml")) and ":" not in config:
            # One line naming a YAML file (a mapping would hold a colon): read it, or say it is missing
            # rather than send the path as the config's text.
            with open(config.strip(), encoding="utf-8") as f:
                return f.read()
        return config
    if isinstance(config, dict):
        return to_yaml(config)
    if hasattr(config, "to_yaml"):
        return str(config.to_yaml())
    if hasattr(config, "to_dict"):
        return to_yaml(config.to_dict())
    inner = getattr(config, "config", None)
    if inner is not None and hasattr(inner, "to_dict"):
        return to_yaml(inner.to_dict())
    raise TypeError(f"train config: expected YAML text, a .yaml path or a dict, got {type(config).__name__}")



# ---------------------------------------------------------------------------- reader


class YamlError(ValueError):
    """The text is not YAML this reader understands; the message names the line."""


_INT = re.compile(r"^[-+]?(0|[1-9][0-9_]*)$")
_HEX = re.compile(r"^[-+]?0x[0-9a-fA-F_]+$")
_OCT = re.compile(r"^[-+]?0o?[0-7_]+$")
_FLOAT = re.compile(r"^[-+]?(\.[0-9]+|[0-9][0-9_]*(\.[0-9_]*)?)([eE][-+]?[0-9]+)?$")
_BOOLS = {"true": True, "yes": True, "on": True, "false": False, "no": False, "off": False}


def plain_scalar(text: str) -> Any:
    """A plain (unquoted) scalar as PyYAML reads it: null, bool, int, float, or the string."""
    t = text.strip()
    if t in ("", "~", "null", "Null", "NULL"):
        return None
    low = t.lower()
    if low in _BOOLS and t in (low, low.capitalize(), low.upper()):
        return _BOOLS[low]
    if _INT.match(t):
        return int(t.replace("_", ""))
    if _HEX.match(t):
        return int(t.replace("_", ""), 16)
    if len(t) > 1 and _OCT.match(t) and t.lstrip("+-").startswith("0"):
        return int(t.replace("_", "").replace("0o", "0").lstrip("+-"), 8) * (-1 if t.startswith("-") else 1)
    if low in (".inf", "+.inf"):
        return math.inf
    if low == "-.inf":
        return -math.inf
    if low == ".nan":
        return math.nan
    if _FLOAT.match(t) and any(c.isdigit() for c in t):
        return float(t.replace("_", ""))
    return t


def _strip_comment(line: str) -> str:
    """The line without a trailing `# comment` (a # that starts the line or follows a space, outside quotes)."""
    quote = ""
    i = 0
    while i < len(line):
        c = line[i]
        if quote:
            if c == "\\" and quote == '"':
                i += 2
                continue
            if c == quote:
                if quote == "'" and i + 1 < len(line) and line[i + 1] == "'":
                    i += 2
                    continue
                quote = ""
        elif c in "\"'" and (i == 0 or line[i - 1] in " \t:[{,-"):
            quote = c
        elif c == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip()
        i += 1
    return line.rstrip()


class _Flow:
    """A recursive-descent reader of one flow collection or quoted scalar."""

    def __init__(self, text: str, lineno: int):
        self.s = text
        self.i = 0
        self.lineno = lineno

    def error(self, what: str) -> YamlError:
        return YamlError(f"YAML line {self.lineno}: {what} (at {self.s[self.i:self.i + 20]!r})")

    def ws(self) -> None:
        while self.i < len(self.s) and self.s[self.i] in " \t\r\n":
            self.i += 1

    def value(self, stops: str) -> Any:
        self.ws()
        if self.i >= len(self.s):
            return None
        c = self.s[self.i]
        if c == "{":
            return self.mapping()
        if c == "[":
            return self.sequence()
        if c in "\"'":
            return self.quoted()
        start = self.i
        depth = 0
        while self.i < len(self.s):
            ch = self.s[self.i]
            if ch in stops and depth == 0:
                if ch != ":" or self.i + 1 >= len(self.s) or self.s[self.i + 1] in " \t,]}":
                    break
            self.i += 1
        return plain_scalar(self.s[start:self.i])

    def quoted(self) -> str:
        q = self.s[self.i]
        j = self.i + 1
        out = []
        while True:
            if j >= len(self.s):
                raise self.error("unterminated quoted string")
            ch = self.s[j]
            if q == "'":
                if ch == "'":
                    if j + 1 < len(self.s) and self.s[j + 1] == "'":
                        out.append("'")
                        j += 2
                        continue
                    break
                out.append(ch)
                j += 1
            else:
                if ch == "\\":
                    j += 2
                    continue
                if ch == '"':
                    break
                j += 1
        if q == "'":
            self.i = j + 1
            return "".join(out)
        raw = self.s[self.i:j + 1]
        self.i = j + 1
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            try:
                return raw[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape")
            except UnicodeDecodeError as e:
                raise self.error(f"bad escape in a double-quoted string: {e}") from None

    def mapping(self) -> Dict[str, Any]:
        self.i += 1
        out: Dict[str, Any] = {}
        while True:
            self.ws()
            if self.i >= len(self.s):
                raise self.error("unterminated {")
            if self.s[self.i] == "}":
                self.i += 1
                return out
            key = self.value(":,}")
            self.ws()
            val = None
            if self.i < len(self.s) and self.s[self.i] == ":":
                self.i += 1
                val = self.value(",}")
            out[_key_text(key)] = val
            self.ws()
            if self.i < len(self.s) and self.s[self.i] == ",":
                self.i += 1
            elif self.i < len(self.s) and self.s[self.i] != "}":
                raise self.error("expected , or }")

    def sequence(self) -> List[Any]:
        self.i += 1
        out: List[Any] = []
        while True:
            self.ws()
            if self.i >= len(self.s):
                raise self.error("unterminated [")
            if self.s[self.i] == "]":
                self.i += 1
                return out
            out.append(self.value(",]"))
            self.ws()
            if self.i < len(self.s) and self.s[self.i] == ",":
                self.i += 1
            elif self.i < len(self.s) and self.s[self.i] != "]":
                raise self.error("expected , or ]")

    def whole(self) -> Any:
        v = self.value("")
        self.ws()
        if self.i != len(self.s):
            raise self.error("unexpected text after the value")
        return v


def _key_text(key: Any) -> str:
    if isinstance(key, bool):
        return "true" if key else "false"
    if key is None:
        return "null"
    return str(key)


def _scalar_text(text: str, lineno: int) -> Any:
    t = text.strip()
    if not t:
        return None
    if t[0] in "&*!":
        raise YamlError(f"YAML line {lineno}: anchors, aliases and tags are not supported ({t[:30]!r})")
    if t[0] in "{[\"'":
        return _Flow(t, lineno).whole()
    return plain_scalar(t)


def _split_key(content: str, lineno: int) -> Optional[Tuple[str, str]]:
    """(key, rest) when `content` is `key: rest` / `key:`, else None."""
    if content[0] in "\"'":
        f = _Flow(content, lineno)
        key = f.quoted()
        rest = content[f.i:].lstrip()
        if rest.startswith(":") and (len(rest) == 1 or rest[1] in " \t"):
            return key, rest[1:].strip()
        return None
    if content[0] in "{[":
        return None
    m = re.match(r"^([^:#]*?(?::(?![ \t]|$)[^:#]*?)*):(?:[ \t]+(.*))?$", content)
    if not m:
        return None
    return _key_text(plain_scalar(m.group(1))), (m.group(2) or "").strip()


def from_yaml(text: str) -> Any:
    """Parses YAML text (the subset described in the module docstring) into dicts, lists and scalars."""
    lines: List[Tuple[int, int, str]] = []  # (line number, indent, content)
    raw_lines = text.splitlines()
    i = 0
    started = False
    while i < len(raw_lines):
        raw = raw_lines[i].rstrip()
        lineno = i + 1
        i += 1
        if "\t" in raw[:len(raw) - len(raw.lstrip())]:
            raise YamlError(f"YAML line {lineno}: tabs are not allowed in indentation")
        stripped = raw.strip()
        if stripped == "---" and not started:
            started = True
            continue
        if stripped in ("---", "...") or stripped.startswith("--- "):
            if stripped == "..." or not any(l.strip() and not l.strip().startswith("#") for l in raw_lines[i:]):
                break
            raise YamlError(f"YAML line {lineno}: several documents in one file are not supported")
        if stripped.startswith("%"):
            continue
        content = _strip_comment(raw)
        if not content.strip():
            continue
        started = True
        indent = len(content) - len(content.lstrip(" "))
        body = content.strip()
        # Block scalars (| and >) swallow the following more-indented lines verbatim.
        m = re.search(r"(^|:\s+|^-\s+)([|>])([-+]?)[0-9]?$", body)
        if m:
            block: List[str] = []
            while i < len(raw_lines):
                nxt = raw_lines[i]
                if nxt.strip() and len(nxt) - len(nxt.lstrip(" ")) <= indent:
                    break
                block.append(nxt)
                i += 1
            while block and not block[-1].strip():
                block.pop()
            pad = min((len(b) - len(b.lstrip(" ")) for b in block if b.strip()), default=0)
            body_lines = [b[pad:] for b in block]
            if m.group(2) == "|":
                value = "\n".join(body_lines)
            else:
                value = " ".join(l.strip() for l in body_lines if l.strip())
            if m.group(3) != "-":
                value += "\n"
            lines.append((lineno, indent, body[:m.start(2)].rstrip() + " " + json.dumps(value) if body[:m.start(2)].strip()
                          else json.dumps(value)))
            continue
        lines.append((lineno, indent, body))
    if not lines:
        return None
    value, pos = _block(lines, 0, lines[0][1])
    if pos != len(lines):
        raise YamlError(f"YAML line {lines[pos][0]}: unexpected indentation")
    return value


def _block(lines: List[Tuple[int, int, str]], pos: int, indent: int) -> Tuple[Any, int]:
    lineno, ind, content = lines[pos]
    if content.startswith("- ") or content == "-":
        return _seq(lines, pos, indent)
    if _split_key(content, lineno) is not None:
        return _map(lines, pos, indent)
    # A lone scalar (possibly a flow collection spread over several lines).
    text = content
    pos += 1
    while pos < len(lines) and lines[pos][1] > indent:
        text += " " + lines[pos][2]
        pos += 1
    return _scalar_text(text, lineno), pos


def _nested(lines: List[Tuple[int, int, str]], pos: int, parent_indent: int, allow_same_indent_seq: bool) -> Tuple[Any, int]:
    """The value on the lines after a `key:` / `-` that has nothing after it."""
    if pos < len(lines):
        _, ind, content = lines[pos]
        if ind > parent_indent:
            return _block(lines, pos, ind)
        if allow_same_indent_seq and ind == parent_indent and (content.startswith("- ") or content == "-"):
            return _seq(lines, pos, ind)
    return None, pos


def _map(lines: List[Tuple[int, int, str]], pos: int, indent: int) -> Tuple[Dict[str, Any], int]:
    out: Dict[str, Any] = {}
    while pos < len(lines):
        lineno, ind, content = lines[pos]
        if ind < indent:
            break
        if ind > indent:
            raise YamlError(f"YAML line {lineno}: unexpected indentation")
        kv = _split_key(content, lineno)
        if kv is None:
            if content.startswith("- ") or content == "-":
                break
            raise YamlError(f"YAML line {lineno}: expected 'key: value', got {content[:40]!r}")
        key, rest = kv
        pos += 1
        if rest:
            text = rest
            if rest[0] in "{[":
                while pos < len(lines) and lines[pos][1] > indent and _unbalanced(text):
                    text += " " + lines[pos][2]
                    pos += 1
            out[key] = _scalar_text(text, lineno)
        else:
            out[key], pos = _nested(lines, pos, indent, True)
    return out, pos


def _unbalanced(text: str) -> bool:
    try:
        _Flow(text, 0).whole()
        return False
    except YamlError:
        return True


def _seq(lines: List[Tuple[int, int, str]], pos: int, indent: int) -> Tuple[List[Any], int]:
    out: List[Any] = []
    while pos < len(lines):
        lineno, ind, content = lines[pos]
        if ind != indent or not (content.startswith("- ") or content == "-"):
            if ind > indent:
                raise YamlError(f"YAML line {lineno}: unexpected indentation")
            break
        item = content[1:].lstrip()
        if not item:
            value, pos = _nested(lines, pos + 1, indent, False)
            out.append(value)
            continue
        # "- key: value" opens a mapping whose keys sit at the item's column.
        item_indent = indent + (len(content) - len(item))
        if item.startswith("- ") or item == "-" or _split_key(item, lineno) is not None:
            lines[pos] = (lineno, item_indent, item)
            value, pos = _block(lines, pos, item_indent)
            out.append(value)
            continue
        text = item
        pos += 1
        if item[0] in "{[":
            while pos < len(lines) and lines[pos][1] > indent and _unbalanced(text):
                text += " " + lines[pos][2]
                pos += 1
        out.append(_scalar_text(text, lineno))
    return out, pos


def load_yaml_file(path: str) -> Any:
    with open(path, encoding="utf-8") as f:
        return from_yaml(f.read())
