"""``python -m kgtuner.launch``: the KGTuner search service (Hydra main over ``conf/config.yaml``).

Examples::

    python -m kgtuner.launch                                   # the embedded demo on CPU (~2-3 min)
    python -m kgtuner.launch cluster.num_gpus=8 budget.seconds=600
    python -m kgtuner.launch +experiment=biokg_complex cluster.address=auto
    python -m kgtuner.launch search=random                     # a one-stage baseline
    python -m kgtuner.launch resume=true hydra.run.dir=outputs/2026-11-25/10-00-00   # continue a run

Outputs go to the Hydra run directory (``hydra.run.dir``): trials.parquet, summary.json,
best_config.yaml, search_curve.png. Bad settings end with one error line and exit code 2, before
Ray starts; an interrupted run (Ctrl+C) exits with 130 and prints how to resume it.
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from kgtuner.errors import KGTunerError
from kgtuner.paths import CONF_DIR

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130


def run(cfg: DictConfig, run_dir: str) -> dict:
    """Validate ``cfg`` (before any Ray call) and run the experiment in ``run_dir``."""
    from kgtuner.tune.coordinator import run_experiment
    from kgtuner.tune.settings import ExperimentSettings

    settings = ExperimentSettings.from_config(cfg)
    return run_experiment(settings, run_dir)


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    from kgtuner.tune.coordinator import ExperimentInterrupted

    run_dir = HydraConfig.get().runtime.output_dir
    try:
        run(cfg, run_dir)
    except ExperimentInterrupted as exc:
        print(f"kgtuner: {exc}", file=sys.stderr, flush=True)
        sys.exit(EXIT_INTERRUPTED)
    except KGTunerError as exc:
        print(f"kgtuner: error: {exc}", file=sys.stderr, flush=True)
        sys.exit(EXIT_BAD_INPUT)


if __name__ == "__main__":
    main()
