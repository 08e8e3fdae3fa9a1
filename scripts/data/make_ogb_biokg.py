"""Synthetic ogbl-biokg datasets in OGB's on-disk layout, read by the real ``ogb`` loader.

``ROOT/ogbl_biokg/``: ``raw/num-node-dict.csv.gz``, ``raw/triplet-type-list.csv.gz``,
``raw/relations/<head type>___<relation>___<tail type>/{edge,num-edge-list,edge_reltype}.csv.gz``,
``split/random/{train,valid,test}.pt`` (OGB's split dicts: type-local ``head``/``tail``, ``relation``,
``head_type``/``tail_type``, and for valid/test ``head_neg``/``tail_neg`` candidates local to the type of
the side they replace), an empty ``processed/`` and ``RELEASE_v1.txt`` (without it ogb asks to delete the
folder). ``kgtuner.data.load_dataset("ogbl-biokg", ogb_root=ROOT)`` then loads it as the real data set
(typed negatives, the OGB evaluator).

Two generators share the writer:

* :func:`write_fake_biokg`: the tiny, random one of ``tests/test_data_ogb.py`` (15 entities);
* :func:`make_learnable_biokg`: biokg's five entity types in biokg's proportions, relations between
  type pairs, and *structure*: every entity belongs to one of ``clusters`` latent clusters of its type,
  and each relation maps a head cluster to one tail cluster (a random permutation), so a tail is drawn
  from the cluster its head and relation point to (with probability ``noise``: anywhere in its type).
  A KGE model that learns the clusters ranks the true entity above the candidates of other clusters,
  so the OGB test MRR rises far above the random MRR (``H(K+1)/(K+1)`` for ``K`` candidates). A query's
  candidates never include its true entity (an exact tie would be ranked by rounding noise).

    python scripts/data/make_ogb_biokg.py ROOT                       # ~20k entities, 500k train triples
    python scripts/data/make_ogb_biokg.py ROOT --smoke --load        # a toy graph for CPU checks, loaded once
    python scripts/data/make_ogb_biokg.py ROOT --entities 93773 --train-triples 4762678
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

import numpy as np

# ---------------------------------------------------------------------------------------------- writer


def _gz(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", compresslevel=1) as fh:
        fh.write(text)


def _gz_ints(path: Path, columns: list[np.ndarray]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", compresslevel=1) as fh:
        np.savetxt(fh, np.stack(columns, 1), fmt="%d", delimiter=",")


def write_layout(root: Path, counts: dict[str, int], relations: list[tuple[str, str, str]],
                 splits: dict[str, dict], edges: dict | None = None, note: str = "synthetic ogbl-biokg") -> Path:
    """Write ``ROOT/ogbl_biokg`` in OGB's layout and return that folder.

    ``counts``: entities per type; ``relations``: (head type, name, tail type), the relation id is the
    index; ``splits``: OGB split dicts (see the module docstring); ``edges``: the raw graph, a
    ``(head local, relation, tail local)`` int array (default: the train split, as in OGB)."""
    import torch

    folder = Path(root) / "ogbl_biokg"
    raw = folder / "raw"
    names = sorted(counts)
    _gz(raw / "num-node-dict.csv.gz", ",".join(names) + "\n" + ",".join(str(counts[n]) for n in names) + "\n")
    _gz(raw / "triplet-type-list.csv.gz", "".join(",".join(t) + "\n" for t in relations))
    if edges is None:
        tr = splits["train"]
        edges = np.stack([tr["head"], tr["relation"], tr["tail"]], 1)
    for rid, (ht, rel, tt) in enumerate(relations):
        mine = edges[edges[:, 1] == rid]
        sub = raw / "relations" / f"{ht}___{rel}___{tt}"
        _gz_ints(sub / "edge.csv.gz", [mine[:, 0], mine[:, 2]])
        _gz(sub / "num-edge-list.csv.gz", f"{len(mine)}\n")
        _gz_ints(sub / "edge_reltype.csv.gz", [np.full(len(mine), rid)])
    (folder / "split" / "random").mkdir(parents=True, exist_ok=True)
    for name, d in splits.items():
        torch.save(d, folder / "split" / "random" / f"{name}.pt")
    (folder / "processed").mkdir(exist_ok=True)
    (folder / "RELEASE_v1.txt").write_text(note + "\n")
    return folder


# ------------------------------------------------------------------------------- tiny random (tests)

TYPES = {"disease": 4, "drug": 6, "protein": 5}  # entities per type; global ids follow sorted type names
# (head type, relation name, tail type) -> relation id, as in biokg's edge_reltype
BIOKG_RELATIONS = {("drug", "drug-protein", "protein"): 0, ("protein", "protein-disease", "disease"): 1,
                   ("drug", "drug-disease", "disease"): 2}
K = 3  # candidate negatives per query


def _split_dict(rng, rows, with_negatives):
    """rows: list of (head type, head local id, relation id, tail type, tail local id)."""
    d = {
        "head": np.array([r[1] for r in rows], dtype=np.int64),
        "relation": np.array([r[2] for r in rows], dtype=np.int64),
        "tail": np.array([r[4] for r in rows], dtype=np.int64),
        "head_type": [r[0] for r in rows],
        "tail_type": [r[3] for r in rows],
    }
    if with_negatives:  # local to the entity type of the replaced side
        d["head_neg"] = np.stack([rng.integers(0, TYPES[r[0]], K) for r in rows]).astype(np.int64)
        d["tail_neg"] = np.stack([rng.integers(0, TYPES[r[3]], K) for r in rows]).astype(np.int64)
    return d


def write_fake_biokg(root: Path, unseen: bool = False) -> dict:
    """A tiny random ogbl-biokg (15 entities, 3 relations, 3 candidates) under ``root``; returns the split
    dicts written. ``unseen``: one more protein, which occurs only in a test triple."""
    rng = np.random.default_rng(0)
    counts = {n: TYPES[n] + (unseen and n == "protein") for n in TYPES}
    rows = []
    for (ht, rel, tt), rid in BIOKG_RELATIONS.items():
        edges = sorted({(int(rng.integers(TYPES[ht])), int(rng.integers(TYPES[tt]))) for _ in range(12)})
        rows += [(ht, h, rid, tt, t) for h, t in edges]
    raw_edges = np.array([(h, rid, t) for _, h, rid, _, t in rows], dtype=np.int64)
    order = rng.permutation(len(rows))
    rows = [rows[i] for i in order]
    n = len(rows)
    last = [("drug", 0, 0, "protein", TYPES["protein"])] if unseen else []
    splits = {"train": _split_dict(rng, rows[: n - 8], False), "valid": _split_dict(rng, rows[n - 8: n - 4], True),
              "test": _split_dict(rng, rows[n - 4:] + last, True)}
    write_layout(root, counts, list(BIOKG_RELATIONS), splits, edges=raw_edges,
                 note="tiny fake ogbl-biokg written by kgtuner's tests")
    return splits


# ------------------------------------------------------------------------------------ learnable graph

#: ogbl-biokg's entities per type (93,773 in all); the generator keeps these proportions
BIOKG_TYPES = {"disease": 10687, "drug": 10533, "function": 45085, "protein": 17499, "sideeffect": 9969}
#: type pairs of biokg's relations (drug-drug interactions, protein-protein, drug-target, ...)
PAIRS = [("drug", "drug"), ("protein", "protein"), ("drug", "protein"), ("drug", "sideeffect"),
         ("protein", "function"), ("function", "function"), ("drug", "disease"), ("disease", "protein"),
         ("protein", "disease")]


def random_mrr(k: int) -> float:
    """Expected MRR of a random scorer against ``k`` candidates: the rank is uniform on 1..k+1."""
    return float(np.sum(1.0 / np.arange(1, k + 2)) / (k + 1))


def make_learnable_biokg(root: Path, entities: int = 20_000, relations: int = 51, train_triples: int = 500_000,
                         eval_triples: int = 2_000, candidates: int = 500, clusters: int = 32,
                         noise: float = 0.1, seed: int = 0) -> dict:
    """Write a structured synthetic ogbl-biokg under ``root`` (see the module docstring); returns its
    statistics (JSON-able)."""
    rng = np.random.default_rng(seed)
    total = sum(BIOKG_TYPES.values())
    counts = {t: max(2 * clusters, round(entities * n / total)) for t, n in BIOKG_TYPES.items()}
    # entities of each type, grouped by cluster: members[t][c] = local ids of cluster c
    cluster_of = {t: rng.integers(0, clusters, n) for t, n in counts.items()}
    members = {t: [np.flatnonzero(c == k) for k in range(clusters)] for t, c in cluster_of.items()}
    rels = [(PAIRS[i % len(PAIRS)][0], f"{PAIRS[i % len(PAIRS)][0]}-{PAIRS[i % len(PAIRS)][1]}-{i}",
             PAIRS[i % len(PAIRS)][1]) for i in range(relations)]
    maps = [rng.permutation(clusters) for _ in rels]  # relation i: head cluster c -> tail cluster maps[i][c]
    rank = [rng.permutation(counts[ht]) for ht, _, _ in rels]  # relation i's head popularity order
    pop = {ht: 1.0 / np.arange(1, counts[ht] + 1) ** 0.5 for ht, _, _ in rels}  # skewed, as real graphs have

    def draw(n: int) -> np.ndarray:
        r = rng.integers(0, relations, n)
        h, t = np.empty(n, np.int64), np.empty(n, np.int64)
        for i, (ht, _, tt) in enumerate(rels):
            idx = np.flatnonzero(r == i)
            h[idx] = rank[i][rng.choice(counts[ht], len(idx), p=pop[ht] / pop[ht].sum())]
            target = maps[i][cluster_of[ht][h[idx]]]
            tails = rng.integers(0, counts[tt], len(idx))  # noise, and clusters left empty
            for k in np.unique(target):
                sel = np.flatnonzero((target == k) & (rng.random(len(idx)) >= noise))
                if len(members[tt][k]):
                    tails[sel] = rng.choice(members[tt][k], len(sel))
            t[idx] = tails
        return np.stack([h, r, t], 1)

    need = train_triples + 2 * eval_triples
    triples = np.empty((0, 3), np.int64)
    for _ in range(10):  # draw until enough distinct triples (popular heads repeat)
        triples = np.unique(np.concatenate([triples, draw(int(1.1 * (need - len(triples))) + 100)]), axis=0)
        if len(triples) >= need:
            break
    else:
        raise SystemExit(f"only {len(triples)} distinct triples; ask for fewer triples or more entities")
    triples = triples[rng.permutation(len(triples))]
    types = {i: (ht, tt) for i, (ht, _, tt) in enumerate(rels)}
    head_type = np.array([types[i][0] for i in range(relations)])
    tail_type = np.array([types[i][1] for i in range(relations)])

    def split(rows: np.ndarray, negatives: bool) -> dict:
        d = {"head": rows[:, 0].copy(), "relation": rows[:, 1].copy(), "tail": rows[:, 2].copy(),
             "head_type": head_type[rows[:, 1]].tolist(), "tail_type": tail_type[rows[:, 1]].tolist()}
        if negatives:  # OGB's candidates: random entities of the replaced side's type (type-local ids)
            for side, true in (("head", d["head"]), ("tail", d["tail"])):
                n = np.array([counts[x] for x in d[f"{side}_type"]])[:, None]
                neg = (rng.random((len(rows), candidates)) * n).astype(np.int64)
                while (same := neg == true[:, None]).any():  # never the true entity: no exact ties to rank
                    neg[same] = (rng.random(int(same.sum())) * np.broadcast_to(n, neg.shape)[same]).astype(np.int64)
                d[f"{side}_neg"] = neg
        return d

    train, rest = triples[:train_triples], triples[train_triples:]
    # valid/test: triples whose head and tail occur in train (the graph is dense enough that almost all do)
    names = sorted(counts)
    offset = dict(zip(names, np.cumsum([0] + [counts[n] for n in names[:-1]]).tolist()))
    h_off = np.array([offset[x] for x in head_type])
    t_off = np.array([offset[x] for x in tail_type])
    in_train = np.zeros(sum(counts.values()), dtype=bool)
    in_train[h_off[train[:, 1]] + train[:, 0]] = True
    in_train[t_off[train[:, 1]] + train[:, 2]] = True
    rest = rest[in_train[h_off[rest[:, 1]] + rest[:, 0]] & in_train[t_off[rest[:, 1]] + rest[:, 2]]]
    valid, test = rest[:eval_triples], rest[eval_triples:2 * eval_triples]
    splits = {"train": split(train, False), "valid": split(valid, True), "test": split(test, True)}
    folder = write_layout(root, counts, rels, splits,
                          note=f"synthetic learnable ogbl-biokg (kgtuner scripts/data/make_ogb_biokg.py, seed {seed})")
    stats = {"folder": str(folder), "entities": sum(counts.values()), "entity_types": counts,
             "relations": relations, "train": len(train), "valid": len(valid), "test": len(test),
             "candidates": candidates, "clusters": clusters, "noise": noise, "seed": seed,
             "random_mrr": random_mrr(candidates)}
    (folder / "synthetic.json").write_text(json.dumps(stats, indent=2))
    return stats


SMOKE = {"entities": 1000, "relations": 12, "train_triples": 8_000, "eval_triples": 200, "candidates": 50,
         "clusters": 8}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root", type=Path, help="OGB root folder (data.ogb_root / $KGTUNER_OGB_ROOT)")
    ap.add_argument("--entities", type=int, default=20_000)
    ap.add_argument("--relations", type=int, default=51)
    ap.add_argument("--train-triples", type=int, default=500_000)
    ap.add_argument("--eval-triples", type=int, default=2_000, help="valid and test triples each")
    ap.add_argument("--candidates", type=int, default=500, help="OGB candidate negatives per query")
    ap.add_argument("--clusters", type=int, default=32, help="latent clusters per entity type")
    ap.add_argument("--noise", type=float, default=0.1, help="share of tails drawn anywhere in their type")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--smoke", action="store_true", help=f"toy size for CPU checks: {SMOKE}")
    ap.add_argument("--load", action="store_true",
                    help="then load it once through kgtuner (ogb processes the raw files; kgtuner's cache is filled), "
                         "so that later concurrent readers find both")
    args = ap.parse_args()
    kw = {k: getattr(args, k) for k in ("entities", "relations", "train_triples", "eval_triples", "candidates",
                                        "clusters", "noise", "seed")}
    if args.smoke:
        kw.update(SMOKE)
    stats = make_learnable_biokg(args.root, **kw)
    print(json.dumps(stats), flush=True)
    if args.load:
        from kgtuner.data import load_dataset

        print(f"loaded: {load_dataset('ogbl-biokg', ogb_root=args.root)!r}", flush=True)


if __name__ == "__main__":
    main()
