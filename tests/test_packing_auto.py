"""Issue 39, part 2: ``trial.stage1_per_gpu=auto`` (k from a memory estimate of the packed stage's largest trial, the
GPU's memory and the host's CPUs per GPU, at most 8), each packed trial's share of its GPU's memory
(``torch.cuda.set_per_process_memory_fraction``), and packing beyond KGTuner's stage 1: GraSH's rounds on subgraphs
and the one-stage searches with ``trial.pack_one_stage=true``. CPU only: the GPU memory is given, CUDA is faked."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from tune_helpers import experiment_config

from kgtuner.cluster import packing
from kgtuner.cluster.packing import (GB, PackingChoice, TrialSize, choose_per_gpu, limit_gpu_memory, memory_fraction,
                                     parameter_floats, stage_size, trial_bytes)
from kgtuner.cluster.resources import plan_resources
from kgtuner.errors import ConfigError
from kgtuner.search import load_space
from kgtuner.tune.settings import ExperimentSettings, TrialSettings

REPO = Path(__file__).resolve().parents[1]
MB = 1e6


def _trial(**kw) -> TrialSettings:
    base = {"stage1": {"max_steps": 1, "valid_every": 1, "patience": 1},
            "stage2": {"max_steps": 1, "valid_every": 1, "patience": 1}}
    return TrialSettings.from_mapping({**base, **kw})


def _settings(**over) -> ExperimentSettings:
    """The demo's settings with the composed decoupled space (as the launcher gives it: strategy.space loads it)."""
    space = yaml.safe_load((REPO / "conf" / "space" / "decoupled.yaml").read_text())
    return ExperimentSettings.from_config(experiment_config(2, **{"space": space, **over}))


# ------------------------------------------------------------------ the estimate
def test_parameter_floats_count_each_models_rows():
    assert parameter_floats("complex", 1000, 10, 100) == 1000 * 100 + 2 * 10 * 100  # dim counts real numbers
    assert parameter_floats("distmult", 1000, 10, 100) == parameter_floats("complex", 1000, 10, 100)
    assert parameter_floats("rotate", 1000, 10, 100) == 1000 * 100 + 2 * 10 * 50
    assert parameter_floats("rescal", 1000, 10, 100) == 1000 * 100 + 2 * 10 * 100 * 100
    assert parameter_floats("tucker", 1000, 10, 100) == 1000 * 100 + 2 * 10 * 100 + 100 ** 3
    assert parameter_floats("conve", 1000, 10, 100, {"channels": 8}) == 1000 * 100 + 2 * 10 * 100 + 2 * 8 * 100 ** 2


def test_trial_bytes_follow_the_documented_formula():
    floats = 1000 * 100 + 2 * 10 * 100
    sampled = trial_bytes(model="complex", entities=1000, relations=10, dim=100, batch_size=128, negatives=32)
    assert sampled == 4 * floats * 4 + 4 * 4 * 128 * (32 + 2) * 100 + 500 * MB  # parameters, Adam, best; activations
    dense = trial_bytes(model="complex", entities=1000, relations=10, dim=100, batch_size=128, negatives=None)
    assert dense == 4 * floats * 5 + 4 * (4 * 128 * 1000 + 2 * 1000 * 100) + 500 * MB  # dense gradient; scores
    assert trial_bytes(model="complex", entities=1000, relations=10, dim=200, batch_size=128, negatives=32) > sampled


def test_a_stage_size_is_the_largest_trial_its_space_draws():
    class Graph:
        num_entities, num_relations = 5000, 20

    decoupled = stage_size(load_space("decoupled", model="complex", dataset="demo"), Graph(), model="complex")
    assert (decoupled.dim, decoupled.batch_size, decoupled.negatives) == (100, 128, None)  # stage 1's sizes; 1VsAll
    assert (decoupled.entities, decoupled.relations) == (5000, 20)
    full = stage_size(load_space("full", model="complex", dataset="demo"), Graph(), model="complex")
    assert (full.dim, full.batch_size) == (2000, 1024) and full.bytes() > decoupled.bytes()
    assert "5000 entities, dim 2000" in full.describe() and "GB" in full.describe()


