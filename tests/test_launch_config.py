"""The launcher's config: composition, presets, and bad overrides refused before Ray starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from kgtuner.errors import ConfigError
from kgtuner.paths import CONF_DIR
from kgtuner.tune.settings import ExperimentSettings

REPO = Path(__file__).resolve().parents[1]


def _compose(*overrides):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def test_default_config_is_the_cpu_demo():
    s = ExperimentSettings.from_config(_compose())
    assert s.data["name"] == "demo" and s.model_name == "complex" and s.two_stage
    assert s.budget.seconds <= 150 and s.options.subgraph_ratio == 0.2 and s.options.top_k == 10
    assert s.space["name"] == "decoupled"
    assert s.cluster.get("address") is None and s.final_seeds == 0 and s.resume is False


PAPER_MODELS = {  # the models of the paper's tables per dataset preset (conf/experiment/<dataset>.yaml)
    "biokg": ("transe", "rotate", "distmult", "complex", "autosf"),
    "wikikg2": ("transe", "rotate", "distmult", "complex", "autosf"),
    "wn18rr": ("transe", "rotate", "rescal", "distmult", "complex", "tucker", "conve"),
    "fb15k237": ("transe", "rotate", "rescal", "distmult", "complex", "tucker", "conve"),
}
SHORTCUTS = sorted(p.stem for p in (CONF_DIR / "experiment").glob("*_*.yaml"))  # biokg_complex = biokg + complex


def test_one_preset_per_dataset():
    assert sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml") if "_" not in p.stem) == \
        sorted(PAPER_MODELS)
    assert {"biokg_complex", "wn18rr_complex"} <= set(SHORTCUTS)  # the README's commands


@pytest.mark.parametrize("overrides", [
    *[(f"+experiment={dataset}", f"model={model}") for dataset, models in PAPER_MODELS.items() for model in models],
    *[(f"+experiment={shortcut}",) for shortcut in SHORTCUTS],
], ids=lambda o: " ".join(o))
def test_every_experiment_preset_composes_and_validates(overrides, monkeypatch):
    monkeypatch.setenv("KGTUNER_DATA_ROOT", "/data")
    s = ExperimentSettings.from_config(_compose(*overrides))
    preset = overrides[0].split("=", 1)[1]
    dataset, _, model = preset.partition("_")
    model = overrides[1].split("=", 1)[1] if len(overrides) > 1 else model
    assert s.model_name == model
    days = {"biokg": 2, "wikikg2": 5, "wn18rr": 1, "fb15k237": 1}[dataset]
    assert s.budget.seconds == days * 86400
    assert s.trial.stage1.max_steps == 20000
    assert s.trial.stage2.max_steps == {"biokg": 200000, "wikikg2": 400000}.get(dataset, 100000)
    assert s.trial.stage1.valid_every == s.trial.stage2.valid_every == 2500
    if dataset in ("wn18rr", "fb15k237"):
        assert s.data["name"] == "folder" and s.data["path"] == f"/data/{dataset.replace('fb15k237', 'fb15k-237')}"
    else:
        assert s.data["name"] == f"ogbl-{dataset}"


def test_a_preset_leaves_the_space_to_the_search_group():
    assert _compose("+experiment=biokg_complex").space.name == "decoupled"  # KGTuner's
    assert _compose("+experiment=biokg_complex", "search=random").space.name == "full"  # the baselines'
    assert _compose("+experiment=wn18rr", "search=tpe", "space=shrunk").space.name == "shrunk"


def test_a_shortcut_is_its_dataset_preset_with_the_model():
    assert _compose("+experiment=biokg_complex") == _compose("+experiment=biokg", "model=complex")
    assert _compose("+experiment=wn18rr_complex") == _compose("+experiment=wn18rr", "model=complex")


def test_baseline_search_groups_compose():
    """The baselines search the full space by default (their conf/search file overrides the space group);
    the user's own space=... still wins."""
    for name in ("random", "tpe", "rf_bore", "grash"):
        s = ExperimentSettings.from_config(_compose(f"search={name}"))
        assert not s.two_stage and s.search_name == name and s.space["name"] == "full"
        assert _compose(f"search={name}", "space=shrunk").space.name == "shrunk"
        assert _compose(f"search={name}", "space=decoupled").space.name == "decoupled"
    for name in ("kgtuner", "kgtuner_asha"):
        assert _compose(f"search={name}").space.name == "decoupled"


@pytest.mark.parametrize("override, fragment", [
    ("budget.seconds=0", "budget.seconds"),
    ("budget.seconds=-5", "budget.seconds"),
    ("search.subgraph_ratio=1.5", "search.subgraph_ratio"),
    ("search.stage1_fraction=0", "search.stage1_fraction"),
    ("final.seeds=-1", "final.seeds"),
    ("trial.gpus=-1", "trial.gpus"),
    ("cluster.num_gpus=-2", "cluster.num_gpus"),
])
def test_bad_values_raise_config_error_before_ray(override, fragment, tmp_path):
    import ray

    from kgtuner.launch import run

    with pytest.raises(ConfigError, match=fragment.replace(".", r"\.")):
        run(_compose(override), str(tmp_path))
    assert not ray.is_initialized()
    assert not (tmp_path / "search").exists()


def test_folder_dataset_without_path_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv("KGTUNER_DATA_PATH", raising=False)
    with pytest.raises(ConfigError, match="data.path"):
        ExperimentSettings.from_config(_compose("data=folder"))


def test_resume_without_a_previous_run_is_refused(tmp_path):
    import ray

    from kgtuner.launch import run

    with pytest.raises(ConfigError, match="resume=true"):
        run(_compose("resume=true"), str(tmp_path))
    assert not ray.is_initialized()


def _launch(*args, timeout=120, env=None):
    return subprocess.run([sys.executable, "-m", "kgtuner.launch", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


def test_cli_bad_value_exits_2_with_one_line_and_no_ray(tmp_path):
    proc = _launch("budget.seconds=-1", f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 2, proc.stderr
    assert "budget.seconds must be a positive number" in proc.stderr
    assert "Traceback" not in proc.stderr and "Ray cluster" not in proc.stdout
    assert not (tmp_path / "search").exists()


def test_cli_unknown_key_and_group_option_fail_with_hydras_message(tmp_path):
    proc = _launch("budget.secs=3", f"hydra.run.dir={tmp_path}")
    assert proc.returncode != 0 and "budget.secs" in proc.stderr
    proc = _launch("search=bogus", f"hydra.run.dir={tmp_path}")
    assert proc.returncode != 0 and "bogus" in proc.stderr
