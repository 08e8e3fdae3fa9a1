"""The soak itself (``Soak``): the set-up (the run directory's tmpfs, the two-node cluster), the search's driver
sessions, the faults injected on the schedule's times, and what it saw (``Injected``, the notes the fault checks
read); after the run, the history checks and the clean-up."""

from __future__ import annotations

import errno
import json
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from soak.checks import Check, check_history
from soak.cluster import Session, TwoNodeCluster
from soak.history import tune_retries
from soak.schedule import (CLOSE_LINE, CPUS_PER_NODE, DRIVER_STOPS, GPUS_PER_NODE, HEAD_IP, REPO, SWITCH_LINE,
                           TMPFS_SIZE, TRIAL_OVERRIDES, WORKER_IP, Fault, Schedule)


@dataclass
class Injected:
    kind: str
    planned: str
    wall_s: float
    active_s: float
    unix: float
    detail: str
    ok: bool = True
    outcome: str = ""


class Soak:
    """Runs the search under the schedule and records what happened."""

    def __init__(self, schedule: Schedule, work: Path, out, keep: bool):
        self.schedule, self.work, self.out, self.keep = schedule, work, out, keep
        self.t0 = time.monotonic()
        self.rng = random.Random(schedule.seed + 1)
        self.injected: list[Injected] = []
        self.sessions: list[Session] = []
        self.crashes: list[float] = []  # unix times of the driver's kill -9
        self.disk_stops: list[float] = []  # unix times of the full disks
        self.mounted = False
        self.run_dir: Path | None = None
        self.next_try = 0.0  # wall time of the next try of a fault that could not be injected
        self.notes: list[str] = []  # failures seen while running (become the fault checks)
        self.skipped: list[str] = []
        self.budget_s = schedule.budget_s
        self.extended = False
        self.cluster: TwoNodeCluster | None = None
        self.restart_at: float | None = None
        self.restart_delay = 0.0
        self.mount: Path | None = None
        self.peak_disk = 0
        self.finished = False
        self.unexpected = 0

    # ------------------------------------------------------------------ output
    def say(self, msg: str) -> None:
        wall = time.monotonic() - self.t0
        self.out.write(f"[{int(wall // 60):3d}:{int(wall % 60):02d} | t={self.active():7.1f}s] {msg}\n")

    def wall(self) -> float:
        return time.monotonic() - self.t0

    # ------------------------------------------------------------------ set-up
    def setup(self) -> None:
        ray_tmp = self.work / "ray"
        ray_tmp.mkdir()
        token = self.work / "auth_token"
        token.write_text(secrets.token_hex(32))
        env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN")}
        env.update(RAY_TMPDIR=str(self.work), RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token),
                   RAY_USAGE_STATS_ENABLED="0", PYTHONUNBUFFERED="1", KGTUNER_CACHE=str(self.work / "cache"))
        self.env = env
        self.mount = self.work / "disk"
        self.mount.mkdir()
        why = None
        if os.geteuid() != 0 or shutil.which("mount") is None:
            why = "not root" if os.geteuid() != 0 else "no mount command"
        else:
            proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE}", "tmpfs", str(self.mount)],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                why = proc.stderr.strip() or f"mount exit {proc.returncode}"
        if why is not None:
            self.mount_error = why
            self.say(f"NOTE: cannot mount a {TMPFS_SIZE} tmpfs for the run directory ({why}): it is on the ordinary "
                     "disk and the full-disk fault is left out")
            dropped = [f for f in self.schedule.faults if f.kind == "disk_full"]
            self.schedule.faults = [f for f in self.schedule.faults if f.kind != "disk_full"]
            self.skipped += [f"{f.label()} (no tmpfs: {why})" for f in dropped]
            self.mounted = False
        else:
            self.mounted = True
            self.say(f"run directory on a {TMPFS_SIZE} tmpfs at {self.mount}")
        self.run_dir = self.mount / "run"
        self.say(f"starting the two-node cluster (head {HEAD_IP}, worker {WORKER_IP}, {GPUS_PER_NODE} logical GPUs and "
                 f"{CPUS_PER_NODE} CPUs each)")
        self.cluster = TwoNodeCluster(self.work, env)
        self.say(f"cluster up: GCS {self.cluster.info['address']}, dashboard {self.cluster.info['dashboard']}, "
                 f"worker raylet pid {self.cluster.raylet_pid}")

    # ------------------------------------------------------------------ the search's state
    def state(self) -> dict:
        if self.run_dir is None:
            return {}
        try:
            return json.loads((self.run_dir / "kgtuner_state.json").read_text())
        except (OSError, ValueError):
            return {}

    def active(self) -> float:
        if self.run_dir is None:
            return 0.0
        try:
            return float(self.state().get("elapsed_s") or 0.0)
        except (TypeError, ValueError):
            return 0.0

    def disk_used(self) -> int:
        if not self.mounted:
            return 0
        st = os.statvfs(self.mount)
        used = (st.f_blocks - st.f_bfree) * st.f_frsize
        self.peak_disk = max(self.peak_disk, used)
        return used

    # ------------------------------------------------------------------ driver sessions
    def start_session(self, resume: bool) -> Session:
        index = len(self.sessions) + 1
        out_path, err_path = self.work / f"driver-{index:02d}.out", self.work / f"driver-{index:02d}.err"
        cmd = [sys.executable, "-m", "kgtuner.launch", "cluster=remote",
               f"cluster.address={self.cluster.info['address']}",
               f"hydra.run.dir={self.run_dir}", f"budget.seconds={self.budget_s}", f"seed={self.schedule.seed}",
               *TRIAL_OVERRIDES] + (["resume=true"] if resume else [])
        with open(out_path, "w") as out, open(err_path, "w") as err:
            proc = subprocess.Popen(cmd, cwd=REPO, env=self.env, stdout=out, stderr=err, start_new_session=True)
        session = Session(index, proc, out_path, err_path, resume, self.budget_s, self.wall(), self.active())
        self.sessions.append(session)
        what = ("resume=true " if resume else "") + f"budget.seconds={self.budget_s}"
        self.say(f"session {index}: driver pid {proc.pid} started ({what})")
        if index == 1:
            self.say("  command: " + " ".join(cmd[1:]))
        return session

    @property
    def session(self) -> Session:
        return self.sessions[-1]

    def clock_running(self) -> bool:
        """The current session's budget clock has started (its state moved on since it began)."""
        s = self.session
        return s.proc.poll() is None and "budget clock starts" in s.text()

    def wait_driver(self, timeout: float) -> int | None:
        try:
            return self.session.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill_group(self, session: Session) -> None:
        try:
            os.killpg(session.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            session.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass

    def resume(self, extend: bool = False) -> None:
        if extend and not self.extended:
            self.budget_s, self.extended = self.schedule.final_budget_s, True
        self.start_session(resume=True)

    # ------------------------------------------------------------------ faults
    def record(self, fault: Fault, detail: str, ok: bool = True, outcome: str = "", active: float | None = None,
               wall: float | None = None, unix: float | None = None) -> Injected:
        rec = Injected(fault.kind, fault.label(), self.wall() if wall is None else wall,
                       self.active() if active is None else active, time.time() if unix is None else unix,
                       detail, ok, outcome)
        self.injected.append(rec)
        self.say(f"FAULT {fault.kind}: {detail}" + (f" -> {outcome}" if outcome else "")
                 + ("" if ok else "  [UNEXPECTED]"))
        if not ok:
            self.notes.append(f"{fault.kind} at t={rec.active_s:.1f}s: {outcome}")
        return rec

    def inject(self, fault: Fault) -> bool:
        """Inject ``fault`` now; False: not possible now (retry later)."""
        if fault.kind == "trial_kill":
            actors = sorted(self.cluster.trial_actors(), key=lambda a: int(a["pid"]))
            if not actors:
                return False
            actor = self.rng.choice(actors)
            node = "worker" if actor.get("node_id") == self.cluster.info["worker_node"] else "head"
            try:
                os.kill(int(actor["pid"]), signal.SIGKILL)
            except ProcessLookupError:
                return False
            self.record(fault, f"kill -9 of trial worker pid {actor['pid']} on the {node} node "
                               f"({len(actors)} trial actors alive)")
            return True
        if fault.kind == "raylet_kill":
            if not self.cluster.worker_up or self.session.proc.poll() is not None:
                return False
            pid = self.cluster.raylet_pid
            os.kill(pid, signal.SIGKILL)
            self.cluster.worker_up = False
            self.restart_at, self.restart_delay = self.wall() + fault.restart_after_s, fault.restart_after_s
            self.record(fault, f"kill -9 of the worker node's raylet (pid {pid}); node restart in "
                               f"{fault.restart_after_s:.0f}s")
            return True
        if not self.clock_running():
            return False
        return self.stop_driver(fault)

    def stop_driver(self, fault: Fault) -> bool:
        s = self.session
        active, wall, unix = self.active(), self.wall(), time.time()
        before = self.state()
        s.ended_by = fault.kind
        if fault.kind == "sigterm":
            os.killpg(s.proc.pid, signal.SIGTERM)
            rc = self.wait_driver(240)
            err = s.stderr()
            ok = rc == 130 and "resume=true" in err
            outcome = f"exit {rc}" + (", resume command printed" if "resume=true" in err else ", no resume command")
            detail = f"SIGTERM to the driver's process group (pid {s.proc.pid}) in stage {before.get('stage')}"
        elif fault.kind == "kill9":
            os.kill(s.proc.pid, signal.SIGKILL)
            rc = self.wait_driver(60)
            self.crashes.append(unix)
            ok, outcome = rc == -signal.SIGKILL, f"exit {rc}"
            detail = f"kill -9 of the driver (pid {s.proc.pid}) in stage {before.get('stage')}"
            if fault.at_s is None:
                text = s.text()
                closed = CLOSE_LINE in text
                switched = SWITCH_LINE in text
                after = self.state()
                where = ("between stage 1's close and the switch" if closed and not switched else
                         "just after the switch" if switched else "before stage 1 closed")
                detail += f", {where} (state after: stage {after.get('stage')}, switch_s {after.get('switch_s')})"
        else:  # disk_full
            filler = self.mount / "chaos_filler"
            self.disk_stops.append(unix)
            t_fill = time.monotonic()
            wrote = fill_disk(filler)
            rc = self.wait_driver(240)
            held = time.monotonic() - t_fill
            if held < 3.0:
                time.sleep(3.0 - held)
                held = 3.0
            filler.unlink()
            err = s.stderr()
            errors = [ln for ln in err.splitlines() if ln.startswith("kgtuner: error:")]
            from kgtuner.tune.run_dir import RESERVE_FILE, temp_files

            left = [p.name for p in temp_files(self.run_dir)]
            reserve = (self.run_dir / RESERVE_FILE).exists()
            ok = rc == 2 and len(errors) == 1 and "is full" in errors[0] and "resume=true" in errors[0] \
                and not left and not reserve and "Logging error" not in err
            outcome = (f"exit {rc}, {len(errors)} error line(s)" + (f": {errors[0][:160]}" if errors else "")
                       + (f"; temporary files left: {left}" if left else "") + ("; reserve left" if reserve else "")
                       + ("; '--- Logging error ---' printed" if "Logging error" in err else ""))
            detail = (f"run directory's tmpfs filled ({wrote / 2**20:.1f} MB written until ENOSPC) in stage "
                      f"{before.get('stage')}, held {held:.0f}s, then freed")
        if rc is None:
            outcome = "the driver did not end within the limit; killed"
            ok = False
        self.kill_group(s)
        if fault.kind == "kill9":
            time.sleep(3.0)  # Ray ends the dead job's actors
        self.record(fault, detail, ok, outcome, active=active, wall=wall, unix=unix)
        self.resume(extend=fault.extend)
        return True

    def restart_node_if_due(self) -> None:
        if self.restart_at is None or self.wall() < self.restart_at:
            return
        self.restart_at = None
        t = time.monotonic()
        try:
            info = self.cluster.restart_worker()
        except Exception as exc:  # noqa: BLE001
            self.notes.append(f"the worker node did not come back: {exc}")
            self.say(f"worker node restart FAILED: {exc}")
            return
        self.say(f"worker node started again after {self.restart_delay:.0f}s down (node {info['worker_node'][:12]}, "
                 f"raylet pid {info['raylet']}, {time.monotonic() - t:.1f}s to start)")

    # ------------------------------------------------------------------ the run
    def run(self, deadline_s: float) -> None:
        pending = [f for f in self.schedule.faults if f.at_s is not None]
        switch_faults = [f for f in self.schedule.faults if f.at_s is None]
        late_s = self.schedule.switch_s + 0.05 * self.schedule.budget_s + 20.0
        self.start_session(resume=False)
        while True:
            if self.wall() > deadline_s:
                self.notes.append(f"the soak did not finish within {deadline_s / 60:.0f} minutes")
                self.say("ABORT: out of time")
                self.kill_group(self.session)
                return
            s = self.session
            rc = s.proc.poll()
            if rc is not None:
                if rc == 0:
                    self.say(f"session {s.index}: the search finished (exit 0)")
                    self.finished = True
                    return
                self.unexpected += 1
                tail = " | ".join(s.stderr().strip().splitlines()[-3:])[-400:]
                self.notes.append(f"session {s.index} ended by itself with exit {rc}: {tail}")
                self.say(f"session {s.index}: UNEXPECTED exit {rc}: {tail}")
                if self.unexpected > 3:
                    return
                self.kill_group(s)
                self.resume()
                continue
            self.restart_node_if_due()
            self.disk_used()
            active = self.active()
            if switch_faults and (CLOSE_LINE in s.text() or SWITCH_LINE in s.text() or active > late_s):
                if self.clock_running() or CLOSE_LINE in s.text():
                    fault = switch_faults.pop(0)
                    if CLOSE_LINE not in s.text() and SWITCH_LINE not in s.text():
                        self.say(f"note: the switch fault missed stage 1's close (t={active:.1f}s): fired now")
                    self.stop_driver(fault)
                    continue
            due = [f for f in pending if f.at_s <= active]
            if due and self.wall() >= self.next_try and not (switch_faults and due[0].kind in DRIVER_STOPS
                            and abs(active - self.schedule.switch_s) < 0.05 * self.schedule.budget_s):
                if self.inject(due[0]):
                    pending.remove(due[0])
                    continue
                self.next_try = self.wall() + 1.0
            time.sleep(0.1 if switch_faults and active > self.schedule.switch_s - 10 else 0.25)
        # not reached

    def left_over(self) -> list[str]:
        done = {(r.kind, r.planned) for r in self.injected}
        return [f.label() for f in self.schedule.faults if (f.kind, f.label()) not in done]

    # ------------------------------------------------------------------ after the run
    def stop_cluster(self) -> None:
        self.say(f"stopping the cluster; {tune_retries(self.run_dir)}; tmpfs peak use "
                 f"{self.peak_disk / 2**20:.1f} MB of {TMPFS_SIZE}" if self.mounted else "stopping the cluster")
        self.cluster.stop()

    def check(self) -> list[Check]:
        """The history checks of the finished search (a FAIL when it did not finish)."""
        if not self.finished:
            return [Check("history", False, "the search did not finish: no history to check")]
        return check_history(self.run_dir, driver_logs=[s.out_path for s in self.sessions], crashes=self.crashes,
                             disk_stops=self.disk_stops, budget_s=self.budget_s, started_with=self.schedule.budget_s)

    def failed(self, exc: BaseException) -> None:
        self.notes.append(f"the soak itself failed: {type(exc).__name__}: {exc}")
        self.say(f"ERROR: {type(exc).__name__}: {exc}")

    def clean_up(self) -> Path | None:
        """Every driver and the cluster stopped, the run directory copied off the tmpfs (``keep``: the copy's
        path), the tmpfs unmounted."""
        kept = None
        for s in self.sessions:
            if s.proc.poll() is None:
                self.kill_group(s)
        if self.cluster is not None:
            self.cluster.stop()
        if self.keep and self.mount is not None and (self.mount / "run").exists():
            kept = self.work / "run"
            shutil.copytree(self.mount / "run", kept, symlinks=True)
        if getattr(self, "mounted", False):
            subprocess.run(["umount", "-l", str(self.mount)], capture_output=True)
        return kept


def fill_disk(filler: Path) -> int:
    """Write ``filler`` until its disk is full (ENOSPC): the bytes written."""
    wrote = 0
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # unbuffered: nothing left to flush
    try:
        for chunk in (b"\0" * (1 << 20), b"\0" * (1 << 12)):
            try:
                while True:
                    n = os.write(fd, chunk)
                    wrote += n
                    if n < len(chunk):  # a short write: the disk is full
                        break
            except OSError as exc:
                if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                    raise
    finally:
        os.close(fd)
    return wrote
