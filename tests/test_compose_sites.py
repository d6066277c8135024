"""SuperNodes on other hosts and SuperNode authentication in the compose files; deploy/supernode_keys.py.

No Docker engine needed: the generated files are read as compose reads them
(tests/compose_files.py). That a site really joins a server over its
published port, with authentication, and that an unregistered key is
refused, is deploy/e2e.sh's ``site`` profile (tests/test_e2e_docker.py) and,
without Docker, tests/test_deployment_auth.py.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from compose_files import (
    DATA_MOUNT, DEV, MAIN, NOAUTH, NODE_KEY, PROFILES, REPO, SECRETS_DIR, SITE, SUPERNODE, argv, flag_value, gen,
    load, load_module, load_text, node_config, supernodes,
)

keys = load_module("term_fl_supernode_keys", REPO / "deploy" / "supernode_keys.py")


@pytest.fixture(scope="module")
def main() -> dict:
    return load(MAIN)


@pytest.fixture(scope="module")
def site() -> dict:
    return load(SITE)


# --------------------------------------------------------------------------
# The site: SuperNodes only, joining a SuperLink by address and port
# --------------------------------------------------------------------------


def test_site_file_holds_supernodes_only_and_joins_by_address(site):
    services = site["services"]
    assert services and set(services) == set(supernodes(site)), "a site runs SuperNodes and nothing else"
    for name, svc in services.items():
        args = argv(svc)
        superlink = flag_value(args, "--superlink")
        # an address and port given at `up` (a required variable), never a compose service name
        assert superlink.startswith("${TERM_FL_SUPERLINK:?"), (name, superlink)
        assert "depends_on" not in svc, f"{name} waits for nothing of this host: its SuperLink is elsewhere"
        assert svc["restart"] == "on-failure"  # retries until its key is registered and the SuperLink is up
        assert DATA_MOUNT in svc["volumes"]
    assert set(site["secrets"]) == {"ca.crt"} | {f"{name}.key" for name in services}, "only the CA and its own keys"


def test_site_devices_match_the_server_profile(main, site):
    """The site's partitions are the devices of the federation the server profile's submitter runs."""
    configs = [node_config(s) for s in site["services"].values()]
    n = gen.DEFAULT_SITE_DEVICES
    assert sorted(int(c["partition-id"]) for c in configs) == list(range(n))
    assert {c["num-partitions"] for c in configs} == {str(n)}
    run_config = flag_value(argv(main["services"]["submit-server"]), "--run-config")
    assert f"data.num_devices={n}" in run_config
    assert "run.node_timeout=900" in run_config  # sites may start long after the server


def test_generator_writes_a_site_for_some_partitions():
    doc = load_text(gen.render_all(site_devices=12, partitions=gen.site_partitions("8-11", 12))[SITE])
    configs = sorted((int(c["partition-id"]), c["num-partitions"]) for c in map(node_config, doc["services"].values()))
    assert configs == [(i, "12") for i in range(8, 12)]
    assert set(doc["services"]) == {f"site-supernode-{i}" for i in range(8, 12)}
    main = load_text(gen.render_all(site_devices=12)[MAIN])
    assert "data.num_devices=12" in flag_value(argv(main["services"]["submit-server"]), "--run-config")


@pytest.mark.parametrize("bad", ["3-12", "5-2", "x", "-1"])
def test_generator_refuses_partitions_outside_the_federation(bad, capsys):
    with pytest.raises(SystemExit) as exc:
        gen.main(["--site-devices", "12", "--site-partitions", bad, "--check"])
    assert exc.value.code == 2
    assert "--site-partitions" in capsys.readouterr().err


# --------------------------------------------------------------------------
# SuperNode authentication: on by default, with an opt-out
# --------------------------------------------------------------------------


def test_superlink_requires_authenticated_supernodes_over_tls(main):
    link = argv(main["services"]["superlink"])
    assert "--enable-supernode-auth" in link
    assert "--ssl-certfile" in link and "--insecure" not in link  # Flower allows authentication with TLS only


def test_every_supernode_proves_its_own_key(main, site):
    for doc in (main, site):
        secrets = doc["secrets"]
        for name, svc in supernodes(doc).items():
            assert flag_value(argv(svc), "--auth-supernode-private-key") == NODE_KEY, name
            own = [s for s in svc["secrets"] if isinstance(s, dict)]
            assert own == [{"source": f"{name}.key", "target": "supernode.key"}], name
            assert secrets[f"{name}.key"] == {"file": f"${{TERM_FL_KEYS_DIR:-./deploy/keys}}/{name}"}


def test_keys_are_registered_before_any_supernode_starts(main):
    services = main["services"]
    register = services["register-supernodes"]
    args = argv(register)
    assert args[:4] == ["/app/deploy/submit.sh", "python", "/app/deploy/supernode_keys.py", "register"]
    assert args[4:] == ["/keys", register["environment"]["TERM_FL_CONNECTION"]]
    assert register["volumes"] == ["${TERM_FL_KEYS_DIR:-./deploy/keys}:/keys:ro"]
    assert register["depends_on"] == {"superlink": {"condition": "service_healthy"}}
    assert register["restart"] == "no"
    for name, svc in supernodes(main).items():
        assert svc["depends_on"]["register-supernodes"] == {"condition": "service_completed_successfully"}, name
    assert "deploy/supernode_keys.py" in (REPO / "Dockerfile").read_text(encoding="utf-8")


def merged(main: dict, override: dict, name: str) -> dict:
    """A service of ``main`` with ``override``'s keys replacing its own (compose's rule for these keys)."""
    return {**main["services"][name], **override["services"].get(name, {})}


@pytest.mark.parametrize("override", [NOAUTH, DEV])
def test_noauth_and_dev_overrides_turn_authentication_off(main, override):
    doc = load(override)
    link = merged(main, doc, "superlink")
    assert "--enable-supernode-auth" not in argv(link)
    assert ("--insecure" in argv(link)) == (override == DEV)
    for name in supernodes(main):
        node = merged(main, doc, name)
        assert "--auth-supernode-private-key" not in argv(node), name
        assert node["secrets"] == ([] if override == DEV else ["ca.crt"]), name
    assert argv(merged(main, doc, "register-supernodes"))[0] == "echo"
    assert not any(name.endswith(".key") and name != "server.key" for name in doc["secrets"]), "no key files needed"


def test_noauth_override_keeps_tls(main):
    doc = load(NOAUTH)
    assert set(doc["secrets"]) == {"ca.crt", "server.pem", "server.key"}
    assert flag_value(doc["services"]["superlink"]["command"], "--ssl-keyfile") == f"{SECRETS_DIR}/server.key"
    for name in supernodes(main):
        assert flag_value(argv(merged(main, doc, name)), "--root-certificates") == f"{SECRETS_DIR}/ca.crt"


def test_supernodes_fork_their_clientapps_and_poll_as_documented(main, site):
    """The launcher and the polls that bound a deployed round (docs/scaling-out.md), each with a way back."""
    for doc in (main, site):
        for name, svc in supernodes(doc).items():
            assert argv(svc)[0] == SUPERNODE, name
            env = svc["environment"]
            assert env["TERM_FL_PREFORK"] == "${TERM_FL_PREFORK:-1}"
            assert env["FLWR_SUPEREXEC_TASK_POLL_INTERVAL"] == "${TERM_FL_SUPEREXEC_POLL_S:-0.2}"
            ready = env["TERM_FL_READY_FILE"]
            health = svc["healthcheck"]["test"]
            assert health[0] == "CMD-SHELL" and f"test -f {ready}" in health[1], name
    for profile in PROFILES:  # a run starts once its SuperNodes have imported torch: no ServerApp amid those imports
        depends = main["services"][f"submit-{profile}"]["depends_on"]
        assert all(depends[name] == {"condition": "service_healthy"} for name in supernodes(main, profile))
    assert main["services"]["superlink"]["environment"]["TERM_FL_REPLY_POLL_S"] == "${TERM_FL_REPLY_POLL_S:-0.2}"
    assert main["services"]["dashboard"]["environment"]["TERM_FL_DASHBOARD_TOKEN"] == "${TERM_FL_DASHBOARD_TOKEN:-}"
    assert set(supernodes(main)) == {n for p in gen.profiles() if p.name in PROFILES for n in p.supernode_services()}


# --------------------------------------------------------------------------
# deploy/supernode_keys.py
# --------------------------------------------------------------------------


def test_generated_keys_are_what_flower_reads(tmp_path):
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import load_ssh_private_key
    from flwr.cli.supernode.register import try_load_public_key
    from flwr.supercore.primitives.asymmetric import public_key_to_bytes

    keys.generate(tmp_path, ["site-supernode-0", "site-supernode-1"])
    for name in ("site-supernode-0", "site-supernode-1"):
        private, public = tmp_path / name, tmp_path / f"{name}.pub"
        assert stat.S_IMODE(private.stat().st_mode) == 0o600 and stat.S_IMODE(public.stat().st_mode) == 0o644
        # flower-supernode --auth-supernode-private-key and `flwr supernode register` read them
        key = load_ssh_private_key(private.read_bytes(), password=None)
        assert isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name == "secp384r1"
        assert try_load_public_key(public) == public_key_to_bytes(key.public_key())
    assert (tmp_path / "site-supernode-0").read_bytes() != (tmp_path / "site-supernode-1").read_bytes()


def test_generate_keeps_existing_keys_unless_forced(tmp_path):
    keys.generate(tmp_path, ["a"])
    first = (tmp_path / "a").read_bytes()
    assert keys.generate(tmp_path, ["a"]) == [] and (tmp_path / "a").read_bytes() == first
    assert keys.generate(tmp_path, ["a"], force=True) == [tmp_path / "a.pub"]
    assert (tmp_path / "a").read_bytes() != first


@pytest.mark.parametrize("name", ["../escape", "a b", "", ".hidden", "x" * 65])
def test_generate_refuses_names_that_are_not_service_names(tmp_path, name):
    with pytest.raises(ValueError, match="key name"):
        keys.generate(tmp_path, [name])
    assert not any(tmp_path.iterdir())


def fake_flwr(tmp_path: Path, known: set[str], broken: set[str] = frozenset()) -> Path:
    """A stand-in for `flwr supernode register KEY CONNECTION`: what the SuperLink answers per key file."""
    script = tmp_path / "flwr"
    script.write_text(
        f"#!{sys.executable}\n"
        "import pathlib, sys\n"
        "key = pathlib.Path(sys.argv[3]).name\n"
        f"if key in {sorted(broken)!r}: print('Connection refused', file=sys.stderr); sys.exit(1)\n"
        f"if key in {sorted(known)!r}: print('[code: 23] Public key already in use.', file=sys.stderr); sys.exit(1)\n"
        "print('SuperNode 123 registered successfully.')\n"
    )
    script.chmod(0o755)
    return script


def test_register_counts_known_keys_as_registered_and_reports_failures(tmp_path, capsys):
    folder = tmp_path / "keys"
    keys.generate(folder, ["n0", "n1", "n2"])
    flwr = fake_flwr(tmp_path, known={"n1.pub"})
    assert keys.register(folder, "compose", str(flwr)) == 0
    out = capsys.readouterr().out
    assert "n0.pub: registered" in out and "n1.pub: registered before" in out
    assert "3 of 3 public keys registered with compose" in out
    broken = fake_flwr(tmp_path, known=set(), broken={"n2.pub"})
    assert keys.register(folder, "compose", str(broken)) == 1
    captured = capsys.readouterr()
    assert "could not register" in captured.err and "n2.pub" in captured.err
    assert "2 of 3 public keys registered" in captured.out


def test_register_without_keys_is_an_error(tmp_path, capsys):
    assert keys.register(tmp_path, "compose", str(fake_flwr(tmp_path, known=set()))) == 1
    assert "no public keys" in capsys.readouterr().err


def test_keys_script_runs_as_a_command(tmp_path):
    out = subprocess.run([sys.executable, str(REPO / "deploy" / "supernode_keys.py"), "generate", str(tmp_path), "k"],
                         capture_output=True, text=True, timeout=60, check=False, env={**os.environ})
    assert out.returncode == 0 and (tmp_path / "k.pub").read_text().startswith("ecdsa-sha2-nistp384 ")
    bad = subprocess.run([sys.executable, str(REPO / "deploy" / "supernode_keys.py"), "generate", str(tmp_path), "a/b"],
                         capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 2 and "key name" in bad.stderr
