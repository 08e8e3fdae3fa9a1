"""Operations: kgtuner.cluster.ray_cluster (connect, dashboard auth, job runtime_env) and kgtuner.cluster.metrics."""

from __future__ import annotations

import json
import os
import socket

import pytest

from kgtuner.errors import ConfigError
from kgtuner.cluster import metrics as km
from kgtuner.cluster import ray_cluster as rc


# ----------------------------------------------------------------------------- fast unit tests

def test_runtime_env_for_job_makes_job_stop_a_clean_sigint():
    env = rc.runtime_env_for_job(stop_wait_s=90, working_dir="/repo")
    assert env["env_vars"]["RAY_JOB_STOP_SIGNAL"] == "SIGINT"
    assert env["env_vars"]["RAY_JOB_STOP_WAIT_TIME_S"] == "90"
    assert env["env_vars"]["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] == "1"  # the ogb/torch workaround travels
    assert env["working_dir"] == "/repo"
    assert "working_dir" not in rc.runtime_env_for_job()
    for bad in (0, -5, 2.5, True, "60"):
        with pytest.raises(ConfigError, match="stop_wait_s"):
            rc.runtime_env_for_job(stop_wait_s=bad)


@pytest.mark.parametrize("cfg, key", [
    ({"num_gpus": -1}, "num_gpus"), ({"num_gpus": 1.5}, "num_gpus"), ({"num_cpus": "four"}, "num_cpus"),
    ({"dashboard_port": 70000}, "dashboard_port"), ({"dashboard_host": ""}, "dashboard_host"),
    ({"address": 6379}, "address"),
])
def test_bad_cluster_config_is_a_config_error_before_ray_starts(cfg, key):
    import ray

    with pytest.raises(ConfigError, match=key):
        rc.connect_ray(cfg, print_banner=False)
    assert not ray.is_initialized()


def test_exposure_warning_only_off_loopback():
    for host in ("127.0.0.1", "localhost", "::1"):
        assert rc.exposure_warning(host, 8265) is None
    text = rc.exposure_warning("0.0.0.0", 8265)
    assert "every network interface" in text and "8265" in text and "token" in text
    assert "10.1.2.3" in rc.exposure_warning("10.1.2.3", 9000)


def test_token_source_follows_rays_order(monkeypatch, tmp_path):
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert rc.token_source() == str(tmp_path / ".ray" / "auth_token")
    assert rc.read_token() is None and rc.auth_headers() == {}
    token_file = tmp_path / "tok"
    token_file.write_text("abc123\n")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(token_file))
    assert rc.token_source() == str(token_file)
    assert rc.auth_headers() == {"Authorization": "Bearer abc123"}
    monkeypatch.setenv("RAY_AUTH_TOKEN", "fromenv")
    assert "RAY_AUTH_TOKEN" in rc.token_source()
    assert rc.read_token() == "fromenv"


