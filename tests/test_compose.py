"""The Docker Compose deployment: schema, structure, TLS, and the generator.

No Docker engine is needed: the files are validated against the Compose
Specification's JSON Schema (../shared/schemas/compose-spec.json, Draft 7),
checked structurally, and every Flower flag they use is checked against the
``--help`` of the installed Flower binaries. That the topology really runs is
tests/test_deployment_local.py (the same processes on loopback).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import sqlite3
import subprocess
import tomllib

import pytest
from compose_files import (
    BIN, DATA_MOUNT, DEV, FILES, GPU, MAIN, NOAUTH, PROFILES, REPO, SCHEMA, SECRETS_DIR, SITE, SUPERNODE, _VAR, argv,
    flag_value, gen, interpolate, load, load_module, load_text, node_config, supernodes,
)

from term_fl.config import load_scenario


@pytest.fixture(scope="module")
def main() -> dict:
    return load(MAIN)


# --------------------------------------------------------------------------
# Generated files and schema
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name", FILES)
def test_committed_file_equals_generator_output(name):
    expected = gen.render_all()[name]
    actual = (REPO / name).read_text(encoding="utf-8")
    assert actual == expected, f"{name} is stale: run `python deploy/gen_compose.py` and commit the result"


def test_generator_check_mode_passes():
    assert gen.main(["--check"]) == 0


@pytest.mark.parametrize("name", FILES)
def test_validates_against_compose_spec(name):
    if not SCHEMA.is_file():
        pytest.skip(f"Compose Specification schema not found at {SCHEMA} (CI puts shared/ beside the repo)")
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(load(name)), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors[:20])


def test_generator_other_fairness_size_is_consistent():
    for n in (3, 17):
        doc = load_text(gen.render_all(n)[MAIN])
        nodes = supernodes(doc, "fairness")
        assert len(nodes) == n
        assert sorted(int(node_config(s)["partition-id"]) for s in nodes.values()) == list(range(n))
        assert {node_config(s)["num-partitions"] for s in nodes.values()} == {str(n)}
        assert f"data.num_devices={n}" in flag_value(argv(doc["services"]["submit-fairness"]), "--run-config")
        assert len(supernodes(doc, "vehicle-sensor")) == 23
        gpu = load_text(gen.render_all(n)[GPU])
        assert set(gpu["services"]) == set(nodes) | set(supernodes(doc, "vehicle-sensor"))
    with pytest.raises(ValueError):
        gen.render_all(1)


# --------------------------------------------------------------------------
# Structure of docker-compose.yml
# --------------------------------------------------------------------------


def test_services_and_profiles(main):
    services = main["services"]
    for name in ("superlink", "register-supernodes", "dashboard"):
        assert set(services[name]["profiles"]) == {"vehicle-sensor", "fairness", "server"}
    assert services["submit-vehicle-sensor"]["profiles"] == ["vehicle-sensor"]
    assert services["submit-fairness"]["profiles"] == ["fairness"]
    assert services["submit-server"]["profiles"] == ["server"]
    assert not supernodes(main, "server"), "the server profile's SuperNodes join from site hosts"
    for name, svc in services.items():
        assert svc.get("profiles"), f"service {name} has no profile: it would start in every deployment"
        assert svc["image"] and svc["build"]["dockerfile"] == "Dockerfile", name


def test_exactly_23_vehicle_supernodes(main):
    nodes = supernodes(main, "vehicle-sensor")
    assert len(nodes) == 23
    configs = [node_config(s) for s in nodes.values()]
    assert sorted(int(c["partition-id"]) for c in configs) == list(range(23))
    assert {c["num-partitions"] for c in configs} == {"23"}
    for svc in nodes.values():
        assert svc["profiles"] == ["vehicle-sensor"]
        assert DATA_MOUNT in svc["volumes"]
        assert svc["depends_on"]["check-vehicle-data"]["condition"] == "service_completed_successfully"


def test_fairness_supernodes_match_generator_default(main):
    n = gen.DEFAULT_FAIRNESS_SUPERNODES
    nodes = supernodes(main, "fairness")
    assert len(nodes) == n
    configs = [node_config(s) for s in nodes.values()]
    assert sorted(int(c["partition-id"]) for c in configs) == list(range(n))
    assert {c["num-partitions"] for c in configs} == {str(n)}
    # the synthetic federation has one device per SuperNode
    run_config = flag_value(argv(main["services"]["submit-fairness"]), "--run-config")
    assert f"data.num_devices={n}" in run_config


def test_supernodes_connect_to_the_single_superlink_port(main):
    link = argv(main["services"]["superlink"])
    assert link[0] == "flower-superlink"
    assert flag_value(link, "--host") == "0.0.0.0"
    port = flag_value(link, "--port")
    assert port == "8000"
    assert "--disable-runtime-dependency-installation" in link
    for profile in PROFILES:
        for name, svc in supernodes(main, profile).items():
            assert flag_value(argv(svc), "--superlink") == f"superlink:{port}", name
            # one container per SuperNode: the default runtime port 127.0.0.1:9094 cannot collide
            assert "--port" not in argv(svc)
            assert svc["depends_on"]["superlink"]["condition"] == "service_healthy"
    text = (REPO / MAIN).read_text(encoding="utf-8")
    for stale in ("9091", "9092", "9093", "--fleet-api-address", "--serverappio-api-address",
                  "--clientappio-api-address", "flwr/serverapp", "flwr/clientapp"):
        assert stale not in text, f"stale Flower < 1.42 setting {stale!r} in {MAIN}"


def test_every_supernode_uses_tls_and_main_file_has_no_insecure(main):
    secrets = main["secrets"]
    certs = {"ca.crt", "server.pem", "server.key"}
    assert certs <= set(secrets)
    assert {name: secrets[name]["file"] for name in certs} == {
        name: f"${{TERM_FL_CERTS_DIR:-./deploy/certs}}/{name}" for name in certs
    }
    link = main["services"]["superlink"]
    for flag, secret in (("--ssl-ca-certfile", "ca.crt"), ("--ssl-certfile", "server.pem"),
                         ("--ssl-keyfile", "server.key")):
        assert flag_value(argv(link), flag) == f"{SECRETS_DIR}/{secret}"
        assert secret in link["secrets"]
    for profile in PROFILES:
        for name, svc in supernodes(main, profile).items():
            assert flag_value(argv(svc), "--root-certificates") == f"{SECRETS_DIR}/ca.crt", name
            assert "ca.crt" in svc["secrets"], name
    for name in ("submit-vehicle-sensor", "submit-fairness", "submit-server", "register-supernodes"):
        env = main["services"][name]["environment"]
        assert env["TERM_FL_ROOT_CERTIFICATES"] == f"{SECRETS_DIR}/ca.crt"
        assert "TERM_FL_INSECURE" not in env
    for name in (MAIN, SITE, GPU, NOAUTH, "Dockerfile"):
        assert "--insecure" not in (REPO / name).read_text(encoding="utf-8"), name
    assert "--insecure" in (REPO / DEV).read_text(encoding="utf-8")


def test_results_volume_and_data_mounts(main):
    assert "results" in main["volumes"]
    services = main["services"]
    assert "results:/results" in services["superlink"]["volumes"]  # the ServerApp runs here
    assert "results:/results" in services["dashboard"]["volumes"]
    assert DATA_MOUNT in services["superlink"]["volumes"]
    dash = argv(services["dashboard"])
    assert dash[:2] == ["term-fl", "dashboard"]
    assert flag_value(dash, "--db") == "/results/results.db"
    assert flag_value(dash, "--host") == "0.0.0.0" and flag_value(dash, "--port") == "8050"


@pytest.mark.parametrize(("published_as", "answered"), [
    ("", {"localhost", "127.0.0.1", "dashboard"}),
    ("fl.example.org,dash.lab", {"localhost", "127.0.0.1", "dashboard", "fl.example.org", "dash.lab"}),
])
def test_dashboard_answers_the_names_it_is_published_under(main, published_as, answered):
    """The dashboard's Host: guard lets in loopback, the service name (other containers) and
    TERM_FL_DASHBOARD_HOSTNAME; compose's interpolation is done here as compose does it."""
    from term_fl.cli.commands import build_parser
    from term_fl.dashboard.hosts import allowed_host_names

    command = [a.replace("${TERM_FL_DASHBOARD_HOSTNAME:-}", published_as) for a in argv(main["services"]["dashboard"])]
    args = build_parser().parse_args(command[1:])
    names, any_ip = allowed_host_names(args.host, args.allowed_hosts)
    assert answered <= names and any_ip
    assert "rebind.example" not in names
    assert not any(n.startswith("$") for n in names)


