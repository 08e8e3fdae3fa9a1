"""Starting or attaching to Ray for kgtuner: dashboard, token authentication, job runtime_env.

``connect_ray(cluster_cfg)`` is what the launcher calls. It either attaches to a running cluster
(``cluster.address`` or ``RAY_ADDRESS``) or starts a local Ray on loopback only (Ray's single-machine
mode: its RPC ports and its unauthenticated Prometheus endpoints listen on 127.0.0.1) whose dashboard
binds to 127.0.0.1 unless the user explicitly asks for another host. Ray 2.60's token authentication for the dashboard
and the Jobs API stays on; the printed banner says where the token is and how to pass it.

A local Ray's processes are started with SIGTERM blocked (a stop signal sent to every process of the job
reaches the driver only, which stops the search cleanly and then ends Ray) and end with the driver however it
ends (a watcher process SIGKILLs what is left of them, the raylet's agents included, once the driver is gone).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from kgtuner._compat import RUNTIME_ENV_VARS
from kgtuner.errors import ConfigError, KGTunerError
from kgtuner.cluster.local_processes import _start_reaper, _stop_signals_left_to_driver
from kgtuner.cluster.local_processes import shutdown_ray  # noqa: F401 - kgtuner.cluster.ray_cluster.shutdown_ray

log = logging.getLogger(__name__)

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
#: Ray's switch of its single-machine mode (node IP 127.0.0.1; Ray's default on macOS/Windows).
_SINGLE_MACHINE_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
DEFAULT_DASHBOARD_HOST = "127.0.0.1"
DEFAULT_DASHBOARD_PORT = 8265
#: Seconds a stopped job gets to finish after SIGINT before Ray kills it (Tune saves its state).
DEFAULT_JOB_STOP_WAIT_S = 60

#: The keys of the ``cluster`` group (conf/cluster/*.yaml); the launcher refuses any other.
CLUSTER_KEYS = ("address", "num_cpus", "num_gpus", "dashboard_host", "dashboard_port", "include_dashboard")
_CLUSTER_KEYS = CLUSTER_KEYS


@dataclass(frozen=True)
class RayInfo:
    """What the launcher needs to know about the Ray it runs on.

    Attributes:
        address: GCS address of the cluster (``host:port``).
        started_here: True when ``connect_ray`` started a local Ray (False when it attached).
        dashboard_url: ``http://host:port`` of the dashboard, or None when it is not running.
        metrics_export_port: Port of this node's Prometheus metrics export (``/metrics``), if known.
        num_gpus: GPUs (logical or real) of the whole cluster.
        num_cpus: CPUs of the whole cluster.
        node_ids: Ray node ids of the alive nodes.
        auth_enabled: Whether token authentication is on for the dashboard / Jobs API.
        token_source: Where the token comes from (a file path, or ``RAY_AUTH_TOKEN``), or None.
        node_ip: IP address of the node this driver runs on (its metrics export listens there).
    """

    address: str
    started_here: bool
    dashboard_url: str | None
    metrics_export_port: int | None
    num_gpus: int
    num_cpus: float
    node_ids: list[str] = field(default_factory=list)
    auth_enabled: bool = True
    token_source: str | None = None
    node_ip: str | None = None

    @property
    def metrics_url(self) -> str | None:
        """URL of this node's Prometheus-format metrics export, or None."""
        if self.metrics_export_port is None:
            return None
        return f"http://{self.node_ip or '127.0.0.1'}:{self.metrics_export_port}/metrics"

    def banner(self) -> str:
        """Human-readable lines: dashboard URL, how to authenticate, where metrics are."""
        lines = [f"Ray cluster {self.address} ({'started locally' if self.started_here else 'attached'}): "
                 f"{len(self.node_ids)} node(s), {self.num_gpus} GPU(s), {self.num_cpus:g} CPU(s)"]
        if self.dashboard_url:
            lines.append(f"Ray dashboard: {self.dashboard_url}")
        if self.auth_enabled:
            lines.append(
                f"  token authentication is on; token: {self.token_source or token_source()}. "
                "Open the dashboard and paste the token, or send 'Authorization: Bearer <token>' "
                "(the `ray` CLI and JobSubmissionClient read ~/.ray/auth_token or RAY_AUTH_TOKEN)."
            )
        if self.metrics_url:
            lines.append(f"Prometheus metrics (kgtuner gauges are named ray_kgtuner_*): {self.metrics_url}")
        return "\n".join(lines)


