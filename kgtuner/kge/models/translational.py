"""Translational-distance models: TransE (L1) and RotatE.

Scores are ``gamma - ||q(h, r) - t||`` for every loss, as in the reference code: the margin
``gamma`` (hyper-parameter) lets a true triple score above 0, so sigmoid-based losses can reach
probabilities above 1/2 (with ``-distance`` alone every score is <= 0). Ranking and MR are
unaffected by the shift. Scoring many candidates costs ``O(B * C * dim)`` without a matrix
product, chunked over candidates when no gradient is needed. With gradients, scoring shared candidates
(1VsAll, kVsAll, shared negatives) is done at once while its ``[B, C, dim]`` intermediates stay under
``ONE_SHOT_ELEMENTS``, and above it by ``ChunkedL1`` / ``ChunkedComplexL1``, which score and differentiate a
chunk of candidates at a time (TransE and RotatE at dim 2000, batch 1024, 1VsAll on a 94k-entity graph asked
for 358-715 GiB at once: docs/gpu/run3).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from kgtuner.kge.models.base import KGEModel
from kgtuner.kge.models.bilinear import _require_multiple

#: Elements of the ``[B, chunk, dim]`` intermediate allowed while scoring without gradients.
_CHUNK_ELEMENTS = 1 << 25
#: Elements of the ``[B, C, dim]`` intermediates that scoring shared candidates with gradients may reach at once
#: (8 GiB of float32); above it, the chunked functions below score ``CHUNK_ELEMENTS`` at a time.
ONE_SHOT_ELEMENTS = 1 << 31
#: Elements of one chunk's ``[B, chunk, dim]`` intermediates in ``ChunkedL1`` and ``ChunkedComplexL1``.
CHUNK_ELEMENTS = 1 << 28


def _spans(n: int, step: int):
    return [(s, min(n, s + step)) for s in range(0, n, step)]


def _chunked_forward(ctx, q, cand, step, distance):
    """``distance(q, cand[s:e]) -> [B, e - s]`` over ``step`` candidates at a time, written into one output (no chunk
    results kept between the chunks' temporaries: on a CPU they kept glibc's heap from reuse)."""
    ctx.save_for_backward(q, cand)
    ctx.step = step
    out = q.new_empty(q.shape[0], cand.shape[0])
    for s, e in _spans(cand.shape[0], step):
        distance(q, cand[s:e], out[:, s:e])
    return out


def _chunked_backward(ctx, g, grads):
    """Gradients of both inputs, accumulated chunk by chunk: ``grads(q, cand[s:e], g[:, s:e])`` gives the chunk's
    ``(d/dq [B, d], d/dcand [e - s, d])`` (each None where that input needs none)."""
    q, cand = ctx.saved_tensors
    need_q, need_c = ctx.needs_input_grad[:2]
    gq = torch.zeros_like(q) if need_q else None
    gc = torch.empty_like(cand) if need_c else None
    for s, e in _spans(cand.shape[0], ctx.step):
        dq, dc = grads(q, cand[s:e], g[:, s:e], need_q, need_c)
        if need_q:
            gq.add_(dq)
        if need_c:
            gc[s:e] = dc
    return gq, gc, None


def _l1_into(q, c, out):
    out.copy_(torch.cdist(q, c, p=1.0))


def _l1_grads(q, c, g, need_q, need_c):
    sign = (q.unsqueeze(1) - c.unsqueeze(0)).sign_()  # [B, chunk, d]
    return (torch.bmm(g.unsqueeze(1), sign).squeeze(1) if need_q else None,
            torch.einsum("bn,bnd->nd", g, sign).neg_() if need_c else None)


def _complex_l1_into(q, c, out):
    torch.sum(_moduli(q.unsqueeze(1), c.unsqueeze(0))[2], dim=-1, out=out)


def _complex_l1_grads(q, c, g, need_q, need_c):
    dr, di, m = _moduli(q.unsqueeze(1), c.unsqueeze(0))  # [B, chunk, d/2] each
    w = g.unsqueeze(-1).div(m)
    pr, pi = dr.mul_(w), di.mul_(w)
    del m, w
    return (torch.cat([pr.sum(1), pi.sum(1)], dim=-1) if need_q else None,
            torch.cat([pr.sum(0), pi.sum(0)], dim=-1).neg_() if need_c else None)


class ChunkedL1(torch.autograd.Function):
    """``||q_b - c_n||_1`` for every query and candidate, ``q [B, d]`` x ``cand [C, d]`` -> ``[B, C]``, ``step``
    candidates at a time in both passes. ``torch.cdist``'s backward allocates the whole ``[B, C, d]`` at once;
    here the gradient ``d/dq = sum_n g sign(q - c_n)`` (and its negative summed over queries for ``c``) is
    accumulated chunk by chunk, so memory is one ``[B, step, d]`` sign tensor (and its temporary)."""

    @staticmethod
    def forward(ctx, q, cand, step):
        return _chunked_forward(ctx, q, cand, step, _l1_into)

    @staticmethod
    def backward(ctx, g):
        return _chunked_backward(ctx, g, _l1_grads)


class ChunkedComplexL1(torch.autograd.Function):
    """RotatE's distance ``sum_k |q_k - c_k|`` (complex moduli) for every query and shared candidate,
    ``q [B, d]`` x ``cand [C, d]`` -> ``[B, C]``, ``step`` candidates at a time. The forward keeps no
    intermediates; the backward recomputes each chunk's ``(q - c)`` and moduli (``ComplexL1`` keeps three
    ``[B, C, d/2]`` tensors for all candidates at once)."""

    @staticmethod
    def forward(ctx, q, cand, step):
        return _chunked_forward(ctx, q, cand, step, _complex_l1_into)

    @staticmethod
    def backward(ctx, g):
        return _chunked_backward(ctx, g, _complex_l1_grads)


@torch.compiler.disable  # a graph break under ``compile: true``: the chunk loop is not unrolled into the graph
def _chunked(fn, q, cand, step):
    return fn.apply(q, cand, step)


class _Distance(KGEModel):
    BILINEAR = False
    #: ``{device type: (one-shot limit, chunk)}`` in elements of ``[B, C, d]`` for scoring shared candidates with
    #: gradients (``"default"``: other devices; a device with neither always scores at once). Per instance too, so
    #: a test can force the chunked path.
    chunk_limits: dict[str, tuple[int, int]] = {"default": (ONE_SHOT_ELEMENTS, CHUNK_ELEMENTS)}

    def _shared(self, one_shot, chunked, q, cand):
        """Distances ``[B, C]`` of ``q [B, d]`` to shared candidates ``cand [C, d]`` with gradients: ``one_shot``
        while its ``[B, C, d]`` intermediates fit the device's one-shot limit, else the chunked function."""
        limits = self.chunk_limits.get(q.device.type, self.chunk_limits.get("default"))
        if limits is None or q.shape[0] * cand.shape[0] * q.shape[1] <= limits[0]:
            return one_shot(q, cand)
        step = max(1, limits[1] // max(1, q.shape[0] * q.shape[1]))
        return _chunked(chunked, q, cand, step)

    @staticmethod
    def _needs_grad(*tensors) -> bool:
        return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)

    def _dist(self, diff_fn, q, cand):
        """Apply ``diff_fn(q [B,1,d], cand [B|1, C, d]) -> [B, C]`` (a distance) chunked over C when
        gradients are off."""
        if cand.dim() == 2:
            cand = cand.unsqueeze(0)
        q3 = q.unsqueeze(1)
        n_c = cand.shape[1]
        if torch.is_grad_enabled() and (q.requires_grad or cand.requires_grad):
            return diff_fn(q3, cand)
        step = max(1, _CHUNK_ELEMENTS // max(1, q.shape[0] * q.shape[1]))
        return torch.cat([diff_fn(q3, cand[:, s:s + step]) for s in range(0, n_c, step)], dim=1)

    def dura(self, h, r, t):
        """DURA for distance models: ``||c(h, r) - t||_2^2`` (appendix A.3)."""
        return (self.tail_query(h, r) - t).pow(2).sum(-1)

    def export_embeddings(self):
        out = super().export_embeddings()
        out["gamma"] = np.asarray(self.gamma, dtype=np.float32)
        return out


class TransE(_Distance):
    """TransE: ``f = gamma - ||h + r - t||_1``."""

    NAME = "transe"
    #: CUDA's ``torch.cdist`` backward allocates ``[B, C, d]`` at once; the CPU's does not, and is faster there
    #: than ``ChunkedL1`` (``python scripts/perf/bench_distance_chunks.py``)
    chunk_limits = {"cuda": (ONE_SHOT_ELEMENTS, CHUNK_ELEMENTS)}

    def tail_query(self, h, r):
        return h + r

    def head_query(self, r, t):
        return t - r

    def compare(self, q, cand):
        if cand.dim() == 2:
            if self._needs_grad(q, cand):
                return self.gamma - self._shared(_cdist_l1, ChunkedL1, q, cand)
            return self.gamma - torch.cdist(q, cand, p=1.0)  # cdist's forward keeps no [B, C, d] intermediate
        return self.gamma - torch.cdist(q.unsqueeze(1), cand, p=1.0).squeeze(1)

    def compare_pairs(self, q, e):
        return self.gamma - (q - e).abs().sum(-1)


def _moduli(q3, cand):
    """``(qr - cr, qi - ci, sqrt((qr - cr)^2 + (qi - ci)^2 + 1e-12))``, broadcast over the leading dims."""
    qr, qi = q3.chunk(2, dim=-1)
    cr, ci = cand.chunk(2, dim=-1)
    dr, di = qr - cr, qi - ci
    return dr, di, torch.addcmul(dr * dr, di, di).add_(1e-12).sqrt_()


class ComplexL1(torch.autograd.Function):
    """``sum_k |q_k - c_k|`` with its gradient written by hand: ``d/dq = g (q - c) / |q - c|`` per coordinate,
    summed back to each input's (broadcast) shape. One autograd node and about half the passes over the
    ``[B, C, dim/2]`` intermediates of the plain formula (RotatE's scoring of shared negatives is bound by them)."""

    @staticmethod
    def forward(ctx, q3, cand):
        dr, di, m = _moduli(q3, cand)
        ctx.save_for_backward(dr, di, m)
        ctx.shapes = (q3.shape, cand.shape)
        return m.sum(-1)

    @staticmethod
    def backward(ctx, g):
        dr, di, m = ctx.saved_tensors
        w = g.unsqueeze(-1) / m
        pr, pi = dr * w, di * w

        def reduced(shape):  # [re | im] of the gradient, each half summed to the input's broadcast shape
            half = (*shape[:-1], shape[-1] // 2)
            return torch.cat([pr.sum_to_size(half), pi.sum_to_size(half)], dim=-1)

        q_shape, c_shape = ctx.shapes
        need_q, need_c = ctx.needs_input_grad
        return reduced(q_shape) if need_q else None, reduced(c_shape).neg_() if need_c else None


def _cdist_l1(q, cand):
    return torch.cdist(q, cand, p=1.0)


def _complex_l1_shared(q, cand):
    return complex_l1(q.unsqueeze(1), cand.unsqueeze(0))


def complex_l1(q3, cand):
    """Sum over coordinates of the complex modulus ``|q_k - c_k|``."""
    if torch.is_grad_enabled() and (q3.requires_grad or cand.requires_grad):
        return ComplexL1.apply(q3, cand)
    return _moduli(q3, cand)[2].sum(-1)


class RotatE(_Distance):
    """RotatE: ``f = gamma - sum_k |h_k * exp(i theta_k) - t_k|`` (complex modulus per coordinate).

    Entity rows hold dim/2 real then dim/2 imaginary parts; relation rows hold dim/2 phases,
    initialised uniform(-pi, pi) whatever the entity initializer. ``export_embeddings`` writes
    relations as unit complex numbers ``[cos theta | sin theta]`` (same layout as entities).
    """

    NAME = "rotate"
    #: on a CPU the chunked distance is also faster once ``[B, C, d]`` passes about 2^24 elements: its chunks stay
    #: in cache, where the one-shot intermediates stream through memory
    #: (``python scripts/perf/bench_distance_chunks.py``)
    chunk_limits = {"cpu": (1 << 25, 1 << 22), "default": (ONE_SHOT_ELEMENTS, CHUNK_ELEMENTS)}

    @classmethod
    def check_options(cls, dim, options):
        _require_multiple(cls.NAME, dim, 2, "dim counts real numbers: dim/2 complex numbers")
        return super().check_options(dim, options)

    def relation_dim(self):
        return self.dim // 2

    def init_embeddings(self, init_fn):
        with torch.no_grad():
            init_fn(self.entity.weight)
            self.relation.weight.uniform_(-math.pi, math.pi)

    def tail_query(self, h, r):
        a, b = h.chunk(2, dim=-1)
        c, d = torch.cos(r), torch.sin(r)
        return torch.cat([a * c - b * d, a * d + b * c], dim=-1)

    def head_query(self, r, t):
        c, d = torch.cos(r), torch.sin(r)
        x, y = t.chunk(2, dim=-1)
        return torch.cat([c * x + d * y, c * y - d * x], dim=-1)

    def compare(self, q, cand):
        if cand.dim() == 2 and self._needs_grad(q, cand):
            return self.gamma - self._shared(_complex_l1_shared, ChunkedComplexL1, q, cand)
        return self.gamma - self._dist(complex_l1, q, cand)

    def compare_pairs(self, q, e):
        return self.gamma - complex_l1(q, e)

    def export_embeddings(self):
        out = super().export_embeddings()
        phase = out["relation"]
        out["relation"] = np.concatenate([np.cos(phase), np.sin(phase)], axis=1).astype(np.float32)
        return out
