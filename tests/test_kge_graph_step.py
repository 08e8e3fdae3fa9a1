"""The captured step (``train.cuda_graph``): the static-shape step equals the eager step, mixes with it, restores,
follows the learning rate, and falls back with its reason where it does not apply. On CPU the static step runs
eagerly; the capture itself is exercised on CUDA (the last test, skipped without a GPU) and by the GPU check."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from kgtuner.data import KnowledgeGraph
from kgtuner.errors import ConfigError
from kgtuner.kge import Trainer, TrainConfig
from kgtuner.kge.graph_step import CapturedStep, unsupported
from kgtuner.kge.optim import scale_lr

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _graph(n_ent=60, n_rel=4, n=520, typed=False, seed=0):
    rng = np.random.default_rng(seed)
    t = np.stack([rng.integers(0, n_ent, n), rng.integers(0, n_rel, n), rng.integers(0, n_ent, n)], 1)
    kg = KnowledgeGraph("toy", np.array([f"e{i}" for i in range(n_ent)]), np.array([f"r{i}" for i in range(n_rel)]),
                        t[:420], t[420:470], t[470:])
    if typed:
        kg.entity_types = np.arange(n_ent) % 3
    return kg


def _cfg(**kw):
    # 420 training triples in batches of 64: 6 full batches and a short one an epoch (the eager step's)
    base = dict(model="complex", dim=8, batch_size=64, negatives=16, max_steps=30, max_epochs=None, valid_every=10,
                device="cpu", lr=0.02, seed=3)
    return {**base, **kw}


def _trainer(kg, graph: bool, **kw) -> Trainer:
    t = Trainer(_cfg(cuda_graph=graph, **kw), kg)
    if not graph:
        t.dedup_rows = False  # the eager step with the captured step's merge of duplicate rows
    return t


def _max_diff(a: Trainer, b: Trainer) -> float:
    sa, sb = a.model.state_dict(), b.model.state_dict()
    return max(float((sa[k] - sb[k]).abs().max()) for k in sa)


@pytest.mark.parametrize("model,extra", [("complex", {}), ("distmult", {"inverse": True}),
                                         ("rotate", {"loss": "MR"}), ("transe", {"dropout": 0.2}),
                                         ("autosf", {"regularizer": "NUC"}), ("complex", {"amp": True})])
def test_static_step_trains_as_the_eager_step(model, extra):
    kg = _graph()
    # built and trained one after the other: each seeds torch's global generator (dropout) when it is built
    graph = _trainer(kg, True, model=model, **extra)
    rg = graph.fit()
    eager = _trainer(kg, False, model=model, **extra)
    re_ = eager.fit()
    assert isinstance(graph.graph_step, CapturedStep) and eager.graph_step is None
    assert rg.steps == re_.steps == 30
    # a few float32 roundings apart (the kernel's learning rate is a float32 tensor here, a double there)
    assert _max_diff(graph, eager) < 1e-5
    assert [h["valid_mrr"] for h in rg.history] == pytest.approx([h["valid_mrr"] for h in re_.history], abs=1e-6)
    # the short last batches (steps 7, 14, ...) took the eager step, the others the static one
    assert graph.graph_step.calls == 30 - 30 // 7
    for t in (graph, eager):
        opt = t.optimizers[0]
        assert [opt.state[p]["step"] for p in (t.model.entity.weight, t.model.relation.weight)] == [30, 30]


def test_static_step_with_typed_negatives_and_the_default_cpu_step():
    kg = _graph(typed=True)
    graph = _trainer(kg, True)
    default = Trainer(_cfg(), kg)  # CPU default: torch.unique merges duplicate rows (other summation order)
    assert graph.sampler.name == "typed"
    graph.fit(), default.fit()
    assert _max_diff(graph, default) < 1e-5


def test_learning_rate_change_reaches_the_static_step():
    kg = _graph()
    graph, eager = _trainer(kg, True, max_steps=5), _trainer(kg, False, max_steps=5)
    graph.fit(), eager.fit()
    for t in (graph, eager):
        scale_lr(t.optimizers, 0.1)
        t.cfg.max_steps = 12
        t.fit()
    assert float(graph.graph_step.lr) == pytest.approx(0.002)
    assert _max_diff(graph, eager) < 1e-5
    # without the change the runs part: the test can tell
    other = _trainer(kg, True, max_steps=12)
    other.fit()
    assert _max_diff(other, eager) > 1e-4


def test_restore_continues_the_static_step_exactly():
    kg = _graph()
    whole = _trainer(kg, True, max_steps=20)
    whole.fit()
    first = _trainer(kg, True, max_steps=9)
    first.fit()
    state = first.state_dict()
    second = _trainer(kg, True, max_steps=20)
    second.load_state_dict(state)
    second.fit()
    assert _max_diff(whole, second) == 0.0
    assert second.optimizers[0].state[second.model.entity.weight]["step"] == 20


def test_state_tensors_replaced_resets_the_step():
    kg = _graph()
    t = _trainer(kg, True, max_steps=3)
    t.fit()
    step = t.graph_step
    assert step._moments is not None and step.calls == 3
    t.optimizers[0].load_state_dict(copy.deepcopy(t.optimizers[0].state_dict()))  # new state tensors
    step._sync_host_state()
    assert step.calls == 0  # forgotten: a CUDA graph would be recorded again on the new tensors


@pytest.mark.parametrize("cfg,reason", [
    ({"negatives": "1VsAll", "loss": "CE"}, "plain autograd"),
    ({"optimizer": "Adagrad"}, "Adam's row update only"),
    ({"model": "tucker"}, "dense parameters"),
])
def test_unsupported_configurations_train_eagerly_and_say_why(cfg, reason):
    t = Trainer(_cfg(cuda_graph=True, max_steps=3, **cfg), _graph())
    assert t.graph_step is None and reason in t.step_note
    assert t.fit().steps == 3
    assert reason in unsupported(t)


def test_compile_and_cuda_graph_together_are_refused():
    with pytest.raises(ConfigError, match="choose one"):
        TrainConfig.from_dict(_cfg(cuda_graph=True, compile=True))
    with pytest.raises(ConfigError, match="tf32"):
        TrainConfig.from_dict(_cfg(tf32="maybe"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the capture itself)")
def test_captured_graph_learns_as_the_eager_step_on_cuda():
    kg = _graph(n_ent=500, n=5200)
    cfg = _cfg(device="cuda", max_steps=200, valid_every=50, dim=32, batch_size=128, negatives=64)
    graph, eager = Trainer({**cfg, "cuda_graph": True}, kg), Trainer(cfg, kg)
    rg, re_ = graph.fit(), eager.fit()
    assert graph.graph_step.captures == 1 and graph.graph_step.calls > 100
    # other random negatives (the graph's philox offsets), so equal learning, not equal values
    assert abs(rg.valid["mrr"] - re_.valid["mrr"]) < 0.05