def token_source() -> str:
    """Where Ray takes the auth token from, in Ray 2.60's order: ``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH``,
    then ``~/.ray/auth_token`` (created by the first local ``ray.init``/``ray start`` when missing)."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return "environment variable RAY_AUTH_TOKEN"
    if os.environ.get("RAY_AUTH_TOKEN_PATH"):
        return os.environ["RAY_AUTH_TOKEN_PATH"]
    return str(Path.home() / ".ray" / "auth_token")


def read_token() -> str | None:
    """The token this process would send (see ``token_source``), or None when there is none."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return os.environ["RAY_AUTH_TOKEN"].strip()
    path = Path(token_source())
    try:
        token = path.read_text().strip()
    except OSError:
        return None
    return token or None


def auth_headers() -> dict[str, str]:
    """``{"Authorization": "Bearer <token>"}`` for dashboard / Jobs API requests ({} without a token)."""
    token = read_token()
    return {"Authorization": f"Bearer {token}"} if token else {}


def runtime_env_for_job(stop_wait_s: int = DEFAULT_JOB_STOP_WAIT_S, working_dir: str | None = None) -> dict:
    """The ``runtime_env`` for submitting a kgtuner experiment as a Ray job.

    It carries ``kgtuner._compat.RUNTIME_ENV_VARS`` (needed by every worker) and makes ``ray job stop``
    send SIGINT -- which Tune treats as a clean, resumable stop -- instead of SIGTERM, waiting
    ``stop_wait_s`` seconds before Ray force-kills the driver.
    """
    if not isinstance(stop_wait_s, int) or isinstance(stop_wait_s, bool) or stop_wait_s < 1:
        raise ConfigError(f"stop_wait_s must be a positive integer number of seconds, got {stop_wait_s!r}")
    env = dict(RUNTIME_ENV_VARS)
    env["RAY_JOB_STOP_SIGNAL"] = "SIGINT"
    env["RAY_JOB_STOP_WAIT_TIME_S"] = str(stop_wait_s)
    runtime_env: dict[str, Any] = {"env_vars": env}
    if working_dir is not None:
        runtime_env["working_dir"] = str(working_dir)
    return runtime_env


#: Folder (under the session's ``runtime_resources``) where Ray unpacks a job's uploaded ``working_dir``.
_WORKING_DIR_FILES = "working_dir_files"


def job_working_dir(cwd: str | os.PathLike | None = None) -> Path | None:
    """The Ray-managed copy of this job's uploaded ``working_dir`` that ``cwd`` (default: the current
    directory) lies in, or None (not a Ray job, no ``working_dir``, or running elsewhere).

    Ray unpacks a job's ``working_dir`` into ``<session>/runtime_resources/working_dir_files/<package>``
    on every node that runs a task of the job, and the first set-up on a node *replaces* that folder
    (``shutil.rmtree``, then unzip: Ray 2.60's ``WorkingDirPlugin.create`` unpacks with
    ``overwrite=True``). Nodes that share one Ray temp dir -- several raylets on one machine
    (``ray.cluster_utils.Cluster``, two ``ray start`` on one host), containers sharing ``/tmp/ray`` -- share
    that folder, so the first trial on the second node deletes the directory the job's driver runs in.
    Paths into it stay valid (same path, same content), but the driver's current directory is then a
    deleted one, and ``getcwd()`` fails: the driver's first ``import torch`` (by Tune's TensorBoard
    logger, at the first trial result) aborts in torch's static oneMKL with "Intel oneMKL FATAL ERROR:
    Cannot load .../libtorch_cpu.so" and a segmentation fault.
    """
    if not _job_runtime_env().get("working_dir"):
        return None
    try:
        here = Path(cwd if cwd is not None else os.getcwd()).resolve()
    except OSError:  # already deleted under us
        return None
    for folder in (here, *here.parents):
        if folder.parent.name == _WORKING_DIR_FILES:
            return folder
    return None


