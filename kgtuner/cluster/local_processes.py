"""The processes of a local Ray start: started with SIGTERM blocked, reaped if the driver dies, killed at the end.

- :func:`_stop_signals_left_to_driver`: Ray's processes start with SIGTERM blocked, so a stop sent to a whole job
  reaches the driver, which saves the search, and not Ray's processes first.
- A reaper process ends a local start's processes when the driver dies without stopping them (``kill -9``).
- :func:`shutdown_ray`: the end of a run, without Ray's graceful second per process type.

Used by :mod:`kgtuner.cluster.ray_cluster` (``connect_ray`` starts and stops a local Ray through these).
"""

from __future__ import annotations

import contextlib
import logging
import sys
from pathlib import Path

log = logging.getLogger("kgtuner.cluster.ray_cluster")  # the cluster's logger, as before these moved here

@contextlib.contextmanager
def _stop_signals_left_to_driver():
    """Start Ray's processes with SIGTERM blocked, as Ray itself starts them with SIGINT blocked.

    Schedulers and supervisors stop a job by signalling every process of it at once (``timeout`` on a
    process group, Slurm's ``scancel``, ``kill -TERM -PGID``). Ray's processes would then end while the
    driver is still saving the search, and the driver's Ray core worker ends the driver's own process the
    moment the raylet is gone, before anything was saved. A signal mask is inherited by child processes
    (and theirs: the raylet's agents and workers), so with SIGTERM blocked while ``ray.init`` starts them,
    such a stop reaches the driver only: it stops the search cleanly (Tune's final checkpoint) and then
    ends Ray itself (``ray.shutdown``: SIGKILL after a one-second grace per process). SIGKILL still ends
    them, and they still end with the driver (Ray's parent-death signal; :func:`_start_reaper` for the
    raylet's children)."""
    import signal

    if not hasattr(signal, "pthread_sigmask"):  # not POSIX
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)  # a SIGTERM that came meanwhile is delivered now


#: Ends the processes of a local start once the driver is gone (see :func:`_start_reaper`).
_REAPER_SCRIPT = r"""
import os, signal, sys, threading
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a stop signal to the whole job: the driver stops Ray itself
signal.signal(signal.SIGINT, signal.SIG_IGN)
sys.path.append(sys.argv[1])  # Ray's bundled psutil, if there is no other
import psutil
roots, known = {int(p) for p in sys.argv[2:]}, {}
def scan():  # one pass over the process table: the roots and all their descendants
    children, created = {}, {}
    for p in psutil.process_iter(["ppid", "create_time"]):
        children.setdefault(p.info["ppid"], []).append(p.pid)
        created[p.pid] = p.info["create_time"]
    todo, seen = [pid for pid in roots if pid in created], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        if created.get(pid) is not None:
            known.setdefault(pid, created[pid])
        todo.extend(children.get(pid, ()))
gone = threading.Event()
def wait_for_eof():
    try:
        while sys.stdin.buffer.read(4096):
            pass
    finally:
        gone.set()
threading.Thread(target=wait_for_eof, daemon=True).start()
while not gone.wait(1.0):
    scan()
victims = []
for pid, created in known.items():
    try:
        p = psutil.Process(pid)
        if p.create_time() == created:
            p.kill()
            victims.append(p)
    except psutil.Error:
        pass
psutil.wait_procs(victims, timeout=5)
"""
_REAPER = None


def _start_reaper() -> None:
    """Make every process of this local start end with the driver, however the driver ends.

    Ray kills the processes the driver starts (GCS, raylet, dashboard, monitors) when the driver dies
    (Linux parent-death signal), but not the raylet's own children: after a ``kill -9`` of the driver
    its DashboardAgent and RuntimeEnvAgent lived about 60 s more (they find the raylet gone within two
    seconds, then wait 60 s trying to report it to the dead GCS), with their errors still written to
    the driver's output. This starts a small watcher process (it ignores SIGTERM/SIGINT, reads a pipe
    from the driver, and notes the processes of this Ray -- its start's processes and all their
    descendants -- every second); when the pipe closes (the driver ended, normally or killed) it
    SIGKILLs those still alive (checked by start time, so a reused pid is never hit)."""
    import subprocess

    import ray

    global _REAPER
    _stop_reaper()
    node = getattr(ray._private.worker, "_global_node", None)
    roots = [str(info.process.pid) for infos in getattr(node, "all_processes", {}).values() for info in infos
             if getattr(info, "process", None) is not None]
    if not roots or not sys.platform.startswith("linux"):
        return
    bundled = str(Path(ray.__file__).parent / "thirdparty_files")
    try:
        _REAPER = subprocess.Popen([sys.executable, "-c", _REAPER_SCRIPT, bundled, *roots], stdin=subprocess.PIPE,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True)
    except OSError as exc:  # never a reason not to search
        log.warning("could not start the watcher that ends Ray's processes with the driver: %s", exc)


def _stop_reaper() -> None:
    """Let the previous local start's watcher end (it kills what is left of that Ray)."""
    global _REAPER
    reaper, _REAPER = _REAPER, None
    if reaper is not None and reaper.stdin is not None:
        try:
            reaper.stdin.close()
        except OSError:
            pass


def shutdown_ray() -> None:
    """End this process's Ray (``ray.shutdown``); a local start's processes get SIGKILL at once.

    Ray's own stop sends SIGTERM and waits a second, one process type after another (raylet, GCS, monitor,
    dashboard, log monitor: about 5 s at the end of every launch). A local start's processes run with SIGTERM
    blocked (:func:`_stop_signals_left_to_driver`), so each of those seconds is only waited, and SIGKILL
    follows anyway. They hold nothing of a search (the driver writes its rows, state file and Tune's
    checkpoints), so they are killed without the wait. An attached driver only disconnects, as with
    ``ray.shutdown``."""
    import ray

    node = getattr(ray._private.worker, "_global_node", None)
    kill = getattr(node, "kill_all_processes", None)
    if kill is not None:
        def kill_now(check_alive=False, allow_graceful=True, wait=False):
            return kill(check_alive=check_alive, allow_graceful=False, wait=wait)

        node.kill_all_processes = kill_now  # what ray.shutdown calls, for this node only
    ray.shutdown()
    _stop_reaper()
