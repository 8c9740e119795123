"""The import order spec <- hw <- host <- sim <- cli, checked by import-linter on the installed packages.

Each layer is a package in the folder of the same name, so import-linter walks the folders themselves.
"""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_import_layers():
    lint = Path(sys.executable).with_name("lint-imports")
    if not lint.exists():
        pytest.fail("import-linter is not installed; run `make install`")
    proc = subprocess.run(
        [str(lint), "--config", "pyproject.toml", "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    report = proc.stdout + proc.stderr
    assert proc.returncode == 0, report[-3000:]
    assert "2 kept, 0 broken" in report


def test_each_package_is_its_folder():
    import tomllib

    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    for package, folder in mapping.items():
        assert package.split(".")[-1] == folder, (package, folder)
        assert (ROOT / folder / "__init__.py").is_file()
