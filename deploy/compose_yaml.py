"""A small deterministic YAML emitter for the compose files of deploy/gen_compose.py.

Standard library only (no PyYAML needed to regenerate the files). It writes
the subset of YAML the compose files use: mappings, lists, plain or quoted
scalars, anchors (``&name``), aliases and merge keys (``<<: *name``),
explicit tags such as compose's ``!reset`` / ``!override``, and comment
lines; flat short values go on one line.
"""

from __future__ import annotations

import json
import re
from typing import Any


class Anchor:
    """A mapping emitted with ``&name``."""

    def __init__(self, name: str, value: dict[str, Any]):
        self.name, self.value = name, value


class Alias:
    """``*name`` (as a value, or as ``<<: *name`` merge key)."""

    def __init__(self, anchor: Anchor):
        self.name = anchor.name


class Tagged:
    """A value with an explicit YAML tag, e.g. compose's ``!reset []``."""

    def __init__(self, tag: str, value: Any):
        self.tag, self.value = tag, value


class Comment:
    """A comment line placed before the next key of a mapping."""

    def __init__(self, text: str):
        self.text = text


_PLAIN = re.compile(r"^(?:[A-Za-z_/]|--?[A-Za-z])[A-Za-z0-9_./-]*$")
_RESERVED = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~"}


def _scalar(value: Any) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    if isinstance(value, int):
        return str(value)
    text = str(value)
    if _PLAIN.match(text) and text.lower() not in _RESERVED:
        return text
    if '"' in text and "'" not in text and text.isprintable():
        return f"'{text}'"  # single-quoted: no escapes needed
    return json.dumps(text)  # a JSON string is a valid YAML double-quoted scalar


def _is_inline(value: Any) -> bool:
    if isinstance(value, Tagged):
        return True
    if isinstance(value, Anchor):
        return False
    if isinstance(value, dict):
        flat = len(value) <= 2 and all(not isinstance(v, (dict, list, Anchor, Alias)) for v in value.values())
        return not value or (flat and len(_inline(value)) <= 60)
    if isinstance(value, list):
        return not value or all(not isinstance(v, (dict, list, Anchor)) for v in value) and _short(value)
    return True


def _short(values: list[Any]) -> bool:
    return len(", ".join(_scalar(v) for v in values)) <= 60 and len(values) <= 4


def _inline(value: Any) -> str:
    if isinstance(value, Alias):
        return f"*{value.name}"
    if isinstance(value, Tagged):
        return f"{value.tag} {_inline(value.value)}"
    if isinstance(value, dict):
        return "{}" if not value else "{" + ", ".join(f"{_scalar(k)}: {_inline(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_inline(v) for v in value) + "]"
    return _scalar(value)


def _emit(value: Any, indent: int, out: list[str]) -> None:
    pad = "  " * indent
    if isinstance(value, Anchor):
        value = value.value
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, Comment):
                out.append(f"{pad}# {key.text}")
                continue
            k = "<<" if key == "<<" else _scalar(key)
            if isinstance(item, Anchor):
                out.append(f"{pad}{k}: &{item.name}")
                _emit(item.value, indent + 1, out)
            elif _is_inline(item):
                out.append(f"{pad}{k}: {_inline(item)}")
            else:
                out.append(f"{pad}{k}:")
                _emit(item, indent + 1, out)
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, dict) and item:
                lines: list[str] = []
                _emit(item, indent + 1, lines)
                first = lines[0].lstrip()
                out.append(f"{pad}- {first}")
                out.extend(lines[1:])
            else:
                out.append(f"{pad}- {_inline(item)}")
    else:
        raise TypeError(f"cannot emit {value!r} as a block")


def to_yaml(doc: dict[str, Any], header: str) -> str:
    """``doc`` as YAML text after ``header`` (comment lines), blank lines between top-level keys and services."""
    out: list[str] = []
    _emit(doc, 0, out)
    # blank lines between top-level keys and between services, for the reader
    text: list[str] = []
    for line in out:
        top = not line.startswith(" ")
        service = _in_services(text) and re.match(r"^  [^ -]", line) is not None
        if text and (top or service) and not text[-1].lstrip().startswith("#"):
            one_liners = service and not line.endswith(":") and re.match(r"^  [^ #-].*[^:]$", text[-1])
            if not one_liners:
                text.append("")
        text.append(line)
    return header + "\n" + "\n".join(text) + "\n"


def _in_services(lines: list[str]) -> bool:
    for line in reversed(lines):
        if line and not line.startswith(" ") and not line.startswith("#"):
            return line.startswith("services:")
    return False

