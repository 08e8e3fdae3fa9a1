"""``TrainConfig``: one training configuration, every hyper-parameter and control named once.

Names match the search-space files, the ``train.<name>`` overrides of ``python -m kgtuner.train``
and the result columns. Conditional HPs that are inactive (``gamma`` unless ``loss == "MR"`` or
the model is TransE/RotatE, ``adv_weight`` unless ``BCE_adv``, ``reg_weight`` with
``regularizer: None``) may be absent and are then ignored. ``TrainConfig.from_dict`` validates
everything and raises ``ConfigError`` naming the key, the value and the fix.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from kgtuner.errors import ConfigError
from kgtuner.kge.losses import LOSSES
from kgtuner.kge.models import MODELS
from kgtuner.kge.optim import INITIALIZERS, OPTIMIZERS
from kgtuner.kge.regularizers import REGULARIZERS
from kgtuner.validation import boolean, number

DENSE_NEGATIVES = ("1VsAll", "kVsAll")


@dataclass
class TrainConfig:
    """A validated training configuration (build it with ``from_dict``).

    Hyper-parameters (paper Table 1): ``model``, ``dim``, ``batch_size``, ``negatives`` (int
    or ``"1VsAll"``/``"kVsAll"``), ``loss``, ``gamma`` (MR margin, and the offset of TransE/RotatE's
    score ``gamma - distance`` with every loss), ``adv_weight`` (BCE_adv alpha), ``regularizer``,
    ``reg_weight``, ``dropout``, ``optimizer``, ``lr``, ``initializer``, ``inverse``;
    ``model_options`` holds model-specific settings (AutoSF structure, ConvE layout, ...).

    Controls: ``max_epochs`` / ``max_steps`` (training stops at whichever comes first; None =
    no limit, at least one must be set), ``valid_every`` (steps between validations),
    ``patience`` (validations without improvement of filtered valid MRR before early stop),
    ``lr_patience`` / ``lr_factor`` (learning rate multiplied by ``lr_factor`` after
    ``lr_patience`` stalled validations, as the reference's ReduceLROnPlateau; 0 disables),
    ``max_valid_triples`` (None = every valid triple; else validation ranks a fixed sample of that
    many valid triples, each as a head and a tail query, filtered by every true triple: the same
    sample in every run on the same graph, drawn with ``kgtuner.kge.trainer.VALID_SAMPLE_SEED``, not
    ``seed``; test metrics always use the whole test split),
    ``seed``, ``device`` (``auto`` = CUDA when present, else CPU), ``amp`` (bfloat16 autocast of the
    training step; meant for CUDA, also honoured on CPU), ``eval_batch_size`` (queries per
    evaluation batch; None = chosen by the evaluator to bound memory), ``type_constrained``
    (typed negatives when the graph has entity types), ``compile`` (``torch.compile`` the sampled-
    negative step's loss and its gradient, with CUDA graphs on CUDA; it costs a compilation of tens of
    seconds per run, and another for an epoch's shorter last batch; meant for CUDA: on CPU the default
    eager step was faster, see scripts/perf/bench_engine_speed.py --compile), ``cuda_graph`` (the whole
    sampled-negative step, Adam's row update included, captured once into a CUDA graph and replayed:
    :mod:`kgtuner.kge.graph_step`; a configuration it does not cover trains with the eager step), ``tf32``
    (float32 matrix products on TF32 tensor cores, CUDA only: faster, with a 10-bit mantissa in the
    products' inputs; off by default).
    """

    model: str = "complex"
    dim: int = 200
    batch_size: int = 1024
    negatives: int | str = 128
    loss: str = "BCE_adv"
    gamma: float = 6.0
    adv_weight: float = 1.0
    regularizer: str = "DURA"
    reg_weight: float = 1e-3
    dropout: float = 0.0
    optimizer: str = "Adam"
    lr: float = 1e-2
    initializer: str = "xavier_uniform"
    inverse: bool = False
    model_options: dict = field(default_factory=dict)
    # controls
    max_epochs: int | None = 100
    max_steps: int | None = None
    valid_every: int = 1000
    patience: int = 5
    lr_patience: int = 2
    lr_factor: float = 0.5
    max_valid_triples: int | None = None
    seed: int = 0
    device: str = "auto"
    amp: bool = False
    eval_batch_size: int | None = None
    type_constrained: bool = True
    compile: bool = False
    cuda_graph: bool = False
    tf32: bool = False

    # ------------------------------------------------------------------ building
    @classmethod
    def from_dict(cls, d: dict[str, Any] | None = None, **overrides) -> "TrainConfig":
        """Validated config from a mapping (absent keys take defaults; unknown keys are refused)."""
        data = dict(d or {})
        data.update(overrides)
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise ConfigError(f"unknown training setting(s) {unknown}; valid names: {', '.join(names)}")
        cfg = cls(**{k: _plain(v) for k, v in data.items()})
        cfg.validate()
        return cfg

    def to_dict(self) -> dict[str, Any]:
        """Plain-dict form (round-trips through ``from_dict``)."""
        return dataclasses.asdict(self)

    # ---------------------------------------------------------------- validation
    def validate(self) -> None:
        """Check every value and combination; raise ``ConfigError`` on the first problem."""
        self.model = str(self.model).lower()
        if self.model not in MODELS:
            raise ConfigError(f"unknown model {self.model!r}; choose one of {', '.join(MODELS)}")
        self.dim = number("dim", self.dim, integer=True, minimum=1)
        self.batch_size = number("batch_size", self.batch_size, integer=True, minimum=1)
        self.negatives = _negatives(self.negatives)
        _choice("loss", self.loss, LOSSES)
        self.regularizer = "None" if self.regularizer is None else str(self.regularizer)
        _choice("regularizer", self.regularizer, REGULARIZERS)
        _choice("optimizer", self.optimizer, OPTIMIZERS)
        _choice("initializer", self.initializer, INITIALIZERS)
        self.gamma = number("gamma", self.gamma, minimum=0.0, low_open=True)
        self.adv_weight = number("adv_weight", self.adv_weight, minimum=0.0, low_open=True)
        self.reg_weight = number("reg_weight", self.reg_weight, minimum=0.0)
        self.dropout = number("dropout", self.dropout, minimum=0.0, maximum=1.0, high_open=True)
        self.lr = number("lr", self.lr, minimum=0.0, low_open=True)
        self.lr_factor = number("lr_factor", self.lr_factor, minimum=0.0, low_open=True, maximum=1.0,
                                high_open=True)
        self.inverse = boolean("inverse", self.inverse)
        self.amp = boolean("amp", self.amp)
        self.type_constrained = boolean("type_constrained", self.type_constrained)
        self.compile = boolean("compile", self.compile)
        self.cuda_graph = boolean("cuda_graph", self.cuda_graph)
        self.tf32 = boolean("tf32", self.tf32)
        if self.compile and self.cuda_graph:
            raise ConfigError("compile: true and cuda_graph: true both capture the step; choose one "
                              "(cuda_graph captures the optimizer's update too)")
        if self.loss == "MR" and self.negatives in DENSE_NEGATIVES:
            raise ConfigError(f"loss 'MR' needs sampled negatives, not negatives={self.negatives!r}: "
                              "use an integer number of negatives or another loss")
        self.max_epochs = number("max_epochs", self.max_epochs, integer=True, minimum=1, allow_none=True)
        self.max_steps = number("max_steps", self.max_steps, integer=True, minimum=1, allow_none=True)
        if self.max_epochs is None and self.max_steps is None:
            raise ConfigError("set a training budget: max_epochs or max_steps (both are null)")
        self.valid_every = number("valid_every", self.valid_every, integer=True, minimum=1)
        self.patience = number("patience", self.patience, integer=True, minimum=1)
        self.lr_patience = number("lr_patience", self.lr_patience, integer=True, minimum=0)
        self.max_valid_triples = number("max_valid_triples", self.max_valid_triples, integer=True, minimum=1,
                                        allow_none=True)
        self.seed = number("seed", self.seed, integer=True, minimum=0)
        self.eval_batch_size = number("eval_batch_size", self.eval_batch_size, integer=True, minimum=1,
                                      allow_none=True)
        if str(self.device) not in ("auto", "cpu") and not str(self.device).startswith("cuda"):
            raise ConfigError(f"device must be 'auto', 'cpu' or 'cuda[:N]', got {self.device!r}")
        if not isinstance(self.model_options, dict):
            raise ConfigError(f"model_options must be a mapping, got {self.model_options!r}")
        self.model_options = MODELS[self.model].check_options(self.dim, dict(self.model_options))

    @property
    def sampled(self) -> bool:
        """True for an integer number of negatives (sparse updates)."""
        return not isinstance(self.negatives, str)


def _plain(v):
    """OmegaConf containers and numpy scalars -> plain Python values."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(v, (DictConfig, ListConfig)):
            return OmegaConf.to_container(v, resolve=True)
    except ImportError:  # pragma: no cover
        pass
    if hasattr(v, "item") and callable(v.item) and not isinstance(v, (list, dict, str)):
        return v.item()
    return v


def _choice(key, value, options):
    if value not in options:
        raise ConfigError(f"{key}={value!r} is not valid; choose one of {', '.join(map(str, options))}")


def _negatives(value):
    if isinstance(value, str) and value in DENSE_NEGATIVES:
        return value
    if isinstance(value, str):
        low = {v.lower(): v for v in DENSE_NEGATIVES}
        if value.lower() in low:
            return low[value.lower()]
    try:
        return number("negatives", value, integer=True, minimum=1)
    except ConfigError:
        raise ConfigError(f"negatives must be a positive integer, '1VsAll' or 'kVsAll', got {value!r}") from None
