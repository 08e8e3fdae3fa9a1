"""The coordinator's fault paths: what a run does when it is stopped, its disk fills up or Ray dies under it.

Guarantees (docs/operations.md, "Faults and guarantees"):

* **Ctrl+C, SIGTERM** (``docker stop``, Slurm, ``ray job stop``): a clean stop through Tune's own SIGINT
  handler, Tune's final checkpoint, :class:`ExperimentInterrupted` (exit 130) with the resume command; SIGTERM
  prints the resume command at once, in case the stop is cut short.
* **Ray killed under the driver** (raylet or GCS gone: SIGKILL, the OOM killer): a watcher thread ends the
  driver within a second with the resume command and exit 130, never a 60 s wait on a dead GCS.
* **A full disk** under the run directory: the space set aside in ``.kgtuner_reserve`` is freed, the search
  stops the way Ctrl+C does, and the run ends with one line (:class:`~kgtuner.tune.run_dir.DiskFull`, exit
  2) naming what could not be written and the resume command; Tune's loggers print no traceback per failed
  write, no temporary file is left, the files written before stay whole.
* **Ray too slow to start** (a local start's GCS or raylet not up in time on a busy machine): one line (exit 2)
  naming the cause and the command to retry, with ``resume=true`` where the run directory holds a search.
* **A failed search** (e.g. every stage-1 trial failed) still writes trials.parquet and summary.json
  (``status: failed``, the rows and their errors as evidence), then ends with one line (exit 2).
* At the end, whatever the outcome: the reserve is freed, the watcher stands down, the previous SIGTERM
  handler is back, the state is saved (a full disk keeps the previous file whole), the run directory's lock is
  released, and a local Ray this driver started is stopped at once (never in place of the run's own outcome).

:class:`Faults` is a mixin of :class:`~kgtuner.tune.coordinator.Coordinator`; it uses the coordinator's
``run_dir``, ``verbose``, ``out``, ``log``, ``elapsed``, ``state``, ``store``, ``live``, ``early_stopped``,
``ray_info``, ``save_state``, ``write_outputs``, ``close``, ``_persist`` and ``_search_finished``.
"""

from __future__ import annotations

import logging
import os
import sys
from contextlib import contextmanager
from pathlib import Path

from kgtuner.errors import KGTunerError
from kgtuner.tune import events
from kgtuner.tune.run_dir import (SEARCH_DIR, STATE_FILE, DiskFull, disk_full_error, disk_full_message,
                                  is_disk_full_text, release_space, remove_temp_files, resume_command,
                                  retry_command)

__all__ = ["ExperimentInterrupted", "Faults"]

_LOG = logging.getLogger("kgtuner.tune.coordinator")  # the driver's logger, as before the fault paths moved here


class ExperimentInterrupted(KGTunerError):
    """The run stopped before its budget ended (Ctrl+C); it can be resumed."""


