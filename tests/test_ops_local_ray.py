"""Operations on a real local Ray: connect_ray's banner, dashboard token auth, kgtuner_ metrics export."""

from __future__ import annotations

import json
import time

import pytest

from http_helpers import http_get

from kgtuner.cluster import metrics as km
from kgtuner.cluster import ray_cluster as rc

pytestmark = [pytest.mark.slow, pytest.mark.serial]


def _scrape(url: str) -> dict[tuple[str, tuple], float]:
    """Prometheus text -> {(series name, sorted kgtuner-relevant labels): value} for ray_kgtuner_* series."""
    from prometheus_client.parser import text_string_to_metric_families

    _, body = http_get(url)
    out = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name.startswith("ray_kgtuner_"):
                labels = tuple(sorted((k, v) for k, v in sample.labels.items()
                                      if k in ("experiment", "stage", "state", "trial_id")))
                out[(sample.name, labels)] = sample.value
    return out


@pytest.fixture(scope="module")
def local_ray():
    import ray

    info = rc.connect_ray({"num_cpus": 1, "num_gpus": 2}, print_banner=False)
    try:
        yield info
    finally:
        ray.shutdown()


def test_connect_ray_local_start_describes_the_cluster(local_ray, capsys):
    info = local_ray
    assert info.started_here and info.num_gpus == 2 and info.num_cpus == 1
    assert info.dashboard_url.startswith("http://127.0.0.1:")
    assert len(info.node_ids) == 1 and info.metrics_export_port
    assert info.auth_enabled and info.token_source
    text = info.banner()
    assert info.dashboard_url in text and "Authorization: Bearer" in text and "ray_kgtuner_" in text
    # connecting again reuses the running Ray
    again = rc.connect_ray({"num_cpus": 1}, print_banner=True)
    assert again.address == info.address and not again.started_here
    assert info.dashboard_url in capsys.readouterr().out


def test_dashboard_api_needs_the_token(local_ray):
    import ray

    @ray.remote(num_cpus=0)
    class KGTunerProbe:
        def ping(self):
            return "pong"

    probe = KGTunerProbe.options(name="kgtuner_probe_actor").remote()
    assert ray.get(probe.ping.remote()) == "pong"
    base = local_ray.dashboard_url
    for path in ("/api/jobs/", "/api/v0/actors"):
        status, _ = http_get(base + path)
        assert status == 401, f"{path} answered {status} without a token"
        status, _ = http_get(base + path, {"Authorization": "Bearer not-the-token"})
        assert status == 403
    status, body = http_get(base + "/api/v0/actors?limit=1000", rc.auth_headers())
    assert status == 200
    actors = json.loads(body)["data"]["result"]["result"]
    assert any(a.get("name") == "kgtuner_probe_actor" and a.get("state") == "ALIVE" for a in actors)
    status, body = http_get(base + "/api/jobs/", rc.auth_headers())
    assert status == 200 and any(job["type"] == "DRIVER" for job in json.loads(body))
    ray.kill(probe)


def test_metrics_export_serves_kgtuner_gauges(local_ray):
    import ray

    exp = km.ExperimentMetrics("opstest")
    exp.set_stage(2)
    exp.best_mrr(0.31, stage=1)
    exp.best_mrr(0.42, stage=2)
    exp.best_mrr(0.40, stage=2)
    exp.trials(running=2, finished=5, failed=1)
    exp.budget_used(0.5)

    @ray.remote(num_gpus=1)
    class Trial:  # a trial-side process, as inside a Tune trainable
        def report(self):
            t = km.TrialMetrics("trial_7", stage=2, experiment="opstest")
            t.valid_mrr(0.42)
            t.throughput(5000.0)
            return True

    trial = Trial.remote()
    assert ray.get(trial.report.remote())
    expected = {
        ("ray_kgtuner_stage", (("experiment", "opstest"),)): 2.0,
        ("ray_kgtuner_best_valid_mrr", (("experiment", "opstest"), ("stage", "all"))): 0.42,
        ("ray_kgtuner_best_valid_mrr", (("experiment", "opstest"), ("stage", "1"))): 0.31,
        ("ray_kgtuner_best_valid_mrr", (("experiment", "opstest"), ("stage", "2"))): 0.42,
        ("ray_kgtuner_trials", (("experiment", "opstest"), ("state", "finished"))): 5.0,
        ("ray_kgtuner_trials", (("experiment", "opstest"), ("state", "failed"))): 1.0,
        ("ray_kgtuner_budget_used_fraction", (("experiment", "opstest"),)): 0.5,
        ("ray_kgtuner_trial_valid_mrr", (("experiment", "opstest"), ("stage", "2"), ("trial_id", "trial_7"))): 0.42,
        ("ray_kgtuner_trial_throughput_triples_per_second",
         (("experiment", "opstest"), ("stage", "2"), ("trial_id", "trial_7"))): 5000.0,
    }
    deadline = time.monotonic() + 45  # Ray exports about every 10 s
    seen = {}
    while time.monotonic() < deadline:
        seen = _scrape(local_ray.metrics_url)
        if all(key in seen for key in expected):
            break
        time.sleep(2)
    missing = [key for key in expected if key not in seen]
    assert not missing, f"not exported after 45 s: {missing}; seen {sorted(seen)}"
    for key, value in expected.items():
        assert seen[key] == pytest.approx(value), key
    ray.kill(trial)