def test_environment_everywhere(main):
    for name, svc in main["services"].items():
        env = svc["environment"]
        assert env["FLWR_TELEMETRY_ENABLED"] == "0", name
        assert env["FLWR_DISABLE_UPDATE_CHECK"] == "1", name
        assert env["FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION"] == "1", name
        assert env["TERM_FL_VEHICLE_DATA"] == "/data/vehicle_fewshot.json", name


def test_submit_services_run_flwr_with_the_app_run_config(main):
    app_config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["flwr"]["app"]["config"]
    pattern = re.compile(r"(\S+?)=(\'[^\']*\'|\"[^\"]*\"|\S+)")  # flwr's own run-config parser
    for profile in (*PROFILES, "server"):
        svc = main["services"][f"submit-{profile}"]
        args = argv(svc)
        assert args[0] == "/app/deploy/submit.sh"
        assert args[1:6] == ["flwr", "run", "/app", svc["environment"]["TERM_FL_CONNECTION"], "--stream"]
        assert svc["environment"]["TERM_FL_SUPERLINK_ADDRESS"] == "superlink:8000"
        assert svc["restart"] == "no"
        run_config = flag_value(args, "--run-config")
        values = {k: tomllib.loads(f"v = {v}")["v"] for k, v in pattern.findall(run_config)}
        assert set(values) <= set(app_config), f"unknown run-config keys {set(values) - set(app_config)}"
        assert values["results-dir"] == "/results"
        assert values["scenario"].startswith("configs/")
        depends = svc["depends_on"]
        assert depends["superlink"]["condition"] == "service_healthy"
        assert depends["register-supernodes"]["condition"] == "service_completed_successfully"
        assert ("check-vehicle-data" in depends) == (profile == "vehicle-sensor")
        others = {"superlink", "register-supernodes", "check-vehicle-data"}
        assert set(depends) - others == set(supernodes(main, profile))


