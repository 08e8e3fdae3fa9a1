#!/usr/bin/env python
"""Benchmark of the data layer: load (cold / cached), filter-index build, 20% subgraph, peak memory.

Datasets: WN18RR from ../shared/datasets (skipped when absent) and a synthetic graph of ogbl-biokg's
shape (93,773 entities, 51 relations, 4,762,678 / 162,886 / 162,870 triples, skewed degrees), written
as Parquet (string names) into a temporary folder. Each phase runs in a fresh subprocess so that its
peak RSS is its own. Times are also printed as ratios to an anchor (sorting 10M int64 numbers) measured
in the same run, because the machine may be shared.

    python scripts/perf/bench_data.py [--ratio 0.2] [--sampler multi_rw] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("KGTUNER_SHARED_DATASETS", REPO.parent / "shared" / "datasets"))
BIOKG_SHAPE = {"entities": 93_773, "relations": 51, "train": 4_762_678, "valid": 162_886, "test": 162_870}


def anchor_seconds() -> float:
    """Seconds to sort 10M random int64 numbers (best of 3): the machine-speed yardstick."""
    data = np.random.default_rng(0).integers(0, 1 << 40, size=10_000_000)
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        np.sort(data)
        best = min(best, time.perf_counter() - start)
    return best


def write_biokg_like(folder: Path, seed: int = 0) -> None:
    """Synthetic biokg-shaped graph as Parquet with dictionary-encoded string names."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    n_ent, n_rel = BIOKG_SHAPE["entities"], BIOKG_SHAPE["relations"]
    popularity = rng.lognormal(0.0, 1.5, size=n_ent)  # skewed degrees, hubs as in biokg
    popularity /= popularity.sum()
    ent_names = pa.array([f"ent{i:06d}" for i in range(n_ent)])
    rel_names = pa.array([f"rel{i:02d}" for i in range(n_rel)])
    total = BIOKG_SHAPE["train"] + BIOKG_SHAPE["valid"] + BIOKG_SHAPE["test"]
    heads = rng.choice(n_ent, size=total, p=popularity)
    tails = rng.choice(n_ent, size=total, p=popularity)
    rels = rng.integers(0, n_rel, size=total)
    heads[:n_ent] = rng.permutation(n_ent)  # every entity occurs in train, as in biokg
    folder.mkdir(parents=True, exist_ok=True)
    start = 0
    for split in ("train", "valid", "test"):
        end = start + BIOKG_SHAPE[split]
        table = pa.table({
            "head": pa.DictionaryArray.from_arrays(pa.array(heads[start:end].astype(np.int32)), ent_names),
            "relation": pa.DictionaryArray.from_arrays(pa.array(rels[start:end].astype(np.int32)), rel_names),
            "tail": pa.DictionaryArray.from_arrays(pa.array(tails[start:end].astype(np.int32)), ent_names),
        })
        pq.write_table(table, folder / f"{split}.parquet")
        start = end


def measure(dataset: str, cache: str, ratio: float, sampler: str) -> dict:
    """One phase in this (fresh) process: load, then filter index and subgraph; times and peak RSS."""
    import warnings

    from kgtuner.data import FilterIndex, load_dataset, sample_subgraph

    warnings.simplefilter("ignore")
    out = {}
    start = time.perf_counter()
    kg = load_dataset(dataset, cache_dir=cache)
    out["load_s"] = time.perf_counter() - start
    start = time.perf_counter()
    fi = FilterIndex.from_graph(kg)
    out["filter_s"] = time.perf_counter() - start
    rng = np.random.default_rng(0)
    q = kg.test[rng.integers(0, len(kg.test), 1024)]
    start = time.perf_counter()
    for _ in range(10):
        fi.true_tails(q[:, 0], q[:, 1])
        fi.true_heads(q[:, 1], q[:, 2])
    out["filter_query_ms"] = (time.perf_counter() - start) / 20 * 1e3
    start = time.perf_counter()
    sub = sample_subgraph(kg, ratio=ratio, seed=0, sampler=sampler)
    out["subgraph_s"] = time.perf_counter() - start
    out["sub_entity_ratio"] = sub.entity_ratio
    out["sub_train"] = int(len(sub.graph.train))
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out["triples"] = int(len(kg.train) + len(kg.valid) + len(kg.test))
    return out


def run_phase(dataset: Path, cache: Path, ratio: float, sampler: str) -> dict:
    cmd = [sys.executable, __file__, "--measure", str(dataset), "--cache", str(cache),
           "--ratio", str(ratio), "--sampler", sampler]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ratio", type=float, default=0.2)
    parser.add_argument("--sampler", default="multi_rw")
    parser.add_argument("--keep", default=None, help="folder for the synthetic data (default: a temp dir)")
    parser.add_argument("--measure", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--cache", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.cache, args.ratio, args.sampler)))
        return

    anchor = anchor_seconds()
    with tempfile.TemporaryDirectory(prefix="kgtuner-bench-") as tmp:
        work = Path(args.keep) if args.keep else Path(tmp)
        datasets = {}
        if (SHARED / "wn18rr" / "train.txt").exists():
            datasets["wn18rr (text)"] = SHARED / "wn18rr"
        else:
            print(f"(wn18rr skipped: {SHARED / 'wn18rr'} absent)")
        biokg = work / "biokg_like"
        if not (biokg / "train.parquet").exists():
            start = time.perf_counter()
            write_biokg_like(biokg)
            print(f"wrote synthetic biokg-shaped Parquet in {time.perf_counter() - start:.1f} s")
        datasets["biokg-shaped (parquet)"] = biokg

        rows = []
        for label, path in datasets.items():
            cache = work / f"cache-{path.name}"
            shutil.rmtree(cache, ignore_errors=True)  # the first phase must be a real cold load
            cold = run_phase(path, cache, args.ratio, args.sampler)
            warm = run_phase(path, cache, args.ratio, args.sampler)
            rows.append((label, cold, warm))

    print(f"\nanchor (np.sort of 10M int64, best of 3): {anchor:.3f} s; cores: {os.cpu_count()}")
    head = (f"{'dataset':24} {'triples':>9} {'cold load':>10} {'cached load':>12} {'filter idx':>11} "
            f"{'cached+filter':>14} {'subgraph':>9} {'query/1k':>9} {'peak RSS cold/cached':>21}")
    print(head)
    print("-" * len(head))
    for label, cold, warm in rows:
        both = warm["load_s"] + warm["filter_s"]
        print(f"{label:24} {cold['triples']:>9,} {cold['load_s']:>9.2f}s {warm['load_s']:>11.2f}s "
              f"{warm['filter_s']:>10.2f}s {both:>13.2f}s {warm['subgraph_s']:>8.2f}s "
              f"{warm['filter_query_ms']:>7.2f}ms {cold['peak_rss_mb']:>9.0f}/{warm['peak_rss_mb']:.0f} MB")
        print(f"{'  (x anchor)':24} {'':>9} {cold['load_s'] / anchor:>9.1f}x {warm['load_s'] / anchor:>11.1f}x "
              f"{warm['filter_s'] / anchor:>10.1f}x {both / anchor:>13.1f}x {warm['subgraph_s'] / anchor:>8.1f}x")
        print(f"{'  subgraph':24} entity ratio {warm['sub_entity_ratio']:.4f}, {warm['sub_train']:,} train triples")
    print("targets (2 cores, biokg-shaped): cached load + filter index < 10 s, subgraph < 10 s, peak RSS < 2 GB")


if __name__ == "__main__":
    main()
