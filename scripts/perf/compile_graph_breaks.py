"""Graphs and graph breaks of each model's compiled training objective (``compile: true``), traced by Dynamo.

One line per model and loss (sampled negatives, the row step's objective on the demo graph, CPU, no C++ compiler
needed): the number of graphs Dynamo makes of the objective, its breaks, and their reasons. One graph and no
break is what ``tests/test_kge_row_step.py::test_the_compiled_objective_is_one_graph`` requires.

    python scripts/perf/compile_graph_breaks.py [--models complex rotate ...] [--losses BCE_adv CE MR]
"""

from __future__ import annotations

import argparse

import torch
import torch._dynamo as dynamo

from kgtuner.data import load_dataset
from kgtuner.kge import MODELS, TrainConfig, Trainer

NO_REGULARIZER = ("transe", "rotate", "conve")  # models the DURA regulariser does not apply to


def explain(kg, model: str, loss: str):
    cfg = {"model": model, "dim": 32, "batch_size": 64, "negatives": 16, "loss": loss, "reg_weight": 1e-3,
           "regularizer": "None" if model in NO_REGULARIZER else "DURA", "max_steps": 1}
    trainer = Trainer(TrainConfig.from_dict(cfg), kg, device="cpu")
    batch = torch.as_tensor(kg.train[:64])
    ids = trainer.sampler.row_ids(trainer.model, batch, trainer.sampler.draw(trainer.generator))
    leaves = [w.detach().index_select(0, i).requires_grad_()
              for w, i in zip((trainer.model.entity.weight, trainer.model.relation.weight), ids)]
    dynamo.reset()
    return dynamo.explain(trainer._rows_objective)(batch, leaves[0], None, leaves[1], None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=sorted(MODELS))
    ap.add_argument("--losses", nargs="+", default=["BCE_adv"])
    args = ap.parse_args()
    kg = load_dataset("demo")
    for model in args.models:
        for loss in args.losses:
            ex = explain(kg, model, loss)
            reasons = sorted({r.reason.splitlines()[0][:80] for r in ex.break_reasons})
            print(f"{model:9s} {loss:9s} graphs {ex.graph_count:3d} breaks {ex.graph_break_count:3d} {reasons}",
                  flush=True)


if __name__ == "__main__":
    main()