def submit_overrides(main: dict, profile: str, env: dict[str, str] | None = None) -> list[str]:
    run_config = interpolate(flag_value(argv(main["services"][f"submit-{profile}"]), "--run-config"), env)
    return shlex.split(dict(re.findall(r'(\S+?)="([^"]*)"', run_config))["overrides"])


@pytest.mark.parametrize("profile", [*PROFILES, "server"])
def test_default_run_is_short_and_full_size_is_an_override(main, profile, tmp_path):
    """A plain `up` runs 10 rounds; TERM_FL_ROUNDS and TERM_FL_OVERRIDES (last wins) change it."""
    scenario = REPO / next(p.scenario for p in gen.profiles() if p.name == profile)
    env = {"TERM_FL_VEHICLE_DATA": str(tmp_path / "v.json")}
    default = load_scenario(scenario, submit_overrides(main, profile), environ=env, check_files=False)
    assert default.run.rounds == 10 < load_scenario(scenario, environ=env, check_files=False).run.rounds
    full = submit_overrides(main, profile, {"TERM_FL_ROUNDS": "100"})
    assert load_scenario(scenario, full, environ=env, check_files=False).run.rounds == 100
    extra = submit_overrides(main, profile, {"TERM_FL_OVERRIDES": "run.rounds=3 strategy.t=2.0"})
    resolved = load_scenario(scenario, extra, environ=env, check_files=False)
    assert (resolved.run.rounds, resolved.strategy.term.t) == (3, 2.0)


def test_vehicle_profile_checks_its_data_before_any_supernode_starts(main):
    services = main["services"]
    check = services["check-vehicle-data"]
    assert check["profiles"] == ["vehicle-sensor"] and check["restart"] == "no"
    assert check["volumes"] == [DATA_MOUNT]
    args = argv(check)
    assert args[:2] == ["python", "/app/deploy/check_data.py"]
    assert (REPO / "deploy" / "check_data.py").is_file()
    assert "deploy/check_data.py" in (REPO / "Dockerfile").read_text(encoding="utf-8")
    submit = argv(services["submit-vehicle-sensor"])
    # the same scenario and overrides as the run itself
    assert f'scenario="{args[2]}" overrides="{args[3]}"' in flag_value(submit, "--run-config")
    for name in supernodes(main, "vehicle-sensor"):
        assert services[name]["depends_on"]["check-vehicle-data"]["condition"] == "service_completed_successfully"


@pytest.mark.parametrize("name", FILES)
def test_no_default_host_path_outside_the_repository(name):
    text = (REPO / name).read_text(encoding="utf-8")
    for var, default in _VAR.findall(text):
        if "/" in default and "://" not in default:
            assert default.startswith("./") and ".." not in default, f"${{{var}}} defaults to {default}"
    assert "shared/" not in text


