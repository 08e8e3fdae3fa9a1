"""The settings of the tiny demo recording the tests of ``kgtuner bench record`` and ``restore`` share (the
recording itself: the ``recorded`` fixture of conftest.py)."""

from __future__ import annotations

from pathlib import Path

from kgtuner.bench import pool as bp

REPO = Path(__file__).resolve().parents[1]
#: A tiny recording of the demo graph: every pool, repeated seeds, caps that stop some runs (the measured-seconds
#: protocol of the tables before issue 38; the calibrated one: tests/test_bench_cost.py).
TINY = dict(dataset="demo", cost="measured", valid_unit="steps", one_rule=False, decoupled_configs=0,
            stage1_configs=5, full_configs=3, expand_top=1, max_epochs=2,
            stage1_cap_s=2.0, expand_cap_s=0.3, full_cap_s=0.3, stage1_valid_every=3, expand_valid_every=4,
            full_valid_every=4, noise_stage1_top=1, noise_stage1_random=1, noise_stage1_seeds=2,
            noise_expand_top=1, noise_expand_random=0, noise_expand_seeds=2, noise_full_top=1,
            noise_full_random=0, noise_full_seeds=2)


def tiny(**kw) -> bp.RecordSettings:
    return bp.RecordSettings(**{**TINY, **kw})