def test_memory_bound():
    choice = choose_per_gpu(trial_bytes=10 * GB, gpu_memory=40 * GB, cpus_per_gpu=16)
    assert choice.k == 3 and choice.bound == "memory"  # floor(0.8 x 40 / 10): the headroom counts
    assert "memory-bound" in choice.reason and "10.00 GB" in choice.reason
    assert choose_per_gpu(trial_bytes=50 * GB, gpu_memory=40 * GB, cpus_per_gpu=16).k == 1  # too large: never 0


def test_core_bound():
    choice = choose_per_gpu(trial_bytes=1 * GB, gpu_memory=80 * GB, cpus_per_gpu=4)
    assert choice == PackingChoice(4, "cores", choice.reason) and "cores-bound" in choice.reason
    assert choose_per_gpu(trial_bytes=1 * GB, gpu_memory=80 * GB, cpus_per_gpu=2.5).k == 2  # whole cores only
    assert choose_per_gpu(trial_bytes=1 * GB, gpu_memory=80 * GB, cpus_per_gpu=0.5).k == 1


def test_the_cap_of_eight():
    choice = choose_per_gpu(trial_bytes=0.1 * GB, gpu_memory=141 * GB, cpus_per_gpu=32)
    assert choice.k == 8 and choice.bound == "cap"
    assert choose_per_gpu(trial_bytes=0.1 * GB, gpu_memory=141 * GB, cpus_per_gpu=8).bound == "cores+cap"


def test_an_unknown_memory_or_trial_gives_one():
    assert choose_per_gpu(trial_bytes=1 * GB, gpu_memory=None, cpus_per_gpu=16).k == 1
    assert "trial.gpu_memory_gb" in choose_per_gpu(trial_bytes=1 * GB, gpu_memory=None, cpus_per_gpu=16).reason
    assert choose_per_gpu(trial_bytes=None, gpu_memory=80 * GB, cpus_per_gpu=16).k == 1


def test_multi_gpu_trials_keep_rays_whole_gpu_rule():
    # trial.gpus=2: k trials share 2 GPUs; never 1.5 GPUs each, nor 0.667 (Ray fits one such trial a GPU: k=2)
    assert choose_per_gpu(trial_bytes=1 * GB, gpu_memory=80 * GB, cpus_per_gpu=1.5, gpus_per_trial=2).k == 2
    assert choose_per_gpu(trial_bytes=30 * GB, gpu_memory=80 * GB, cpus_per_gpu=8, gpus_per_trial=2).k == 4


def test_a_share_below_one_gpu_is_one_mth_of_it():
    assert choose_per_gpu(trial_bytes=1 * GB, gpu_memory=80 * GB, cpus_per_gpu=4, gpus_per_trial=2).k == 8  # 1/4 each


def test_the_papers_stage1_on_biokg_packs_eight_and_the_demo_on_cpus_one():
    # ogbl-biokg (93,773 entities, 51 relations): stage 1 on the 20% subgraph at the decoupled space's sizes
    stage1 = stage_size(load_space("decoupled", model="complex", dataset="ogbl-biokg"),
                        type("G", (), {"num_entities": 18755, "num_relations": 51})(), model="complex")
    assert stage1.bytes() < 1 * GB
    choice = choose_per_gpu(trial_bytes=stage1.bytes(), gpu_memory=80 * GB, cpus_per_gpu=8)
    assert choice.k == 8 and "cores" in choice.bound
    plan = plan_resources(_trial(), num_gpus=0, num_cpus=8, packed={1: stage1}, gpu_memory=80 * GB)
    assert plan.stages == {} and plan.per_gpu == {1: 1} and plan.trial_resources() == {"cpu": 1.0}
    assert any("trial.stage1_per_gpu=auto: one trial per CPU slot" in n for n in plan.notes)


# ------------------------------------------------------------------ the plan with auto
def _size(gb: float) -> TrialSize:
    """A TrialSize of about ``gb`` GB (sampled negatives: the parameters dominate)."""
    entities = int((gb * GB - 500 * MB) / (4 * 4 * 100))
    return TrialSize(entities=entities, relations=1, dim=100, batch_size=1, negatives=1)


def test_auto_packs_by_memory_on_logical_gpus_with_the_memory_given():
    plan = plan_resources(_trial(gpus=1), num_gpus=2, num_cpus=32, packed={1: _size(10)}, gpu_memory=40 * GB)
    assert plan.per_gpu == {1: 3} and plan.stages == {1: ({"gpu": 0.3333, "cpu": 5.33}, 6)} and plan.slots == 2
    note = next(n for n in plan.notes if n.startswith("trial.stage1_per_gpu=auto"))
    assert "runs 3 trials per GPU share" in note and "k=3, memory-bound" in note and "40 GB" in note


