"""The coordinator's resume paths: continuing a saved search (``resume=true``), with the same or a larger budget.

Guarantees (docs/operations.md, "Faults and guarantees" and "More budget for a search"):

* **No finished trial lost, none counted twice.** Before Tune restores its experiment, the rows, the state
  and the budget clock are made to agree with Tune's newest saved state (:meth:`Resume.reconcile_with_tune`):
  rows of trials the saved searcher never saw finish are kept, marked finished in Tune's saved state (they never
  run again) and given to the restored searcher (:meth:`Resume.on_searcher_restored`); the budget used is at
  least the end of the last kept row; the stage and the strategy's entries come from the snapshot saved with
  Tune's. Only a row the restored searcher cannot take is dropped (logged), and another trial runs instead.
* **Damaged or unrestorable Tune state is refused**, never silently started afresh: a damaged file before Tune
  reads it (:func:`~kgtuner.tune.tune_state.tune_snapshot`), a saved experiment Tune did not restore before its
  first step (:meth:`Resume.on_step_begin`).
* **A larger budget continues the search**, interrupted or finished: its stage split stays the first budget's
  (:func:`resumed_settings`), the extension is recorded in the state file and the kept overrides, Tune's
  finished search is reopened, the restored searcher takes the new budget, and the answer, outputs and final
  retraining are redone; an extension whose session ended before Tune saved under it is given again.

:class:`Resume` is a mixin of :class:`~kgtuner.tune.coordinator.Coordinator`; it uses the coordinator's
``run_dir``, ``settings``, ``strategy``, ``state``, ``store``, ``extension``, ``early_stopped``, ``log``,
``elapsed``, ``save_state``, ``_initial_state``, ``_persist`` and ``_search_finished``.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from kgtuner.tune import events
from kgtuner.tune.report import TrialReport
from kgtuner.tune.run_dir import (SEARCH_DIR, RunDirRefused, budget_extension, extend_overrides, fingerprint,
                                  remove_temp_files)
from kgtuner.tune.tune_state import (mark_trials_finished, remove_superseded_sessions, reopen_search,
                                     tune_snapshot)

__all__ = ["KEPT_STATE", "Resume", "resumed_settings"]

#: State entries a resume takes from the state file, not from the snapshot saved with Tune's state: the
#: settings the run was checked against and the budget it has (a budget extended in a session that ended
#: before Tune saved again stays extended).
KEPT_STATE = ("fingerprint", "sessions", "budget_base", "budget_extensions")


def resumed_settings(settings, saved: dict | None, run_dir) -> tuple[Any, Any]:
    """``(settings, extension)`` for a run whose saved state is ``saved`` (None: a fresh run). ``resume=true``
    with a larger budget: the search continues under it, its stage split kept (``Budget.extended``; the
    extension is returned too); a run extended before keeps the first budget's split."""
    extension = budget_extension(settings, saved, run_dir) if saved else None
    if extension is not None:
        settings = dataclasses.replace(settings, budget=extension)
    elif saved and saved.get("budget_base") is not None:  # a run extended before: its split stays the first's
        settings = dataclasses.replace(settings, budget=dataclasses.replace(settings.budget,
                                                                            base=float(saved["budget_base"])))
    return settings, extension


