"""Train configs for sync_train_config: YAML text as given, or a dict written as block YAML.

Standard library only, so no YAML parser here: a dict is emitted with every string JSON-quoted (a
JSON string is a valid YAML double-quoted scalar), which the server's YAML loader reads back exactly.
"""

from __future__ import annotations

import json
import math
import os
import re
from typing import Any, Dict, List

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
    return k if _PLAIN_KEY.match(k) and k not in ("true", "false", "null", "yes", "no", "on", "off") else json.dumps(k)


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


def config_text(config: Any) -> str:
    """The YAML text of `config`: a YAML string, a path to a YAML file, a dict, or an object with
    `to_yaml()` / `to_dict()` / `.config.to_dict()` (upstream's AgentJetJob)."""
    if isinstance(config, os.PathLike):
        with open(config, encoding="utf-8") as f:
            return f.read()
    if isinstance(config, str):
        if "\n" not in config and config.endswith((".yaml", ".yml")) and os.path.isfile(config):
            with open(config, encoding="utf-8") as f:
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

