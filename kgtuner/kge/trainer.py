"""``Trainer``: trains one configuration with validation, early stopping and checkpoint/restore.

The loop batches over the sampler's examples in a per-epoch seeded permutation, validates
(filtered MRR, or the OGB protocol when the graph has candidate negatives) every
``valid_every`` steps and at the end, keeps the best-validation weights, halves the learning
rate after ``lr_patience`` stalled validations, stops after ``patience`` stalled validations,
and finally computes test metrics for the best state. After every validation it calls
``callback(report)``; a callback returning True stops the run (status ``"stopped"``).

Statuses: ``"ok"`` (budget exhausted or early-stopped), ``"stopped"`` (callback), ``"diverged"``
(non-finite or exploding loss, or NaN validation MRR: no metrics are reported).

``max_valid_triples`` bounds the cost of a validation on a large graph (a stage-1 subgraph of
ogbl-wikikg2 ranks every query against ~500k entities): validation then ranks a fixed sample of that
many valid triples (:meth:`Trainer.valid_rows`; every true triple still filters), the test split stays whole.

With sampled negatives a step is the *row step* (``Trainer._row_step``): each embedding table's rows
of the batch (heads, tails, the shared negatives; relations) are gathered once, the loss and the
regularizer are computed on them, and the row-sparse optimizers of :mod:`kgtuner.kge.optim` update
exactly those rows. It computes what the plain autograd step through ``nn.Embedding(sparse=True)``
with torch's ``SparseAdam`` computes (``kgtuner.kge.reference_step`` keeps that step as the yardstick),
without a host-device synchronisation inside the step loop on CUDA (no ``torch.unique``; losses are
read back asynchronously). ``compile: true`` runs the loss and its gradient through ``torch.compile``
(CUDA graphs on CUDA); ``cuda_graph: true`` replays the whole step, optimizer update included, from one
CUDA graph (:mod:`kgtuner.kge.graph_step`). 1VsAll/kVsAll train by plain autograd.
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import numpy as np
import torch

from kgtuner.errors import ConfigError
from kgtuner.kge.config import TrainConfig
from kgtuner.kge.graph_step import captured_step
from kgtuner.kge.losses import make_loss
from kgtuner.kge.models import MODELS
from kgtuner.kge.optim import _RowSparse, initialize, make_optimizers, scale_lr
from kgtuner.kge.regularizers import REGULARIZERS
from kgtuner.kge.samplers import SAMPLERS, sampler_name

#: A loss above this (or non-finite) ends the run as diverged.
DIVERGED_LOSS = 1e10
METRIC_KEYS = ("mrr", "hits@1", "hits@3", "hits@10")
#: Seed of the validation sample of ``max_valid_triples`` (fixed: the same triples in every run and trial).
VALID_SAMPLE_SEED = 20220522


@dataclass
class TrainResult:
    """Outcome of ``Trainer.fit``: status, best-validation metrics and their test metrics, timings."""

    status: str
    valid: dict[str, float] | None
    test: dict[str, float] | None
    best_step: int
    steps: int
    epochs: float
    train_seconds: float
    triples_per_second: float
    stop_reason: str
    message: str = ""
    history: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class LossMonitor:
    """Reads the step losses for the running mean and for divergence, without stalling the device.

    On CPU each loss is read at once. On an accelerator the losses of ``chunk`` steps are stacked
    and copied to pinned host memory asynchronously; a chunk is read once its copy has finished
    (polled without blocking) or at ``drain`` (validation, end of training), so the step loop never
    waits for the device and a divergence is found at most two chunks late, reported with the step
    at which it happened. ``add``/``drain`` return the divergence message, or None.
    ``asynchronous`` (default: not on CPU) forces either mode (tests run the chunked one on CPU).
    """

    def __init__(self, device: torch.device, chunk: int = 50, asynchronous: bool | None = None):
        self.sync = device.type == "cpu" if asynchronous is None else not asynchronous
        self.chunk = chunk
        self.total = 0.0
        self.count = 0
        self.pending: list[torch.Tensor] = []
        self.first_step = 0
        self.copies: list[tuple[torch.Tensor, Any, int]] = []

    def add(self, loss: torch.Tensor, step: int) -> str | None:
        if self.sync:
            v = float(loss)
            if not math.isfinite(v) or abs(v) > DIVERGED_LOSS:
                return self._message(v, step)
            self.total += v
            self.count += 1
            return None
        if not self.pending:
            self.first_step = step
        self.pending.append(loss)
        if len(self.pending) >= self.chunk:
            self._launch()
        while self.copies and self.copies[0][1].query():
            host, _, first = self.copies.pop(0)
            if (bad := self._read(host, first)) is not None:
                return bad
        return None

    def drain(self) -> str | None:
        if self.pending:
            self._launch()
        while self.copies:
            host, event, first = self.copies.pop(0)
            event.synchronize()
            if (bad := self._read(host, first)) is not None:
                return bad
        return None

    def _launch(self) -> None:
        vals = torch.stack(self.pending).float()
        if vals.device.type == "cuda":
            host = torch.empty(vals.shape, dtype=vals.dtype, pin_memory=True)
            host.copy_(vals, non_blocking=True)
            event = torch.cuda.Event()
            event.record()
        else:  # CPU (or an accelerator without events): a plain copy, readable at once
            host, event = vals.cpu(), _Done()
        self.copies.append((host, event, self.first_step))
        self.pending = []

    def _read(self, vals: torch.Tensor, first_step: int) -> str | None:
        vals = vals.float()
        bad = ~torch.isfinite(vals) | (vals.abs() > DIVERGED_LOSS)
        if bool(bad.any()):
            i = int(torch.nonzero(bad)[0])
            return self._message(float(vals[i]), first_step + i)
        self.total += float(vals.sum())
        self.count += vals.numel()
        return None

    @staticmethod
    def _message(v: float, step: int) -> str:
        return f"training loss became {'NaN' if math.isnan(v) else f'{v:.3g}'} at step {step}"


class _Done:
    @staticmethod
    def query() -> bool:
        return True

    @staticmethod
    def synchronize() -> None:
        pass


def resolve_device(device: str | torch.device | None) -> torch.device:
    """``auto``/None -> CUDA when available, else CPU."""
    if device is None or str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


class Trainer:
    """Train ``cfg`` on ``kg`` (a :class:`kgtuner.data.KnowledgeGraph`).

    Parameters
    ----------
    cfg:
        A :class:`TrainConfig` or a dict for ``TrainConfig.from_dict``.
    kg:
        The graph; ``kg.candidates`` selects the OGB protocol, ``kg.entity_types`` typed negatives.
    filter_index:
        :class:`kgtuner.data.FilterIndex` for filtered ranking (built from ``kg`` when needed).
    device:
        Overrides ``cfg.device``.
    callback:
        ``callback(report: dict) -> bool | None`` after each validation; True requests a stop.
    should_stop:
        ``should_stop() -> bool`` checked before every step (cheap, e.g. a wall-clock deadline);
        True stops the run like a callback stop (status ``"stopped"``, best-validation state kept).
    """

    def __init__(self, cfg: TrainConfig | dict, kg, filter_index=None, device=None,
                 callback: Callable[[dict], bool | None] | None = None,
                 should_stop: Callable[[], bool] | None = None):
        self.cfg = cfg if isinstance(cfg, TrainConfig) else TrainConfig.from_dict(cfg)
        if isinstance(cfg, TrainConfig):
            self.cfg.validate()
        c = self.cfg
        self.kg = kg
        self.filter_index = filter_index
        self.callback = callback
        self.should_stop = should_stop
        self.device = resolve_device(device if device is not None else c.device)
        torch.manual_seed(c.seed)
        name = sampler_name(c.negatives, getattr(kg, "entity_types", None), c.type_constrained)
        self.sampler = SAMPLERS[name](kg.train, kg.num_entities, kg.num_relations,
                                      num_negatives=c.negatives if c.sampled else 0,
                                      entity_types=getattr(kg, "entity_types", None), device=self.device)
        self.model = MODELS[c.model](kg.num_entities, kg.num_relations, c.dim, inverse=c.inverse,
                                     dropout=c.dropout, sparse=self.sampler.sparse, options=c.model_options,
                                     gamma=c.gamma)
        initialize(self.model, c.initializer)
        self.model.to(self.device)
        self.optimizers = make_optimizers(self.model, c.optimizer, c.lr)
        self.loss_fn = make_loss(c.loss, gamma=c.gamma, adv_weight=c.adv_weight)
        self.regularizer = REGULARIZERS[c.regularizer](c.reg_weight)
        self.examples = self.sampler.examples().to(self.device)
        full, rest = divmod(self.examples.shape[0], c.batch_size)
        # a final batch of ONE example is dropped (batch norm, e.g. ConvE's, cannot train on it)
        self.steps_per_epoch = max(1, full + (rest > 1))
        self.generator = torch.Generator(device=self.device).manual_seed(c.seed)
        self._amp = bool(c.amp)
        #: Sampled negatives: gather the batch's embedding rows once and update only those rows
        #: (see ``_row_step``); False runs the plain autograd step through ``nn.Embedding``.
        self.row_step = bool(getattr(self.sampler, "row_step", False)) and self.model.sparse
        #: Merge duplicate rows with ``torch.unique`` (CPU) or keep them (no host sync; static shapes).
        self.dedup_rows = self.device.type == "cpu"
        self._objective = self._compiled_objective() if c.compile else self._rows_objective
        if self.device.type == "cuda":  # process-wide: set by every trainer, so a tf32 run leaves nothing behind
            torch.set_float32_matmul_precision("high" if c.tf32 else "highest")  # sets the old and new flags alike
        #: ``cuda_graph``: the whole step replayed from one CUDA graph (``step_note`` says whether, or why not)
        self.graph_step, self.step_note = captured_step(self) if c.cuda_graph else (None, "")
        self._valid_rows: np.ndarray | None = None  # the validation sample (max_valid_triples), drawn once
        # progress (everything below is checkpointed)
        self.step = 0
        self.epoch = 0
        self.batch_in_epoch = 0
        self.best_mrr = -math.inf
        self.best_step = 0
        self.best_valid: dict | None = None
        self.best_state: dict | None = None
        self.stalled = 0
        self.lr_stalled = 0
        self.last_eval_step = -1
        self.history: list[dict] = []
        self.train_seconds = 0.0
        self.examples_seen = 0
        self.loss_sum = 0.0
        self.loss_count = 0
        self._epoch_examples: torch.Tensor | None = None
        self._perm_epoch = -1

    # ------------------------------------------------------------------ training
    def _epoch_batches(self) -> torch.Tensor:
        """This epoch's examples in their seeded order, on the device (batches are slices of it)."""
        if self._perm_epoch != self.epoch:
            g = torch.Generator().manual_seed(self.cfg.seed * 1_000_003 + self.epoch)
            perm = torch.randperm(self.examples.shape[0], generator=g)
            if self.device.type == "cuda":
                perm = perm.pin_memory().to(self.device, non_blocking=True)
            self._epoch_examples = self.examples.index_select(0, perm)
            self._perm_epoch = self.epoch
        return self._epoch_examples

    def _autocast(self):
        if self._amp:
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _train_step(self, batch: torch.Tensor) -> torch.Tensor:
        if self.graph_step is not None and batch.shape[0] == self.cfg.batch_size:
            return self.graph_step(batch)
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=True)
        if self.row_step:
            loss, row_updates = self._row_step(batch)
        else:
            with self._autocast():
                loss = self.sampler.loss(self.model, batch, self.loss_fn, self.generator)
                reg = self.regularizer(self.model, *self.sampler.regularized_triples(batch))
                if reg is not None:
                    loss = loss + reg
            loss.backward()
            row_updates = ()
        for opt in self.optimizers:
            if not row_updates or any(p.grad is not None for g in opt.param_groups for p in g["params"]):
                opt.step()  # (the row step leaves the tables' .grad unset: often nothing is left to do)
        for opt, weight, ids, grads, rows in row_updates:
            opt.step_rows(weight, ids, grads, rows, distinct=self.dedup_rows)
        return loss.detach()

    def _row_step(self, batch: torch.Tensor) -> tuple[torch.Tensor, list]:
        """Loss and gradients of a sampled-negative batch computed on its gathered embedding rows.

        The rows of ``sampler.row_ids`` are gathered ONCE per table into a leaf tensor (distinct
        rows with ``dedup_rows``, else one row per id); the loss, the regularizer (same rows, no
        second lookup) and their gradient are computed on them. A row-sparse optimizer then updates
        exactly those rows from the leaf's gradient and the already gathered parameter rows
        (returned as ``(optimizer, table, ids, grads, rows)``); any other optimizer gets a sparse
        COO gradient. The values are those of the autograd step through ``nn.Embedding(sparse=True)``.
        """
        model = self.model
        neg = self.sampler.draw(self.generator)
        tables = (model.entity.weight, model.relation.weight)
        leaves, rows, inverse = [], [], []
        for weight, ids in zip(tables, self.sampler.row_ids(model, batch, neg)):
            if self.dedup_rows:
                ids, inv = torch.unique(ids, sorted=True, return_inverse=True)
            else:
                inv = None
            leaves.append(weight.detach().index_select(0, ids).requires_grad_())
            rows.append(ids)
            inverse.append(inv)
        if self.cfg.compile and self.device.type == "cuda":
            torch.compiler.cudagraph_mark_step_begin()
        if self.cfg.compile and self.dedup_rows:  # the number of distinct rows changes every step
            for leaf in leaves:
                torch._dynamo.maybe_mark_dynamic(leaf, 0)
        with self._autocast():
            loss = self._objective(batch, leaves[0], inverse[0], leaves[1], inverse[1])
        loss.backward()
        updates = []
        for weight, ids, leaf in zip(tables, rows, leaves):
            opt = self._row_optimizer(weight)
            if opt is not None:
                updates.append((opt, weight, ids, leaf.grad, leaf.detach()))
            else:
                weight.grad = torch.sparse_coo_tensor(ids.unsqueeze(0), leaf.grad, weight.shape,
                                                      is_coalesced=self.dedup_rows, check_invariants=False)
        return (loss.detach().clone() if self.cfg.compile else loss.detach()), updates

    def _row_optimizer(self, weight: torch.Tensor):
        """The row-sparse optimizer updating ``weight`` (None: give it a sparse COO gradient)."""
        key = tuple(map(id, self.optimizers))
        if getattr(self, "_row_opt_key", None) != key:
            self._row_opt = {id(w): next((o for o in self.optimizers if isinstance(o, _RowSparse) and o.owns(w)), None)
                             for w in (self.model.entity.weight, self.model.relation.weight)}
            self._row_opt_key = key
        return self._row_opt.get(id(weight))

    def _rows_objective(self, batch, ent, ent_inv, rel, rel_inv) -> torch.Tensor:
        """Loss plus regularizer of a batch from its gathered rows (``inv``: expand distinct rows)."""
        if ent_inv is not None:
            ent = ent.index_select(0, ent_inv)
            rel = rel.index_select(0, rel_inv)
        eh, er, et, er_inv, cand = self.sampler.split_rows(self.model, batch, ent, rel)
        loss = self.sampler.rows_loss(self.model, batch, eh, er, et, er_inv, cand, self.loss_fn)
        reg = self.regularizer.rows(self.model, eh, er, et)
        return loss if reg is None else loss + reg

    def _compiled_objective(self):
        """``_rows_objective`` through ``torch.compile`` (CUDA: with CUDA graphs, "reduce-overhead")."""
        mode = "reduce-overhead" if self.device.type == "cuda" else None
        return torch.compile(self._rows_objective, mode=mode, dynamic=None)

    def _budget_left(self) -> tuple[bool, str]:
        c = self.cfg
        if c.max_steps is not None and self.step >= c.max_steps:
            return False, "max_steps"
        if c.max_epochs is not None and self.epoch >= c.max_epochs:
            return False, "max_epochs"
        return True, ""

    def fit(self) -> TrainResult:
        """Train until the budget, early stopping, a callback stop or divergence; see module docstring."""
        c = self.cfg
        has_valid = len(self.kg.valid) > 0
        stop_reason = ""
        status = "ok"
        message = ""
        if has_valid and self.stalled >= c.patience:
            stop_reason = "patience"
        self.model.train()
        monitor = LossMonitor(self.device)
        while not stop_reason:
            ok, reason = self._budget_left()
            if not ok:
                stop_reason = reason
                break
            if self.should_stop is not None and self.should_stop():
                stop_reason = "callback"
                break
            t0 = time.perf_counter()
            lo = self.batch_in_epoch * c.batch_size
            batch = self._epoch_batches()[lo:lo + c.batch_size]
            loss = self._train_step(batch)
            self.examples_seen += batch.shape[0]
            self.step += 1
            self.batch_in_epoch += 1
            if self.batch_in_epoch >= self.steps_per_epoch:
                self.epoch += 1
                self.batch_in_epoch = 0
            validate = self.step % c.valid_every == 0
            diverged = monitor.add(loss, self.step)
            if validate and not diverged:
                diverged = monitor.drain()
            self._absorb(monitor)
            self.train_seconds += time.perf_counter() - t0
            if diverged:
                return self._diverged(diverged)
            if validate and has_valid:
                verdict = self._validate()
                if verdict == "diverged":
                    return self._diverged(f"validation MRR is NaN at step {self.step}")
                if verdict:
                    stop_reason = verdict
        diverged = monitor.drain()
        self._absorb(monitor)
        if diverged:
            return self._diverged(diverged)
        if stop_reason == "callback":
            status = "stopped"
        elif has_valid and self.last_eval_step != self.step:
            verdict = self._validate(final=True)
            if verdict == "diverged":
                return self._diverged(f"validation MRR is NaN at step {self.step}")
        test = None
        if status == "ok":
            test = self.evaluate_test()
        return TrainResult(status=status, valid=self.best_valid, test=test, best_step=self.best_step,
                           steps=self.step, epochs=self.epochs, train_seconds=self.train_seconds,
                           triples_per_second=self.triples_per_second, stop_reason=stop_reason,
                           message=message, history=list(self.history))

    def _absorb(self, monitor: "LossMonitor") -> None:
        """Move the monitor's read losses into the running mean reported at validation."""
        self.loss_sum += monitor.total
        self.loss_count += monitor.count
        monitor.total, monitor.count = 0.0, 0

    def _diverged(self, message: str) -> TrainResult:
        self.history.append({"step": self.step, "status": "diverged"})
        return TrainResult(status="diverged", valid=None, test=None, best_step=self.best_step, steps=self.step,
                           epochs=self.epochs, train_seconds=self.train_seconds,
                           triples_per_second=self.triples_per_second, stop_reason="diverged",
                           message=message, history=list(self.history))

    @property
    def epochs(self) -> float:
        """Epochs done, with the fraction of the current one."""
        return self.epoch + self.batch_in_epoch / self.steps_per_epoch

    @property
    def triples_per_second(self) -> float:
        return self.examples_seen / self.train_seconds if self.train_seconds > 0 else 0.0

    @property
    def lr(self) -> float:
        return self.optimizers[0].param_groups[0]["lr"]

    # ---------------------------------------------------------------- validation
    def evaluate(self, split: str, model=None) -> dict[str, float]:
        """Metrics of ``model`` (default: current weights) on ``split`` (``valid``/``test``)."""
        from kgtuner.kge import evaluation

        model = model or self.model
        triples = getattr(self.kg, split)
        rows = self.valid_rows() if split == "valid" else None
        if rows is not None:
            triples = triples[rows]
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                cands = getattr(self.kg, "candidates", None)
                if cands and split in cands:
                    head, tail = cands[split]["head_neg"], cands[split]["tail_neg"]
                    if rows is not None:
                        head, tail = head[rows], tail[rows]
                    return evaluation.evaluate_ogb(model, triples, head, tail, self.kg.name,
                                                   batch_size=self.cfg.eval_batch_size)
                if self.filter_index is None:
                    from kgtuner.data import FilterIndex

                    self.filter_index = FilterIndex.from_graph(self.kg)
                return evaluation.evaluate_filtered(model, triples, self.filter_index,
                                                    batch_size=self.cfg.eval_batch_size)
        finally:
            model.train(was_training)

    def valid_rows(self) -> np.ndarray | None:
        """Rows of ``kg.valid`` that validation ranks: None for all of them, else the fixed sample of
        ``max_valid_triples`` (seeded by :data:`VALID_SAMPLE_SEED`, so every run on this graph ranks
        the same triples and their MRRs compare)."""
        cap, n = self.cfg.max_valid_triples, len(self.kg.valid)
        if cap is None or n <= cap:
            return None
        if self._valid_rows is None:
            rng = np.random.default_rng(VALID_SAMPLE_SEED)
            self._valid_rows = np.sort(rng.choice(n, size=cap, replace=False))
        return self._valid_rows

    def _validate(self, final: bool = False) -> str:
        """Validate, update best state / patience / lr, call back; return a stop reason or ''."""
        metrics = {k: float(v) for k, v in self.evaluate("valid").items()}
        self.last_eval_step = self.step
        mrr = metrics["mrr"]
        if math.isnan(mrr):
            return "diverged"
        improved = mrr > self.best_mrr
        if improved:
            self.best_mrr, self.best_step, self.best_valid = mrr, self.step, metrics
            self.best_state = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
            self.stalled = self.lr_stalled = 0
        else:
            self.stalled += 1
            self.lr_stalled += 1
            if self.cfg.lr_patience and self.lr_stalled >= self.cfg.lr_patience:
                scale_lr(self.optimizers, self.cfg.lr_factor)
                self.lr_stalled = 0
        mean_loss = self.loss_sum / self.loss_count if self.loss_count else float("nan")
        self.loss_sum, self.loss_count = 0.0, 0
        report = {"step": self.step, "epoch": self.epochs, "loss": mean_loss, "lr": self.lr,
                  **{f"valid_{k}": v for k, v in metrics.items()},
                  "best_valid_mrr": self.best_mrr, "best_step": self.best_step,
                  "train_seconds": self.train_seconds, "triples_per_second": self.triples_per_second}
        self.history.append(report)
        reason = ""
        if self.stalled >= self.cfg.patience:
            reason = "patience"
        if self.callback is not None and self.callback(dict(report)) and not final:
            reason = "callback"
        return reason

    def best_model(self):
        """The model with its best-validation weights loaded (the current model if never validated)."""
        if self.best_state is not None:
            self.model.load_state_dict(self.best_state)
        return self.model

    def evaluate_test(self) -> dict[str, float] | None:
        """Test metrics of the best-validation weights (None when the graph has no test triples)."""
        model = self.best_model()
        if len(self.kg.test) == 0:
            return None
        return {k: float(v) for k, v in self.evaluate("test", model).items()}

    # -------------------------------------------------------------- checkpointing
    _PROGRESS = ("step", "epoch", "batch_in_epoch", "best_mrr", "best_step", "best_valid", "stalled",
                 "lr_stalled", "last_eval_step", "history", "train_seconds", "examples_seen", "loss_sum",
                 "loss_count")

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue this run identically (weights, optimizers, RNGs, progress)."""
        return {
            "config": self.cfg.to_dict(),
            "model": {k: v.detach().clone() for k, v in self.model.state_dict().items()},
            "optimizers": [copy.deepcopy(opt.state_dict()) for opt in self.optimizers],
            "generator": self.generator.get_state(),
            "torch_rng": torch.get_rng_state(),
            "best_state": self.best_state,
            "progress": {k: getattr(self, k) for k in self._PROGRESS},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a ``state_dict`` taken from a trainer with the same configuration and graph."""
        saved = TrainConfig.from_dict(state["config"])
        for key in ("model", "dim", "negatives", "inverse", "optimizer", "model_options"):
            if getattr(saved, key) != getattr(self.cfg, key):
                raise ConfigError(f"checkpoint was made with {key}={getattr(saved, key)!r}, "
                                  f"this trainer has {key}={getattr(self.cfg, key)!r}")
        self.model.load_state_dict(state["model"])
        for opt, sd in zip(self.optimizers, state["optimizers"]):
            opt.load_state_dict(sd)
        self.generator.set_state(state["generator"])
        torch.set_rng_state(state["torch_rng"])
        self.best_state = state["best_state"]
        if self.graph_step is not None:  # the optimizer's state tensors were replaced
            self.graph_step.reset()
        for k, v in state["progress"].items():
            setattr(self, k, v)
        self._perm_epoch = -1


def export_arrays(model, kg) -> dict[str, np.ndarray]:
    """``embeddings.npz`` content: the model's arrays plus ``entity_names`` / ``relation_names``."""
    out = dict(model.export_embeddings())
    out["entity_names"] = np.asarray(kg.entities, dtype=str)
    out["relation_names"] = np.asarray(kg.relations, dtype=str)
    return out