def _job_runtime_env() -> dict:
    """The runtime_env of the Ray job this process belongs to ({} outside a job)."""
    injected = os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR")
    if not injected:
        return {}
    try:
        return dict(json.loads(injected).get("runtime_env") or {})
    except (ValueError, AttributeError, TypeError):
        return {}


def _validated(cluster_cfg: Mapping[str, Any] | None) -> dict[str, Any]:
    cfg = dict(cluster_cfg or {})
    out: dict[str, Any] = {k: cfg.get(k) for k in _CLUSTER_KEYS}
    address = out["address"] or os.environ.get("RAY_ADDRESS") or None
    if address is not None and not isinstance(address, str):
        raise ConfigError(f"cluster.address must be a string like 'HOST:6379' or 'auto', got {address!r}")
    out["address"] = address
    for key in ("num_cpus", "num_gpus"):
        value = out[key]
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
            raise ConfigError(f"cluster.{key} must be a non-negative number or null, got {value!r}")
    if out["num_gpus"] is not None and float(out["num_gpus"]) != int(out["num_gpus"]):
        raise ConfigError(f"cluster.num_gpus must be a whole number of GPUs, got {out['num_gpus']!r}")
    host = out["dashboard_host"] if out["dashboard_host"] is not None else DEFAULT_DASHBOARD_HOST
    if not isinstance(host, str) or not host:
        raise ConfigError(f"cluster.dashboard_host must be a host name or IP such as 127.0.0.1, got {host!r}")
    out["dashboard_host"] = host
    port = DEFAULT_DASHBOARD_PORT if out["dashboard_port"] is None else out["dashboard_port"]
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise ConfigError(f"cluster.dashboard_port must be a TCP port in 1..65535, got {port!r}")
    out["dashboard_port"] = port
    include = out["include_dashboard"]
    out["include_dashboard"] = True if include is None else bool(include)
    return out


def exposure_warning(host: str, port: int) -> str | None:
    """The warning text when the dashboard would listen on a non-loopback address, else None."""
    if host in LOOPBACK_HOSTS:
        return None
    where = "every network interface" if host in ("0.0.0.0", "::") else f"address {host}"
    return (
        f"WARNING: the Ray dashboard and Jobs API will listen on {where} (port {port}). Anyone who can "
        "reach it and holds the auth token can submit jobs that run arbitrary code on this cluster; "
        "keep the token secret and firewall the port, or use the default dashboard_host=127.0.0.1 "
        "with an SSH tunnel (see docs/operations.md)."
    )


def _port_free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def pick_dashboard_port(host: str, port: int, tries: int = 50) -> int:
    """``port`` when free, else the next free port (another local Ray, e.g. a second experiment, may
    hold 8265); the banner prints the port actually used."""
    bind_host = "0.0.0.0" if host in ("0.0.0.0", "") else ("127.0.0.1" if host == "localhost" else host)
    for candidate in range(port, min(port + tries, 65536)):
        if _port_free(bind_host, candidate):
            if candidate != port:
                print(f"Ray dashboard port {port} is in use (another Ray on this machine?); using {candidate}.",
                      flush=True)
            return candidate
    raise ConfigError(f"cluster.dashboard_port: no free port in {port}..{port + tries - 1} on {host}; "
                      "set cluster.dashboard_port=NNNN to a free port")


