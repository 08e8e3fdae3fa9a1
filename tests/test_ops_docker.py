"""Operations files: the Ray cluster launcher configs pass Ray's own validation; Dockerfile, compose file
and the scripts are consistent with the installed Ray / Python and bind to loopback by default."""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
DOCKER = REPO / "docker"
CLUSTER_FILES = ("cluster.yaml", "cluster-local.yaml")


def _load(name: str) -> dict:
    return yaml.safe_load((DOCKER / name).read_text())


def _validate(cfg: dict) -> None:
    from ray.autoscaler._private.util import prepare_config, validate_config

    validate_config(prepare_config(copy.deepcopy(cfg)))


def _project_version() -> str:
    return re.search(r'^version\s*=\s*"([^"]+)"', (REPO / "pyproject.toml").read_text(), flags=re.M).group(1)


@pytest.mark.parametrize("name", CLUSTER_FILES)
def test_cluster_yaml_passes_rays_validation(name):
    cfg = _load(name)
    _validate(cfg)
    broken = copy.deepcopy(cfg)
    broken["head_start_ray_commandz"] = ["ray start --head"]  # a typo'd key must be rejected
    with pytest.raises(Exception, match="head_start_ray_commandz"):
        _validate(broken)


@pytest.mark.parametrize("name", CLUSTER_FILES)
def test_cluster_yaml_keeps_the_dashboard_on_loopback_with_token_auth(name):
    cfg = _load(name)
    head = " ".join(cfg["head_start_ray_commands"])
    workers = " ".join(cfg["worker_start_ray_commands"])
    assert "--dashboard-host=127.0.0.1" in head and "0.0.0.0" not in head
    assert "RAY_AUTH_MODE=token" in head and "RAY_AUTH_MODE=token" in workers
    assert "~/.ray/auth_token" in cfg["file_mounts"]  # the same token on every node
    image = cfg["docker"]["image"]
    assert image.rsplit(":", 1)[1] == _project_version() and "/kgtuner:" in image


def test_cloud_cluster_has_8_gpu_workers_and_local_one_lists_machines():
    cloud = _load("cluster.yaml")
    workers = [t for name, t in cloud["available_node_types"].items() if name != cloud["head_node_type"]]
    assert workers and all(t["resources"]["GPU"] == 8 for t in workers)
    assert cloud["available_node_types"][cloud["head_node_type"]]["resources"]["GPU"] == 0
    local = _load("cluster-local.yaml")
    assert local["provider"]["type"] == "local"
    assert local["provider"]["head_ip"] and len(local["provider"]["worker_ips"]) >= 1


def _dockerfile_base_image() -> str:
    """The first FROM's image with the ARG defaults substituted (BASE_IMAGE's default names the other ARGs)."""
    text = (DOCKER / "Dockerfile").read_text()
    args = dict(re.findall(r"^ARG\s+(\w+)=(\S+)", text, flags=re.M))
    base = re.search(r"^FROM\s+(\S+)", text, flags=re.M).group(1)
    while "${" in base:
        base = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], base)
    return base, args


def test_dockerfile_base_image_matches_installed_ray_and_python():
    import ray
    import torch

    image, args = _dockerfile_base_image()
    py = f"py{sys.version_info.major}{sys.version_info.minor}"
    assert image == f"rayproject/ray:{ray.__version__}-{py}-gpu"
    assert args["TORCH_VERSION"] == torch.__version__.split("+")[0]
    text = (DOCKER / "Dockerfile").read_text()
    assert "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1" in text  # kgtuner._compat.RUNTIME_ENV_VARS, image-wide
    copies = re.findall(r"^COPY[ \t]+((?:--\S+[ \t]+)*)(.+)$", text, flags=re.M)
    assert copies
    for flags, args in copies:
        if "--from=" in flags:  # from a build stage, not from the repository
            continue
        for src in args.split()[:-1]:
            assert (REPO / src).exists(), f"Dockerfile copies {src}, which is not in the repository"


def test_dockerfile_base_is_a_build_arg_and_every_stage_starts_from_the_user_step():
    # users get Ray's image; scripts/ops/docker_check.sh passes a local base. Both stages start from the `base` stage,
    # which gives a base without Ray's `ray` user one, so the rest runs the same on both.
    text = (DOCKER / "Dockerfile").read_text()
    froms = re.findall(r"^FROM\s+(.+)$", text, flags=re.M)
    assert froms[0].split() == ["${BASE_IMAGE}", "AS", "base"]
    assert all(f.split()[0] == "base" for f in froms[1:]) and len(froms) == 3
    assert re.search(r"^ARG BASE_IMAGE=rayproject/ray:", text, flags=re.M)
    assert "useradd" in text and "--uid 1000" in text and re.search(r"^USER ray$", text, flags=re.M)


