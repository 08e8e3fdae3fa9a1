"""KGTuner's defaults (the ``defaults`` grid at 8 workers): the decisions by the rule fixed before the runs, and
the README's line on them."""

from __future__ import annotations

import pandas as pd

from .frames import replay_progress


def defaults_progress(progress: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
    """{graph: (searches replayed, planned)} of the ``defaults`` grid on part 4's two graphs (``progress``:
    ``replay_progress(frames, "defaults")``; a graph not replayed yet has none)."""
    from kgtuner.bench.benchmark import STUDIES
    from kgtuner.bench.compare import CONFIRM_ON, DECIDE_ON

    planned = len(STUDIES["defaults"].cells())
    return {g: progress.get(g, (0, planned)) for g in (DECIDE_ON, CONFIRM_ON)}


def section_defaults(df, progress: dict[str, tuple[int, int]] | None = None) -> list[str]:
    """Part 4's decisions from the ``defaults`` grids, by the rule fixed in ``kgtuner.bench.compare`` before the
    runs (a variant wins on a graph when its paired test-MRR difference to the default is positive at p < ALPHA
    and no budget shows it worse; a default changes only when the confirming graph agrees). ``progress``:
    {graph: (searches replayed, planned)} of the ``defaults`` grid (``replay_progress``); until the grid is
    complete on both graphs, only its progress is shown (a partial grid decides nothing)."""
    from kgtuner.bench.compare import ALPHA, CONFIRM_ON, DECIDE_ON, decide_defaults, variant_verdicts

    md = ["### KGTuner's defaults: the decisions", "",
          f"Rule (fixed in `kgtuner.bench.compare` before the runs): a variant wins on a graph when its paired test-MRR "
          f"difference to the default, per seed averaged over the budgets, is positive with a two-sided exact Wilcoxon "
          f"p < {ALPHA:g} (the mean and the signed ranks on the same side) and no budget shows it worse at that level. "
          f"Decided on {DECIDE_ON}, confirmed on {CONFIRM_ON}; a default changes only when both say it wins.", ""]
    if progress is not None:
        left = defaults_progress(progress)
        if any(done < n for done, n in left.values()):
            return md + ["Pending: the `defaults` grid decides once it is replayed in full on both graphs ("
                         + "; ".join(f"{g}: {done} of {n} searches" for g, (done, n) in left.items()) + ").", ""]
    verdicts = variant_verdicts(df)
    md += ["| variant | graph | seeds | test MRR difference [95% CI] | p | worst budget (diff, p) | verdict |",
           "|---|---|---|---|---|---|---|"]
    for r in verdicts.sort_values(["variant", "graph"]).to_dict("records"):
        md.append(f"| `{r['variant']}` | {r['graph']} | {r['seeds']} | {r['diff']:+.4f} [{r['diff_lo']:+.4f}, "
                  f"{r['diff_hi']:+.4f}] | {r['p']:.3g} | {r['worst_budget']:g} ({r['worst_budget_diff']:+.4f}, "
                  f"{r['worst_budget_p']:.3g}) | {r['verdict']} |")
    md += ["", "| variant | on " + DECIDE_ON + " | on " + CONFIRM_ON + " | change the default |", "|---|---|---|---|"]
    for r in decide_defaults(verdicts):
        md.append(f"| `{r['variant']}` | {r['decide']} | {r['confirm']} | {'yes' if r['change'] else 'no'} |")
    return md + [""]


def defaults_line(frames: dict[tuple[str, str], pd.DataFrame]) -> list[str]:
    """The summary's line on part 4: the defaults the ``defaults`` grids changed, once complete on both graphs."""
    from kgtuner.bench.compare import CONFIRM_ON, DECIDE_ON, decide_defaults, variant_verdicts

    if any(done < n for done, n in defaults_progress(replay_progress(frames, "defaults")).values()):
        return []
    df = pd.concat([frames[g, "defaults"] for g in (DECIDE_ON, CONFIRM_ON)], ignore_index=True)
    changed = [r["variant"] for r in decide_defaults(variant_verdicts(df)) if r["change"]]
    one = len(changed) == 1
    what = (f"{', '.join(f'`{v}`' for v in changed)} won on both graphs and "
            f"{'becomes the default' if one else 'become the defaults'}" if changed else
            "no variant won on both graphs, so every default stays as it was")
    return ["", f"KGTuner's defaults (stage-1 share, `top_k`, Thompson draws, stage 2's warm forest), decided on "
                f"{DECIDE_ON} and confirmed on {CONFIRM_ON} at 8 workers by the rule fixed before the runs: {what} "
                "([decisions](#kgtuners-defaults-the-decisions))."]
