"""Tensor-factorisation models: DistMult, ComplEx, RESCAL, TuckER and AutoSF.

All score a triple as ``<q(h, r), t>`` with a query vector ``q`` in entity space, so the
scores of every entity are one matrix product ``Q @ E^T``.
"""

from __future__ import annotations

import torch
from torch import nn

from kgtuner.errors import ConfigError
from kgtuner.kge.models.base import KGEModel


def _require_multiple(name: str, dim: int, k: int, why: str) -> None:
    if dim % k:
        raise ConfigError(f"dim={dim} is invalid for model {name!r}: it must be a multiple of {k} ({why}); "
                          f"e.g. dim={max(k, dim - dim % k)}")


def _complex_product(x: torch.Tensor, y: torch.Tensor, conj_x: bool) -> torch.Tensor:
    """Element-wise complex product of rows in ``[re | im]`` layout: ``x * y``, or ``conj(x) * y``.

    Written into one output (two multiplies and two fused multiply-adds; no concatenation)."""
    a, b = x.chunk(2, dim=-1)
    c, d = y.chunk(2, dim=-1)
    out = torch.empty(x.shape, dtype=torch.result_type(x, y), device=x.device)
    re, im = out.chunk(2, dim=-1)
    sign = 1.0 if conj_x else -1.0
    torch.mul(a, c, out=re).addcmul_(b, d, value=sign)  # ac - bd  |  ac + bd
    torch.mul(a, d, out=im).addcmul_(b, c, value=-sign)  # ad + bc  |  ad - bc
    return out


class _ComplexProduct(torch.autograd.Function):
    """``x * y`` (or ``conj(x) * y``) with its gradient written by hand: one autograd node instead of
    a dozen (``d(xy)/dx = conj(y) g``, ``d(xy)/dy = conj(x) g``; ``d(conj(x) y)/dx = conj(g) y``,
    ``d(conj(x) y)/dy = x g``). The same values as the plain formula, in fewer passes."""

    @staticmethod
    def forward(ctx, x, y, conj_x):
        ctx.save_for_backward(x, y)
        ctx.conj_x = conj_x
        return _complex_product(x, y, conj_x)

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        need_x, need_y = ctx.needs_input_grad[:2]
        if ctx.conj_x:
            return (_complex_product(g, y, True) if need_x else None,
                    _complex_product(x, g, False) if need_y else None, None)
        return (_complex_product(y, g, True) if need_x else None,
                _complex_product(x, g, True) if need_y else None, None)


def complex_product(x: torch.Tensor, y: torch.Tensor, conj_x: bool = False) -> torch.Tensor:
    """``x * y`` or ``conj(x) * y`` for ``[re | im]`` rows (equal shapes: the one-node autograd path).

    Under ``torch.compile`` the plain formula: the compiler fuses it and derives its gradient, whereas the
    hand-written path (``out=`` into halves of one tensor, ``torch.result_type``) would break the graph, four
    times per product."""
    if x.shape == y.shape and x.dtype == y.dtype and not torch.compiler.is_compiling():
        return _ComplexProduct.apply(x, y, conj_x)
    a, b = x.chunk(2, dim=-1)
    c, d = y.chunk(2, dim=-1)
    if conj_x:
        return torch.cat([a * c + b * d, a * d - b * c], dim=-1)
    return torch.cat([a * c - b * d, a * d + b * c], dim=-1)


class DistMult(KGEModel):
    """DistMult: ``f = <h, r, t> = sum_i h_i r_i t_i``."""

    NAME = "distmult"

    def tail_query(self, h, r):
        return h * r

    def head_query(self, r, t):
        return r * t


class ComplEx(KGEModel):
    """ComplEx: ``f = Re(<h, r, conj(t)>)``; a row holds dim/2 real parts, then dim/2 imaginary parts."""

    NAME = "complex"

    @classmethod
    def check_options(cls, dim, options):
        _require_multiple(cls.NAME, dim, 2, "dim counts real numbers: dim/2 complex numbers")
        return super().check_options(dim, options)

    def tail_query(self, h, r):
        return complex_product(h, r)  # [ac - bd, ad + bc] for h = a + ib, r = c + id

    def head_query(self, r, t):
        return complex_product(r, t, conj_x=True)  # conj(r) t = [cx + dy, cy - dx] for t = x + iy


class RESCAL(KGEModel):
    """RESCAL: ``f = h^T R_r t`` with a full ``dim x dim`` matrix per relation (stored row-major)."""

    NAME = "rescal"

    def relation_dim(self):
        return self.dim * self.dim

    def _mat(self, r):
        return r.view(-1, self.dim, self.dim)

    def tail_query(self, h, r):
        return torch.bmm(h.unsqueeze(1), self._mat(r)).squeeze(1)

    def head_query(self, r, t):
        return torch.bmm(self._mat(r), t.unsqueeze(2)).squeeze(2)

    def export_embeddings(self):
        out = super().export_embeddings()
        out["relation"] = out["relation"].reshape(-1, self.dim, self.dim)
        return out