def test_auto_packs_by_cores():
    plan = plan_resources(_trial(gpus=1), num_gpus=2, num_cpus=8, packed={1: _size(1)}, gpu_memory=80 * GB)
    assert plan.per_gpu == {1: 4} and plan.slots_of(1) == 8 and plan.slots_of(2) == 2
    assert any("k=4, cores-bound" in n for n in plan.notes)
    explicit = plan_resources(_trial(gpus=1, cpus=3), num_gpus=2, num_cpus=8, packed={1: _size(1)},
                              gpu_memory=80 * GB)  # trial.cpus=3: a GPU's trial slot has 3 CPUs, one per packed trial
    assert explicit.per_gpu == {1: 3} and explicit.stages[1] == ({"gpu": 0.3333, "cpu": 1.0}, 6)


def test_auto_chooses_per_stage_and_keeps_one_where_a_trial_is_large():
    plan = plan_resources(_trial(gpus=1), num_gpus=1, num_cpus=16, packed={1: _size(4), 2: _size(10), 3: _size(40)},
                          gpu_memory=41 * GB)
    assert plan.per_gpu == {1: 8, 2: 3, 3: 1} and set(plan.stages) == {1, 2}
    assert plan.stages[2][0]["gpu"] == pytest.approx(1 / 3, abs=1e-4) and plan.slots_of(3) == 1
    assert any("stage 3 keeps one trial per GPU share" in n for n in plan.notes)


def test_auto_is_one_on_logical_gpus_without_a_memory():
    plan = plan_resources(_trial(gpus=1), num_gpus=2, num_cpus=8, packed={1: _size(1)}, gpu_memory=None)
    assert plan.stages == {} and plan.per_gpu == {1: 1} and plan.trial_resources() == {"gpu": 1, "cpu": 4.0}
    assert any("memory is unknown" in n and "trial.gpu_memory_gb" in n for n in plan.notes)


def test_auto_detects_the_memory_from_trial_gpu_memory_gb():
    plan = plan_resources(_trial(gpus=1, gpu_memory_gb=40), num_gpus=2, num_cpus=32, packed={1: _size(10)})
    assert plan.per_gpu == {1: 3} and any("GPU memory: trial.gpu_memory_gb=40" in n for n in plan.notes)
    assert packing.detect_gpu_memory(24) == (24 * GB, "trial.gpu_memory_gb=24")


def test_auto_without_packed_stages_plans_whole_shares():
    plan = plan_resources(_trial(gpus=1), num_gpus=2, num_cpus=4, packed={}, gpu_memory=80 * GB)  # e.g. search=random
    assert plan.stages == {} and plan.per_gpu == {} and plan.trial_resources() == {"gpu": 1, "cpu": 2.0}
    assert plan_resources(_trial(gpus=1), num_gpus=2, num_cpus=4).slots == 2


def test_an_integer_k_ignores_the_estimate():
    plan = plan_resources(_trial(gpus=1, stage1_per_gpu=2), num_gpus=2, num_cpus=4, packed={1: _size(100)},
                          gpu_memory=8 * GB)
    assert plan.per_gpu == {1: 2} and plan.stages[1] == ({"gpu": 0.5, "cpu": 1.0}, 4)


# ------------------------------------------------------------------ each packed trial's share of the memory
def test_memory_fraction_of_a_trials_resources():
    assert memory_fraction({"GPU": 0.25, "CPU": 1.0}) == pytest.approx(0.95 * 0.25)
    assert memory_fraction({"gpu": 0.5, "cpu": 1.0}) == pytest.approx(0.475)  # a plan's share
    assert memory_fraction({"GPU": 1.0}) is None and memory_fraction({"CPU": 2.0}) is None
    assert memory_fraction(None) is None
    # the CUDA context (500 MB) each packed process holds outside the allocator comes off its share
    assert memory_fraction({"GPU": 0.125}, gpu_memory=24 * GB) == pytest.approx(0.95 * 0.125 - 0.5 / 24, abs=1e-6)
    assert memory_fraction({"GPU": 0.125}, gpu_memory=1 * GB) == pytest.approx(0.05 * 0.125)  # never below 5%


