#!/usr/bin/env python
"""One configuration trained for a fixed number of epochs with validation every epoch (and patience 50, so it never
stops early): the learning curve that sized issue 38's protocol (its 10-epoch limit; docs/benchmarks/tables/README.md).

    python scripts/benchmarks/converge_curve.py DATASET BATCH DIM NEGATIVES LOSS LR REGULARIZER REG_WEIGHT EPOCHS

Prints one line per validation (epoch, validation MRR on 3000 valid triples, cumulative CPU seconds of training and
validation), then the test metrics at the best validation. One torch thread, ComplEx, Adam, no dropout.
The outputs in docs/benchmarks/tables/converge_pilot/ are this script's, verbatim.
"""
import sys

import torch

from kgtuner.bench.record import train_config
from kgtuner.data import FilterIndex, load_dataset

torch.set_num_threads(1)
ds, b, d, neg, loss, lr, reg, rw = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], float(sys.argv[6]), sys.argv[7], float(sys.argv[8])
kg = load_dataset(ds); fi = FilterIndex.from_graph(kg)
spe = -(-len(kg.train)//b)
cfg = {"batch_size": b, "dim": d, "negatives": neg, "loss": loss, "lr": lr, "regularizer": reg, "reg_weight": rw,
       "dropout": 0.0, "optimizer": "Adam", "initializer": "xavier_uniform", "inverse": False, "gamma": 12.0, "adv_weight": 1.0}
res = train_config(kg, cfg, model="complex", controls={"max_epochs": int(sys.argv[9]), "max_steps": None, "valid_every": spe, "patience": 50, "max_valid_triples": 3000}, filter_index=fi)
for p in res["curve"]:
    print(f"ep {p['epoch']:.1f} valid {p['valid_mrr']:.4f} train_s {p['train_s']:.0f} valid_s {p['valid_s']:.0f}", flush=True)
print("test", res["test"], res["stop_reason"], res["seconds"])