def test_profile_scenarios_exist(main):
    scenarios = sorted((REPO / "configs").glob("*.toml"))
    if not scenarios:
        pytest.skip("configs/ holds no scenario files yet")
    for profile in gen.profiles():
        assert (REPO / profile.scenario).is_file(), (
            f"profile {profile.name} runs {profile.scenario}, which is not in the repository "
            f"(configs/ has {[p.name for p in scenarios]}); fix deploy/gen_compose.py"
        )


def test_gpu_override_reserves_nvidia_gpus_for_every_supernode(main):
    gpu = load(GPU)
    all_nodes = set(supernodes(main))
    assert set(gpu["services"]) == all_nodes
    for name, svc in gpu["services"].items():
        devices = svc["deploy"]["resources"]["reservations"]["devices"]
        assert devices == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}], name
        assert "whl/cu" in svc["build"]["args"]["TORCH_INDEX_URL"], name
        assert svc["image"] != main["services"][name]["image"], "CUDA and CPU images need distinct tags"


def test_dev_override_is_plaintext_everywhere(main):
    dev = load(DEV)
    services = dev["services"]
    assert "--insecure" in services["superlink"]["command"]
    assert not any(a.startswith("--ssl") for a in services["superlink"]["command"])
    assert "--enable-supernode-auth" not in services["superlink"]["command"], "authentication needs TLS"
    for name in supernodes(main):
        merged = {**main["services"][name], **services[name]}
        args = argv(merged)
        assert "--insecure" in args and "--root-certificates" not in args, name
        assert "--auth-supernode-private-key" not in args, name
        assert node_config(merged)  # the per-node command of the main file still applies
        assert services[name]["secrets"] == []
    for profile in (*PROFILES, "server"):
        assert services[f"submit-{profile}"]["environment"]["TERM_FL_INSECURE"] == "1"
    assert argv(services["register-supernodes"])[0] == "echo"
    assert dev["secrets"] == {}


def _compose_cli() -> list[str] | None:
    """A Docker Compose v2 CLI, if this machine has one (`config` needs no engine)."""
    candidates = [[str(BIN / "docker-compose")], ["docker", "compose"], ["docker-compose"]]  # the test extra's first
    for cmd in candidates:
        if shutil.which(cmd[0]) is None:
            continue
        out = subprocess.run([*cmd, "version"], capture_output=True, text=True, timeout=60, check=False)
        match = re.search(r"v?(\d+)\.(\d+)\.(\d+)", out.stdout)
        if out.returncode == 0 and match and tuple(map(int, match.groups())) >= (2, 24, 4):
            return cmd
    return None


@pytest.mark.parametrize(
    ("files", "profile"),
    [([MAIN], "vehicle-sensor"), ([MAIN], "fairness"), ([MAIN], "server"), ([MAIN, GPU], "vehicle-sensor"),
     ([MAIN, NOAUTH], "fairness"), ([MAIN, DEV], "fairness"), ([SITE], None)],
)
def test_docker_compose_accepts_the_files(files, profile, tmp_path):
    """Docker Compose itself (>= 2.24.4 for `!reset` / `!override`) resolves every combination, when installed."""
    cli = _compose_cli()
    if cli is None:
        pytest.skip("no Docker Compose >= 2.24.4 CLI here (the schema and structure tests still run)")
    args = [*cli, *(a for f in files for a in ("-f", str(REPO / f))), *(["--profile", profile] if profile else []),
            "config"]
    env = {**os.environ, "TERM_FL_SUPERLINK": "fl.example.org:8000", "TERM_FL_KEYS_DIR": str(tmp_path)}
    out = subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=REPO, env=env, check=False)
    assert out.returncode == 0, out.stderr
    resolved = load_text(out.stdout)
    nodes = [s for s in resolved["services"].values() if (s.get("entrypoint") or [None])[0] == SUPERNODE]
    expected = {"vehicle-sensor": 23, "fairness": gen.DEFAULT_FAIRNESS_SUPERNODES, "server": 0,
                None: gen.DEFAULT_SITE_DEVICES}
    assert len(nodes) == expected[profile]
    for node in nodes:
        argv_ = [*node["entrypoint"], *node["command"]]
        assert ("--insecure" in argv_) == (DEV in files)
        assert ("--root-certificates" in argv_) == (DEV not in files)
        assert ("--auth-supernode-private-key" in argv_) == (DEV not in files and NOAUTH not in files)
        if SITE in files:
            assert flag_value(argv_, "--superlink") == "fl.example.org:8000"
        if GPU in files:
            assert node["deploy"]["resources"]["reservations"]["devices"][0]["driver"] == "nvidia"
    link = resolved["services"].get("superlink")
    if link is not None:
        assert ("--enable-supernode-auth" in link["command"]) == (DEV not in files and NOAUTH not in files)


