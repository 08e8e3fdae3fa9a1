"""``kgtuner predict`` (= ``python -m kgtuner.predict``): the answers of a trained model, from its run directory.

    kgtuner predict RUN_DIR --head H --relation R [--top 10] [--filter-known] [--json]   best tails of (H, R, ?)
    kgtuner predict RUN_DIR --relation R --tail T [--top 10] [--filter-known] [--json]   best heads of (?, R, T)
    kgtuner predict RUN_DIR --triples FILE [--batch-size N] [--json]                     score each triple of FILE

RUN_DIR is a search's run directory or a ``kgtuner train`` output directory (:func:`kgtuner.load_model`).
Rankings print as TSV ``rank, name, id, score`` (with a header line), or with ``--json`` as one JSON object.
``--triples`` reads ``head<TAB>relation<TAB>tail`` lines (``-``: stdin; blank lines skipped) and streams
``head, relation, tail, score`` rows in batches (TSV with a header; ``--json``: one JSON object per line),
never holding the file or an ``[N, entities]`` score matrix. ``--filter-known`` leaves out the answers
already true in the graph's train/valid/test triples (the graph named by the run's config, or ``--data``).
An unknown name, a missing file or a bad option prints one ``kgtuner: error:`` line (naming the nearest
known names) and exits with status 2; with ``--triples`` the batches before a bad line are already printed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Iterable, Iterator
from itertools import islice
from typing import TextIO

from kgtuner.cli import ArgumentParser, fail
from kgtuner.errors import ConfigError, DataError, KGTunerError


def read_triples(lines: Iterable[str], source: str = "<triples>") -> Iterator[tuple[int, str, str, str]]:
    """``(line number, head, relation, tail)`` of each ``head<TAB>relation<TAB>tail`` line (lazily; blank
    lines skipped); DataError naming ``source:line`` for a line without exactly three fields."""
    for lineno, line in enumerate(lines, 1):
        line = line.rstrip("\r\n")
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != 3:
            raise DataError(f"{source}:{lineno}: expected head<TAB>relation<TAB>tail, got {len(parts)} "
                            f"tab-separated field(s): {line[:80]!r}")
        yield lineno, parts[0], parts[1], parts[2]


def score_tsv(model, lines: Iterable[str], batch_size: int | None = None,
              source: str = "<triples>") -> Iterator[tuple[str, str, str, float]]:
    """Stream ``(head, relation, tail, score)`` for the triples of TSV ``lines`` with a
    :class:`~kgtuner.model.TrainedModel`: ``batch_size`` lines (default ``model.triples_batch_size()``) are
    read, scored and yielded at a time. An unknown name raises UnknownNameError naming ``source:line``."""
    import numpy as np

    from kgtuner.model.trained import UnknownNameError

    step = int(batch_size or model.triples_batch_size())
    if step < 1:
        raise ConfigError(f"batch size must be a whole number >= 1, got {batch_size!r}")
    rows = read_triples(lines, source)
    while True:
        chunk = list(islice(rows, step))
        if not chunk:
            return
        ids = np.empty((len(chunk), 3), dtype=np.int64)
        for i, (lineno, h, r, t) in enumerate(chunk):
            try:
                ids[i] = (model.entity_id(h), model.relation_id(r), model.entity_id(t))
            except UnknownNameError as exc:
                raise UnknownNameError(f"{source}:{lineno}: {exc}") from None
        scores = model.score_triples(ids[:, 0], ids[:, 1], ids[:, 2], batch_size=step)
        for (_, h, r, t), score in zip(chunk, scores.tolist()):
            yield h, r, t, score


def _number(score: float) -> float | None:
    return score if math.isfinite(score) else None


def _fmt(score: float) -> str:
    return f"{score:.7g}"


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = ArgumentParser(prog=prog, description=__doc__.splitlines()[0],
                            epilog="Examples: kgtuner predict RUN --head aspirin --relation treats --top 5; "
                                   "kgtuner predict RUN --triples candidates.tsv --json")
    parser.add_argument("run_dir", metavar="RUN_DIR",
                        help="run directory of a search or of kgtuner train (metrics.json, embeddings.npz)")
    parser.add_argument("--head", help="head entity name: rank the tails of (HEAD, RELATION, ?)")
    parser.add_argument("--relation", help="relation name")
    parser.add_argument("--tail", help="tail entity name: rank the heads of (?, RELATION, TAIL)")
    parser.add_argument("--triples", metavar="FILE",
                        help="score the head<TAB>relation<TAB>tail lines of FILE ('-': stdin), streamed in batches")
    parser.add_argument("--top", type=int, default=10, help="answers to print (default 10)")
    parser.add_argument("--filter-known", action="store_true",
                        help="leave out answers already true in the graph's train/valid/test triples")
    parser.add_argument("--json", action="store_true", help="JSON output (--triples: one object per line)")
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:N or auto")
    parser.add_argument("--data", default=None,
                        help="the graph, for --filter-known: dataset name or folder (default: the run's data node)")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="triples scored per batch with --triples (default: from the model's size)")
    return parser


def _check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    query = [name for name in ("head", "relation", "tail") if getattr(args, name) is not None]
    if args.triples is not None:
        if query or args.filter_known:
            parser.error(f"--triples scores a file; it takes no --{query[0] if query else 'filter-known'}")
        if args.batch_size is not None and args.batch_size < 1:
            parser.error(f"--batch-size must be >= 1, got {args.batch_size}")
        return
    if args.relation is None or (args.head is None) == (args.tail is None):
        parser.error("give --head H --relation R (best tails), --relation R --tail T (best heads) or --triples FILE")
    if args.top < 1:
        parser.error(f"--top must be >= 1, got {args.top}")


def _predict(model, args: argparse.Namespace, out: TextIO) -> None:
    if args.head is not None:
        rows = model.predict_tails(args.head, args.relation, top=args.top, filter_known=args.filter_known)
    else:
        rows = model.predict_heads(args.relation, args.tail, top=args.top, filter_known=args.filter_known)
    if args.json:
        doc = {"run": str(model.path), "model": model.config.model,
               "query": {"head": args.head, "relation": args.relation, "tail": args.tail},
               "predict": "tail" if args.head is not None else "head", "filter_known": bool(args.filter_known),
               "predictions": [{"rank": i, "name": p.name, "id": p.id, "score": _number(p.score)}
                               for i, p in enumerate(rows, 1)]}
        out.write(json.dumps(doc) + "\n")
        return
    out.write("rank\tname\tid\tscore\n")
    for i, p in enumerate(rows, 1):
        out.write(f"{i}\t{p.name}\t{p.id}\t{_fmt(p.score)}\n")


def _score_file(model, args: argparse.Namespace, out: TextIO) -> None:
    if args.triples == "-":
        handle, source = sys.stdin, "<stdin>"
    else:
        source = args.triples
        try:
            handle = open(os.path.expanduser(args.triples), encoding="utf-8")  # noqa: SIM115 - closed below
        except OSError as exc:
            raise ConfigError(f"--triples {args.triples}: cannot read it ({exc.strerror or exc})") from None
    try:
        if not args.json:
            out.write("head\trelation\ttail\tscore\n")
        for h, r, t, score in score_tsv(model, handle, args.batch_size, source):
            if args.json:
                out.write(json.dumps({"head": h, "relation": r, "tail": t, "score": _number(score)}) + "\n")
            else:
                out.write(f"{h}\t{r}\t{t}\t{_fmt(score)}\n")
    except UnicodeDecodeError as exc:
        raise DataError(f"{source} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    finally:
        if handle is not sys.stdin:
            handle.close()


def main(argv: list[str] | None = None, prog: str = "python -m kgtuner.predict") -> int:
    """Entry point (``kgtuner predict``, ``python -m kgtuner.predict``); returns the exit status."""
    parser = _parser(prog)
    args = parser.parse_args(argv)
    _check(parser, args)
    try:
        from kgtuner.model.load import load_model

        model = load_model(args.run_dir, device=args.device, data=args.data)
        if args.triples is not None:
            _score_file(model, args, sys.stdout)
        else:
            _predict(model, args, sys.stdout)
        sys.stdout.flush()
    except KGTunerError as exc:
        sys.stdout.flush()
        return fail(exc)
    except BrokenPipeError:  # `kgtuner predict ... | head`: the reader left; not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main())
