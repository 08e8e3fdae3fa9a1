"""``python -m kgtuner.data``: dataset statistics and subgraph sampling from the command line.

Errors in the input (bad file, unknown dataset, bad option) print one ``kgtuner: error:`` line to stderr
and exit 2 (:mod:`kgtuner.cli`, the style of every kgtuner command).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kgtuner.cli import ArgumentParser, fail
from kgtuner.data.load import load_dataset
from kgtuner.data.loaders import write_folder
from kgtuner.data.subgraph import SAMPLERS, sample_subgraph
from kgtuner.data.unseen import UNSEEN_POLICIES
from kgtuner.errors import KGTunerError

DATASET_HELP = "built-in name (demo, ogbl-biokg, ogbl-wikikg2) or folder with train/valid/test (.txt/.tsv/.parquet)"


def _parser(prog: str = "python -m kgtuner.data") -> argparse.ArgumentParser:
    parser = ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir", default=None, help="processed-dataset cache (default $KGTUNER_CACHE)")
    parser.add_argument("--ogb-root", default=None, help="OGB datasets folder (default $KGTUNER_OGB_ROOT)")
    parser.add_argument("--unseen", choices=UNSEEN_POLICIES, default=None,
                        help="valid/test triples with entities/relations unseen in train: keep (default, ranked) | drop | error")
    parser.add_argument("--no-cache", action="store_true", help="neither read nor write the processed cache")
    sub = parser.add_subparsers(dest="command", required=True)

    stats = sub.add_parser("stats", help="print {name, entities, relations, train, valid, test} as JSON (each split "
                           "as in its file; with --unseen drop also ranked_valid, ranked_test)")
    stats.add_argument("dataset", help=DATASET_HELP)

    sg = sub.add_parser("subgraph", help="sample a subgraph; print its counts as JSON")
    sg.add_argument("dataset", help=DATASET_HELP)
    sg.add_argument("--ratio", type=float, default=0.2, help="fraction of entities to keep (default 0.2)")
    sg.add_argument("--seed", type=int, default=0)
    sg.add_argument("--sampler", choices=sorted(SAMPLERS), default="multi_rw")
    sg.add_argument("--out", default=None,
                    help="write the subgraph as a dataset folder (test.txt repeats valid.txt; "
                         "entity_ids.txt / relation_ids.txt map back to the full graph's ids)")
    return parser


def main(argv: list[str] | None = None, prog: str = "python -m kgtuner.data") -> int:
    args = _parser(prog).parse_args(argv)
    try:
        kg = load_dataset(
            args.dataset, args.cache_dir, unseen=args.unseen, use_cache=not args.no_cache, ogb_root=args.ogb_root
        )
        if args.command == "stats":
            print(json.dumps(kg.stats()))
            return 0
        sub = sample_subgraph(kg, ratio=args.ratio, seed=args.seed, sampler=args.sampler)
        if args.out:
            out = Path(args.out)
            write_folder(sub.graph, out, test_from="valid")
            (out / "entity_ids.txt").write_text("\n".join(map(str, sub.entity_ids.tolist())) + "\n")
            (out / "relation_ids.txt").write_text("\n".join(map(str, sub.relation_ids.tolist())) + "\n")
        print(json.dumps(sub.summary()))
        return 0
    except KGTunerError as exc:
        return fail(exc)


if __name__ == "__main__":
    sys.exit(main())