# --------------------------------------------------------------------------
# Flags against the installed Flower 1.42 binaries
# --------------------------------------------------------------------------


def _helps(*cmds: tuple[str, ...]) -> list[str]:
    """``--help`` output of installed Flower commands (run in parallel: each imports flwr)."""
    env = {**os.environ, "FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1", "COLUMNS": "200"}
    procs = []
    for cmd in cmds:
        exe = BIN / cmd[0]
        if not exe.exists():
            pytest.skip(f"{exe} not installed")
        procs.append(subprocess.Popen([str(exe), *cmd[1:], "--help"], stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True, env=env))
    return [p.communicate(timeout=120)[0] for p in procs]


def _flags(args: list[str]) -> set[str]:
    return {a for a in args if a.startswith("--")}


def test_flags_exist_in_installed_flower_binaries(main):
    services = main["services"]
    link_help, node_help, run_help, dash_help = _helps(
        ("flower-superlink",), ("flower-supernode",), ("flwr", "run"), ("term-fl", "dashboard"))
    overrides = [load(NOAUTH)["services"], load(DEV)["services"]]
    used_link = _flags(argv(services["superlink"])) | {f for o in overrides for f in _flags(o["superlink"]["command"])}
    used_node = set()
    # term-fl-supernode hands every argument to flower-supernode
    for doc in (main, load(SITE)):
        for name, svc in supernodes(doc).items():
            used_node |= _flags(argv(svc))
            used_node |= {f for o in overrides if name in o for f in _flags(o[name]["entrypoint"])}
    used_run = set()
    for profile in (*PROFILES, "server"):
        used_run |= _flags(argv(services[f"submit-{profile}"])[1:])
    for flag in used_link:
        assert re.search(rf"(^|\s|\[){re.escape(flag)}\b", link_help), f"flower-superlink has no {flag}"
    for flag in used_node:
        assert re.search(rf"(^|\s|\[){re.escape(flag)}\b", node_help), f"flower-supernode has no {flag}"
    for flag in used_run:
        assert re.search(rf"{re.escape(flag)}\b", run_help), f"flwr run has no {flag}"
    for flag in _flags(argv(services["dashboard"])):
        assert re.search(rf"{re.escape(flag)}\b", dash_help), f"term-fl dashboard has no {flag}"
    assert "Deprecated" not in link_help.split("--host", 1)[1].split("--port", 1)[0]


# --------------------------------------------------------------------------
# deploy/make-certs.sh and deploy/submit.sh
# --------------------------------------------------------------------------


def test_make_certs_covers_every_hostname(tmp_path, main):
    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed")
    out = tmp_path / "certs"
    subprocess.run(["bash", str(REPO / "deploy" / "make-certs.sh"), str(out)], check=True,
                   capture_output=True, timeout=120)
    for name in ("ca.crt", "ca.key", "server.pem", "server.key"):
        assert (out / name).is_file()
    assert oct((out / "server.key").stat().st_mode & 0o777) == "0o600"
    text = subprocess.run(["openssl", "x509", "-in", str(out / "server.pem"), "-noout", "-text"],
                          check=True, capture_output=True, text=True).stdout
    san = text.split("Subject Alternative Name", 1)[1].splitlines()[1]
    hosts = {"127.0.0.1", "localhost"}
    for svc in supernodes(main).values():
        hosts.add(flag_value(argv(svc), "--superlink").rsplit(":", 1)[0])
    for profile in (*PROFILES, "server"):
        hosts.add(main["services"][f"submit-{profile}"]["environment"]["TERM_FL_SUPERLINK_ADDRESS"].rsplit(":", 1)[0])
    for host in hosts:
        assert (f"IP Address:{host}" if host[0].isdigit() else f"DNS:{host}") in san, (host, san)
    subprocess.run(["openssl", "verify", "-CAfile", str(out / "ca.crt"), str(out / "server.pem")],
                   check=True, capture_output=True)