class FakeCuda:
    """torch.cuda's calls that limit_gpu_memory makes, recorded."""

    def __init__(self, available=True, initialized=False, devices=1):
        self.available, self.initialized, self.devices, self.calls = available, initialized, devices, []

    def install(self, monkeypatch):
        import torch

        monkeypatch.setattr(torch.cuda, "is_available", lambda: self.available)
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: self.initialized)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: self.devices)
        monkeypatch.setattr(torch.cuda, "get_device_properties",
                            lambda device: type("Props", (), {"total_memory": 80 * GB})())
        monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction",
                            lambda fraction, device=None: self.calls.append((fraction, device)))
        monkeypatch.setattr(torch.cuda, "empty_cache", lambda: self.calls.append("empty_cache"))
        return self


def test_limit_gpu_memory_is_a_no_op_without_cuda(monkeypatch):
    cuda = FakeCuda(available=False).install(monkeypatch)
    assert limit_gpu_memory({"GPU": 0.5}) is None and cuda.calls == []
    assert limit_gpu_memory() is None  # Ray's assigned resources, outside Ray: nothing either


def test_a_packed_trial_caps_its_allocations_on_its_device(monkeypatch):
    cuda = FakeCuda(devices=1).install(monkeypatch)
    share = 0.95 * 0.25 - 0.5 / 80  # its share less its CUDA context, of an 80 GB GPU
    assert limit_gpu_memory({"GPU": 0.25, "CPU": 1.0}) == pytest.approx(share, abs=1e-6)
    assert cuda.calls == [(pytest.approx(share, abs=1e-6), 0)]


def test_a_whole_gpu_trial_sets_nothing_or_lifts_a_reused_workers_cap(monkeypatch):
    fresh = FakeCuda(initialized=False).install(monkeypatch)
    assert limit_gpu_memory({"GPU": 1.0}) is None and fresh.calls == []  # no CUDA context made for nothing
    reused = FakeCuda(initialized=True, devices=2).install(monkeypatch)
    # a reused worker: the earlier trial's cached blocks are released, then its cap lifted
    assert limit_gpu_memory({"GPU": 1.0}) is None and reused.calls == ["empty_cache", (1.0, 0), (1.0, 1)]


# ------------------------------------------------------------------ the settings
@pytest.mark.parametrize("value", ["two", 0, -2, 2.5, None, "", [2]])
def test_a_bad_stage1_per_gpu_names_the_key_the_value_and_the_fix(value):
    with pytest.raises(ConfigError) as err:
        _settings(**{"trial.stage1_per_gpu": value})
    msg = str(err.value)
    assert msg.startswith("trial.stage1_per_gpu must be auto or a whole number >= 1") and repr(value) in msg
    assert "set trial.stage1_per_gpu=auto" in msg and "\n" not in msg


@pytest.mark.parametrize("value, expected", [("auto", "auto"), ("AUTO", "auto"), (" auto ", "auto"), (3, 3), ("2", 2)])
def test_auto_and_integers_are_accepted(value, expected):
    assert _settings(**{"trial.stage1_per_gpu": value}).trial.stage1_per_gpu == expected


@pytest.mark.parametrize("key, value, fragment", [
    ("trial.pack_one_stage", "maybe", "trial.pack_one_stage must be true or false, got 'maybe'"),
    ("trial.gpu_memory_gb", 0, "trial.gpu_memory_gb must be a number > 0 or null, got 0"),
    ("trial.gpu_memory_gb", "lots", "trial.gpu_memory_gb must be a number > 0 or null, got 'lots'"),
])
def test_the_new_trial_keys_are_checked(key, value, fragment):
    with pytest.raises(ConfigError, match=fragment.replace(".", r"\.")):
        _settings(**{key: value})


def test_auto_is_the_shipped_default():
    for name in ("demo", "paper"):
        trial = yaml.safe_load((REPO / "conf" / "trial" / f"{name}.yaml").read_text())
        assert trial["stage1_per_gpu"] == "auto" and trial["pack_one_stage"] is False and trial["gpu_memory_gb"] is None
        assert TrialSettings.from_mapping(trial).stage1_per_gpu == "auto"
    defaults = _settings().trial
    assert (defaults.stage1_per_gpu, defaults.pack_one_stage, defaults.gpu_memory_gb) == ("auto", False, None)


