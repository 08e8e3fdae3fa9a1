"""Unknown keys are refused in every group, naming the key and the nearest valid one (issue 14, case 4).

``+search.topk=5`` used to run the whole search with ``top_k`` still 10: only ``budget`` and ``trial``
rejected unknown keys."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from kgtuner.errors import ConfigError
from kgtuner.paths import CONF_DIR
from kgtuner.tune.settings import ExperimentSettings


def _settings(*overrides):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return ExperimentSettings.from_config(compose(config_name="config", overrides=list(overrides)))


@pytest.mark.parametrize("overrides, message", [
    (["+search.topk=5"], "search.topk is not a setting of search=kgtuner; did you mean search.top_k?"),
    (["search=kgtuner_asha", "+search.subgraph_ration=0.1"],
     "search.subgraph_ration is not a setting of search=kgtuner_asha; did you mean search.subgraph_ratio?"),
    (["search=grash", "+search.round=2"], "search.round is not a setting of search=grash; did you mean search.rounds?"),
    (["search=rf_bore", "+search.top_k=5"], "search.top_k is not a setting of search=rf_bore"),
    (["search=random", "+search.searcher.min_dist=0.1"],
     "search.searcher.min_distance"),
    (["search=tpe", "+search.searcher.n_startup=3"], "did you mean search.searcher.n_startup_trials?"),
    (["+search.searcher.n_tree=3"], "search.searcher.n_tree is not a setting of search=kgtuner; did you mean "
                                    "search.searcher.n_trees?"),
    # stage 2's forest is built at the switch, mid-run: its keys are checked before Ray starts too
    (["+search.stage2_searcher.n_tree=3"], "did you mean search.stage2_searcher.n_trees?"),
    (["+search.asha.eta=3"], "search.asha.eta is not a setting of search.asha"),
    (["+data.paht=/tmp"], "data.paht is not a setting of data; did you mean data.path?"),
    (["+cluster.dashbord_port=9000"], "cluster.dashbord_port is not a setting of cluster; did you mean "
                                      "cluster.dashboard_port?"),
    (["+budget.secs=10"], "budget.secs is not a setting of budget; did you mean budget.seconds?"),
    (["+budget.stage1_fraction=0.3"], "did you mean search.stage1_fraction?"),
    (["+trial.gpu=1"], "trial.gpu is not a setting of trial; did you mean trial.gpus?"),
    (["+trial.stage1.max_step=10"], "did you mean trial.stage1.max_steps?"),
    (["+final.seed=2"], "final.seed is not a setting of final; did you mean final.seeds?"),
    (["+seeds=3"], "seeds is not a setting of the launcher (a top-level key); did you mean seed?"),
    (["+top_k=5"], "top_k is not a setting of the launcher (a top-level key); did you mean search.top_k?"),
    (["+search.foo=1"], "search.foo is not a setting of search=kgtuner; its settings are search.asha, "),
])
def test_an_unknown_key_is_refused_with_the_nearest_valid_one(overrides, message):
    with pytest.raises(ConfigError) as err:
        _settings(*overrides)
    assert message in str(err.value)


@pytest.mark.parametrize("overrides", [
    [], ["+experiment=biokg_complex"], ["+experiment=wn18rr_complex", "data.path=/tmp"], ["search=kgtuner_asha"],
    ["search=grash"], ["search=rf_bore", "search.early_stop=asha"], ["search=random", "+search.early_stop=asha"],
    ["search=tpe"], ["cluster=remote"], ["data=ogbl-biokg"], ["search.top_k=5", "final.seeds=2", "answer.keep=1"],
])
def test_every_shipped_group_and_preset_passes(overrides):
    _settings(*overrides)


def test_a_typo_no_longer_runs_with_the_default():
    assert _settings("search.top_k=5").options.top_k == 5
    with pytest.raises(ConfigError, match="search.top_k"):
        _settings("+search.topk=5")
