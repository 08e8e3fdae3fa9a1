"""The history checks of a finished run directory, one function a guarantee of docs/operations.md (the module
docstring of scripts/ops/chaos.py maps each to its guarantee), and ``check_history``, all of them."""

from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from soak.history import History, crash_between, ended_disk_full, hp_key, load_history
from soak.schedule import BUDGET_FLOOR_S, BUDGET_TOLERANCE, REPO, RESUME_MARK, SWITCH_LINE


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    guarantee: str = ""

    def line(self) -> str:
        return f"{'PASS' if self.ok else 'FAIL'}  {self.name}: {self.detail}"


def check_rows_once(h: History, crashes=()) -> Check:
    """Every trial with a final report is a row, and no trial is a row twice."""
    guarantee = ("Ctrl+C, SIGTERM: resume=true loses no finished trial; a crash of the driver loses no finished "
                 "trial and counts none twice; a lost worker node is retried and loses no trial")
    if "trial_id" not in h.rows or not len(h.rows):
        return Check("rows", False, "no rows in trials.parquet " + "; ".join(h.problems), guarantee)
    ids = list(h.rows["trial_id"])
    twice = sorted({t for t in ids if ids.count(t) > 1})
    rows_by_hp = {}
    for r in h.rows.itertuples():
        rows_by_hp.setdefault((int(r.stage), hp_key(json.loads(r.config_json))), []).append(r.trial_id)
    missing, excused = [], []
    for tid, trial in h.trials.items():
        finals = trial.finals
        if not finals or tid in set(ids):
            continue
        if any(ended_disk_full(f) for f in finals):
            excused.append(f"{tid} (ended for want of space)")
            continue
        last = max(float(f.get("timestamp") or f.get("ended_unix") or 0) for f in finals)
        others = [t for t in rows_by_hp.get((trial.stage, trial.config), []) if t != tid]
        if others and crash_between(crashes, last, math.inf):
            excused.append(f"{tid} (its report was not recorded before a kill -9; run again as {others[0]})")
            continue
        f = finals[-1]
        missing.append(f"{tid} (stage {trial.stage}, trial_index {trial.trial_index}: {f.get('trial_status')}, "
                       f"valid_mrr {f.get('valid_mrr')} at step {f.get('step')})")
    reported = sum(1 for t in h.trials.values() if t.finals)
    ok = not twice and not missing and not h.problems
    detail = (f"{len(ids)} rows, {len(set(ids))} trial ids; {reported} of {len(h.trials)} Tune trials reported a final "
              f"result")
    if twice:
        detail += f"; recorded twice: {', '.join(twice)}"
    if missing:
        detail += f"; reported a final result but no row: {', '.join(missing)}"
    if excused:
        detail += f"; excused: {', '.join(excused)}"
    if h.problems:
        detail += "; " + "; ".join(h.problems)
    return Check("rows", ok, detail, guarantee)


def check_trial_index_once(h: History) -> Check:
    guarantee = "a crash of the driver: its trial_index is not reused; More budget: trial_index continues"
    if "trial_index" not in h.rows or not len(h.rows):
        return Check("trial_index", False, "no rows with a trial_index", guarantee)
    idx = [int(i) for i in h.rows["trial_index"].dropna()]
    twice = sorted({i for i in idx if idx.count(i) > 1})
    ok = not twice and len(idx) == len(h.rows)
    detail = f"{len(idx)} trial indices over {len(h.rows)} rows, {len(set(idx))} distinct"
    if twice:
        who = h.rows[h.rows["trial_index"].isin(twice)][["trial_id", "trial_index"]].values.tolist()
        detail += f"; used twice: {twice} ({who})"
    if len(idx) != len(h.rows):
        detail += f"; {len(h.rows) - len(idx)} rows without one"
    return Check("trial_index", ok, detail, guarantee)


