"""Optimizer and initializer factories keyed by config names.

With sampled negatives the embedding tables produce *sparse* gradients (only the rows of a
batch), and the optimizers update only those rows:

* ``Adam``: :class:`RowSparseAdam` on the embedding tables plus ``torch.optim.Adam`` on dense
  parameters (TuckER core, ConvE layers). ``RowSparseAdam`` computes exactly what
  ``torch.optim.SparseAdam`` computes ("lazy" Adam: the gradients of a row's duplicates are
  summed, only the touched rows' moments are updated, moments of rows not in the batch are NOT
  decayed, and the bias correction uses the table's global step count), and keeps its state
  layout (``step``, ``exp_avg``, ``exp_avg_sq``), but without SparseAdam's ``coalesce`` and
  ``sparse_mask`` round trips: one sort of the touched row ids, then gathers and scatters of
  those rows. With 1VsAll/kVsAll every row is touched and plain Adam is used throughout.
* ``Adagrad``: :class:`RowSparseAdagrad`, ``torch.optim.Adagrad``'s update and state with the
  same row-wise treatment of sparse gradients (dense gradients take torch's own code).
* ``SGD``: ``torch.optim.SGD`` (a sparse gradient is added to its rows directly).

Two ways to merge the duplicate rows of a step's gradient (``dedup``):

* ``True`` (the default on CPU): ``torch.unique``, so each touched row is updated once;
* ``False`` (the default on CUDA): a sort and a segment sum, after which every duplicate of a row
  carries the row's summed gradient and computes the same new values, written with
  ``index_copy_`` (equal values, so the write order does not matter). Nothing in it depends on the
  number of distinct rows, so it never waits for the device (``torch.unique`` must copy that
  number to the host).

Initializers (appendix A.4, reference code): ``uniform`` U(-0.01, 0.01), ``normal`` N(0, 0.01²),
``xavier_uniform``, ``xavier_normal``; they apply to the embedding tables (RotatE phases are
always uniform(-pi, pi), dense layers keep their own initialisation).
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn

#: Initializer functions keyed by config name (in-place on a tensor).
INITIALIZERS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "uniform": lambda w: nn.init.uniform_(w, -0.01, 0.01),
    "normal": lambda w: nn.init.normal_(w, 0.0, 0.01),
    "xavier_uniform": nn.init.xavier_uniform_,
    "xavier_normal": nn.init.xavier_normal_,
}

OPTIMIZERS = ("Adam", "Adagrad", "SGD")


def initialize(model, name: str) -> None:
    """Initialise ``model``'s embeddings with initializer ``name`` and reset its dense parameters."""
    model.init_embeddings(INITIALIZERS[name])
    model.reset_dense_parameters()


# ------------------------------------------------------------------------------- row-sparse updates
def merge_rows(idx: torch.Tensor, vals: torch.Tensor, dedup: bool):
    """Sum the values of duplicate row ids: ``(rows [n], sums [n, ...], distinct, pick)``.

    ``dedup=True``: each distinct row once (``torch.unique``; ``distinct`` True). ``dedup=False``: the
    ids sorted with their duplicates kept, each duplicate carrying its row's total (``distinct``
    False; nothing depends on the number of distinct rows, so no host sync). ``pick[i]`` is an input
    position holding id ``rows[i]`` (to pick per-entry data, e.g. the gathered parameter rows).
    """
    if dedup:
        rows, inverse = torch.unique(idx, sorted=True, return_inverse=True)
        sums = vals.new_zeros((rows.shape[0], *vals.shape[1:])).index_add_(0, inverse, vals)
        pick = torch.empty_like(rows).scatter_(0, inverse, torch.arange(idx.shape[0], device=idx.device))
        return rows, sums, True, pick
    rows, order = torch.sort(idx)
    starts = torch.ones_like(rows, dtype=torch.bool)
    starts[1:] = rows[1:] != rows[:-1]
    segment = torch.cumsum(starts, 0) - 1
    sums = torch.zeros_like(vals).index_add_(0, segment, vals.index_select(0, order))
    return rows, sums.index_select(0, segment), False, order


