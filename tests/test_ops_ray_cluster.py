"""Operations: kgtuner.cluster.ray_cluster (connect, dashboard auth, job runtime_env) and kgtuner.cluster.metrics."""

from __future__ import annotations

import json
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