def check_no_retraining(h: History, crashes=(), disk_stops=()) -> Check:
    """No configuration trained by two trials of one stage, no trial training again after its final report, beyond
    what a resume re-runs: a trial cut by a kill -9 (``crashes``) or a full disk (``disk_stops``) before its row was
    written, which the restored searcher proposes again."""
    guarantee = ("only the trials that were running when the driver died run again (from their last checkpoint); "
                 "a kept row never runs again")
    stops = sorted([*crashes, *disk_stops])
    if "trial_id" not in h.rows or not len(h.rows):
        return Check("no retraining", False, "no rows in trials.parquet " + "; ".join(h.problems), guarantee)
    recorded = set(h.rows["trial_id"])
    groups: dict[tuple, list[str]] = {}
    for r in h.rows.itertuples():
        groups.setdefault((int(r.stage), hp_key(json.loads(r.config_json))), []).append(r.trial_id)
    for tid, t in h.trials.items():
        if tid not in recorded and t.stage is not None:
            groups.setdefault((t.stage, t.config), []).append(tid)
    twice, excused = [], []
    for (stage, _hp), tids in sorted(groups.items()):
        tids = sorted(set(tids))
        if len(tids) < 2:
            continue
        finished = [t for t in tids if t in recorded]
        cut = [t for t in tids if t not in recorded]
        unexplained = []
        for t in cut:
            trial = h.trials.get(t)
            stamps = [float(ln.get("timestamp") or 0) for ln in (trial.lines if trial else [])]
            if trial is not None and any(ended_disk_full(f) for f in trial.finals):
                continue  # ended for want of space: no row, the resume runs it again
            if stops and (not stamps or crash_between(stops, max(stamps), math.inf)):
                continue  # running (or its report unrecorded) when the driver was killed or the disk filled
            unexplained.append(t)
        if len(finished) > 1 or unexplained:
            twice.append(f"stage {stage}: {', '.join(tids)}")
        else:
            excused.append(f"stage {stage}: {', '.join(cut)} cut by a stop, run again as "
                           f"{', '.join(finished) or 'another unfinished trial'}")
    again = []
    for tid, t in h.trials.items():
        first_final = None
        for ln in t.lines:
            if ln.get("trial_status") in (None, ""):
                continue
            if first_final is None:
                first_final = ln
            elif ln.get("ended_unix") != first_final.get("ended_unix"):  # a re-report of the final record is the same
                if crash_between(crashes, float(first_final.get("timestamp") or 0),
                                  float(ln.get("timestamp") or math.inf)):
                    excused.append(f"{tid} trained again after a final report its killed driver never recorded")
                else:
                    again.append(tid)
                break
    ok = not twice and not again
    detail = (f"{len(groups)} configurations in {len({s for s, _ in groups})} stage(s), "
              f"{sum(len(set(v)) for v in groups.values())} trials")
    if twice:
        detail += f"; trained by two trials: {'; '.join(twice)}"
    if again:
        detail += f"; trained again after their final report: {', '.join(sorted(again))}"
    if excused:
        detail += f"; re-runs the docs promise: {'; '.join(excused)}"
    return Check("no retraining", ok, detail, guarantee)


def check_validation_kept(h: History) -> Check:
    """Every ok/stopped row keeps at least the validation its trial had saved in its first restore point: a trial
    that runs again continues from a checkpoint holding its best validation so far (``valid_mrr`` is the best so
    far, so every later restore point holds at least that of the first)."""
    guarantee = ("only the trials that were running when the driver died run again, from their last checkpoint; a "
                 "trial at its deadline stops before its next step and keeps its best validation so far")
    if "trial_id" not in h.rows or not len(h.rows):
        return Check("validation kept", False, "no rows in trials.parquet " + "; ".join(h.problems), guarantee)
    lost, compared = [], 0
    for r in h.rows.itertuples():
        trial = h.trials.get(r.trial_id)
        if trial is None or r.status not in ("ok", "stopped"):
            continue
        saved = [ln for ln in trial.lines if ln.get("checkpoint_dir_name") and ln.get("trial_status") in (None, "")
                 and isinstance(ln.get("valid_mrr"), (int, float)) and math.isfinite(ln["valid_mrr"])]
        if not saved:
            continue
        compared += 1
        floor, got = float(saved[0]["valid_mrr"]), getattr(r, "valid_mrr", None)
        if got is None or not math.isfinite(float(got)) or float(got) < floor - 1e-9:
            lost.append(f"{r.trial_id} (stage {r.stage}: row {r.status} valid_mrr {got}"
                        + (f", error '{r.error}'" if getattr(r, "error", None) else "")
                        + f"; its restore point {saved[0]['checkpoint_dir_name']} at step {saved[0].get('step')} "
                        f"held {floor:.4f})")
    detail = f"{compared} rows of trials that had saved a restore point keep at least its validation"
    if lost:
        detail = f"{len(lost)} of {compared} rows lost the validation of their restore point: " + "; ".join(lost)
    return Check("validation kept", not lost, detail, guarantee)