def test_submit_script_writes_the_connection_and_waits(tmp_path):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    cert = tmp_path / "ca.crt"
    cert.write_text("dummy")
    home = tmp_path / "flwr"
    env = {
        **os.environ,
        "FLWR_HOME": str(home),
        "TERM_FL_SUPERLINK_ADDRESS": f"127.0.0.1:{port}",
        "TERM_FL_CONNECTION": "local-test",
        "TERM_FL_ROOT_CERTIFICATES": str(cert),
        "TERM_FL_WAIT_TIMEOUT": "5",
    }
    script = str(REPO / "deploy" / "submit.sh")
    try:
        out = subprocess.run(["sh", script, "echo", "ran"], env=env, capture_output=True, text=True, timeout=30,
                             check=False)
    finally:
        listener.close()
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("ran")
    config = tomllib.loads((home / "config.toml").read_text())
    assert config["superlink"]["default"] == "local-test"
    assert config["superlink"]["local-test"] == {"address": f"127.0.0.1:{port}", "root-certificates": str(cert)}
    # flwr refuses a relative root-certificates path: the script refuses it first
    bad = subprocess.run(["sh", script, "true"], env={**env, "TERM_FL_ROOT_CERTIFICATES": "ca.crt"},
                         capture_output=True, text=True, timeout=30, check=False)
    assert bad.returncode == 2 and "absolute" in bad.stderr
    # never clobbers a config.toml it did not write
    (home / "config.toml").write_text('[superlink]\ndefault = "mine"\n')
    mine = subprocess.run(["sh", script, "true"], env=env, capture_output=True, text=True, timeout=30, check=False)
    assert mine.returncode == 2 and "not written by this script" in mine.stderr


# --------------------------------------------------------------------------
# deploy/check_data.py (the vehicle profile's data check)
# --------------------------------------------------------------------------


def _load_check_data():
    return load_module("term_fl_check_data", REPO / "deploy" / "check_data.py")


def test_check_data_says_what_is_missing_and_where_it_goes(tmp_path, monkeypatch, capsys):
    check = _load_check_data()
    monkeypatch.setenv("TERM_FL_VEHICLE_DATA", str(tmp_path / "vehicle_fewshot.json"))
    assert check.main(["configs/vehicle-sensor.toml", "run.rounds=2"]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and str(tmp_path / "vehicle_fewshot.json") in err
    assert "data/ folder" in err and "TERM_FL_DATA_DIR" in err

    (tmp_path / "vehicle_fewshot.json").write_text('{"users": []}')
    assert check.main(["configs/vehicle-sensor.toml", "run.rounds=2"]) == 2
    assert "sha256 mismatch" in capsys.readouterr().err
    assert check.main(["configs/vehicle-sensor.toml", "run.rounds=2 data.sha256=any"]) == 0
    assert "vehicle data ok" in capsys.readouterr().out


def test_check_data_accepts_the_published_file(monkeypatch, capsys):
    from conftest import vehicle_path

    path = vehicle_path()
    if path is None:
        pytest.skip("vehicle data not found (set TERM_FL_VEHICLE_DATA)")
    monkeypatch.setenv("TERM_FL_VEHICLE_DATA", str(path))
    assert _load_check_data().main(["configs/vehicle-sensor.toml", ""]) == 0
    assert "a8c8b22a89ea64e5a563cffe94352b48c1f44a02100fd3256adfc09dc43d9ddc" in capsys.readouterr().out


# --------------------------------------------------------------------------
# deploy/e2e_check.py (what deploy/e2e.sh checks in the results store)
# --------------------------------------------------------------------------


def test_e2e_check_accepts_a_finished_run_and_names_what_is_missing(tmp_path):
    from conftest import small_scenario
    from term_fl.results import ResultsStore
    from term_fl.runs.run import run_one

    check = load_module("term_fl_e2e_check", REPO / "deploy" / "e2e_check.py")
    scenario = small_scenario("run.engine=inprocess", "run.evaluate_fraction=0.5")
    with ResultsStore(tmp_path / "results.db") as store:
        run_one(scenario, store, out_dir=tmp_path / "run")
    db, rounds, devices = str(tmp_path / "results.db"), scenario.run.rounds, scenario.data.synthetic.num_devices
    problems, summary = check.check(db, rounds, devices)
    assert problems == [] and summary["rounds"] == rounds and len(summary["round_s"]) == rounds
    problems, _ = check.check(db, rounds + 1, devices)
    assert any(f"expected finished {rounds + 1}/{rounds + 1}" in p for p in problems)
    with sqlite3.connect(db) as con:
        con.execute("DELETE FROM device_eval WHERE round = 1")
    problems, _ = check.check(db, rounds, devices)
    assert any(p.startswith("round 1: val rows") for p in problems)
