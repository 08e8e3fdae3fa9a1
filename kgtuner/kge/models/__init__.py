"""KGE scoring models, registered under their lower-case config names (``model=<name>``)."""

from kgtuner.kge.models.base import KGEModel
from kgtuner.kge.models.bilinear import AUTOSF_DEFAULT_STRUCTURE, RESCAL, AutoSF, ComplEx, DistMult, TuckER
from kgtuner.kge.models.conve import ConvE
from kgtuner.kge.models.translational import RotatE, TransE

#: Model classes keyed by config name.
MODELS: dict[str, type[KGEModel]] = {
    cls.NAME: cls for cls in (TransE, RotatE, RESCAL, DistMult, ComplEx, TuckER, ConvE, AutoSF)
}

__all__ = ["MODELS", "KGEModel", "TransE", "RotatE", "RESCAL", "DistMult", "ComplEx", "TuckER", "ConvE",
           "AutoSF", "AUTOSF_DEFAULT_STRUCTURE"]
