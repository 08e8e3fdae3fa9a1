"""Package layout; everything else (metadata, dependencies, the ``kgtuner`` console script) is in
pyproject.toml.

The Hydra configuration tree stays at the top of the repository as ``conf/`` and ships inside the
distribution as the package ``kgtuner.conf`` (a ``package_dir`` mapping), so an installed wheel finds
its configs next to its code (``kgtuner.paths.CONF_DIR``) from any working directory.
"""

from setuptools import find_namespace_packages, find_packages, setup

CONF_PACKAGES = ["kgtuner.conf", *(f"kgtuner.conf.{name}" for name in find_namespace_packages(where="conf"))]
DATA_PACKAGES = ["kgtuner.datasets", *(f"kgtuner.datasets.{name}"
                                       for name in find_namespace_packages(where="kgtuner/datasets"))]

setup(
    packages=[*find_packages(include=["kgtuner", "kgtuner.*"]), *DATA_PACKAGES, *CONF_PACKAGES],
    package_dir={"kgtuner.conf": "conf"},
    package_data={**{name: ["*.yaml"] for name in CONF_PACKAGES}, **{name: ["*"] for name in DATA_PACKAGES}},
)