_ONES: dict[torch.device, torch.Tensor] = {}


def _one(device: torch.device) -> torch.Tensor:
    """A cached ``1.0`` on ``device``: the step count handed to torch's fused kernels."""
    if device not in _ONES:
        _ONES[device] = torch.ones((), device=device)
    return _ONES[device]


def _fusable(kernel: str, devices: tuple[str, ...], *tensors: torch.Tensor) -> bool:
    """torch's fused ``kernel`` can update these tensors (floating, one dtype, on one of ``devices``)."""
    t = tensors[0]
    return (hasattr(torch, kernel) and t.device.type in devices and t.is_floating_point()
            and all(x.dtype == t.dtype and x.device == t.device for x in tensors))


def write_rows(target: torch.Tensor, rows: torch.Tensor, new: torch.Tensor) -> None:
    """``target[rows] = new`` (rows may repeat with equal values).

    ``index_copy_`` copies element by element; viewed as the widest type that tiles a row (16-byte
    complex128, else 8-byte int64) it moves the same bytes with 4x (2x) fewer elements: about 40%
    faster for fp32 rows on CPU. It is a plain memory copy, so the values are bit for bit the same.
    """
    row_bytes = target.shape[-1] * target.element_size() if target.dim() == 2 else 0
    if target.is_contiguous() and new.is_contiguous() and new.dtype == target.dtype:
        for wide in (torch.complex128, torch.int64):
            if row_bytes and row_bytes % wide.itemsize == 0 and target.element_size() < wide.itemsize:
                target.view(wide).index_copy_(0, rows, new.view(wide))
                return
    target.index_copy_(0, rows, new)