class TuckER(KGEModel):
    """TuckER: ``f = sum_ijk W_jik r_j h_i t_k`` with a dense core ``W [dim, dim, dim]``.

    The relation dimension equals the entity dimension. The core is initialised uniform(-1, 1)
    as in the TuckER paper's code; its batch-norm layers are not used. The core is limited to
    ``max_core_gb`` GiB (option, default 16) so that impossible points fail at validation.
    """

    NAME = "tucker"
    OPTIONS = {"max_core_gb": 16.0}

    @classmethod
    def check_options(cls, dim, options):
        opts = super().check_options(dim, options)
        gb = 4 * dim ** 3 / 2 ** 30
        if gb > float(opts["max_core_gb"]):
            raise ConfigError(f"dim={dim} is too large for model 'tucker': its dim^3 core needs {gb:.1f} GiB "
                              f"(limit model.options.max_core_gb={opts['max_core_gb']}); use dim <= 500")
        return opts

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.core = nn.Parameter(torch.empty(self.dim, self.dim, self.dim))
        self.reset_dense_parameters()

    def reset_dense_parameters(self):
        with torch.no_grad():
            self.core.uniform_(-1.0, 1.0)

    def _rel_mat(self, r):
        d = self.dim
        return (r @ self.core.view(d, d * d)).view(-1, d, d)

    def tail_query(self, h, r):
        return torch.bmm(h.unsqueeze(1), self._rel_mat(r)).squeeze(1)

    def head_query(self, r, t):
        return torch.bmm(self._rel_mat(r), t.unsqueeze(2)).squeeze(2)

    def export_embeddings(self):
        out = super().export_embeddings()
        out["core"] = self.core.detach().float().cpu().numpy()
        return out


#: AutoSF structure found for ogbl-biokg by the AutoSF authors (blocks 0..3 of h, r, t):
#: f = <h0,r0,t0> + <h0,r0,t1> + <h1,r1,t1> + <h2,r2,t2> + <h3,r3,t3>.
AUTOSF_DEFAULT_STRUCTURE = [[0, 0, 0, 1], [0, 0, 1, 1], [1, 1, 1, 1], [2, 2, 2, 1], [3, 3, 3, 1]]


class AutoSF(KGEModel):
    """AutoSF: a block-structured bilinear model, ``f = sum s <h_i, r_j, t_k>`` over its structure.

    Embeddings are split into 4 equal blocks; ``options.structure`` lists terms
    ``[i, j, k, s]`` (head block, relation block, tail block, sign +1/-1). The default is the
    structure AutoSF found for ogbl-biokg (``AUTOSF_DEFAULT_STRUCTURE``).
    """

    NAME = "autosf"
    OPTIONS = {"structure": AUTOSF_DEFAULT_STRUCTURE}
    BLOCKS = 4

    @classmethod
    def check_options(cls, dim, options):
        _require_multiple(cls.NAME, dim, cls.BLOCKS, "embeddings are split into 4 blocks")
        opts = super().check_options(dim, options)
        terms = [list(t) for t in opts["structure"]]
        bad = [t for t in terms if len(t) != 4 or not all(int(v) == v for v in t)
               or not all(0 <= int(v) < cls.BLOCKS for v in t[:3]) or int(t[3]) not in (-1, 1)]
        if not terms or bad:
            raise ConfigError(f"model.options.structure for 'autosf' must be a non-empty list of [i, j, k, sign] "
                              f"with blocks 0..3 and sign +1/-1; bad entries: {bad or 'empty list'}")
        opts["structure"] = [[int(v) for v in t] for t in terms]
        return opts

    def _blocks(self, x):
        return x.chunk(self.BLOCKS, dim=-1)

    def tail_query(self, h, r):
        hb, rb = self._blocks(h), self._blocks(r)
        out = [None] * self.BLOCKS
        for i, j, k, s in self.options["structure"]:
            term = hb[i] * rb[j] if s > 0 else -(hb[i] * rb[j])
            out[k] = term if out[k] is None else out[k] + term
        zero = torch.zeros_like(hb[0])
        return torch.cat([o if o is not None else zero for o in out], dim=-1)

    def head_query(self, r, t):
        rb, tb = self._blocks(r), self._blocks(t)
        out = [None] * self.BLOCKS
        for i, j, k, s in self.options["structure"]:
            term = rb[j] * tb[k] if s > 0 else -(rb[j] * tb[k])
            out[i] = term if out[i] is None else out[i] + term
        zero = torch.zeros_like(tb[0])
        return torch.cat([o if o is not None else zero for o in out], dim=-1)

    def export_embeddings(self):
        out = super().export_embeddings()
        import numpy as np

        out["structure"] = np.asarray(self.options["structure"], dtype=np.int64)
        return out
