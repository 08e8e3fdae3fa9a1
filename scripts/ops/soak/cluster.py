"""The processes of a soak: the local two-node Ray cluster, held by a helper process (``TwoNodeCluster``), and
the search's driver sessions (``Session``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from soak.schedule import CPUS_PER_NODE, GPUS_PER_NODE, HEAD_IP, WORKER_IP


_HELPER = textwrap.dedent('''
    import json, os, socket, sys
    from ray.cluster_utils import Cluster

    def free_port():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    def raylet(node):
        return node.all_processes["raylet"][0].process.pid

    dash = free_port()
    common = dict(num_cpus={cpus}, num_gpus={gpus}, object_store_memory=200 * 2**20)
    cluster = Cluster(initialize_head=True, head_node_args=dict(
        node_ip_address="{head}", include_dashboard=True, dashboard_host="127.0.0.1",
        dashboard_port=dash, dashboard_agent_listen_port=free_port(), **common))
    try:
        worker = cluster.add_node(node_ip_address="{worker}", **common)
        head = cluster.head_node
        print(json.dumps(dict(dashboard=f"http://127.0.0.1:{{dash}}", address=cluster.address,
                              head_node=head.node_id, worker_node=worker.node_id, raylet=raylet(worker))), flush=True)
        for line in sys.stdin:
            cmd = line.strip()
            if cmd == "restart-worker":  # its raylet was killed: remove what is left, start the node again
                cluster.remove_node(worker, allow_graceful=False)
                worker = cluster.add_node(node_ip_address="{worker}", **common)
                print(json.dumps(dict(worker_node=worker.node_id, raylet=raylet(worker))), flush=True)
            elif cmd == "stop":
                break
    finally:
        cluster.shutdown()
''').format(head=HEAD_IP, worker=WORKER_IP, cpus=CPUS_PER_NODE, gpus=GPUS_PER_NODE)


class TwoNodeCluster:
    """The helper process holding the cluster (as tests/test_ops_multinode.py::two_node_cluster)."""

    def __init__(self, work: Path, env: dict):
        self.work, self.env = work, env
        script = work / "cluster_helper.py"
        script.write_text(_HELPER)
        self.log_path = work / "cluster_helper.log"
        self.proc = subprocess.Popen([sys.executable, str(script)], env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=open(self.log_path, "w"), text=True,
                                     start_new_session=True)
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the two-node cluster did not start:\n" + self.log_path.read_text()[-3000:])
        self.info = json.loads(line)
        self.raylet_pid = int(self.info["raylet"])
        self.worker_up = True

    @property
    def headers(self) -> dict:
        return {"Authorization": "Bearer " + Path(self.env["RAY_AUTH_TOKEN_PATH"]).read_text().strip()}

    def restart_worker(self) -> dict:
        self.proc.stdin.write("restart-worker\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the cluster helper ended while restarting the worker node:\n"
                               + self.log_path.read_text()[-3000:])
        info = json.loads(line)
        self.raylet_pid, self.worker_up = int(info["raylet"]), True
        self.info["worker_node"] = info["worker_node"]
        return info

    def trial_actors(self) -> list[dict]:
        """Alive actors of the trainable holding a GPU (as tests/test_ops_multinode.py::_alive_actors, _is_trial)."""
        req = urllib.request.Request(self.info["dashboard"] + "/api/v0/actors?limit=1000&detail=true",
                                     headers=self.headers)
        try:
            with urllib.request.urlopen(req, timeout=20) as resp:
                actors = json.loads(resp.read())["data"]["result"]["result"]
        except (urllib.error.URLError, OSError, ValueError, KeyError):
            return []
        return [a for a in actors if a.get("state") == "ALIVE" and a.get("pid")
                and "kgtuner" in (a.get("repr_name") or "")
                and any(k.startswith("GPU") for k in a.get("required_resources", {}))]

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("stop\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=90)
            except (BrokenPipeError, subprocess.TimeoutExpired, OSError):
                pass
        try:  # last resort, and whatever its Ray left: the helper's own process group
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass


@dataclass
class Session:
    """One driver process (``python -m kgtuner.launch ...``), in its own process group."""

    index: int
    proc: subprocess.Popen
    out_path: Path
    err_path: Path
    resume: bool
    budget_s: int
    started_wall: float
    start_active: float
    ended_by: str | None = None  # the fault that stopped it
    _seen: str = ""
    _offset: int = 0

    def text(self) -> str:
        """Its stdout so far (read incrementally)."""
        try:
            with open(self.out_path, "rb") as fh:
                fh.seek(self._offset)
                chunk = fh.read()
        except OSError:
            return self._seen
        self._offset += len(chunk)
        self._seen += chunk.decode(errors="replace")
        return self._seen

    def stderr(self) -> str:
        try:
            return self.err_path.read_text(errors="replace")
        except OSError:
            return ""