def job_env_missing(env_vars: Mapping[str, str]) -> dict[str, str]:
    """The env vars not already set by the enclosing Ray job's runtime_env (Ray refuses duplicates)."""
    job_env = _job_runtime_env().get("env_vars") or {}
    return {k: v for k, v in env_vars.items() if k not in job_env}


def _enable_token_auth_for_attach() -> None:
    """Ray 2.60 turns token mode on by itself only for a local or ``auto`` cluster; a driver given an
    explicit address must set ``RAY_AUTH_MODE=token`` to talk to a token-protected cluster. Do that when
    the user has not chosen a mode and a token is available (a cluster without auth ignores it)."""
    if os.environ.get("RAY_AUTH_MODE") is None and read_token() is not None:
        os.environ["RAY_AUTH_MODE"] = "token"
        try:  # refresh Ray's cached config so this process sees the mode (as ray.init does itself)
            from ray._raylet import Config

            Config.initialize("")
        except Exception:  # noqa: BLE001 - older/newer Ray: the environment variable is enough
            pass


def connect_ray(cluster_cfg: Mapping[str, Any] | None = None, *, quiet: bool = True,
                print_banner: bool = True) -> RayInfo:
    """Attach to a Ray cluster or start a local one, and describe it.

    Args:
        cluster_cfg: the ``cluster`` config group. Keys read here: ``address`` (attach; falls back to
            the ``RAY_ADDRESS`` environment variable; ``auto`` finds a local ``ray start`` cluster),
            ``num_cpus`` / ``num_gpus`` (local start only; ``num_gpus`` may declare logical GPUs on a
            CPU machine), ``dashboard_host`` (default 127.0.0.1; any other value prints a warning of
            what is exposed), ``dashboard_port`` (default 8265; the next free port when another Ray
            holds it), ``include_dashboard`` (default True). Other keys are ignored (launcher's).
        quiet: start Ray with WARNING-level logging.
        print_banner: print the dashboard URL and how to authenticate to stdout.

    If Ray is already initialised in this process it is reused as is. Token authentication is left
    as Ray 2.60 sets it (on by default); nothing here turns it off. A local start's processes ignore a
    SIGTERM sent to the whole job and end with this process (see the module docstring).
    """
    import ray

    cfg = _validated(cluster_cfg)
    started_here = False
    if not ray.is_initialized():
        level = logging.WARNING if quiet else logging.INFO
        env_vars = job_env_missing(RUNTIME_ENV_VARS)
        kwargs: dict[str, Any] = {"logging_level": level}
        if env_vars:
            kwargs["runtime_env"] = {"env_vars": env_vars}
        if cfg["address"]:
            _attach(cfg, kwargs)
        else:
            _start_local(cfg, kwargs)
            started_here = True
    info = describe_ray(started_here=started_here)
    if print_banner:
        print(info.banner(), flush=True)
    return info


def _attach(cfg: dict[str, Any], kwargs: dict[str, Any]) -> None:
    import ray

    ignored = [k for k in ("num_cpus", "num_gpus") if cfg[k] is not None]
    if ignored:
        log.warning("cluster.%s ignored: attaching to the existing cluster at %s, whose resources "
                    "are fixed by its nodes", "/".join(ignored), cfg["address"])
    _enable_token_auth_for_attach()
    try:
        ray.init(address=cfg["address"], **kwargs)
    except ConnectionError as exc:
        raise ConfigError(
            f"cannot attach to the Ray cluster at cluster.address={cfg['address']!r} (or RAY_ADDRESS): {exc}. "
            "Check that the head runs (`ray status` there), that the address is HOST:PORT of its GCS "
            "(6379 by default), and that this machine has the cluster's token (RAY_AUTH_TOKEN or "
            "~/.ray/auth_token); or drop cluster.address to start a local Ray.") from None


