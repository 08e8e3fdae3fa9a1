"""``PickledStateSearcher``: Tune's ``save``/``restore`` of a searcher through its ``get_state``/``set_state``."""

from __future__ import annotations

import pickle

from ray.tune.search import Searcher


class PickledStateSearcher(Searcher):
    """A ``Searcher`` whose experiment checkpoint is its ``get_state()`` pickled into one file.

    Subclasses define ``get_state``/``set_state`` (plain data; inner searchers cloudpickled), so a
    restored experiment (``Tuner.restore``) continues with the same stage/round bookkeeping."""

    def save(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "wb") as fh:
            pickle.dump(self.get_state(), fh)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as fh:
            self.set_state(pickle.load(fh))