def check_budget(h: History, budget_s: float | None = None, started_with: float | None = None) -> Check:
    """summary.json's used_s within 5 % (at least BUDGET_FLOOR_S) of the run's budget, which is ``budget_s`` (the
    extended one) when given; the extension recorded; the state file's clock the same."""
    guarantee = ("More budget for a search: the extended budget becomes the run's; a crash of the driver: the "
                 "state file's clock is not counted twice")
    budget = h.summary.get("budget") or {}
    seconds, used = budget.get("seconds"), budget.get("used_s")
    if seconds is None or used is None:
        return Check("budget", False, "summary.json has no budget.seconds / budget.used_s "
                     + "; ".join(h.problems), guarantee)
    seconds, used = float(seconds), float(used)
    tol = max(BUDGET_TOLERANCE * seconds, BUDGET_FLOOR_S)
    problems = []
    if budget_s is not None and abs(seconds - float(budget_s)) > 1e-6:
        problems.append(f"the run's budget is {seconds:g}s, not the {float(budget_s):g}s given")
    extensions = list(budget.get("extensions") or [])
    if started_with is not None and float(started_with) != seconds:
        if not extensions or float(extensions[-1].get("to") or -1) != seconds:
            problems.append(f"the extension {float(started_with):g}s -> {seconds:g}s is not in budget.extensions")
        if float(budget.get("started_with") or -1) != float(started_with):
            problems.append(f"started_with is {budget.get('started_with')}, not {float(started_with):g}")
    if abs(used - seconds) > tol:
        problems.append(f"used {used:.1f}s is {used - seconds:+.1f}s off the budget (tolerance {tol:.1f}s)")
    state_used = h.state.get("search_elapsed_s")
    if state_used is not None and abs(float(state_used) - used) > 0.01:
        problems.append(f"kgtuner_state.json's search_elapsed_s {float(state_used):.3f} != summary's {used:.3f}")
    ext = (f"; extended from {budget.get('started_with')}s: "
           + ", ".join(f"session {e.get('session')} at {e.get('used_s')}s -> {e.get('to')}s" for e in extensions)
           if extensions else "")
    detail = (f"used {used:.1f}s of {seconds:g}s ({(used - seconds) / seconds * 100:+.1f}%, tolerance "
              f"+-{tol:.1f}s){ext}")
    if problems:
        detail += "; " + "; ".join(problems)
    return Check("budget", not problems, detail, guarantee)


