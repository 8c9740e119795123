"""The import order spec <- hw <- host <- sim <- cli, checked by import-linter on the source tree.

The package folders are not nested the way the package names are (``wanreduce.cli`` and ``wanreduce.spec``
live inside ``host/`` but are not part of ``wanreduce.host``), and the editable install reaches them through
an import hook that import-linter cannot walk. So the test lays out the package as Python sees it, from
pyproject's ``package-dir`` table, with symbolic links in a temporary folder, and lints that.
"""

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _layout(dest):
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    mapping = config["tool"]["setuptools"]["package-dir"]
    # Children that are packages of their own are linked under their own name, not their parent's.
    own = {(ROOT / folder).resolve() for folder in mapping.values()}
    for package, folder in sorted(mapping.items()):
        target = dest.joinpath(*package.split("."))
        target.mkdir(parents=True, exist_ok=True)
        for child in sorted((ROOT / folder).iterdir()):
            if child.resolve() in own or child.name == "__pycache__":
                continue
            if child.is_dir() and not (child / "__init__.py").exists():
                continue
            if child.is_file() and child.suffix != ".py":
                continue
            (target / child.name).symlink_to(child)
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")


def test_import_layers(tmp_path):
    lint = Path(sys.executable).with_name("lint-imports")
    if not lint.exists():
        pytest.fail("import-linter is not installed; run `make install`")
    _layout(tmp_path)
    proc = subprocess.run(
        [str(lint), "--config", "pyproject.toml", "--no-cache"],
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    report = proc.stdout + proc.stderr
    assert proc.returncode == 0, report[-3000:]
    assert "2 kept, 0 broken" in report
