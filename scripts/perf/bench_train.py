"""kgtuner vs PyKEEN in one run: training throughput and filtered evaluation time, with the GEMM floor.

Configuration (both engines): ComplEx with 200 real parameters per entity (PyKEEN: 100 complex
dimensions), 128 negatives per positive, batch 1024, Adam (lr 1e-3), kgtuner ``BCE_sum`` = PyKEEN's
softplus loss, no regularizer, no reciprocal relations, on the identical integer-mapped triples.

* Training: kgtuner's ``Trainer`` for ``--kgtuner-steps`` steps (its own triples/s, which counts
  training steps only) vs PyKEEN's sLCWA training loop for about ``--pykeen-seconds`` seconds
  (one epoch over a prefix of the training triples; its throughput does not depend on the
  number of triples). PyKEEN draws 128 negatives per positive, each corrupting the head or the
  tail; kgtuner draws 128 negatives per batch, shared by all queries, for heads and tails.
* Evaluation (``--eval-datasets``, WN18RR by default): filtered test ranking (head and tail
  queries, all entities) of the SAME weights by ``kgtuner.kge.evaluation.evaluate_filtered`` and
  by PyKEEN's ``RankBasedEvaluator`` (batch ``--pykeen-eval-batch``; its default tried to
  allocate 33 GB). Both MRRs are printed: they must agree.
* GEMM floor: ``2 x queries x entities x dim`` flops at the fp32 matrix-multiply rate measured
  in this run (best of several 2048^3 products), the time no exact all-entity ranking can beat.
  GEMM-rate measurements and kgtuner evaluations are interleaved ``--eval-repeats`` times and the
  best of each is kept.

The machine is shared, so every comparison is a ratio of figures measured in this one run, given
both in wall-clock time and in CPU time of this process (``[...]``), which other jobs disturb less.
Run it in the benchmark environment that has PyKEEN (never a kgtuner dependency)::

    ../.venv-bench/bin/python scripts/perf/bench_train.py            # from the repo root: .venv-bench/bin/python
    python scripts/perf/bench_train.py --no-pykeen                   # kgtuner side only (main venv)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from kgtuner.data import FilterIndex, KnowledgeGraph, load_dataset  # noqa: E402
from kgtuner.kge import Trainer  # noqa: E402
from kgtuner.kge.evaluation import evaluate_filtered  # noqa: E402

DIM = 200
NEGATIVES = 128
BATCH = 1024
LR = 1e-3


class Clock:
    """Wall-clock and process CPU seconds of a block (CPU time is robust to other jobs on a shared machine)."""

    def __enter__(self):
        self.w0, self.c0 = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall, self.cpu = time.perf_counter() - self.w0, time.process_time() - self.c0
        return False


def gemm_rate(n: int = 2048, reps: int = 5) -> tuple[float, float]:
    """Best fp32 matrix-multiply rate of ``reps`` ``n^3`` products: (flop per wall second, per CPU second)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    wall = cpu = 0.0
    for _ in range(reps):
        with Clock() as c:
            a @ b
        wall, cpu = max(wall, 2 * n**3 / c.wall), max(cpu, 2 * n**3 / max(c.cpu, 1e-9))
    return wall, cpu


def kgtuner_config(steps: int) -> dict:
    return dict(model="complex", dim=DIM, negatives=NEGATIVES, batch_size=BATCH, optimizer="Adam", lr=LR,
                loss="BCE_sum", regularizer="None", inverse=False, initializer="xavier_uniform",
                max_steps=steps, max_epochs=None, valid_every=10**9, seed=0, device="cpu")


def train_kgtuner(kg, steps: int):
    """Train ``steps`` steps; return ({wall, cpu} triples per second, model)."""
    # the same graph without valid/test triples: fit() then does nothing but train
    quiet = KnowledgeGraph(kg.name, kg.entities, kg.relations, kg.train, valid=np.empty((0, 3)), test=np.empty((0, 3)))
    Trainer(kgtuner_config(5), quiet).fit()  # warm-up
    trainer = Trainer(kgtuner_config(steps), quiet)
    with Clock() as c:
        result = trainer.fit()
    n = result.triples_per_second * result.train_seconds
    return {"wall": n / c.wall, "cpu": n / c.cpu, "trainer_reported": result.triples_per_second}, trainer.model


