"""Quality runs: train one configuration with kgtuner (and optionally the same with PyKEEN), report MRR.

Trains ``kgtuner.kge.Trainer`` on a shared benchmark dataset with the given settings (any
``TrainConfig`` name as ``key=value``), then prints the configuration, wall time, the
best-validation filtered metrics and their test metrics. ``--pykeen`` also trains PyKEEN's ComplEx
with the same configuration and number of epochs (sampled negatives, ``BCE_sum`` = PyKEEN's
softplus loss or ``CE`` = its cross-entropy, no regularizer, no reciprocal relations) and reports
its filtered test MRR from PyKEEN's own evaluator (realistic ranks, as kgtuner's).

Examples (repo root; PyKEEN only in the benchmark environment ``.venv-bench``)::

    python scripts/perf/bench_quality.py wn18rr model=complex dim=500 negatives=1VsAll loss=CE \\
        regularizer=NUC reg_weight=0.05 lr=3e-3 inverse=true batch_size=1024 max_epochs=70 valid_every=425
    .venv-bench/bin/python scripts/perf/bench_quality.py kinships --pykeen model=complex dim=200 \\
        negatives=32 loss=BCE_sum regularizer=None batch_size=256 lr=1e-2 max_epochs=100
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

import torch
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from kgtuner.data import load_dataset  # noqa: E402
from kgtuner.kge import TrainConfig, Trainer  # noqa: E402


def parse_settings(pairs: list[str]) -> dict:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"settings are key=value, got {pair!r}")
        out[key] = yaml.safe_load(value)
    return out


def run_kgtuner(kg, settings: dict, max_seconds: float | None = None) -> dict:
    """Train with validation; ``max_seconds`` stops at the first validation past that wall time."""
    cfg = TrainConfig.from_dict(settings)
    t0 = time.perf_counter()

    def report(rep: dict) -> bool:
        print(f"  step {rep['step']} epoch {rep['epoch']:.1f} loss {rep['loss']:.4f} lr {rep['lr']:.2g} "
              f"valid mrr {rep['valid_mrr']:.4f} ({rep['train_seconds']:.0f} s training, "
              f"{time.perf_counter() - t0:.0f} s wall)", flush=True)
        return max_seconds is not None and time.perf_counter() - t0 > max_seconds

    trainer = Trainer(cfg, kg, callback=report)
    result = trainer.fit()
    test = result.test
    if result.status == "stopped":  # time budget: test metrics of the best-validation weights
        test = trainer.evaluate_test()
    wall = time.perf_counter() - t0
    t1 = time.perf_counter()
    trainer.evaluate("test", trainer.best_model())
    eval_s = time.perf_counter() - t1
    return {"config": cfg.to_dict(), "device": str(trainer.device), "status": result.status,
            "stop_reason": result.stop_reason, "wall_seconds": wall, "train_seconds": result.train_seconds,
            "epochs": result.epochs, "best_step": result.best_step,
            "triples_per_second": result.triples_per_second, "test_eval_seconds": eval_s,
            "valid": result.valid, "test": test}


def run_pykeen(kg, cfg: TrainConfig) -> dict:
    """PyKEEN ComplEx, sLCWA, with ``cfg``'s dim, negatives, loss, batch, lr and epochs."""
    from pykeen.evaluation import RankBasedEvaluator
    from pykeen.models import ComplEx
    from pykeen.training import SLCWATrainingLoop
    from pykeen.triples import CoreTriplesFactory

    losses = {"BCE_sum": "softplus", "CE": "crossentropy"}
    if cfg.model != "complex" or not cfg.sampled or cfg.loss not in losses or cfg.regularizer != "None" \
            or cfg.inverse or cfg.optimizer != "Adam" or cfg.max_epochs is None:
        raise SystemExit("--pykeen supports model=complex, integer negatives, loss BCE_sum|CE, regularizer=None, "
                         "inverse=false, optimizer=Adam and max_epochs")
    tf = CoreTriplesFactory.create(mapped_triples=torch.as_tensor(kg.train), num_entities=kg.num_entities,
                                   num_relations=kg.num_relations)
    model = ComplEx(triples_factory=tf, embedding_dim=cfg.dim // 2, regularizer=None, loss=losses[cfg.loss],
                    random_seed=cfg.seed)
    loop = SLCWATrainingLoop(model=model, triples_factory=tf, optimizer="adam", optimizer_kwargs={"lr": cfg.lr},
                             negative_sampler="basic", negative_sampler_kwargs={"num_negs_per_pos": cfg.negatives})
    t0 = time.perf_counter()
    loop.train(triples_factory=tf, num_epochs=cfg.max_epochs, batch_size=cfg.batch_size, use_tqdm=False)
    train_s = time.perf_counter() - t0
    extra = [torch.as_tensor(x) for x in (kg.train, kg.valid, kg.unseen)]
    res = RankBasedEvaluator(filtered=True, batch_size=64).evaluate(
        model, torch.as_tensor(kg.test), batch_size=64, additional_filter_triples=extra, use_tqdm=False)
    test = {"mrr": res.get_metric("both.realistic.inverse_harmonic_mean_rank"),
            **{f"hits@{k}": res.get_metric(f"both.realistic.hits_at_{k}") for k in (1, 3, 10)}}
    return {"train_seconds": train_s, "epochs": cfg.max_epochs, "test": test}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("dataset", help="name under --data-root (wn18rr, kinships, umls, ...)")
    p.add_argument("settings", nargs="*", help="TrainConfig settings key=value")
    p.add_argument("--data-root", default=str(REPO.parent / "shared" / "datasets"))
    p.add_argument("--pykeen", action="store_true", help="also train PyKEEN with the same configuration")
    p.add_argument("--max-seconds", type=float, default=None,
                   help="stop at the first validation after this wall time (test metrics still computed)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads (default: torch's choice; 1 is far more stable on a busy shared machine)")
    p.add_argument("--json", default=None)
    args = p.parse_intermixed_args(argv)
    warnings.filterwarnings("ignore")
    if args.threads:
        torch.set_num_threads(args.threads)
    kg = load_dataset(os.path.join(args.data_root, args.dataset))
    settings = parse_settings(args.settings)
    settings.setdefault("patience", 1000)  # fixed number of epochs unless asked otherwise
    out = {"dataset": args.dataset, "kgtuner": run_kgtuner(kg, settings, args.max_seconds)}
    k = out["kgtuner"]
    print(f"kgtuner {args.dataset} on {k['device']}: {k['status']}, {k['epochs']:.1f} epochs, "
          f"wall {k['wall_seconds']:.0f} s (training {k['train_seconds']:.0f} s, "
          f"{k['triples_per_second']:,.0f} triples/s), best step {k['best_step']}; "
          f"test evaluation {k['test_eval_seconds']:.2f} s")
    print(f"  valid {k['valid']}\n  test  {k['test']}", flush=True)
    if args.pykeen:
        cfg = TrainConfig.from_dict(settings)
        out["pykeen"] = run_pykeen(kg, cfg)
        print(f"PyKEEN {args.dataset}: training {out['pykeen']['train_seconds']:.0f} s; test {out['pykeen']['test']}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
