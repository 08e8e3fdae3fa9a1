"""The page's last part: the replays on the recorded tables issue 38 found unfair, kept under
``docs/benchmarks/superseded/`` (``tables/``, ``replay/``, ``issue37/replay/``) and shown as they were, under a heading
that says they answer nothing: what they showed (:func:`summary.replay_summary`), every grid
(:func:`replay.section_replay`, with KGTuner's defaults decided on them) and issue 37's stage-2 study."""

from __future__ import annotations

from pathlib import Path

from . import fair
from .common import SUPERSEDED, SUPERSEDED_HEADING
from .frames import replay_frames
from .replay import section_replay
from .stage2 import section as section_stage2
from .summary import SUPERSEDED_WHY, anchor, replay_summary


def section(docs: Path) -> list[str]:
    """The superseded part of the page (``docs``: the page's data folder, ``docs/benchmarks``); none without its
    replay journals."""
    root = Path(docs) / SUPERSEDED
    rel = f"{Path(docs).name}/{SUPERSEDED}"
    frames = replay_frames(root / "replay")
    if not frames:
        return []
    md = [SUPERSEDED_HEADING, "",
          f"These replays ran on the first recorded tables of codex-m and WN18RR. Issue 38's audit found them unfair: "
          f"{SUPERSEDED_WHY}. Their figures therefore say which configurations learn fastest under a short cap, not "
          "which search finds the better configuration, and they are no evidence either way. They stay as they were "
          f"recorded (`docs/{rel}/`: the tables, the replay journals and their results; [what is there]({rel}/README.md)), "
          "and KGTuner's defaults decided on them stand until the fair tables are replayed. The fair benchmark: "
          f"[above](#{anchor(fair.HEADING)}).", "",
          "## What the superseded replays showed", ""]
    md += replay_summary(frames)
    md += section_replay(root / "replay", root / "tables", root, rel, frames,
                         title="## Search strategies replayed on the superseded tables")
    md += section_stage2(root / "issue37" / "replay", root / "replay")
    return md