# ----------------------------------------------------------------------------------------- PyKEEN
def pykeen_factory(kg):
    from pykeen.triples import CoreTriplesFactory

    return CoreTriplesFactory.create(mapped_triples=torch.as_tensor(kg.train, dtype=torch.long),
                                     num_entities=kg.num_entities, num_relations=kg.num_relations)


def pykeen_model(tf):
    from pykeen.models import ComplEx

    return ComplEx(triples_factory=tf, embedding_dim=DIM // 2, regularizer=None, loss="softplus", random_seed=0)


def train_pykeen(kg, seconds: float) -> dict:
    """PyKEEN sLCWA triples/s: a short calibration epoch, then one timed epoch of ~``seconds``."""
    from pykeen.training import SLCWATrainingLoop

    tf = pykeen_factory(kg)
    model = pykeen_model(tf)
    loop = SLCWATrainingLoop(model=model, triples_factory=tf, optimizer="adam", optimizer_kwargs={"lr": LR},
                             negative_sampler="basic", negative_sampler_kwargs={"num_negs_per_pos": NEGATIVES})

    def epoch(n_triples: int) -> dict:
        sub = tf.clone_and_exchange_triples(mapped_triples=tf.mapped_triples[:n_triples])
        with Clock() as c:
            loop.train(triples_factory=sub, num_epochs=1, batch_size=BATCH, use_tqdm=False, use_tqdm_batch=False)
        return {"wall": n_triples / c.wall, "cpu": n_triples / c.cpu}

    rate = epoch(2 * BATCH)["wall"]  # calibration (and warm-up)
    n = int(min(len(kg.train), max(2, round(seconds * rate / BATCH)) * BATCH))
    return epoch(n)


def pykeen_from_kgtuner(kg, model):
    """A PyKEEN ComplEx holding ``model``'s weights (kgtuner rows: [real | imaginary])."""
    tf = pykeen_factory(kg)
    pk = pykeen_model(tf)
    half = DIM // 2
    with torch.no_grad():
        for ours, theirs in ((model.entity.weight, pk.entity_representations[0]),
                             (model.relation.weight, pk.relation_representations[0])):
            w = ours.detach()
            theirs._embeddings.weight.copy_(torch.stack([w[:, :half], w[:, half:]], -1).reshape(len(w), DIM))
    h, r, t = (torch.as_tensor(kg.test[:8, i]) for i in range(3))
    a = model.score_spo(h, r, t)
    b = pk.score_hrt(torch.as_tensor(kg.test[:8])).view(-1)
    if not torch.allclose(a, b, rtol=1e-4, atol=1e-4):
        raise RuntimeError(f"weight transfer to PyKEEN failed: scores {a.tolist()} vs {b.tolist()}")
    return pk


def eval_pykeen(kg, model, batch_size: int) -> tuple[Clock, float]:
    from pykeen.evaluation import RankBasedEvaluator

    pk = pykeen_from_kgtuner(kg, model)
    evaluator = RankBasedEvaluator(filtered=True, batch_size=batch_size)
    extra = [torch.as_tensor(x, dtype=torch.long) for x in (kg.train, kg.valid, getattr(kg, "unseen", kg.train[:0]))]
    with Clock() as c:
        res = evaluator.evaluate(pk, torch.as_tensor(kg.test, dtype=torch.long), batch_size=batch_size,
                                 additional_filter_triples=extra, use_tqdm=False)
    return c, float(res.get_metric("both.realistic.inverse_harmonic_mean_rank"))


# ------------------------------------------------------------------------------------------- main
def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--datasets", nargs="+", default=["wn18rr", "kinships"])
    p.add_argument("--eval-datasets", nargs="+", default=["wn18rr"])
    p.add_argument("--data-root", default=str(REPO.parent / "shared" / "datasets"))
    p.add_argument("--kgtuner-steps", type=int, default=200)
    p.add_argument("--pykeen-seconds", type=float, default=20.0)
    p.add_argument("--pykeen-eval-batch", type=int, default=64)
    p.add_argument("--eval-batch", type=int, default=None, help="kgtuner evaluation batch (default: automatic)")
    p.add_argument("--eval-repeats", type=int, default=3, help="kgtuner evaluations (best time kept)")
    p.add_argument("--no-pykeen", action="store_true", help="kgtuner side only")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads (default: torch's choice; 1 is far more stable on a busy shared machine)")
    p.add_argument("--json", default=None, help="also write the figures to this JSON file")
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore")
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    out: dict = {"threads": torch.get_num_threads(), "config": kgtuner_config(args.kgtuner_steps)}
    rate, _ = gemm_rate()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; fp32 GEMM {rate / 1e9:.1f} GFLOP/s"
          " (figures: wall clock, and in brackets per CPU-second of this process)")
    for name in args.datasets:
        kg = load_dataset(os.path.join(args.data_root, name))
        row: dict = {"entities": kg.num_entities, "train": len(kg.train), "test": len(kg.test)}
        ours, model = train_kgtuner(kg, args.kgtuner_steps)
        row["kgtuner_triples_per_s"] = ours
        line = f"{name}: train kgtuner {ours['wall']:,.0f} [{ours['cpu']:,.0f}] triples/s"
        if not args.no_pykeen:
            theirs = train_pykeen(kg, args.pykeen_seconds)
            row["pykeen_triples_per_s"] = theirs
            row["train_ratio"] = {k: ours[k] / theirs[k] for k in ("wall", "cpu")}
            line += (f" | PyKEEN sLCWA {theirs['wall']:,.0f} [{theirs['cpu']:,.0f}] triples/s"
                     f" | ratio {row['train_ratio']['wall']:.0f}x [{row['train_ratio']['cpu']:.0f}x]")
        print(line, flush=True)
        if name in args.eval_datasets:
            fi = FilterIndex.from_graph(kg)
            evaluate_filtered(model, kg.test[:64], fi, batch_size=args.eval_batch)  # warm-up
            flops = 2.0 * 2 * len(kg.test) * kg.num_entities * DIM
            # interleave GEMM-rate measurements and evaluations; keep the best of each (noisy machine)
            best = {"eval_wall": math.inf, "eval_cpu": math.inf, "floor_wall": math.inf, "floor_cpu": math.inf}
            for _ in range(args.eval_repeats):
                g_wall, g_cpu = gemm_rate()
                with Clock() as c:
                    metrics = evaluate_filtered(model, kg.test, fi, batch_size=args.eval_batch)
                best = {"eval_wall": min(best["eval_wall"], c.wall), "eval_cpu": min(best["eval_cpu"], c.cpu),
                        "floor_wall": min(best["floor_wall"], flops / g_wall),
                        "floor_cpu": min(best["floor_cpu"], flops / g_cpu)}
            row.update(best, kgtuner_test_mrr=metrics["mrr"], eval_over_floor=best["eval_wall"] / best["floor_wall"],
                       eval_over_floor_cpu=best["eval_cpu"] / best["floor_cpu"])
            line = (f"{name}: filtered test eval ({2 * len(kg.test)} queries x {kg.num_entities} entities) kgtuner "
                    f"{best['eval_wall']:.2f} s [{best['eval_cpu']:.2f} CPU-s] = {row['eval_over_floor']:.2f}x "
                    f"[{row['eval_over_floor_cpu']:.2f}x] the GEMM floor {best['floor_wall']:.2f} s "
                    f"[{best['floor_cpu']:.2f} CPU-s] (MRR {metrics['mrr']:.4f})")
            if not args.no_pykeen:
                pk, pk_mrr = eval_pykeen(kg, model, args.pykeen_eval_batch)
                row.update(eval_pykeen_wall=pk.wall, eval_pykeen_cpu=pk.cpu, pykeen_test_mrr=pk_mrr,
                           eval_ratio=pk.wall / best["eval_wall"], eval_ratio_cpu=pk.cpu / best["eval_cpu"])
                line += (f" | PyKEEN {pk.wall:.2f} s [{pk.cpu:.2f} CPU-s] (MRR {pk_mrr:.4f}) | ratio "
                         f"{row['eval_ratio']:.1f}x [{row['eval_ratio_cpu']:.1f}x]")
            print(line, flush=True)
        out[name] = row
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