class _RowSparse:
    """Row-wise application of sparse gradients, shared by :class:`RowSparseAdam` and :class:`RowSparseAdagrad`.

    ``step()`` applies a sparse COO gradient through ``step_rows``; a caller that already holds a
    step's touched rows (the trainer's row step) calls ``step_rows`` itself with the gathered
    parameter rows, sparing a gather (leave ``p.grad`` None for that parameter then).
    """

    dedup: bool | None
    fused: bool

    def _group(self, p: torch.Tensor) -> dict:
        for group in self.param_groups:
            if any(q is p for q in group["params"]):
                return group
        raise ValueError("parameter is not handled by this optimizer")

    def owns(self, p: torch.Tensor) -> bool:
        """``p`` is one of this optimizer's parameters."""
        return any(q is p for group in self.param_groups for q in group["params"])

    @torch.no_grad()
    def step_rows(self, p: torch.Tensor, idx: torch.Tensor, grads: torch.Tensor, p_rows: torch.Tensor | None = None,
                  distinct: bool = False) -> None:
        """Apply the gradient rows ``grads [n, ...]`` of row ids ``idx [n]`` (duplicates allowed unless
        ``distinct``) to parameter ``p``; ``p_rows`` (optional, may be overwritten): ``p[idx]``."""
        group = self._group(p)
        if idx.shape[0] == 0:
            self._count_step(p, group)
            return
        if not distinct:
            dedup = self.dedup if self.dedup is not None else p.device.type == "cpu"
            idx, grads, distinct, pick = merge_rows(idx, grads, dedup)
            if p_rows is not None:
                p_rows = p_rows.index_select(0, pick)
        if group.get("maximize", False):
            grads = -grads
        if p_rows is None:
            p_rows = p.index_select(0, idx)
        self._update_rows(p, group, idx, grads, p_rows, distinct)

    def _sparse_step(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """``step_rows`` for every sparse gradient; returns ``(param, grad)`` of those handled."""
        done = []
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None and p.grad.is_sparse:
                    g = p.grad
                    self.step_rows(p, g._indices()[0], g._values(), distinct=g.is_coalesced())
                    done.append((p, g))
        return done


class RowSparseAdam(_RowSparse, torch.optim.SparseAdam):
    """``torch.optim.SparseAdam``'s update on the touched rows only, without coalesce/sparse_mask.

    Same arguments, state and semantics as ``SparseAdam`` (lazy Adam, see the module docstring).
    ``fused`` (default) updates the gathered rows with torch's fused Adam kernel in one pass (the
    same formula; rounding may differ in the last bit); ``fused=False`` repeats SparseAdam's
    arithmetic operation for operation (bitwise SparseAdam's with distinct rows). ``dedup`` chooses
    how duplicate rows are merged (None: ``True`` on CPU, ``False`` elsewhere). A parameter with a
    dense gradient is updated on all its rows by the same formula.
    """

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, maximize: bool = False,
                 dedup: bool | None = None, fused: bool = True):
        super().__init__(params, lr=lr, betas=betas, eps=eps, maximize=maximize)
        self.dedup = dedup
        self.fused = fused

    def _state(self, p: torch.Tensor) -> dict:
        state = self.state[p]
        if len(state) == 0:
            state["step"] = 0
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return state

    def _count_step(self, p, group) -> None:
        self._state(p)["step"] += 1

    def _step_size(self, state: dict, group: dict) -> float:
        beta1, beta2 = group["betas"]
        state["step"] += 1
        step = state["step"]
        return float(group["lr"]) * math.sqrt(1 - beta2 ** step) / (1 - beta1 ** step)

    def _update_rows(self, p, group, rows, g, p_rows, distinct) -> None:
        state = self._state(p)
        step_size = self._step_size(state, group)
        beta1, beta2 = group["betas"]
        eps = group["eps"]
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m_rows, v_rows = m.index_select(0, rows), v.index_select(0, rows)
        if self.fused and _fusable("_fused_adam_", ("cpu", "cuda"), p, g, m):
            # torch's fused Adam kernel on the gathered rows, with the step count fixed at 1 and lr/eps
            # rescaled so that it computes SparseAdam's update (one pass instead of a dozen)
            c1, c2 = 1 - beta1, math.sqrt(1 - beta2)
            torch._fused_adam_([p_rows], [g.contiguous()], [m_rows], [v_rows], [], [_one(p.device)],
                               lr=step_size * c1 / c2, beta1=beta1, beta2=beta2, weight_decay=0.0,
                               eps=eps / c2, amsgrad=False, maximize=False)
            for target, new in ((m, m_rows), (v, v_rows), (p, p_rows)):
                write_rows(target, rows, new)
            return
        # SparseAdam's arithmetic operation for operation: old += (1 - b) * (new - old)
        m_upd = g.sub(m_rows).mul_(1 - beta1)
        v_upd = g.pow(2).sub_(v_rows).mul_(1 - beta2)
        if distinct:
            m.index_add_(0, rows, m_upd)
            v.index_add_(0, rows, v_upd)
        m_new, v_new = m_upd.add_(m_rows), v_upd.add_(v_rows)
        if not distinct:
            write_rows(m, rows, m_new)
            write_rows(v, rows, v_new)
        delta = m_new.div_(v_new.sqrt_().add_(eps)).mul_(-step_size)
        if distinct:
            p.index_add_(0, rows, delta)
        else:
            write_rows(p, rows, p_rows.add_(delta))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._sparse_step()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None or p.grad.is_sparse:
                    continue
                state = self._state(p)
                step_size = self._step_size(state, group)
                g = -p.grad if group.get("maximize", False) else p.grad
                m, v = state["exp_avg"], state["exp_avg_sq"]
                m.add_(g.sub(m).mul_(1 - beta1))
                v.add_(g.pow(2).sub_(v).mul_(1 - beta2))
                p.add_(m.div(v.sqrt().add_(group["eps"])).mul_(-step_size))
        return loss


