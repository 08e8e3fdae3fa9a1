"""A real local start while another process holds Ray's default dashboard port (issue 14, case 3).

Two launches a second apart used to both choose 8265 (kgtuner checked the port, Ray's dashboard bound it
seconds later); the second failed after 61 s. With Ray's default port kgtuner now lets Ray's dashboard
bind it with Ray's own port retries, at bind time. Here a socket holds the port (Ray's default is pointed
at a free port so the test does not touch a real 8265), and kgtuner's own check is blinded, as in the race."""

from __future__ import annotations

import socket

import pytest

from kgtuner.cluster import ray_cluster as rc

pytestmark = [pytest.mark.slow, pytest.mark.serial]


def test_a_held_default_port_does_not_fail_the_local_start(monkeypatch):
    import ray
    from ray._private import ray_constants

    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    monkeypatch.setattr(ray_constants, "DEFAULT_DASHBOARD_PORT", port)  # "8265" for this test
    monkeypatch.setattr(rc, "_port_free", lambda host, p: True)        # the other launch binds after our check
    try:
        info = rc.connect_ray({"num_cpus": 1, "dashboard_port": port}, print_banner=False)
        assert info.started_here and info.dashboard_url
        used = int(info.dashboard_url.rsplit(":", 1)[1].rstrip("/"))
        assert used != port and port < used <= port + 50
    finally:
        ray.shutdown()
        holder.close()
