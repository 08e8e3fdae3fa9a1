"""The fast training step: row-sparse optimizers, the trainer's row step, the compiled step.

The yardsticks are torch's own optimizers (``SparseAdam``, ``Adagrad``) and the first engine's
autograd step (``kgtuner.kge.reference_step``): the fast path must compute the same values.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from script_loader import load_script

from kgtuner.data import FilterIndex, KnowledgeGraph, load_dataset
from kgtuner.kge import Trainer, TrainConfig
from kgtuner.kge.optim import RowSparseAdagrad, RowSparseAdam, write_rows, merge_rows
from kgtuner.kge.reference_step import ReferenceTrainer
from kgtuner.kge.trainer import LossMonitor


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _tables(seed=0, n=40, d=6):
    torch.manual_seed(seed)
    w = torch.randn(n, d)
    a = torch.nn.Embedding.from_pretrained(w.clone(), freeze=False, sparse=True)
    b = torch.nn.Embedding.from_pretrained(w.clone(), freeze=False, sparse=True)
    return a, b


def _drive(pairs, steps=15, n=40, distinct=False, seed=1):
    """Same sparse gradients into each (embedding, optimizer) pair; duplicates unless ``distinct``."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        idx = (torch.randperm(n, generator=g)[:12] if distinct
               else torch.randint(0, n, (12,), generator=g))
        idx2 = torch.randint(0, n, (5,), generator=g)
        for emb, opt in pairs:
            opt.zero_grad()
            out = emb(idx).sin().sum()
            if not distinct:
                out = out + emb(idx2).pow(2).sum()  # a second lookup: an uncoalesced gradient
            out.backward()
            opt.step()


@pytest.mark.parametrize("dedup", [True, False])
def test_row_sparse_adam_unfused_is_sparse_adam_bit_for_bit(dedup):
    a, b = _tables()
    _drive([(a, torch.optim.SparseAdam(a.parameters(), lr=0.05)),
            (b, RowSparseAdam(b.parameters(), lr=0.05, dedup=dedup, fused=False))], distinct=True)
    assert torch.equal(a.weight, b.weight)