class Resume:
    """Reconcile with Tune's saved experiment, adopt the rows it has not seen, restore Tune and its searcher,
    extend the budget."""

    def _init_resume(self) -> None:
        self._tune_restored: bool | None = None  # None: no restore expected; False/True: Tune's restore done?
        self._snapshot = None  # the saved Tune experiment a resume continues (reconcile_with_tune)
        self._adoptions: list[dict] = []  # rows kept for the restored searcher (on_searcher_restored)
        self._restored_finished = False
        self._budget_grown = False  # Tune's snapshot predates a budget extension (reconcile_with_tune)

    def _reconcile(self) -> None:
        """A resume whose search goes on (not finished, or with a larger budget): :meth:`reconcile_with_tune`."""
        if self._persist and (self.extension is not None or not self.state.get("search_done")):
            self.reconcile_with_tune()

    def snapshot(self) -> dict:
        """The state as of now, saved by Tune with its own experiment state (``ProgressCallback.get_state``):
        a resume takes the stage, the budget used and the strategy's entries from the same moment as the
        trials and the searcher it restores, so no second is counted twice."""
        return json.loads(json.dumps({**self.state, "elapsed_s": round(self.elapsed(), 3),
                                      "search_finished": self._search_finished}, default=str))

    def on_tune_restored(self, snapshot: dict | None) -> None:
        """Tune restored its experiment (``ProgressCallback.set_state``)."""
        if self._tune_restored is not None:
            self._tune_restored = True

    def on_step_begin(self) -> None:
        """Before each step of Tune's loop (the first one: before Tune asks the searcher for trials or saves
        its experiment state): a resume whose saved experiment Tune did not restore stops here."""
        if self._tune_restored is False:  # Tune logged "Failed to restore the run state" and started afresh
            raise RunDirRefused(
                f"Ray Tune could not restore the saved experiment in {self.run_dir / SEARCH_DIR} (see its "
                f"'Failed to restore the run state' above); the finished trials are in {self.store.path}. Start a "
                "fresh search in another hydra.run.dir, or move search/, kgtuner_state.json and trials.parquet "
                "away to reuse this directory")

    def _restored_tuner(self, trainable):
        """The interrupted Tuner restored from ``run_dir/search``, or None (a fresh search)."""
        from ray import tune

        path = self.run_dir / SEARCH_DIR
        if self._snapshot is not None and self._snapshot.path is not None and tune.Tuner.can_restore(str(path)):
            what = "search, its budget extended," if self.extension is not None else "interrupted search"
            self.log(f"resuming the {what} in {path} (stage {self.state['stage']}, "
                     f"{self.elapsed():.1f}s of the budget used, {len(self.store)} trials recorded)")
            return tune.Tuner.restore(str(path), trainable=trainable, resume_unfinished=True,
                                      resume_errored=False, restart_errored=False)
        return None

    def reconcile_with_tune(self) -> None:
        """Before a resume: make the rows, the state and the budget clock agree with the newest Tune
        experiment state that ``Tuner.restore`` will continue from.

        Tune saves its experiment state (trials, searcher) every few seconds (at least 10 s apart),
        trials.parquet and kgtuner_state.json change at every trial end; after a crash (``kill -9``, Ray's
        processes killed under the driver) the rows may hold trials the saved searcher has not seen
        finish: it was saved while they ran, or before they started. Their rows are finished trials with
        their results, so they are **kept**: Tune is told not to run them again (their status in its saved
        state becomes TERMINATED), the restored searcher is given their results when Tune restores it
        (:meth:`on_searcher_restored`: ``MetaSearcher.adopt_finished``; a trial suggested after the save is
        counted as suggested, its ``trial_index`` never reused) and they count in the budget: the active
        seconds used are at least the end of the last of them. The stage and the strategy's entries come
        from the coordinator's snapshot saved with Tune's (``ProgressCallback``); the restored searcher
        re-announces what it redoes (e.g. the stage switch). Only a row the restored searcher cannot take
        (a searcher without ``add_evaluated_point`` support, e.g. TPE's for a trial it never suggested) is
        dropped, and the search runs another trial in its place. A damaged Tune file is refused here
        (:func:`~kgtuner.tune.tune_state.tune_snapshot`), before Tune would silently start an empty experiment.
        """
        self._snapshot = snap = tune_snapshot(self.run_dir)
        remove_temp_files(self.run_dir)  # of writes cut short (a killed driver, a full disk): we hold the lock
        remove_superseded_sessions(self.run_dir)  # the newest, just checked, is all Tune restores from
        if snap.path is None:
            if len(self.store) or float(self.state.get("elapsed_s") or 0.0) > 0:
                self.log(f"Tune saved no state of the interrupted search in {self.run_dir / SEARCH_DIR} (it stopped "
                         "within its first seconds): the search starts again from zero")
            dropped = self.store.keep_only(())
            keep = {k: self.state[k] for k in KEPT_STATE if k in self.state}
            self.state = {**self._initial_state(), **keep}
        else:
            dropped = []
            ahead = snap.unknown_to_searcher([r["trial_id"] for r in self.store.rows()])
            if snap.kgtuner_state is None or snap.searcher_trials is None:  # no searcher to give them to
                dropped = self.store.keep_only(set(snap.finished()) | {r["trial_id"] for r in self.store.rows()
                                                                       if r["trial_id"] not in ahead})
            if snap.kgtuner_state is not None:
                keep = {k: self.state[k] for k in KEPT_STATE if k in self.state}
                saved = dict(snap.kgtuner_state)
                # saved before a session that extended the budget ended: the restored searcher gets it again
                self._budget_grown = bool(self.state.get("budget_extensions")) and \
                    (saved.get("fingerprint") or {}).get("budget") != (self.state.get("fingerprint") or {}).get("budget")
                # the restored searcher answered FINISHED before that snapshot: it will not say so again
                self._restored_finished = bool(saved.pop("search_finished", False))
                self.state = {**saved, **keep}
                self._tune_restored = False  # until ProgressCallback.set_state says Tune restored its snapshot
            if ahead and not dropped:
                self._adopt_rows(snap, ahead)
        if dropped:
            ids = sorted(r["trial_id"] for r in dropped)
            self.log(f"{len(dropped)} trials.parquet row(s) were recorded after the last saved Tune state (the driver "
                     f"was killed?): dropped, those trials run again under the restored searcher: {', '.join(ids)}")
        if dropped or snap.path is None or self._adoptions:
            self.store.flush()
            self.save_state()

    def _adopt_rows(self, snap, ahead: list[str]) -> None:
        """Keep the rows of ``ahead`` (trials that finished after Tune's saved state, see
        :meth:`reconcile_with_tune`): Tune must not run them again, the budget counts them."""
        rows = [r for r in self.store.rows() if r["trial_id"] in set(ahead)]
        self._adoptions = rows
        rerun = [r["trial_id"] for r in rows if snap.trials.get(r["trial_id"]) not in (None, "TERMINATED", "ERROR")]
        if rerun:
            mark_trials_finished(snap.path, rerun)
        ends = [float(r["end_s"]) for r in rows if r.get("end_s") is not None]
        if ends:
            self.state["elapsed_s"] = max(float(self.state.get("elapsed_s") or 0.0), max(ends))
        self.log(f"{len(rows)} trial(s) finished after Tune's last saved state (the driver was stopped before Tune "
                 f"saved again): their rows are kept, the restored search takes their results and counts them in "
                 f"the budget ({self.state['elapsed_s']:.1f}s used); none runs again: "
                 + ", ".join(sorted(r["trial_id"] for r in rows)))

    def on_searcher_restored(self, searcher) -> None:
        """Tune restored the search's searcher (``MetaSearcher.restore``, before Tune's first step): give it the
        trials that finished after its state was saved (:meth:`reconcile_with_tune`). A row it cannot take is
        dropped (logged); the search then runs another trial instead."""
        if self.extension is not None or self._budget_grown:
            changed = searcher.extend_budget(self.strategy.searcher_budget())
            if not changed and getattr(searcher, "done", False):  # it had finished under this budget already
                self._search_finished = True
            self.log("the restored searcher continues under the larger budget: "
                     + (", ".join(f"{k} {old} -> {new}" for k, (old, new) in changed.items()) or "no field changed"))
        rows, self._adoptions = self._adoptions, []
        adopt = getattr(searcher, "adopt_finished", None)
        refused = []
        for row in rows:
            tid, stage = row["trial_id"], int(row["stage"])
            if row.get("rung") is not None:  # stopped by ASHA: the searcher looks the stop up (early_stop_of)
                self.early_stopped[tid] = events.TrialEarlyStopped(tid, int(row["rung"]), int(row.get("steps") or 0))
            try:
                ok = adopt is not None and bool(adopt(tid, stage, json.loads(row["config_json"]),
                                                      row.get("trial_index"), _row_report(row)))
            except Exception:  # noqa: BLE001 - the row is then dropped, as it was before rows were kept
                ok = False
            finally:
                self.early_stopped.pop(tid, None)
            if not ok:
                refused.append(tid)
        if refused:
            self.store.keep_only({r["trial_id"] for r in self.store.rows()} - set(refused))
            self.store.flush()
            self.log(f"{len(refused)} of those trials could not be given to the restored searcher "
                     f"({type(searcher).__name__}): their rows are dropped and the search runs other trials in their "
                     f"place: {', '.join(sorted(refused))}")

    # ------------------------------------------------------------------ a larger budget
    def _continue_budget(self) -> None:
        """Once every check passed: a larger budget is recorded (:meth:`_extend_budget`); an extension whose
        session ended before Tune saved under it reopens the search again."""
        if self.extension is not None:
            self._extend_budget()
        elif self._budget_grown:  # an extension whose session ended before Tune saved under it
            self._restored_finished = False
            self.state.pop("search_done", None)
            reopen_search(self.run_dir)

    def _extend_budget(self) -> None:
        """Every check passed and the search is about to continue under the larger budget: record the
        extension (``budget_extensions``, the fingerprint, the kept overrides), reopen a finished search (its
        answer, outputs and final retraining are redone at the end) and let Tune's restored generator suggest
        again (:func:`~kgtuner.tune.tune_state.reopen_search`)."""
        old = (self.state.get("fingerprint") or {}).get("budget") or {}
        new = self.settings.budget
        was_finished = bool(self.state.get("search_done") or self._restored_finished)
        entry = {"session": int(self.state.get("sessions", 0)), "unit": new.unit,
                 "from": old.get(new.unit), "to": new.seconds if new.timed else new.trials, "used_s": round(float(self.state["elapsed_s"]), 3),
                 "trials_recorded": len(self.store), "search_was": "finished" if was_finished else "interrupted"}
        self.state.setdefault("budget_base", new.split_amount)
        self.state["budget_extensions"] = [*self.state.get("budget_extensions", []), entry]
        self.state["fingerprint"] = fingerprint(self.settings)
        for key in ("search_done", "search_elapsed_s", "done", "final"):
            self.state.pop(key, None)
        self.state["final"] = None
        self._restored_finished = False
        reopened = reopen_search(self.run_dir)
        self.save_state()
        extend_overrides(self.run_dir, new)
        self.log(f"budget extended from {old.get(new.unit):g} to {new.amount:g} {new.unit} (the {entry['search_was']} "
                 f"search continues; {entry['used_s']:.1f}s used, {len(self.store)} trials recorded"
                 + ("; Tune's finished search reopened" if reopened else "") + f"): {self.strategy.extension_note()}")


def _row_report(row: dict) -> dict:
    """The final report of a recorded trial (a trials.parquet row), as the searchers get it from Tune."""
    from kgtuner.tune.results import metrics_of

    report = TrialReport(stage=int(row["stage"]), step=int(row.get("steps") or 0),
                         valid=metrics_of(row, "valid") or {}, test=metrics_of(row, "test") or {}, done=True,
                         status=row.get("status"), error=row.get("error"), graph=row.get("graph"),
                         early_stop_rung=None if row.get("rung") is None else int(row["rung"]),
                         train_seed=None if row.get("train_seed") is None else int(row["train_seed"]))
    return report.to_dict()