def test_a_local_start_listens_on_loopback_only(local_ray):
    """Issue 14 (2): the metrics export port (and every other port of the local Ray: GCS, raylet, agents,
    dashboard) answers on 127.0.0.1 only -- no experiment name, node IP or per-trial MRR for the network."""
    import ipaddress

    import psutil

    assert local_ray.metrics_url.startswith("http://127.0.0.1:") and local_ray.node_ip == "127.0.0.1"
    me = psutil.Process()
    ours = {p.pid for p in me.children(recursive=True)} | {me.pid}
    listening = [(c.pid, c.laddr) for c in psutil.net_connections(kind="inet")
                 if c.status == psutil.CONN_LISTEN and c.pid in ours]
    assert any(addr.port == local_ray.metrics_export_port for _, addr in listening)

    def loopback(ip: str) -> bool:
        addr = ipaddress.ip_address(ip.split("%")[0])
        return addr.is_loopback or (addr.version == 6 and addr.ipv4_mapped is not None
                                    and addr.ipv4_mapped.is_loopback)

    exposed = [(psutil.Process(pid).name(), addr) for pid, addr in listening if not loopback(addr.ip)]
    assert not exposed, f"listening beyond loopback: {exposed}"


def test_the_gcs_and_the_raylet_of_a_local_start_run_with_sigterm_blocked(local_ray):
    """A stop signal to the whole job (``kill -TERM -PGID``, Slurm's ``scancel``) must not end the GCS or the raylet
    under the driver (its Ray core worker would end the driver before the search is saved): both, and the raylet's
    children (agents, workers: they inherit the mask), run with SIGTERM blocked. ``make test-all``'s process-group
    stop tests check the whole stop end to end. (Ray's dashboard head unblocks its signals itself; the search does
    not depend on it.)"""
    import psutil
    import ray

    node = ray._private.worker._global_node
    procs = {kind: info.process.pid for kind, infos in node.all_processes.items() for info in infos
             if kind in ("gcs_server", "raylet") and info.process is not None}
    assert set(procs) == {"gcs_server", "raylet"}, procs
    pids = {**{pid: kind for kind, pid in procs.items()},
            **{c.pid: c.name() for c in psutil.Process(procs["raylet"]).children(recursive=True)}}
    sigterm = 1 << (15 - 1)  # bit of signal 15 in /proc/<pid>/status's SigBlk mask
    for pid, name in pids.items():
        try:
            status = open(f"/proc/{pid}/status").read()
        except FileNotFoundError:  # a worker that ended meanwhile
            continue
        blocked = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigBlk:")), 16)
        assert blocked & sigterm, (name, hex(blocked))


def test_shutdown_ray_ends_the_local_start_without_rays_graceful_wait(local_ray, monkeypatch):
    """The last test of this module (it ends the module's Ray): ``shutdown_ray`` ends every process of the
    local start, through Ray's own ``kill_all_processes`` but with no SIGTERM grace (the processes run with
    SIGTERM blocked, so Ray's second per process type is only waited)."""
    import ray

    node = ray._private.worker._global_node
    procs = [info.process for infos in node.all_processes.values() for info in infos if info.process is not None]
    assert procs and all(p.poll() is None for p in procs)
    calls = []
    real = node.kill_all_processes

    def spy(**kwargs):
        calls.append(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(node, "kill_all_processes", spy)
    rc.shutdown_ray()
    assert not ray.is_initialized()
    assert calls and calls[0]["allow_graceful"] is False
    deadline = time.time() + 10
    while any(p.poll() is None for p in procs) and time.time() < deadline:
        time.sleep(0.1)
    assert all(p.poll() is not None for p in procs), [p.args[0] for p in procs if p.poll() is None]
