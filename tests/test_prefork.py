"""The pre-forking launcher: term-fl-supernode, its fork server and the flwr-clientapp shim.

Every fork server and launcher runs in a process of its own (forking the test
process would copy pytest's state): a toy entry point stands in for Flower's
``flwr-clientapp`` and reports what it sees, and a fake ``flower-supernode``
on ``PATH`` stands in for the SuperNode that starts the shim. That a real
deployment gives the same stored numbers with and without the fork server is
tests/test_deployment_local.py.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from term_fl.deployment import shim

SERVER = r"""
import os, signal, sys
from pathlib import Path
from term_fl.deployment.forkserver import ForkServer
from term_fl.deployment.supernode import write_shim

seen = {"messages": 0}

def entry():
    seen["messages"] += 1  # a child's own change: the next child must not see it
    print(f"child pid={os.getpid()} ppid={os.getppid()} argv={sys.argv[1:]} cwd={os.getcwd()} "
          f"mark={os.environ.get('MARK')} seen={seen['messages']}", flush=True)
    print("to stderr", file=sys.stderr, flush=True)
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    if what == "exit":
        sys.exit(int(sys.argv[2]))
    if what == "raise":
        raise RuntimeError("boom")
    if what == "sleep":
        import time
        time.sleep(120)

folder = Path(sys.argv[1])
write_shim(folder)
stop = []
server = ForkServer(folder / "sock", entry, signals={signal.SIGTERM: stop.append})
print("ready", flush=True)
server.serve_until(lambda: bool(stop), lambda pid, status: None)
server.close()
print("closed", flush=True)
"""


def wait_for_line(proc: subprocess.Popen, text: str, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if text in line:
            return line
        if not line and proc.poll() is not None:
            break
    raise AssertionError(f"no line with {text!r} (exit status {proc.poll()})")


def gone(pid: int, timeout: float = 10) -> bool:
    """Whether process ``pid`` ended (or is a zombie) within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def server(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(folder)], stdout=subprocess.PIPE, text=True)
    try:
        wait_for_line(proc, "ready")
        yield folder, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def shim_env(folder: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, shim.SOCKET_ENV: str(folder / "sock"), shim.REAL_ENV: "/bin/false", "MARK": "m1", **extra}


def run_shim(folder: Path, *args: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(folder / "flwr-clientapp"), *args], env=shim_env(folder, **extra), cwd=folder.parent,
                          capture_output=True, text=True, timeout=60, check=False)


def test_child_runs_with_the_shims_arguments_environment_and_streams(server):
    folder, proc = server
    out = run_shim(folder, "--token", "abc", MARK="from-the-shim")
    assert out.returncode == 0, out.stderr
    assert f"ppid={proc.pid}" in out.stdout  # forked from the fork server, not started by the shim
    assert "argv=['--token', 'abc']" in out.stdout
    assert f"cwd={folder.parent}" in out.stdout and "mark=from-the-shim" in out.stdout
    assert out.stderr.strip() == "to stderr"


def test_exit_status_and_failures_reach_the_shim(server):
    folder, _ = server
    assert run_shim(folder, "exit", "7").returncode == 7
    failed = run_shim(folder, "raise")
    assert failed.returncode == 1 and "RuntimeError: boom" in failed.stderr


def test_every_child_starts_from_the_parents_state(server):
    folder, _ = server
    runs = [run_shim(folder).stdout for _ in range(3)]
    assert all("seen=1" in out for out in runs), runs
    assert len({out.split()[1] for out in runs}) == 3  # three children


def test_a_signal_to_the_shim_ends_its_child(server):
    folder, _ = server
    proc = subprocess.Popen([str(folder / "flwr-clientapp"), "sleep"], env=shim_env(folder), stdout=subprocess.PIPE,
                            text=True)
    child = int(wait_for_line(proc, "child pid=").split("pid=")[1].split()[0])
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    assert gone(child)


def test_without_a_fork_server_the_shim_runs_flowers_own_process(tmp_path):
    from term_fl.deployment.supernode import write_shim

    write_shim(tmp_path)
    real = tmp_path / "real-clientapp"
    real.write_text("#!/bin/sh\necho real \"$@\"\nexit 4\n")
    real.chmod(0o755)
    out = subprocess.run([str(tmp_path / "flwr-clientapp"), "--token", "t"], capture_output=True, text=True,
                         env={**os.environ, shim.SOCKET_ENV: str(tmp_path / "no-such.sock"), shim.REAL_ENV: str(real)},
                         timeout=60, check=False)
    assert (out.returncode, out.stdout.strip()) == (4, "real --token t")


def test_a_malformed_request_is_refused_and_the_server_goes_on(server):
    folder, _ = server
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as raw:
        raw.connect(str(folder / "sock"))
        raw.sendall(shim.HEADER.pack(5) + b"hello")  # no file descriptors, not JSON
        try:
            answer = raw.recv(16)
        except ConnectionResetError:  # closed with the request unread
            answer = b""
        assert answer == b"", "a malformed request got a child"
    assert run_shim(folder).returncode == 0