def test_job_env_vars_not_duplicated_inside_a_ray_job(monkeypatch):
    wanted = {"TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1", "OTHER": "x"}
    monkeypatch.delenv("RAY_JOB_CONFIG_JSON_ENV_VAR", raising=False)
    assert rc.job_env_missing(wanted) == wanted
    job = {"runtime_env": {"env_vars": {"TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}}}
    monkeypatch.setenv("RAY_JOB_CONFIG_JSON_ENV_VAR", json.dumps(job))
    assert rc.job_env_missing(wanted) == {"OTHER": "x"}


def test_dashboard_port_moves_on_when_taken():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        picked = rc.pick_dashboard_port("127.0.0.1", port)
    assert picked != port and port < picked < port + 50


def test_metric_names_are_prefixed_and_exported_with_ray_prefix():
    assert km.METRICS and all(spec.name.startswith("kgtuner_") for spec in km.METRICS.values())
    assert km.exported_name("best_valid_mrr") == "ray_kgtuner_best_valid_mrr"
    assert len({spec.name for spec in km.METRICS.values()}) == len(km.METRICS)


def test_metrics_are_noops_without_ray_and_best_is_monotone():
    import ray

    assert not ray.is_initialized()
    m = km.ExperimentMetrics("unit")
    m.set_stage(1)
    m.best_mrr(0.30, stage=1)
    m.best_mrr(0.25, stage=1)  # worse: the best stays
    m.best_mrr(0.40, stage=2)
    m.best_mrr(float("nan"), stage=2)  # ignored
    m.trials(running=2, finished=3, failed=1)
    m.budget_used(1.7)
    assert m.best(1) == pytest.approx(0.30) and m.best(2) == pytest.approx(0.40)
    assert m.best() == pytest.approx(0.40)
    t = km.TrialMetrics("trial_1", stage=2, experiment="unit")
    t.valid_mrr(0.5)
    t.throughput(1234.5)
    assert km.get_gauge("stage") is None and not ray.is_initialized()
    with pytest.raises(ValueError):
        m.set_stage(3)
    with pytest.raises(ValueError):
        m.trials(running=-1, finished=0, failed=0)


# ----------------------------------------------------------------------------- local start: port race, loopback
class _FakeRay:
    """Stands in for ray.init/shutdown: records each start's arguments and Ray's single-machine switch."""

    def __init__(self, on_init=None):
        self.calls, self.shutdowns, self.on_init = [], 0, on_init

    def init(self, **kwargs):
        from ray._private import ray_constants

        self.calls.append({**kwargs, "_env": os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"),
                           "_cluster": ray_constants.ENABLE_RAY_CLUSTER})
        if self.on_init:
            self.on_init(len(self.calls), kwargs)

    def shutdown(self):
        self.shutdowns += 1


@pytest.fixture
def fake_ray(monkeypatch):
    import ray

    fake = _FakeRay()
    monkeypatch.setattr(ray, "init", fake.init)
    monkeypatch.setattr(ray, "shutdown", fake.shutdown)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(rc, "describe_ray", lambda started_here=False: None)
    return fake


def test_the_default_dashboard_port_is_bound_by_ray_itself_so_two_launches_cannot_race(fake_ray):
    """Issue 14 (3): with 8265, Ray's dashboard is started with dashboard_port=None, i.e. it binds 8265 or the
    next free port at bind time (port retries) instead of kgtuner checking first and Ray binding later."""
    rc.connect_ray({"num_cpus": 1}, print_banner=False)
    (call,) = fake_ray.calls
    assert call["dashboard_port"] is None and call["address"] == "local"


def test_an_explicit_port_taken_while_ray_starts_is_retried_on_the_next_port(fake_ray, capsys):
    """Issue 14 (3): the port was free at the check, another launch took it before Ray's dashboard bound it;
    Ray then raises a plain Exception (not the ValueError the retry used to catch)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    other = socket.socket()

    def take_the_port(n, kwargs):
        if n == 1:
            other.bind(("127.0.0.1", kwargs["dashboard_port"]))
            other.listen()
            raise Exception("Failed to find a valid port for dashboard after 0 retries: [Errno 98] in use")

    fake_ray.on_init = take_the_port
    try:
        rc.connect_ray({"num_cpus": 1, "dashboard_port": port}, print_banner=False)
    finally:
        other.close()
    assert [c["dashboard_port"] for c in fake_ray.calls][0] == port
    assert fake_ray.calls[1]["dashboard_port"] > port and fake_ray.shutdowns == 1
    assert "was taken while Ray started" in capsys.readouterr().out


def test_a_start_failure_that_is_not_the_port_is_not_retried(fake_ray):
    def fail(n, kwargs):
        raise RuntimeError("GCS did not start")

    fake_ray.on_init = fail
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(RuntimeError, match="GCS"):
        rc.connect_ray({"num_cpus": 1, "dashboard_port": port}, print_banner=False)
    assert len(fake_ray.calls) == 1


def test_a_local_start_runs_ray_on_loopback_only_and_restores_the_switch(fake_ray):
    """Issue 14 (2): the local start is Ray's single-machine mode (node IP 127.0.0.1), so the metrics export,
    the dashboard's and the autoscaler's metrics and Ray's RPC ports do not listen on the network."""
    from ray._private import ray_constants

    before = (os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"), ray_constants.ENABLE_RAY_CLUSTER)
    rc.connect_ray({"num_cpus": 1}, print_banner=False)
    (call,) = fake_ray.calls
    assert call["_env"] == "0" and call["_cluster"] is False
    assert (os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"), ray_constants.ENABLE_RAY_CLUSTER) == before