def switch_lines(driver_logs) -> tuple[int, list[str]]:
    """(switch lines, problems) over the drivers' outputs in order: one ``stage switch at`` per timeline, a resume
    that restored stage 1 starting a new one (the restored searcher redoes the switch)."""
    count, switched, problems = 0, False, []
    for i, path in enumerate(driver_logs):
        try:
            text = Path(path).read_text(errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            if RESUME_MARK in line and "(stage 1," in line:
                switched = False
            elif SWITCH_LINE in line:
                count += 1
                if switched:
                    problems.append(f"a second switch in the same timeline ({Path(path).name}: "
                                    f"{line.strip()[:90]})")
                switched = True
    return count, problems


def check_switch_once(h: History, driver_logs=()) -> Check:
    guarantee = ("the stage and the strategy's entries come from the snapshot saved inside Tune's checkpoint; an "
                 "extension keeps the stage split")
    problems = []
    st = h.state
    if int(st.get("stage") or 0) != 2 or st.get("switch_s") is None:
        problems.append(f"state: stage {st.get('stage')}, switch_s {st.get('switch_s')}")
    if st.get("stage1_closed_s") is not None and st.get("switch_s") is not None \
            and float(st["switch_s"]) < float(st["stage1_closed_s"]):
        problems.append(f"switch_s {st['switch_s']} before stage1_closed_s {st['stage1_closed_s']}")
    rows = h.rows
    detail = ""
    if len(rows) and "trial_index" in rows:
        s1 = rows[rows["stage"] == 1]["trial_index"].dropna()
        s2 = rows[rows["stage"] == 2]["trial_index"].dropna()
        if len(s1) and len(s2) and int(s1.max()) > int(s2.min()):
            late = rows[(rows["stage"] == 1) & (rows["trial_index"] > int(s2.min()))]["trial_id"].tolist()
            problems.append(f"stage-1 trials after the first stage-2 trial (trial_index > {int(s2.min())}): {late}")
        detail = f"{len(s1)} stage-1 rows (trial_index <= {int(s1.max()) if len(s1) else '-'}), {len(s2)} stage-2 " \
                 f"rows (from {int(s2.min()) if len(s2) else '-'})"
        if not len(s2):
            problems.append("no stage-2 row")
    if driver_logs:
        count, log_problems = switch_lines(driver_logs)
        problems += log_problems
        if count == 0:
            problems.append("no 'stage switch at' line in the drivers' outputs")
        detail += f"; {count} '{SWITCH_LINE.strip()}' line(s) in {len(driver_logs)} driver output(s)"
    detail = f"state: stage {st.get('stage')}, switch at {st.get('switch_s')}s (stage 1 closed at " \
             f"{st.get('stage1_closed_s')}s); " + detail
    if problems:
        detail += "; " + "; ".join(problems)
    return Check("switch", not problems, detail, guarantee)


def check_answer(run_dir: str | os.PathLike) -> Check:
    """The answer's model scores, independently, summary.json's test MRR."""
    guarantee = "Using the answer: the run directory's model gives exactly the reported test metrics"
    run_dir = Path(run_dir)
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
        reported = float(summary["best"]["test"]["mrr"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return Check("answer", False, f"no test MRR in summary.json ({exc})", guarantee)
    how = "tests/answer_helpers.complex_filtered_ranks (numpy, float64)"
    try:
        tests = str(REPO / "tests")
        if tests not in sys.path:
            sys.path.insert(0, tests)
        from answer_helpers import complex_filtered_ranks  # noqa: E402 - the independent scorer

        import numpy as np

        if summary.get("model") != "complex" or summary.get("dataset") != "demo":
            raise ImportError("the independent scorer is ComplEx on the demo graph only")
        mrr = float(np.mean(1.0 / complex_filtered_ranks(run_dir / "embeddings.npz")))
    except ImportError:
        how = "kgtuner.load_model(run_dir).evaluate('test')"
        try:
            import kgtuner

            mrr = float(kgtuner.load_model(run_dir).evaluate("test")["mrr"])
        except Exception as exc:  # noqa: BLE001
            return Check("answer", False, f"the answer's model cannot be scored: {exc}", guarantee)
    except Exception as exc:  # noqa: BLE001 - missing or damaged embeddings.npz
        return Check("answer", False, f"the answer's model cannot be scored: {type(exc).__name__}: {exc}", guarantee)
    ok = abs(mrr - reported) < 1e-5
    return Check("answer", ok, f"trial {summary['best'].get('trial_id')}: test MRR {mrr:.6f} by {how}, summary.json "
                 f"{reported:.6f}" + ("" if ok else " (they differ)"), guarantee)


def check_history(run_dir: str | os.PathLike, *, driver_logs=(), crashes=(), disk_stops=(),
                  budget_s: float | None = None, started_with: float | None = None, answer: bool = True) -> list[Check]:
    """The history checks of a finished run directory (see the module docstring). ``driver_logs``: the drivers'
    outputs in order (the switch lines); ``crashes``/``disk_stops``: unix times of the driver's kill -9 and of the
    full disks (they excuse what the docs say a resume re-runs); ``budget_s``/``started_with``: the budget given at
    the end and at the start."""
    h = load_history(run_dir)
    checks = [check_rows_once(h, crashes), check_trial_index_once(h), check_no_retraining(h, crashes, disk_stops),
              check_validation_kept(h), check_budget(h, budget_s, started_with), check_switch_once(h, driver_logs)]
    if answer:
        checks.append(check_answer(run_dir))
    return checks
