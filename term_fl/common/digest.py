"""sha256 of a file's bytes, cached while the file's size and modification time stay the same."""

from __future__ import annotations

import functools
import hashlib
import os

__all__ = ["file_digest"]


def file_digest(path: str | os.PathLike[str]) -> str:
    """sha256 of a file's bytes (hex), or ``"unreadable:<path>"`` when it cannot be read."""
    try:
        stat = os.stat(path)
    except OSError:
        return f"unreadable:{os.fspath(path)}"
    return _digest(os.fspath(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=16)
def _digest(path: str, mtime_ns: int, size: int) -> str:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return f"unreadable:{path}"
    return digest.hexdigest()