# ------------------------------------------------------------------ the strategies' packed stages
@pytest.fixture(scope="module")
def demo():
    from kgtuner.data.from_config import load_graph

    return load_graph({"name": "demo"})


def test_kgtuner_packs_stage1_at_the_subgraphs_size(demo):
    strategy = _settings().make_strategy()
    assert strategy.packed_stages == {1: None}  # before prepare: the stage, its size unknown
    strategy.prepare(demo)
    size = strategy.packed_stages[1]
    assert size.entities == strategy.sub.num_entities < demo.num_entities and (size.dim, size.batch_size) == (100, 128)


@pytest.mark.parametrize("variant, packed", [("combined", {1, 2}), ("graph", {1, 2}), ("epoch", set())])
def test_grash_packs_its_rounds_on_subgraphs(demo, variant, packed):
    strategy = _settings(search={"name": "grash", "rounds": 3, "eta": 4, "variant": variant}).make_strategy()
    assert set(strategy.packed_stages) == packed
    strategy.prepare(demo)
    sizes = strategy.packed_stages
    for stage in packed:  # each round's own graph
        assert sizes[stage].entities == strategy.plan.rounds[stage - 1].graph.num_entities < demo.num_entities


def test_one_stage_searches_pack_only_when_asked(demo):
    plain = _settings(search={"name": "random"}).make_strategy()
    plain.prepare(demo)
    assert plain.packed_stages == {}
    asked = _settings(search={"name": "random"}, **{"trial.pack_one_stage": True}).make_strategy()
    asked.prepare(demo)
    assert set(asked.packed_stages) == {1} and asked.packed_stages[1].entities == demo.num_entities


def test_a_packed_one_stage_search_runs_k_times_the_slots(demo):
    strategy = _settings(search={"name": "random"}, **{"trial.pack_one_stage": True,
                                                       "trial.stage1_per_gpu": 2}).make_strategy()
    strategy.prepare(demo)
    plan = plan_resources(strategy.settings.trial, num_gpus=2, num_cpus=4, packed=strategy.packed_stages)
    strategy.packing = dict(plan.stages)
    searcher = strategy.searcher(strategy.space(demo.name), plan.slots)
    assert searcher.max_concurrent == 4 and searcher.inner.max_concurrent == 4
    line = strategy.describe("full", plan.slots, plan.resources)
    assert "4 concurrent trials, {'gpu': 0.5, 'cpu': 1.0} each (trial.stage1_per_gpu=2)" in line


def _fill(searcher, prefix: str, n: int = 30) -> list[str]:
    started = []
    for i in range(n):
        config = searcher.suggest(f"{prefix}{i}")
        if not isinstance(config, dict):
            break
        started.append(f"{prefix}{i}")
    return started


def test_grash_runs_k_times_the_slots_in_packed_rounds_and_the_slots_in_the_last(live, demo):
    # budget.trials=12, 2 rounds, eta 2: 8 configurations in round 1 (on a subgraph: packed), 4 in round 2
    strategy = _settings(search={"name": "grash", "rounds": 2, "eta": 2}, budget={"seconds": None, "trials": 12},
                         **{"trial.stage1_per_gpu": "auto", "trial.gpu_memory_gb": 80}).make_strategy()
    strategy.prepare(demo)
    plan = plan_resources(strategy.settings.trial, num_gpus=2, num_cpus=4, packed=strategy.packed_stages)
    assert plan.per_gpu == {1: 2}  # core-bound: 2 CPUs per GPU (the demo's trials are tiny)
    strategy.packing = dict(plan.stages)
    searcher = strategy.searcher(strategy.space(demo.name), plan.slots)
    assert searcher.stage_limits == {1: 4} and searcher.max_concurrent == 2
    line = strategy.describe("full", plan.slots, plan.resources)
    assert "round 1: 4 concurrent trials, {'gpu': 0.5, 'cpu': 1.0} each (trial.stage1_per_gpu=auto: 2 per GPU)" in line
    assert "other rounds: 2 concurrent trials, {'gpu': 1.0, 'cpu': 2.0} each" in line
    for prefix in ("a", "b"):  # round 1: 2 GPUs x k=2 at once, twice
        started = _fill(searcher, prefix)
        assert len(started) == 4 and {searcher.trial_stage[t] for t in started} == {1}
        for i, tid in enumerate(started):
            searcher.on_trial_complete(tid, {"valid_mrr": 0.1 + 0.01 * i, "trial_status": "ok"})
    last = _fill(searcher, "c")
    assert len(last) == 2 and {searcher.trial_stage[t] for t in last} == {2}  # one trial per GPU again
    searcher.on_trial_complete(last[0], {"valid_mrr": 0.5, "trial_status": "ok"})
    assert len(_fill(searcher, "d")) == 1