@pytest.mark.parametrize("dedup", [True, False])
@pytest.mark.parametrize("fused", [True, False])
def test_row_sparse_adam_matches_sparse_adam_with_duplicates(dedup, fused):
    a, b = _tables()
    oa = torch.optim.SparseAdam(a.parameters(), lr=0.05)
    ob = RowSparseAdam(b.parameters(), lr=0.05, dedup=dedup, fused=fused)
    _drive([(a, oa), (b, ob)])
    assert not torch.equal(a.weight, _tables()[0].weight)  # it did train
    torch.testing.assert_close(b.weight, a.weight, rtol=1e-5, atol=1e-6)
    sa, sb = oa.state[a.weight], ob.state[b.weight]
    assert sa["step"] == sb["step"] == 15
    torch.testing.assert_close(sb["exp_avg"], sa["exp_avg"], rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(sb["exp_avg_sq"], sa["exp_avg_sq"], rtol=1e-5, atol=1e-9)
    # the state is SparseAdam's: a checkpoint of one loads into the other
    oc = torch.optim.SparseAdam(b.parameters(), lr=0.05)
    oc.load_state_dict(ob.state_dict())


@pytest.mark.filterwarnings("ignore:Sparse invariant checks")  # torch's own Adagrad, the yardstick
@pytest.mark.parametrize("dedup", [True, False])
@pytest.mark.parametrize("fused", [True, False])
def test_row_sparse_adagrad_matches_adagrad_with_a_dense_parameter(dedup, fused):
    a, b = _tables()
    torch.manual_seed(3)
    core = torch.randn(4, 4)
    ca, cb = torch.nn.Parameter(core.clone()), torch.nn.Parameter(core.clone())
    oa = torch.optim.Adagrad(list(a.parameters()) + [ca], lr=0.1)
    ob = RowSparseAdagrad(list(b.parameters()) + [cb], lr=0.1, dedup=dedup, fused=fused)
    g = torch.Generator().manual_seed(4)
    for _ in range(12):
        idx = torch.randint(0, 40, (15,), generator=g)
        for emb, c, opt in ((a, ca, oa), (b, cb, ob)):
            opt.zero_grad()
            (emb(idx).sin().sum() + emb(idx[:4]).sum() * c.sum() + c.pow(2).sum()).backward()
            opt.step()
    torch.testing.assert_close(b.weight, a.weight, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(cb, ca, rtol=1e-5, atol=1e-6)
    assert float(ob.state[b.weight]["step"]) == float(oa.state[a.weight]["step"]) == 12
    assert cb.grad is not None and b.weight.grad.is_sparse  # grads are left in place after step()


def test_merge_rows_sums_duplicates_both_ways():
    idx = torch.tensor([5, 2, 5, 9, 2, 5])
    vals = torch.arange(12.0).view(6, 2)
    rows, sums, distinct, pick = merge_rows(idx, vals, dedup=True)
    assert distinct and rows.tolist() == [2, 5, 9]
    assert sums.tolist() == [[10.0, 12.0], [14.0, 17.0], [6.0, 7.0]]
    assert torch.equal(idx[pick], rows)
    rows, sums, distinct, pick = merge_rows(idx, vals, dedup=False)
    assert not distinct and rows.tolist() == [2, 2, 5, 5, 5, 9]
    assert sums.tolist() == [[10.0, 12.0]] * 2 + [[14.0, 17.0]] * 3 + [[6.0, 7.0]]
    assert torch.equal(idx[pick], rows)


def test_step_rows_with_gathered_rows_equals_a_sparse_gradient():
    a, b = _tables()
    oa, ob = RowSparseAdam(a.parameters(), lr=0.05), RowSparseAdam(b.parameters(), lr=0.05)
    idx = torch.tensor([3, 7, 3, 1])
    grads = torch.randn(4, 6)
    a.weight.grad = torch.sparse_coo_tensor(idx.unsqueeze(0), grads, a.weight.shape)
    oa.step()
    ob.step_rows(b.weight, idx, grads, b.weight.detach()[idx].clone())
    torch.testing.assert_close(b.weight, a.weight, rtol=0, atol=0)
    assert ob.state[b.weight]["step"] == 1


@pytest.mark.parametrize("width,dtype", [(6, torch.float32), (5, torch.float32), (3, torch.float64),
                                         (4, torch.bfloat16)])
def test_write_rows_copies_bits(width, dtype):
    target = torch.randn(10, width).to(dtype)
    expected = target.clone()
    new = torch.randn(3, width).to(dtype)
    new[0, 0] = float("nan")
    rows = torch.tensor([8, 1, 4])
    expected[rows] = new
    write_rows(target, rows, new)
    assert torch.equal(target.view(torch.uint8), expected.view(torch.uint8))


# ------------------------------------------------------------------------------ trainer row step
@pytest.fixture(scope="module")
def demo():
    kg = load_dataset("demo", use_cache=False)
    return KnowledgeGraph("demo", kg.entities, kg.relations, kg.train, kg.valid[:100], kg.test[:50])


BASE = {"dim": 16, "batch_size": 200, "negatives": 24, "max_epochs": None, "max_steps": 25, "valid_every": 10 ** 6,
        "lr": 0.02, "initializer": "xavier_uniform", "loss": "BCE_adv", "regularizer": "None"}
CASES = [
    {"model": "complex"},
    {"model": "complex", "dropout": 0.2, "regularizer": "DURA", "reg_weight": 0.01, "inverse": True},
    {"model": "distmult", "optimizer": "Adagrad", "lr": 0.1, "regularizer": "NUC", "reg_weight": 0.01},
    {"model": "rescal", "optimizer": "SGD", "lr": 0.5, "loss": "BCE_mean", "regularizer": "FRO", "reg_weight": 0.01},
    {"model": "transe"},
    # non-smooth scores (L1, hinge) and parameters whose true gradient is 0 (ConvE's biases before batch
    # norm) turn rounding noise into full Adam steps: compare those with SGD, where noise stays noise
    {"model": "transe", "loss": "MR", "gamma": 2.0, "optimizer": "SGD", "lr": 0.5},
    {"model": "rotate", "loss": "CE", "inverse": True},
    {"model": "tucker", "dim": 8, "loss": "BCE_sum", "lr": 0.005},
    {"model": "conve", "loss": "CE", "dropout": 0.1, "optimizer": "SGD", "lr": 0.5},
    {"model": "autosf", "typed": True},
]


def _graph(demo, typed):
    if not typed:
        return demo
    return KnowledgeGraph("typed-demo", demo.entities, demo.relations, demo.train, demo.valid, demo.test,
                          entity_types=np.arange(demo.num_entities) % 3, entity_type_names=["a", "b", "c"])


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
def test_row_step_trains_like_the_reference_step(demo, case):
    case = dict(case)
    kg = _graph(demo, case.pop("typed", False))
    cfg = TrainConfig.from_dict({**BASE, **case})
    # one after the other: a trainer seeds the global RNG (dropout draws from it) when it is built
    fast = Trainer(cfg, kg, device="cpu")
    start = {k: v.clone() for k, v in fast.model.state_dict().items()}
    fast.fit()
    ref = ReferenceTrainer(cfg, kg, device="cpu")
    assert fast.row_step and not ref.row_step
    for k, v in ref.model.state_dict().items():
        assert torch.equal(v, start[k])
    ref.fit()
    moved = 0.0
    for k, v in ref.model.state_dict().items():
        torch.testing.assert_close(fast.model.state_dict()[k], v, rtol=1e-4, atol=5e-5)
        if v.is_floating_point():
            moved = max(moved, float((v - start[k]).abs().max()))
    assert moved > 1e-3  # both trained
    assert fast.step == ref.step == 25


def test_row_step_is_used_only_with_sampled_negatives(demo):
    dense = Trainer(TrainConfig.from_dict({**BASE, "negatives": "1VsAll", "loss": "CE"}), demo, device="cpu")
    assert not dense.row_step
    assert Trainer(TrainConfig.from_dict(BASE), demo, device="cpu").row_step


def test_epoch_batches_visit_every_example_once(demo):
    tr = Trainer(TrainConfig.from_dict({**BASE, "batch_size": 256}), demo, device="cpu")
    seen = []
    for _ in range(tr.steps_per_epoch):
        lo = tr.batch_in_epoch * 256
        seen.append(tr._epoch_batches()[lo:lo + 256])
        tr.batch_in_epoch += 1
    got = torch.cat(seen)
    assert sorted(map(tuple, got.tolist())) == sorted(map(tuple, tr.examples.tolist()))


def test_loss_monitor_chunks_report_the_diverging_step():
    mon = LossMonitor(torch.device("cpu"), chunk=4, asynchronous=True)
    for step in range(1, 7):
        assert mon.add(torch.tensor(1.0 * step), step) is None
    assert mon.count == 4 and mon.total == 10.0  # the first chunk was read, the second is pending
    assert mon.add(torch.tensor(float("nan")), 7) is None  # still pending in the chunk
    msg = mon.drain()
    assert msg == "training loss became NaN at step 7"
    sync = LossMonitor(torch.device("cpu"))
    assert sync.add(torch.tensor(2e10), 3) == "training loss became 2e+10 at step 3"


def _compiler_available() -> bool:
    return bool(shutil.which("g++") or shutil.which("c++") or shutil.which("clang++"))


@pytest.mark.slow
@pytest.mark.skipif(not _compiler_available(), reason="torch.compile on CPU needs a C++ compiler")
def test_compiled_row_step_matches_the_eager_row_step(demo):
    """``compile: true`` on CPU (inductor's C++ kernels; CUDA would add CUDA graphs), incl. the
    shorter last batch of an epoch (a second shape) and validation."""
    cfg = {**BASE, "model": "complex", "dim": 8, "batch_size": 1000, "max_steps": 7, "regularizer": "DURA",
           "reg_weight": 0.01, "valid_every": 7}
    filt = FilterIndex.from_graph(demo)
    eager = Trainer(TrainConfig.from_dict(cfg), demo, filter_index=filt, device="cpu")
    r_eager = eager.fit()
    compiled = Trainer(TrainConfig.from_dict({**cfg, "compile": True}), demo, filter_index=filt, device="cpu")
    assert compiled.steps_per_epoch < 7  # an epoch boundary: the last batch is shorter
    r_comp = compiled.fit()
    assert r_comp.status == "ok" and r_comp.steps == 7
    for k, v in eager.model.state_dict().items():
        torch.testing.assert_close(compiled.model.state_dict()[k], v, rtol=1e-4, atol=1e-5)
    assert r_comp.valid["mrr"] == pytest.approx(r_eager.valid["mrr"], abs=1e-3)
    assert r_comp.history[-1]["loss"] == pytest.approx(r_eager.history[-1]["loss"], rel=1e-4)


@pytest.mark.parametrize("model_name", ["transe", "rotate", "rescal", "distmult", "complex", "tucker", "conve",
                                        "autosf"])
def test_the_compiled_objective_is_one_graph(demo, model_name):
    """``compile: true`` traces each model's loss and regulariser into ONE graph: a graph break splits the
    step into pieces the compiler cannot fuse, and on CUDA into many small CUDA graphs (the first GPU run
    measured the compiled step at half the eager one's speed, with "The CUDA Graph is empty" warnings; ComplEx's
    hand-written product broke its objective 14 times). Traced by Dynamo only (scripts/perf/compile_graph_breaks.py;
    no C++ compiler needed)."""
    explained = load_script("compile_graph_breaks").explain(demo, model_name, "BCE_adv")
    assert explained.graph_break_count == 0, [r.reason.splitlines()[0] for r in explained.break_reasons]
    assert explained.graph_count == 1


@pytest.mark.parametrize("model_name", ["complex", "conve", "transe"])
def test_evaluation_score_buffer_gives_the_same_ranks(demo, model_name):
    """The reused score buffer (plain ``Q @ E^T`` models) ranks exactly like the model's own scoring."""
    import copy

    from kgtuner.kge import MODELS, evaluation

    torch.manual_seed(0)
    model = MODELS[model_name](demo.num_entities, demo.num_relations, 16).eval()
    calls = []
    model.score_sp = lambda *a: calls.append(a) or type(model).score_sp(model, *a)  # instance spy: still "plain"
    filt = FilterIndex.from_graph(demo)
    fast = [evaluation.filtered_ranks(model, demo.valid, filt, side, batch_size=37) for side in ("tail", "head")]
    assert bool(calls) == (model_name == "transe")  # only TransE (a distance) scores through score_sp
    # the same weights in a subclass that overrides the scorers: evaluation must use the model's own scoring
    own = copy.deepcopy(model)
    del own.score_sp
    cls = type(model)
    own.__class__ = type(f"Own{cls.__name__}", (cls,), {"score_sp": lambda self, h, r: cls.score_sp(self, h, r),
                                                        "score_po": lambda self, r, t: cls.score_po(self, r, t)})
    plain = [evaluation.filtered_ranks(own, demo.valid, filt, side, batch_size=37) for side in ("tail", "head")]
    for a, b in zip(fast, plain):
        assert torch.equal(a, b)


@pytest.mark.parametrize("conj", [False, True])
def test_complex_product_has_the_formula_and_its_gradient(conj):
    from kgtuner.kge.models.bilinear import complex_product

    torch.manual_seed(0)
    x = torch.randn(5, 8, dtype=torch.float64, requires_grad=True)
    y = torch.randn(5, 8, dtype=torch.float64, requires_grad=True)
    a, b = x.chunk(2, -1)
    c, d = y.chunk(2, -1)
    expected = torch.cat([a * c + b * d, a * d - b * c] if conj else [a * c - b * d, a * d + b * c], -1)
    torch.testing.assert_close(complex_product(x, y, conj), expected)
    assert torch.autograd.gradcheck(lambda u, v: complex_product(u, v, conj), (x, y))
