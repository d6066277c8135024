#!/usr/bin/env python3
"""SuperNode authentication keys: make them on a SuperNode's host, register them with the SuperLink.

    python deploy/supernode_keys.py generate DIR NAME [NAME ...] [--force]
    python deploy/supernode_keys.py register DIR CONNECTION [--flwr flwr]

With ``flower-superlink --enable-supernode-auth`` (Flower 1.42, TLS only) the
SuperLink accepts a SuperNode only if its public key was registered with
``flwr supernode register``; the SuperNode proves it holds the private key
(``flower-supernode --auth-supernode-private-key``).

``generate`` writes, per NAME, an ECDSA key pair on the NIST P-384 curve in
the OpenSSH formats Flower reads: ``DIR/NAME`` (private, mode 0600) and
``DIR/NAME.pub`` (public). Existing keys are kept unless ``--force``. Only
the ``.pub`` files ever leave the SuperNode's host.

``register`` registers every ``DIR/*.pub`` with the SuperLink of the
connection CONNECTION (``[superlink.CONNECTION]`` in ``$FLWR_HOME/config.toml``,
as ``deploy/submit.sh`` writes it) by running ``flwr supernode register KEY
CONNECTION`` for each (four at a time); a key the SuperLink knows already
("Public key already in use") counts as registered, so running it again
registers only new keys. It prints one line per key and exits 1 if any
registration failed.

``generate`` needs the ``cryptography`` package (a dependency of Flower),
``register`` the ``flwr`` command; both come with the term-fl image
(``docker run --rm -v "$PWD/deploy/keys:/keys" term-fl python
/app/deploy/supernode_keys.py generate /keys ...``).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def generate(folder: Path, names: list[str], *, force: bool = False) -> list[Path]:
    """Write ``folder/NAME`` and ``folder/NAME.pub`` for each name; return the public keys written."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    for name in names:
        if not NAME.fullmatch(name):
            raise ValueError(f"key name {name!r}: use 1-64 letters, digits, '.', '_' or '-' (a SuperNode's service name)")
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name in names:
        private, public = folder / name, folder / f"{name}.pub"
        if private.exists() and public.exists() and not force:
            print(f"supernode_keys: {private} exists; kept (--force makes a new pair)")
            continue
        key = ec.generate_private_key(ec.SECP384R1())
        private.unlink(missing_ok=True)
        fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                        serialization.NoEncryption()))
        comment = f" term-fl-supernode:{name}".encode()
        public.write_bytes(key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                         serialization.PublicFormat.OpenSSH) + comment + b"\n")
        public.chmod(0o644)
        print(f"supernode_keys: wrote {private} and {public}")
        written.append(public)
    return written


PARALLEL = 4  # registrations at a time (each is a flwr process)
ALREADY = "Public key already in use"  # what the SuperLink answers for a registered key


def _flwr(flwr: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1", "NO_COLOR": "1"}
    return subprocess.run([flwr, *args], capture_output=True, text=True, env=env, timeout=300, check=False)


def register_one(key: Path, connection: str, flwr: str = "flwr") -> tuple[str, str]:
    """``flwr supernode register KEY CONNECTION``: ('registered' | 'known' | 'failed', what flwr said)."""
    out = _flwr(flwr, "supernode", "register", str(key), connection)
    said = " ".join((out.stdout + out.stderr).split())
    if out.returncode == 0:
        return "registered", said
    return ("known" if ALREADY in said else "failed"), said


def register(folder: Path, connection: str, flwr: str = "flwr") -> int:
    """Register every ``folder/*.pub`` (a key registered before counts as done); return 0, or 1 if one failed."""
    keys = sorted(folder.glob("*.pub"))
    if not keys:
        print(f"supernode_keys: no public keys (*.pub) in {folder}: nothing to register", file=sys.stderr)
        return 1
    with ThreadPoolExecutor(PARALLEL) as pool:
        results = list(pool.map(lambda key: register_one(key, connection, flwr), keys))
    for key, (outcome, said) in zip(keys, results):
        if outcome == "failed":
            print(f"supernode_keys: could not register {key}: {said[-500:]}", file=sys.stderr)
        else:
            print(f"supernode_keys: {key.name}: {'registered' if outcome == 'registered' else 'registered before'}")
    failed = sum(outcome == "failed" for outcome, _ in results)
    print(f"supernode_keys: {len(keys) - failed} of {len(keys)} public keys registered with {connection}")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="make a key pair per NAME in DIR")
    gen.add_argument("dir", type=Path)
    gen.add_argument("names", nargs="+", metavar="NAME", help="one key pair per SuperNode (its service name)")
    gen.add_argument("--force", action="store_true", help="replace existing key pairs")
    reg = sub.add_parser("register", help="register every DIR/*.pub with the SuperLink of CONNECTION")
    reg.add_argument("dir", type=Path)
    reg.add_argument("connection", help="a [superlink.CONNECTION] of $FLWR_HOME/config.toml")
    reg.add_argument("--flwr", default=shutil.which("flwr") or "flwr", help="the flwr command (default: on PATH)")
    args = parser.parse_args(argv)
    try:
        if args.command == "generate":
            generate(args.dir, args.names, force=args.force)
            return 0
        return register(args.dir, args.connection, args.flwr)
    except (ValueError, RuntimeError, OSError) as exc:
        print(f"supernode_keys: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