def test_a_trial_keeps_to_its_share_and_an_out_of_memory_fails_that_trial_only(monkeypatch, demo):
    """kgtuner_trial, outside Ray: it sets its memory cap before training, and a CUDA out-of-memory in training is its
    own failed report (trial_status=failed, the error kept), not an exception that would take the run or others."""
    import ray
    import torch
    from ray import tune

    from kgtuner.kge import Trainer
    from kgtuner.tune import trainable

    def no_ray():
        raise RuntimeError("no Ray in this test")  # the trial's placement and threads fall back; Ray never starts

    was_up = ray.is_initialized()
    monkeypatch.setattr(ray, "get_runtime_context", no_ray)
    order, reports = [], []
    monkeypatch.setattr(tune, "report", lambda metrics, checkpoint=None: reports.append(dict(metrics)))
    monkeypatch.setattr(tune, "get_checkpoint", lambda: None)
    monkeypatch.setattr(tune, "get_context", lambda: type("Ctx", (), {"get_trial_id": lambda self: "t0"})())
    monkeypatch.setattr(packing, "limit_gpu_memory", lambda resources=None: order.append("limit") or 0.475)

    def fit(self):
        order.append("fit")
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(Trainer, "fit", fit)
    trainable.clear_graph_cache()
    trainable.kgtuner_trial({"stage": 1, "trial_index": 0, "lr": 0.01, "dim": 8, "batch_size": 64, "negatives": 4},
                            graphs={"demo": demo.to_arrays()}, model="complex", checkpoint_every_s=None,
                            stages={1: {"graph_key": "demo", "controls": {"max_steps": 5, "valid_every": 5}}})
    trainable.clear_graph_cache()
    assert order == ["limit", "fit"]  # the cap comes before any training
    assert reports[-1]["trial_status"] == "failed" and reports[-1]["done"]
    assert reports[-1]["error"].startswith("OutOfMemoryError: CUDA out of memory")
    assert ray.is_initialized() == was_up


def test_nvidia_smi_memory_reads_the_smallest_gpu_without_a_cuda_context():
    import subprocess

    listing = "81559, Disabled, NVIDIA H100 80GB HBM3\n40960, [N/A], NVIDIA A100-SXM4-40GB\n"
    ok = lambda cmd, **kw: subprocess.CompletedProcess(cmd, 0, stdout=listing)  # noqa: E731
    assert packing.nvidia_smi_memory(run=ok) == (40960 * 2 ** 20, "nvidia-smi: NVIDIA A100-SXM4-40GB")

    def failing(cmd, **kw):
        raise subprocess.CalledProcessError(9, cmd)

    assert packing.nvidia_smi_memory(run=failing) is None
    garbled = lambda cmd, **kw: subprocess.CompletedProcess(cmd, 0, stdout="N/A, N/A, weird\n")  # noqa: E731
    assert packing.nvidia_smi_memory(run=garbled) is None
    mig = lambda cmd, **kw: subprocess.CompletedProcess(cmd, 0, stdout="81559, Enabled, NVIDIA H100\n")  # noqa: E731
    assert packing.nvidia_smi_memory(run=mig) is None  # the whole GPU's memory, not the MIG instance's


@pytest.mark.parametrize("gpus,k,ok", [(2, 3, False), (3, 2, False), (2, 4, True), (4, 2, True), (1, 3, True)])
def test_an_integer_k_must_give_a_share_ray_places_without_waste(gpus, k, ok):
    cfg = {"gpus": gpus, "stage1_per_gpu": k, "stage1": {"max_steps": 10, "valid_every": 5, "patience": 2},
           "stage2": {"max_steps": 10, "valid_every": 5, "patience": 2}}
    if ok:
        assert TrialSettings.from_mapping(cfg).stage1_per_gpu == k
    else:
        with pytest.raises(ConfigError, match=rf"trial.stage1_per_gpu={k} gives stage-1 trials .* 1/m of one"):
            TrialSettings.from_mapping(cfg)
