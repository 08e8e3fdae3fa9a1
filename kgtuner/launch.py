"""``python -m kgtuner.launch`` (or ``kgtuner launch``): the KGTuner search service (Hydra main over
``conf/config.yaml``).

Examples::

    python -m kgtuner.launch                                   # the embedded demo on CPU (~2-3 min)
    python -m kgtuner.launch cluster.num_gpus=8 budget.seconds=600
    python -m kgtuner.launch +experiment=biokg_complex cluster.address=auto
    python -m kgtuner.launch search=random                     # a one-stage baseline
    python -m kgtuner.launch resume=true hydra.run.dir=outputs/2026-11-25/10-00-00   # continue a run

Outputs go to the Hydra run directory (``hydra.run.dir``): trials.parquet, summary.json,
best_config.yaml, search_curve.png, and the answer's embeddings.npz / metrics.json. Bad settings end
with one ``kgtuner: error:`` line and exit code 2, before Ray starts and before anything is written
to the run directory; an interrupted run (Ctrl+C, SIGTERM, ``ray job stop``) exits with 130 and
prints how to resume it. One driver at a time per run directory (a lock); the experiment's original
overrides are kept in its ``kgtuner_overrides.yaml``.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from kgtuner.cli import EXIT_BAD_SETTING, EXIT_INTERRUPTED, fail, run_hydra
from kgtuner.errors import ConfigError, KGTunerError
from kgtuner.paths import CONF_DIR

EXIT_BAD_INPUT = EXIT_BAD_SETTING
#: Path settings of the launcher config, made absolute when the driver leaves a job's working_dir copy.
PATH_KEYS = ("data.path", "data.ogb_root")


def run(cfg: DictConfig, run_dir: str, overrides: Sequence[str] | None = None) -> dict:
    """Validate ``cfg`` (before any Ray call) and run the experiment in ``run_dir``; ``overrides`` (the
    command line's) are kept in the run directory's ``kgtuner_overrides.yaml`` when the search starts."""
    from kgtuner.tune.coordinator import run_experiment
    from kgtuner.tune.settings import ExperimentSettings

    settings = ExperimentSettings.from_config(cfg)
    return run_experiment(settings, run_dir, overrides=None if overrides is None else list(overrides))


def leave_job_working_dir(cfg: DictConfig, run_dir: str | os.PathLike) -> Path | None:
    """Inside a Ray job with an uploaded ``working_dir``, move the driver out of Ray's copy of it.

    Ray replaces that copy (delete, unpack again) when another node that shares the Ray temp dir
    unpacks the job's package, which leaves the driver in a deleted directory (see
    :func:`kgtuner.cluster.ray_cluster.job_working_dir`; torch's oneMKL then aborts the driver at its
    first ``import torch``). So: the run directory must lie outside the copy (Ray also deletes the copy
    after the job), relative path settings are made absolute first (paths into the copy stay valid),
    and the driver continues in the run directory. Returns the copy left, or None (nothing to do).
    """
    from kgtuner.cluster.ray_cluster import job_working_dir

    copy = job_working_dir()
    if copy is None:
        return None
    run_dir = Path(run_dir).resolve()
    if run_dir == copy or copy in run_dir.parents:
        raise ConfigError(
            f"hydra.run.dir={run_dir} lies inside this Ray job's working_dir copy {copy}, which Ray deletes "
            "after the job (and replaces when another node unpacks it): give an absolute run directory "
            "outside it, e.g. 'hydra.run.dir=${oc.env:HOME}/kgtuner-runs/NAME' (scripts/ops/submit.sh --run-dir)")
    for key in PATH_KEYS:
        try:
            value = OmegaConf.select(cfg, key, throw_on_missing=True)
        except Exception:  # noqa: BLE001 - missing (???) or unresolvable: the settings report it
            continue
        if isinstance(value, str) and value and not os.path.isabs(os.path.expanduser(value)):
            OmegaConf.update(cfg, key, str(Path.cwd() / value), force_add=False)
    os.chdir(run_dir)
    preload_package()
    print(f"[kgtuner] running in {run_dir}, outside the job's working_dir copy {copy} "
          "(Ray may replace that copy while the job runs; every kgtuner module is loaded already)", flush=True)
    return copy


def preload_package() -> list[str]:
    """Import every module of the kgtuner package now (``__main__`` modules excepted); return their names.

    Inside a job with an uploaded ``working_dir`` the package itself is imported from Ray's copy, which
    another node may delete and unpack again at any moment (:func:`leave_job_working_dir`): a module
    the driver imported lazily in that window was "not found" (seen: ``kgtuner.tune.progress`` when
    the Tuner was built). With everything loaded up front the driver never reads the copy again. A
    module whose optional dependency is missing (e.g. optuna for TPE) is skipped: using it fails later
    with its own message, as without this preload.
    """
    import importlib
    import pkgutil

    import kgtuner

    loaded = []
    for info in pkgutil.walk_packages(kgtuner.__path__, prefix="kgtuner."):
        if info.name.rsplit(".", 1)[-1] == "__main__":
            continue
        try:
            importlib.import_module(info.name)
        except ImportError as exc:
            if not getattr(exc, "name", None) or str(exc.name).startswith("kgtuner"):
                raise
            continue
        loaded.append(info.name)
    return loaded


def quiet_full_disk_log_files() -> None:
    """A log file (Hydra's ``launch.log`` in the run directory) on a full disk: the logging module would
    print a ``--- Logging error ---`` traceback for every later log line; instead the file stops being
    written (the console keeps the log) and the search ends with its one ``disk is full`` line."""
    from kgtuner.tune.run_dir import DISK_FULL_ERRNOS

    def patch(handler: logging.FileHandler) -> None:
        plain = handler.handleError

        def handle_error(record, handler=handler, plain=plain):
            exc = sys.exc_info()[1]
            if isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS:
                for logger in [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]:
                    if isinstance(logger, logging.Logger) and handler in logger.handlers:
                        logger.removeHandler(handler)
                return
            plain(record)

        handler.handleError = handle_error

    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    for logger in loggers:
        for handler in getattr(logger, "handlers", []):
            if isinstance(handler, logging.FileHandler):
                patch(handler)


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def _hydra_main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    from kgtuner.tune.coordinator import ExperimentInterrupted

    hydra_cfg = HydraConfig.get()
    run_dir = hydra_cfg.runtime.output_dir
    quiet_full_disk_log_files()
    # Tune's TensorBoard logger renames valid_hits@k to valid_hits_k and logs that at INFO, three lines per result
    logging.getLogger("tensorboardX.summary").setLevel(logging.WARNING)
    try:
        leave_job_working_dir(cfg, run_dir)
        run(cfg, run_dir, overrides=list(hydra_cfg.overrides.task))
    except ExperimentInterrupted as exc:
        print(f"kgtuner: {exc}", file=sys.stderr, flush=True)
        sys.exit(EXIT_INTERRUPTED)
    except KGTunerError as exc:
        sys.exit(fail(exc))


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> None:
    """Entry point (``python -m kgtuner.launch``, ``kgtuner launch``): Hydra's composition errors (unknown
    key or group option) also end with one ``kgtuner: error:`` line and exit code 2."""
    run_hydra(_hydra_main, argv, prog)


if __name__ == "__main__":
    main()
