"""The answer's trained model stays with the run: the best trial's embeddings.npz and metrics.json (the
format of `python -m kgtuner.train`) land in the run directory, their test MRR is the one summary.json
reports (checked by an independent evaluator), Tune's CheckpointConfig bounds what each trial keeps, and
only answer-stage trials that rank among the `answer.keep` best keep a model. The end-to-end check of a search's
answer model (answer_helpers.check_search_left_the_answers_model) runs on the search of
tests/test_launch_e2e.py::test_stage2_starts_from_stage1_rows_and_spends_the_whole_trial_budget."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from kgtuner.errors import ConfigError
from kgtuner.tune.answer_model import RECORD_FILE, final_checkpoint, final_record, keep_threshold, parse_keep


@pytest.mark.parametrize("raw,message", [
    ({"answer": {"keep": -1}}, "answer.keep must be a whole number >= 0"),
    ({"answer": {"keep": "all"}}, "answer.keep must be a whole number >= 0"),
    ({"answer": {"keep": True}}, "answer.keep must be a whole number >= 0"),
    ({"answer": {"kept": 2}}, "answer.kept is not a setting"),
])
def test_keep_setting_is_validated(raw, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_keep(raw)
    assert parse_keep({}) == 3 and parse_keep({"answer": {"keep": 0}}) == 0


def test_keep_threshold_is_the_keep_th_best_so_far():
    assert keep_threshold([0.2, 0.5], 3) is None  # fewer than keep ended: every trial keeps its model
    assert keep_threshold([0.2, 0.5, float("nan"), 0.4, 0.3], 3) == 0.3
    assert keep_threshold([0.9], 1) == 0.9
    assert keep_threshold([0.9], 0) == math.inf


def test_final_checkpoint_record_and_restore(tmp_path):
    report = {"valid_mrr": 0.5, "done": True, "trial_status": "ok", "stage": 1}
    with final_checkpoint(None, report, stage=1) as none:
        assert none is None  # a search that keeps no answer models reports no final checkpoint
    answer = {"key": None, "stage": 2, "keep": 3}  # a stage-1 trial never keeps a model
    with final_checkpoint(answer, report, stage=1, metrics={"valid": {"mrr": 0.5}}, model=object()) as ckpt:
        files = sorted(p.name for p in Path(ckpt.path).iterdir())
        assert files == [RECORD_FILE]
        assert final_record(ckpt) == report
        saved = json.loads((Path(ckpt.path) / RECORD_FILE).read_text())
        assert saved["final"] is True and saved["model"] is False
    from ray import tune

    restore_point = tmp_path / "restore"
    restore_point.mkdir()
    (restore_point / "trainer_state.pt").write_bytes(b"x")
    assert final_record(tune.Checkpoint.from_directory(str(restore_point))) is None
    assert final_record(None) is None


def test_strategy_names_the_search_and_stage():
    from kgtuner.tune.strategies.one_stage import OneStage

    class Settings:
        search_name, options = "random", None
        search = {"name": "random"}

    strategy = OneStage(Settings).describe_answer({"stage": 1, "trial_id": "x"}, {}, early_stopped=True)
    assert strategy["search"] == "random" and strategy["stage"] == 1 and strategy["early_stopped"] is True
    assert "one-stage random search" in strategy["description"] and "ASHA" in strategy["description"]