class RowSparseAdagrad(_RowSparse, torch.optim.Adagrad):
    """``torch.optim.Adagrad`` with sparse gradients applied row-wise (no coalesce/sparse_mask).

    Same arguments, state and formula as ``Adagrad``; dense gradients take torch's own step.
    ``fused`` and ``dedup`` as for :class:`RowSparseAdam` (torch's fused Adagrad kernel is CPU-only).
    """

    def __init__(self, params, lr: float = 1e-2, lr_decay: float = 0, weight_decay: float = 0,
                 initial_accumulator_value: float = 0, eps: float = 1e-10, maximize: bool = False,
                 dedup: bool | None = None, fused: bool = True):
        super().__init__(params, lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                         initial_accumulator_value=initial_accumulator_value, eps=eps, maximize=maximize)
        self.dedup = dedup
        self.fused = fused

    def _count_step(self, p, group) -> None:
        self.state[p]["step"] += 1

    def _update_rows(self, p, group, rows, g, p_rows, distinct) -> None:
        if group["weight_decay"] != 0:
            raise RuntimeError("weight_decay option is not compatible with sparse gradients")
        state = self.state[p]
        state["step"] += 1
        clr = float(group["lr"]) / (1 + (float(state["step"]) - 1) * group["lr_decay"])
        total = state["sum"]
        old = total.index_select(0, rows)
        if self.fused and _fusable("_fused_adagrad_", ("cpu",), p, g, total):
            # torch's fused Adagrad kernel on the gathered rows (step count 1, lr = this step's lr)
            torch._fused_adagrad_([p_rows], [g.contiguous()], [old], [_one(p.device)], lr=clr, lr_decay=0.0,
                                  weight_decay=0.0, eps=group["eps"], maximize=False)
            write_rows(total, rows, old)
            write_rows(p, rows, p_rows)
            return
        sq = g.pow(2)
        if distinct:
            total.index_add_(0, rows, sq)
            std = sq.add_(old).sqrt_().add_(group["eps"])
            p.index_add_(0, rows, g.div(std), alpha=-clr)
        else:
            new = sq.add_(old)
            write_rows(total, rows, new)
            std = new.sqrt_().add_(group["eps"])
            write_rows(p, rows, p_rows.add_(g.div(std), alpha=-clr))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        held = self._sparse_step()
        # dense gradients: torch's own step (the sparse ones are hidden from it meanwhile)
        for p, _ in held:
            p.grad = None
        try:
            if any(p.grad is not None for group in self.param_groups for p in group["params"]):
                super().step()
        finally:
            for p, g in held:
                p.grad = g
        return loss


def make_optimizers(model, name: str, lr: float) -> list[torch.optim.Optimizer]:
    """Optimizers for ``model`` (one or two: sparse embedding tables and dense parameters)."""
    emb = model.embedding_parameters()
    dense = model.dense_parameters()
    if name == "Adam":
        if not model.sparse:
            return [torch.optim.Adam(emb + dense, lr=lr)]
        opts: list[torch.optim.Optimizer] = [RowSparseAdam(emb, lr=lr)]
        if dense:
            opts.append(torch.optim.Adam(dense, lr=lr))
        return opts
    if name == "Adagrad":
        return [RowSparseAdagrad(emb + dense, lr=lr)]
    if name == "SGD":
        return [torch.optim.SGD(emb + dense, lr=lr)]
    raise ValueError(f"unknown optimizer {name!r}; choose one of {OPTIMIZERS}")


def scale_lr(optimizers: list[torch.optim.Optimizer], factor: float) -> float:
    """Multiply every learning rate by ``factor``; return the new (first) learning rate."""
    for opt in optimizers:
        for group in opt.param_groups:
            group["lr"] *= factor
    return optimizers[0].param_groups[0]["lr"]