def test_closing_the_server_ends_running_children(server):
    folder, proc = server
    shim_proc = subprocess.Popen([str(folder / "flwr-clientapp"), "sleep"], env=shim_env(folder),
                                 stdout=subprocess.PIPE, text=True)
    child = int(wait_for_line(shim_proc, "child pid=").split("pid=")[1].split()[0])
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert gone(child) and not (folder / "sock").exists()
    assert shim_proc.wait(timeout=30) == 128 + signal.SIGTERM


# --------------------------------------------------------------------------
# term-fl-supernode
# --------------------------------------------------------------------------

FAKE_SUPERNODE = r"""#!{python}
import json, os, signal, subprocess, sys, time
report = {{"pid": os.getpid(), "argv": sys.argv[1:], "path0": os.environ["PATH"].split(os.pathsep)[0]}}
if "--wait" in sys.argv:
    signal.signal(signal.SIGTERM, lambda *a: (print("got SIGTERM", flush=True), sys.exit(0)))
    print(json.dumps(report), flush=True)
    while True:
        time.sleep(0.1)
if "--no-clientapp" in sys.argv:
    print(json.dumps(report), flush=True)
    sys.exit(3)
runs = [subprocess.run(["flwr-clientapp", *args], capture_output=True, text=True) for args in (["--token", "t1"], ["fail"])]
report["runs"] = [[r.returncode, r.stdout, r.stderr] for r in runs]
print(json.dumps(report), flush=True)
sys.exit(3)
"""

LAUNCHER = r"""
import os, sys
from term_fl.deployment import supernode

def toy():
    print(f"child ppid={os.getppid()} torch-imported={'torch' in sys.modules} argv={sys.argv[1:]}", flush=True)
    if sys.argv[1:] == ["fail"]:
        sys.exit(9)

supernode.run_flwr_clientapp = toy
if os.environ.get("TOY_PRELOAD") == "none":  # what a test of signals or exec needs is not torch
    supernode.PRELOAD = ()
print(f"launcher pid={os.getpid()}", flush=True)
sys.exit(supernode.main(sys.argv[1:]))
"""


@pytest.fixture
def fake_path(tmp_path) -> dict[str, str]:
    """PATH with a fake flower-supernode first (then this venv's Flower commands)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "flower-supernode"
    fake.write_text(FAKE_SUPERNODE.format(python=sys.executable))
    fake.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
            "TMPDIR": str(tmp_path)}


def test_launcher_forks_clientapps_that_find_torch_imported(fake_path, tmp_path):
    import json

    out = subprocess.run([sys.executable, "-c", LAUNCHER, "--superlink", "x:8000", "--node-config", "partition-id=0"],
                         env=fake_path, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 3, out.stderr  # the SuperNode's exit status
    launcher = int(out.stdout.split("launcher pid=")[1].split()[0])
    report = json.loads(next(line for line in out.stdout.splitlines() if line.startswith("{")))
    assert report["argv"] == ["--superlink", "x:8000", "--node-config", "partition-id=0"]
    assert Path(report["path0"]).name.startswith("term-fl-supernode-")  # the shim comes first
    (ok_code, ok_out, _), (fail_code, fail_out, _) = report["runs"]
    assert ok_code == 0 and f"child ppid={launcher} torch-imported=True argv=['--token', 't1']" in ok_out
    assert fail_code == 9 and "argv=['fail']" in fail_out
    assert "torch and term-fl imported once" in out.stderr
    assert not list(tmp_path.glob("term-fl-supernode-*")), "the launcher's folder is removed"


def test_launcher_forwards_sigterm_to_the_supernode_and_says_when_it_is_ready(fake_path, tmp_path):
    ready = tmp_path / "ready"
    ready.write_text("left by a crashed launcher")
    env = {**fake_path, "TOY_PRELOAD": "none", "TERM_FL_READY_FILE": str(ready)}
    proc = subprocess.Popen([sys.executable, "-c", LAUNCHER, "--wait"], env=env, stdout=subprocess.PIPE, text=True)
    wait_for_line(proc, '"pid"')
    deadline = time.monotonic() + 60
    while not (ready.exists() and ready.read_text() == "") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ready.read_text() == "", "the launcher makes its own ready file once the imports are done"
    proc.send_signal(signal.SIGTERM)
    assert wait_for_line(proc, "got SIGTERM")
    assert proc.wait(timeout=60) == 0
    assert not ready.exists()


def test_prefork_off_runs_flower_supernode_itself(fake_path):
    import json

    out = subprocess.run([sys.executable, "-c", LAUNCHER, "--no-clientapp"], env={**fake_path, "TERM_FL_PREFORK": "0"},
                         capture_output=True, text=True, timeout=120, check=False)
    launcher = int(out.stdout.split("launcher pid=")[1].split()[0])
    report = json.loads(next(line for line in out.stdout.splitlines() if line.startswith("{")))
    assert report["pid"] == launcher, "TERM_FL_PREFORK=0 replaces the launcher by flower-supernode"
    assert not Path(report["path0"]).name.startswith("term-fl-supernode-"), "no shim on PATH"
    assert out.returncode == 3 and "imported once" not in out.stderr
