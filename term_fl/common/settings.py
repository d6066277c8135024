"""What a setting declares beside its type and range: how it enters the config hash, and where a path comes from.

A dataset's, a model's or a table's settings are pydantic models; these
markers go into a field's ``Annotated[...]`` metadata, so the rule lives
next to the field and :mod:`term_fl.config` applies it to every field that
carries it:

- :data:`NOT_HASHED`: the setting changes where or how long a run executes,
  not what it computes (seeds, names, the engine, timeouts, a file's path);
  it never enters the config hash.
- :data:`HASHED_WHEN_SET`: a setting added after stores held hashes; it
  enters the hash only away from its default, so earlier hashes stay valid.
- :class:`DigestOf`: the setting (an expected sha256) enters the hash as the
  sha256 of the file the named path setting points to: the same file under
  another path is the same run.
- :class:`PathSetting`: a file path; a relative path in a scenario file is
  taken relative to that file, one given on the command line relative to the
  working directory, and when none is given the environment variable ``env``
  (if any) supplies it.

:class:`SettingsModel` is the base of the datasets' and models' settings:
frozen, unknown keys refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

__all__ = ["HASHED_WHEN_SET", "NOT_HASHED", "DigestOf", "PathSetting", "SettingsModel", "marker"]


@dataclass(frozen=True)
class _Marker:
    name: str

    def __repr__(self) -> str:
        return self.name


NOT_HASHED = _Marker("NOT_HASHED")
HASHED_WHEN_SET = _Marker("HASHED_WHEN_SET")


@dataclass(frozen=True)
class DigestOf:
    """The setting enters the config hash as the sha256 of the file named by the setting ``path``."""

    path: str


@dataclass(frozen=True)
class PathSetting:
    """A file path: relative to the scenario file that gives it; from the environment variable ``env`` when unset."""

    env: str | None = None


def marker(field: Any, kind: type | _Marker) -> Any:
    """The marker of ``kind`` (a marker class, or one of the marker constants) in a pydantic field's metadata, or None."""
    for item in getattr(field, "metadata", ()):
        if item is kind or (isinstance(kind, type) and isinstance(item, kind)):
            return item
    return None


class SettingsModel(BaseModel):
    """The settings of a dataset or a model: validated once, frozen, unknown keys refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @classmethod
    def of(cls, owner: str, values: Mapping[str, Any]) -> SettingsModel:
        """``values`` validated; a ValueError naming ``owner``, each bad key, what is allowed and the value otherwise."""
        try:
            return cls.model_validate(dict(values))
        except ValidationError as exc:
            allowed = ", ".join(cls.model_fields) or "none"
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc']))}: "
                + (f"not a setting of {owner} (its settings: {allowed})" if e["type"] == "extra_forbidden"
                   else f"{e['msg']} (got {e['input']!r})")
                for e in exc.errors()
            )
            raise ValueError(f"{owner}: {problems}") from None