class Faults:
    """The fault paths of a run: SIGTERM, a full disk, a dead local Ray, Tune's log records of a full disk."""

    def _init_faults(self) -> None:
        self._disk_full: tuple[BaseException | None, str] | None = None  # (error, what was written): stopping
        self._fitting = False  # inside Tuner.fit (a stop goes through Tune's SIGINT handler)
        self._stop_requested = False
        self._stopped = None  # threading.Event: run() has ended (the stop watcher stands down)
        self._old_sigterm = None  # the SIGTERM handler before run() installed its own

    # ------------------------------------------------------------------ the run's frame
    @contextmanager
    def faults_as_errors(self):
        """Around the steps of :meth:`run`: a stop (Ctrl+C, SIGTERM) ends as :class:`ExperimentInterrupted`, a
        full disk, wherever it was met, as one :class:`DiskFull`; every other error passes unchanged."""
        from kgtuner.cluster.ray_cluster import RayStartTimedOut

        try:
            yield
        except KeyboardInterrupt:
            if self._disk_full is not None:
                raise self._disk_full_error() from None
            raise ExperimentInterrupted(self._interrupted_msg()) from None
        except RayStartTimedOut as exc:  # a busy machine: nothing is lost, the same command can run again
            raise RayStartTimedOut(self._ray_start_msg(exc)) from None
        except Exception as exc:
            if isinstance(exc, KGTunerError) or (disk_full_error(exc) is None and not is_disk_full_text(str(exc))):
                raise
            if self._disk_full is None:  # e.g. an output file, or Tune's own write
                full = disk_full_error(exc)
                where = getattr(full, "filename2", None) or getattr(full, "filename", None)
                self._disk_full = (full, Path(where).name if where else "the run directory")
            raise self._disk_full_error() from None

    def _guard_process(self) -> None:
        """Once Ray is connected: watch a local Ray this driver started, and stop on SIGTERM like on Ctrl+C."""
        import signal
        import threading

        self._watch_ray()
        if threading.current_thread() is threading.main_thread():  # after ray.init, which sets its own
            self._old_sigterm = signal.signal(signal.SIGTERM, self._on_sigterm)

    def _fit(self, tuner) -> None:
        """``tuner.fit()`` with Tune's loggers filtered (:meth:`_tune_log_filter`); returns only when the search
        finished: a full disk met during the search ends it here (:class:`DiskFull`), a stop before its end
        (:class:`ExperimentInterrupted`), a failed search too, after its outputs (:meth:`_write_failed`)."""
        log_filter = self._tune_log_filter()
        tune_loggers = [logging.getLogger(f"ray.tune.execution.{name}")
                        for name in ("tune_controller", "experiment_state")]
        for logger in tune_loggers:
            logger.addFilter(log_filter)
        self._fitting = True
        try:
            tuner.fit()
        finally:
            self._fitting = False
            for logger in tune_loggers:
                logger.removeFilter(log_filter)
        if self._disk_full is not None:
            raise self._disk_full_error()
        interrupted = bool(self.live) or not self._search_finished
        self.live.clear()
        if interrupted:
            raise ExperimentInterrupted(self._interrupted_msg())
        if self.state.get("error"):
            self._write_failed()
            raise KGTunerError(self.state["error"])

    def _write_failed(self) -> None:
        """The search failed (e.g. every stage-1 trial failed): write trials.parquet and summary.json all the
        same -- the rows and their errors are the user's evidence -- with ``status: failed`` and the reason;
        the caller then raises the error (one line, exit 2)."""
        self.state["search_elapsed_s"] = round(self.elapsed(), 3)
        self.save_state()
        try:
            self.write_outputs()
        except Exception as exc:  # noqa: BLE001 - the search's own error is the one to report
            self.log(f"warning: could not write every output of the failed search: {type(exc).__name__}: {exc}")

    def _stand_down(self) -> None:
        """The run ends, whatever its outcome: free the reserve, stop the Ray watcher, put the previous SIGTERM
        handler back and save the state (a full disk keeps the previous file whole); then, even if that failed,
        leave the Driver role, release the lock and stop a local Ray this driver started."""
        import signal

        from kgtuner.cluster.ray_cluster import shutdown_ray

        try:
            release_space(self.run_dir)
            if self._stopped is not None:
                self._stopped.set()
            if self._old_sigterm is not None:
                signal.signal(signal.SIGTERM, self._old_sigterm)
            try:
                self.save_state()
            except DiskFull:  # the previous state file stays whole
                pass
        finally:
            events.deactivate(self)
            self.close()
            if self.ray_info is not None and self.ray_info.started_here:
                try:
                    shutdown_ray()  # its processes at once, not a second each (Ray's stop)
                except Exception as exc:  # noqa: BLE001 - never in place of the run's own outcome
                    _LOG.warning("could not stop the local Ray at once (%s); Ray stops it at exit", exc)

    def _ray_start_msg(self, exc: BaseException) -> str:
        """Ray did not start in time: the cause, what is kept, and the command to retry (with ``resume=true``
        where the run directory holds a search)."""
        held = self._persist and (self.run_dir / STATE_FILE).exists()
        kept = (f"the search in {self.run_dir} is kept and stays resumable" if held else
                f"nothing of the search was written in {self.run_dir}")
        return (f"{exc}; {kept}. Retry when the machine is less busy (or attach to a running cluster with "
                f"cluster.address=HOST:PORT): {retry_command(self.run_dir, getattr(self, 'overrides', None))}")

    def _interrupted_msg(self) -> str:
        if not self._persist:
            return (f"stopped before the search started; nothing was saved in {self.run_dir}: run the same command "
                    "again to start it")
        return (f"experiment interrupted after {self.elapsed():.1f}s of its budget; {len(self.store)} "
                f"finished trials are saved in {self.run_dir}. Resume with: {resume_command(self.run_dir)}")

    # ------------------------------------------------------------------ a full disk
    @contextmanager
    def _writing(self, what: str):
        """Around a write to the run directory (``what``: the file): a full disk stops the search
        (:meth:`_on_disk_full`) and the file written before stays whole; any other error passes."""
        try:
            yield
        except OSError as exc:
            if disk_full_error(exc) is None:
                raise
            self._on_disk_full(exc, what)

    def _lost_to_full_disk(self, tid: str, error: str | None, report) -> bool:
        """A trial that ended for want of space (it could not write its checkpoint): the disk, not its
        configuration, failed -- no row, so a resume (once there is space) runs it again; the search stops."""
        if not (is_disk_full_text(error) or (report.failed and is_disk_full_text(report.error))):
            return False
        self.early_stopped.pop(tid, None)
        self._on_disk_full(None, f"trial {tid}'s checkpoint in {self.run_dir / SEARCH_DIR}")
        return True

    def _on_disk_full(self, exc: BaseException | None, what: str) -> None:
        """A write to the run directory failed for want of space. During the search: stop it the way Ctrl+C
        does (Tune's own clean stop; once) and end with one line when Tune has stopped (:class:`DiskFull`);
        elsewhere raise it now. The files written before stay whole (every write goes through a temporary
        file, removed when it fails)."""
        import signal

        if self._disk_full is None:
            self._disk_full = (exc, what)
            freed = release_space(self.run_dir)  # room for Tune's last checkpoint and the state file
            self.log(f"the disk of {self.run_dir} is full (writing {what}): stopping the search"
                     + (" (the space kgtuner set aside for this is freed)" if freed else ""))
        if not self._fitting:
            raise self._disk_full_error()
        if not self._stop_requested:
            self._stop_requested = True
            signal.raise_signal(signal.SIGINT)  # Tune's SIGINT handler: stop, as on Ctrl+C

    def _tune_log_filter(self):
        """A filter for Tune's loggers during the search: a record of a full disk (a trial that could not write
        its checkpoint, an experiment checkpoint that could not be written) stops the search at once and is
        not printed -- the search ends with its one line instead of a traceback per failed write."""
        driver = self

        class DiskFullRecords(logging.Filter):
            def filter(self, record: logging.LogRecord) -> bool:
                exc = record.exc_info[1] if record.exc_info else None
                if disk_full_error(exc) is None and not is_disk_full_text(str(exc) if exc is not None else None):
                    return True
                driver._on_disk_full(disk_full_error(exc), f"Tune's files in {driver.run_dir / SEARCH_DIR}")
                return False

        return DiskFullRecords()

    def _disk_full_error(self) -> DiskFull:
        exc, what = self._disk_full or (None, "the run directory")
        remove_temp_files(self.run_dir, os.getpid())
        resumable = self._persist and (self.run_dir / STATE_FILE).exists()
        return DiskFull(disk_full_message(self.run_dir, what, exc, resumable=resumable))

    # ------------------------------------------------------------------ stop signals, a dead Ray
    def _on_sigterm(self, signum, frame) -> None:
        """SIGTERM (``docker stop``, batch schedulers, ``ray job stop``) stops like Ctrl+C: a clean,
        resumable stop (Tune's SIGINT handler during the search, KeyboardInterrupt elsewhere).

        The resume command is printed at once, in case the stop is cut short (a local Ray started by
        ``kgtuner.cluster.ray_cluster`` blocks SIGTERM, so a stop signal sent to every process of the job
        reaches the driver only; where it still kills Ray, :meth:`_watch_ray` ends the driver at once)."""
        import signal

        if self.verbose:
            resume = (f"; if the stop is cut short, resume with: {resume_command(self.run_dir)}" if self._persist
                      else "")
            print(f"[kgtuner] SIGTERM received: stopping like Ctrl+C (the run stays resumable){resume}", file=self.out,
                  flush=True)
        signal.raise_signal(signal.SIGINT)

    def _watch_ray(self) -> None:
        """Until :meth:`run` ends: if the local Ray this driver started dies under it (its raylet or GCS killed:
        a stop sent by the kernel to every process of the job, the OOM killer, ``kill -9``), end the driver
        now with the resume command and exit code 130 instead of hanging on it -- Ray's clients wait 60 s for
        a dead GCS ("Failed to connect to GCS within 60 seconds") and then end the process with exit 1 and
        nothing printed. Nothing is lost: the rows and the state file are written at every trial end,
        Tune's last saved state is on disk, and a resume keeps every finished trial
        (:meth:`~kgtuner.tune.resume.Resume.reconcile_with_tune`)."""
        import threading

        if self._stopped is not None or self.ray_info is None or not self.ray_info.started_here:
            return
        try:
            import ray

            node = ray._private.worker._global_node
            procs = [info.process for key in ("raylet", "gcs_server") for info in node.all_processes.get(key, [])]
        except Exception:  # noqa: BLE001 - no local node to watch
            return
        if not procs:
            return
        self._stopped = stopped = threading.Event()

        def watch() -> None:
            while not stopped.wait(0.25):
                if any(p.poll() is not None for p in procs):
                    break
            else:
                return  # run() ended
            if stopped.is_set():
                return
            print("[kgtuner] Ray's processes ended under the driver (killed?): the search cannot go on, the driver "
                  "stops now", file=self.out, flush=True)
            print(f"kgtuner: {self._interrupted_msg()}", file=sys.stderr, flush=True)
            os._exit(130)

        threading.Thread(target=watch, name="kgtuner-stop-watch", daemon=True).start()
