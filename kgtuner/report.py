"""``kgtuner report`` (= ``python -m kgtuner.report``): rebuild a search's ``report.html`` from its run directory.

    kgtuner report RUN_DIR [--out FILE]

Every search writes ``RUN_DIR/report.html`` when it ends (:mod:`kgtuner.analysis.report`); this rebuilds it from
the run directory's files alone (summary.json, trials.parquet, embeddings.npz): the same files give the same
bytes. ``--out`` writes it elsewhere. A missing or garbled run directory prints one ``kgtuner: error:`` line
and exits with status 2.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from kgtuner.cli import ArgumentParser, fail, output_dir_message
from kgtuner.errors import KGTunerError


def main(argv: Sequence[str] | None = None, prog: str = "python -m kgtuner.report") -> int:
    """Write the report; print its path. Exit status 0, or 2 for a bad run directory or output file."""
    parser = ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    parser.add_argument("run_dir", help="the run directory of a finished search (its hydra.run.dir)")
    parser.add_argument("--out", default=None, help="where to write the HTML (default: RUN_DIR/report.html)")
    args = parser.parse_args(argv)
    from kgtuner.analysis.report import write_report

    try:
        path = write_report(args.run_dir, args.out)
    except KGTunerError as exc:
        return fail(exc)
    except OSError as exc:
        where = Path(args.out).parent if args.out else Path(args.run_dir)
        return fail(output_dir_message(where, exc, "--out" if args.out else "RUN_DIR"))
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
