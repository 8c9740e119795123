import numpy as np
import pytest


@pytest.fixture
def tensor(tmp_path):
    """A 600-element fp32 tensor as .npy (a module may define its own ``tensor`` instead)."""
    path = tmp_path / "t.npy"
    np.save(path, np.linspace(-1, 1, 600, dtype=np.float32))
    return path
