"""What a soak prints: the output to the terminal and ``--log`` (``Tee``), its opening lines (``provenance``, the
set-up, the schedule), the fault checks from what the soak saw, the report of faults and checks, and the drivers'
last lines after a failure."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from soak.checks import Check
from soak.schedule import DRIVER_STOPS, KINDS, REPO, RESUME_MARK, TRIAL_OVERRIDES, Schedule

if TYPE_CHECKING:
    from soak.soak import Soak


class Tee:
    """The output: to the terminal and, when given, to a file (``--log``)."""

    def __init__(self, path: Path | None):
        self.fh = open(path, "w") if path is not None else None

    def write(self, text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()
        if self.fh is not None:
            self.fh.write(text)
            self.fh.flush()

    def close(self) -> None:
        if self.fh is not None:
            self.fh.close()


def provenance() -> str:
    """The commit (``+dirty`` when the tree has changes) and the source tree's hash the soak runs on."""

    def run(cmd):
        try:
            return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return ""

    head = run(["git", "rev-parse", "HEAD"]) or "unknown"
    # untracked files (the soak's own log, written first) are not a change of the code: the tree hash covers them
    dirty = "+dirty" if run(["git", "--no-optional-locks", "status", "--porcelain", "--untracked-files=no"]) else ""
    found = sorted(REPO.glob("scripts/*/tree_hash.sh"))
    tree = run(["bash", str(found[0]), str(REPO)]) if found else ""
    where = found[0].relative_to(REPO) if found else "scripts/*/tree_hash.sh (not found)"
    return f"commit {head}{dirty}, source tree {tree or 'unknown'} (bash {where})"


def write_opening(args, out) -> None:
    """The first lines: the command, the commit and source tree, the machine."""
    import ray

    out.write(f"kgtuner chaos soak: scripts/ops/chaos.py --minutes {args.minutes:g} --seed {args.seed}"
              + (" --every-kind" if args.every_kind else "") + "\n")
    out.write(f"{provenance()}\n")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    out.write(f"started {time.strftime('%Y-%m-%d %H:%M:%S %Z')} on {platform.node()}: {os.cpu_count()} CPUs, load "
              f"{load:.1f}; Python {platform.python_version()}, Ray {ray.__version__}\n")


def write_plan(schedule: Schedule, seed: int, out) -> None:
    """The search and its schedule of faults, then the head of the events."""
    out.write(f"search: the demo graph, KGTuner, budget.seconds={schedule.budget_s} extended to "
              f"{schedule.final_budget_s} on the resume after the switch's kill -9, seed={seed}, "
              f"{' '.join(TRIAL_OVERRIDES)}\n")
    out.write("schedule (active seconds): " + "; ".join(
        f"{k} x{n}" for k, n in schedule.counts().items() if n) + "\n")
    for f in schedule.faults:
        out.write(f"  {f.label()}" + (f", node restart after {f.restart_after_s:.0f}s" if f.restart_after_s else "")
                  + "\n")
    out.write("\n--- events ([minutes:seconds of wall time | active seconds])\n")


def fault_checks(soak: Soak) -> list[Check]:
    """The checks of what the soak saw: every fault injected, every stop as promised, every resume continuing."""
    counts = {k: sum(r.kind == k for r in soak.injected) for k in KINDS}
    planned = soak.schedule.counts()
    short = [f"{k} {counts[k]} of {planned[k]}" for k in KINDS if counts[k] < planned[k]]
    checks = [Check("faults injected", not short,
                    ", ".join(f"{k} {counts[k]}" for k in KINDS)
                    + (f"; not injected: {'; '.join(short)}" if short else " (as scheduled)")
                    + (f"; left out: {'; '.join(soak.skipped)}" if soak.skipped else ""))]
    bad = [n for n in soak.notes]
    stops = [r for r in soak.injected if r.kind in DRIVER_STOPS]
    checks.append(Check("stops as promised", not [r for r in stops if not r.ok],
                        f"{len(stops)} driver stops: " + "; ".join(f"{r.kind} {r.outcome}" for r in stops)))
    resumed = [s for s in soak.sessions if s.resume]
    not_resumed = [s.index for s in resumed if RESUME_MARK not in s.text()]
    last = soak.sessions[-1] if soak.sessions else None
    checks.append(Check("resumes", soak.finished and not not_resumed and soak.unexpected == 0,
                        f"{len(soak.sessions)} driver sessions, {len(resumed)} resumed"
                        + (f"; session(s) {not_resumed} did not resume the search" if not_resumed else "")
                        + (f"; {soak.unexpected} ended by themselves" if soak.unexpected else "")
                        + ("; the last one ended with exit 0" if soak.finished else
                           f"; the search did not finish (last session exit {last.proc.poll() if last else None})")))
    other = [n for n in bad if not any(n.startswith(k) for k in KINDS)]
    if other:
        checks.append(Check("run", False, "; ".join(other)))
    return checks


def report(soak: Soak, history: list[Check], out) -> bool:
    """The faults injected, then every check PASS/FAIL; True when all passed."""
    out.write("\n--- faults injected (t = active seconds of the search's budget clock, w = wall seconds)\n")
    for kind in KINDS:
        recs = [r for r in soak.injected if r.kind == kind]
        times = ", ".join(f"t={r.active_s:.0f} (w={r.wall_s:.0f})" for r in recs)
        out.write(f"{kind:12s} {len(recs):3d}" + (f"  {times}" if recs else "") + "\n")
    for left in soak.left_over():
        out.write(f"not injected: {left}\n")
    checks = fault_checks(soak) + history
    out.write("\n--- checks\n")
    for c in checks:
        out.write(c.line() + "\n")
        if c.guarantee:
            out.write(f"      guarantee: {c.guarantee}\n")
    failed = [c for c in checks if not c.ok]
    out.write(f"\n{len(checks) - len(failed)} of {len(checks)} checks passed"
              + (f"; FAILED: {', '.join(c.name for c in failed)}" if failed else "") + "\n")
    return not failed


def write_session_tails(soak: Soak, out) -> None:
    """The last two sessions' last lines: kgtuner's own output and their stderr (after a failed check)."""
    for s in soak.sessions[-2:]:
        own = [ln for ln in s.text().splitlines() if ln.startswith(("[kgtuner]", "kgtuner:"))]
        err = [ln for ln in s.stderr().splitlines() if ln.strip() and "(kgtuner_trial pid=" not in ln]
        out.write(f"\n--- session {s.index}'s last lines ({s.out_path.name}: kgtuner's; {s.err_path.name})\n")
        out.write("\n".join(own[-12:] + err[-8:]) + "\n")
