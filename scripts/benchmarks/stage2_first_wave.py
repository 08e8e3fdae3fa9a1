"""The first stage-2 trials of a finished KGTuner search: the stage-1 rank of the configuration each expands.

Usage: python scripts/benchmarks/stage2_first_wave.py RUN_DIR
(issue 37: with 8 slots the first 8 should be 8 distinct ranks)."""
import json, sys
import pandas as pd
run = sys.argv[1]
df = pd.read_parquet(f"{run}/trials.parquet")
state = json.load(open(f"{run}/kgtuner_state.json"))
summary = json.load(open(f"{run}/summary.json"))
strip = lambda c: json.dumps({k: v for k, v in c.items() if k not in ("batch_size", "dim")}, sort_keys=True)
top = [strip(c) for c in state["top"]]
s2 = df[df.stage == 2].sort_values("trial_index")
ranks = [top.index(strip(json.loads(c))) for c in s2["config_json"]]
print(f"{run}: slots {summary['cluster']['slots']}, stage-1 trials {int((df.stage == 1).sum())}, stage-2 trials {len(s2)}")
print("stage-1 ranks of the stage-2 trials in trial order:", ranks)
print("first 8:", ranks[:8], "distinct:", len(set(ranks[:8])))
print("stage2 summary:", json.dumps(summary["stage2"]))