@contextlib.contextmanager
def _loopback_node():
    """Start Ray's processes of a local start on 127.0.0.1 only.

    Ray binds its RPC ports (GCS, raylet, object manager), the node agent's Prometheus export (the
    metrics port in the banner) and the dashboard's and autoscaler's metrics servers to the node IP,
    and to every interface unless that IP is a loopback address. A local start serves this process
    only, so its node IP is made 127.0.0.1 -- Ray's own single-machine mode (the default on macOS and
    Windows; ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``): nothing of it, metrics included, answers from the
    network. The dashboard still binds to ``cluster.dashboard_host``. Restored afterwards, so a later
    attach in this process behaves as Ray's default."""
    from ray._private import ray_constants

    before_env = os.environ.get(_SINGLE_MACHINE_ENV)
    before = getattr(ray_constants, "ENABLE_RAY_CLUSTER", None)
    os.environ[_SINGLE_MACHINE_ENV] = "0"           # Ray's processes started now (they read it at start)
    ray_constants.ENABLE_RAY_CLUSTER = False       # this driver (read by services.get_node_ip_address)
    try:
        yield
    finally:
        if before is not None:
            ray_constants.ENABLE_RAY_CLUSTER = before
        if before_env is None:
            os.environ.pop(_SINGLE_MACHINE_ENV, None)
        else:
            os.environ[_SINGLE_MACHINE_ENV] = before_env


class RayStartTimedOut(KGTunerError):
    """A local Ray did not start in time (its GCS or raylet too slow, e.g. on a machine under heavy load); the
    search can be retried as it is (:meth:`kgtuner.tune.faults.Faults.faults_as_errors` adds the command)."""


#: How Ray 2.x reports a local start that did not finish in time: ``Node.__init__``'s plain Exception "The current
#: node timed out during startup ..." (the raylet did not register with the GCS within 30 s), ``Node``'s
#: RuntimeError "Failed to start GCS ...", ``services.wait_for_node``'s TimeoutError "Timed out after ... while
#: waiting for node to startup", and the GCS client's "Failed to connect to GCS within ... seconds".
RAY_START_TIMEOUT_TEXTS = ("timed out during startup", "failed to start gcs", "failed to connect to gcs",
                           "waiting for node to startup", "gcs has become overloaded", "raylet failed to start")


def ray_start_timed_out(exc: BaseException) -> bool:
    """True when ``ray.init`` of a local start failed because Ray's processes did not start in time."""
    text = str(exc).lower()
    return isinstance(exc, TimeoutError) or any(t in text for t in RAY_START_TIMEOUT_TEXTS)


