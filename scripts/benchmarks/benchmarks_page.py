"""Write docs/benchmarks.md and the README's benchmark summary from committed files only: the one command of the
page package ``page/`` beside this file (``page/__init__.py`` says which module writes which section).

Usage::

    python scripts/benchmarks/benchmarks_page.py                       # render from committed files
    python scripts/benchmarks/benchmarks_page.py --collect             # collect outputs/bench_* first, then render
    python scripts/benchmarks/benchmarks_page.py --help                # every option
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = str(Path(__file__).resolve().parent)  # scripts/benchmarks: the page package and the benchmark scripts
if HERE not in sys.path:
    sys.path.insert(0, HERE)

# the page's public names, for `python -c`, the tests and other scripts (each defined in its section's module)
from page.common import README_BEGIN, README_END, SRCC_COMMAND, SUITE_COMMANDS, SUITES  # noqa: E402
from page.defaults import defaults_line, section_defaults  # noqa: E402
from page.frames import replay_frames, replay_progress, replayed_graphs  # noqa: E402
from page.live import large_findings, paired_rows, section_live  # noqa: E402
from page.main import main, render  # noqa: E402
from page.readme import readme_block, write_readme_block  # noqa: E402
from page.replay import section_replay  # noqa: E402
from page.summary import replay_summary, summary_section  # noqa: E402

__all__ = ["README_BEGIN", "README_END", "SRCC_COMMAND", "SUITES", "SUITE_COMMANDS", "defaults_line", "large_findings",
           "main", "paired_rows", "readme_block", "render", "replay_frames", "replay_progress", "replay_summary",
           "replayed_graphs", "section_defaults", "section_live", "section_replay", "summary_section",
           "write_readme_block"]

if __name__ == "__main__":
    sys.exit(main())
