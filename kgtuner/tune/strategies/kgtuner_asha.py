"""KGTuner with ASHA early stopping inside each stage, ``search=kgtuner_asha``.

The two stages of :mod:`kgtuner.tune.strategies.kgtuner` (every ``search`` key inherited from
``conf/search/kgtuner.yaml``) plus one set of ASHA rungs per stage (:mod:`kgtuner.tune.early_stop`):
``search.early_stop`` must stay ``asha``. Not the paper's algorithm: ``search=kgtuner`` is.
"""

from __future__ import annotations

from kgtuner.tune.strategies.kgtuner import KGTuner


class KGTunerASHA(KGTuner):
    """KGTuner + ASHA: a trial stopped at a rung is a low-fidelity observation for RF+BORE and is
    ranked after every fully-trained stage-1 trial."""

    names = ("kgtuner_asha",)

    @classmethod
    def early_stop_policy(cls, search):
        return "required", ("search=kgtuner_asha is KGTuner with ASHA early stopping, so search.early_stop must "
                            "stay asha; for the paper's algorithm without early stopping choose search=kgtuner")