def test_dockerfile_installs_the_wheel_not_an_editable_checkout():
    text = (DOCKER / "Dockerfile").read_text()
    commands = " ".join(re.findall(r"^RUN[ \t]+((?:.*\\\n)*.*)$", text, flags=re.M))
    assert "pip wheel" in commands and re.search(r"pip install [^&]*/tmp/dist/kgtuner-\*\.whl", commands)
    assert not re.search(r"pip install[^&]*(-e|--editable)\b", commands), "an editable install in the image"
    # what the wheel is built from: the package, its configs and the build files
    copied = {src for flags, args in re.findall(r"^COPY[ \t]+((?:--\S+[ \t]+)*)(.+)$", text, flags=re.M)
              if "--from=" not in flags for src in args.split()[:-1]}
    assert {"pyproject.toml", "setup.py", "kgtuner", "conf"} <= copied


def test_compose_file_publishes_on_loopback_only():
    compose = _load("compose.yaml")
    services = compose["services"]
    assert {"ray-head", "ray-worker"} <= set(services)
    head = services["ray-head"]
    assert (DOCKER / head["build"]["context"] / head["build"]["dockerfile"]).exists()
    assert head["image"].endswith(":" + _project_version())
    for service in services.values():
        for mapping in service.get("ports", []):
            assert str(mapping).startswith("127.0.0.1:"), f"port {mapping} published beyond loopback"
        assert service["environment"]["RAY_AUTH_MODE"] == "token"
    assert "--address=ray-head:6379" in services["ray-worker"]["command"]
    gpus = services["ray-worker"]["deploy"]["resources"]["reservations"]["devices"][0]
    assert gpus["capabilities"] == ["gpu"]


@pytest.mark.parametrize("script", ["submit.sh", "metrics_stack.sh", "docker_check.sh"])
def test_scripts_parse_and_explain_themselves(script):
    path = REPO / "scripts" / "ops" / script
    subprocess.run(["bash", "-n", str(path)], check=True)
    out = subprocess.run(["bash", str(path), "--help"], capture_output=True, text=True, check=True).stdout
    assert "127.0.0.1" in out


def test_submit_rejects_bad_options_before_contacting_ray():
    path = REPO / "scripts" / "ops" / "submit.sh"
    bad = subprocess.run(["bash", str(path), "--frobnicate"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--frobnicate" in bad.stderr
    bad = subprocess.run(["bash", str(path), "--stop-wait", "soon"], capture_output=True, text=True)
    assert bad.returncode == 2 and "stop-wait" in bad.stderr


def test_docker_check_rejects_bad_options_and_its_latest_output_passed():
    path = REPO / "scripts" / "ops" / "docker_check.sh"
    bad = subprocess.run(["bash", str(path), "--budget", "soon"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--budget" in bad.stderr
    assert re.search(r"^docker-check:", (REPO / "Makefile").read_text(), flags=re.M)
    # `make docker-check` (a pre-release check, not CI's) commits its latest output verbatim
    out = (REPO / "docs" / "docker" / "docker_check.txt").read_text()
    assert re.search(r"^commit: [0-9a-f]{40}$", out, flags=re.M)
    steps = dict(re.findall(r"^(\w+)\s+(PASS|FAIL|SKIP)\s+[0-9.]+$", out, flags=re.M))
    assert set(steps) >= {"engine", "base", "build", "version", "demo", "train", "submit", "compose", "total"}
    assert set(steps.values()) == {"PASS"}, steps


def test_metrics_stack_needs_a_ray_session(tmp_path):
    path = REPO / "scripts" / "ops" / "metrics_stack.sh"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "RAY_TMPDIR": str(tmp_path)}
    res = subprocess.run(["bash", str(path), "start"], capture_output=True, text=True, env=env)
    assert res.returncode == 1 and "no Ray session" in res.stderr


def test_grafana_dashboard_queries_the_exported_series():
    from kgtuner.cluster.metrics import METRICS, exported_name, grafana_dashboard

    board = grafana_dashboard()
    exprs = " ".join(t["expr"] for p in board["panels"] for t in p["targets"])
    for key in METRICS:
        assert exported_name(key) in exprs