def ray_start_timeout_message(exc: BaseException) -> str:
    """The cause, on one line: Ray's own first sentence and the machine's load."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0].strip()
    first = first.split(". This could happen")[0].split(" Last ")[0].rstrip(". ")
    try:
        load = f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    except OSError:
        load = "load average unknown"
    return (f"the local Ray did not start in time (Ray: {first}): its GCS and raylet start too slowly on a busy "
            f"machine ({load})")


def _dashboard_port_lost(exc: BaseException, host: str, port: int) -> bool:
    """True when a failed local start lost its dashboard port to another process (a launch started at
    the same moment): Ray's own check (ValueError "already occupied"), or the dashboard could not bind
    (Ray raises a plain Exception with the dashboard's log) and the port is taken now."""
    if isinstance(exc, ValueError) and "already occupied" in str(exc):
        return True
    bind_host = "0.0.0.0" if host in ("0.0.0.0", "") else ("127.0.0.1" if host == "localhost" else host)
    return not _port_free(bind_host, port)


def _url_port(url: str | None) -> int | None:
    try:
        return int(str(url).rstrip("/").rsplit(":", 1)[1])
    except (IndexError, ValueError):
        return None


def _start_local(cfg: dict[str, Any], kwargs: dict[str, Any], attempts: int = 3) -> None:
    """``ray.init`` of a local, single-machine Ray (loopback only, see :func:`_loopback_node`).

    The dashboard port: with Ray's default (8265) Ray itself is asked for it (``dashboard_port=None``):
    its dashboard then binds 8265 or the next free port *at bind time*, so two launches started at the
    same moment cannot both take 8265 (checking first and binding later can race). Another port is
    checked here (:func:`pick_dashboard_port`); if another process takes it while Ray starts, the start
    is retried on the next port."""
    import ray
    from ray._private import ray_constants

    port = cfg["dashboard_port"]
    host = cfg["dashboard_host"]
    let_ray_pick = bool(cfg["include_dashboard"]) and port == getattr(ray_constants, "DEFAULT_DASHBOARD_PORT", None)
    for attempt in range(attempts):
        if cfg["include_dashboard"] and not let_ray_pick:
            port = pick_dashboard_port(host, port)
        if attempt == 0 and cfg["include_dashboard"]:
            warning = exposure_warning(host, port)
            if warning:
                print(warning, file=sys.stderr, flush=True)
                log.warning(warning)
        try:
            # address="local": never attach to whatever cluster /tmp/ray/ray_current_cluster names.
            with _loopback_node(), _stop_signals_left_to_driver():
                ray.init(address="local", num_cpus=cfg["num_cpus"], num_gpus=cfg["num_gpus"],
                         include_dashboard=cfg["include_dashboard"], dashboard_host=host,
                         dashboard_port=None if let_ray_pick else port, **kwargs)
        except Exception as exc:  # noqa: BLE001 - Ray raises a plain Exception when its dashboard cannot bind
            if (not cfg["include_dashboard"] or let_ray_pick or attempt == attempts - 1
                    or not _dashboard_port_lost(exc, host, port)):
                if not ray_start_timed_out(exc):
                    raise
                try:  # what this start left behind (its processes end with the driver anyway)
                    ray.shutdown()
                except Exception:  # noqa: BLE001 - never in place of the start's own error
                    pass
                raise RayStartTimedOut(ray_start_timeout_message(exc)) from None
            ray.shutdown()
            print(f"Ray dashboard port {port} was taken while Ray started (another launch at the same time?); "
                  f"retrying with port {port + 1}.", flush=True)
            port += 1
            continue
        if let_ray_pick:
            try:
                used = _url_port(ray._private.worker.get_dashboard_url())
            except Exception:  # noqa: BLE001 - no dashboard URL: nothing to report
                used = None
            if used is not None and used != port:
                print(f"Ray dashboard port {port} is in use (another Ray on this machine?); using {used}.", flush=True)
        _start_reaper()
        return


def describe_ray(started_here: bool = False) -> RayInfo:
    """A ``RayInfo`` of the Ray this process is connected to (it must be initialised)."""
    import ray
    from ray._private.authentication.authentication_utils import is_token_auth_enabled

    ctx = ray.get_runtime_context()
    worker = ray._private.worker.global_worker
    node = getattr(worker, "node", None)
    address = getattr(node, "address", None) or ctx.gcs_address
    resources = ray.cluster_resources()
    alive = [n for n in ray.nodes() if n.get("Alive")]
    this_node = ctx.get_node_id()
    here = next((n for n in alive if n["NodeID"] == this_node), {})
    metrics_port = here.get("MetricsExportPort")
    dashboard = None
    try:
        dash = ray._private.worker.get_dashboard_url()
    except Exception:  # noqa: BLE001 - no dashboard is a normal state (include_dashboard=False)
        dash = None
    if dash:
        dashboard = dash if dash.startswith("http") else f"http://{dash}"
    auth = bool(is_token_auth_enabled())
    return RayInfo(
        address=str(address),
        started_here=started_here,
        dashboard_url=dashboard,
        metrics_export_port=int(metrics_port) if metrics_port else None,
        node_ip=here.get("NodeManagerAddress"),
        num_gpus=int(resources.get("GPU", 0)),
        num_cpus=float(resources.get("CPU", 0)),
        node_ids=[n["NodeID"] for n in alive],
        auth_enabled=auth,
        token_source=token_source() if auth else None,
    )
