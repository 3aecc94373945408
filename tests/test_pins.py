"""The environment the suite runs in is the one setup.cfg pins: every `name==version` of the
package's requirements (and its test extra) is the installed version. The pins carry measured
reasons (ml-dtypes 0.6.0: 0.7.0 costs ~0.6 s of CPU in every process that imports jax; torch
2.13.0: the CPU build on disk), which a venv that drifted from the pins would silently lose."""

from __future__ import annotations

import configparser
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _pins() -> dict[str, str]:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    lines = cfg["options"]["install_requires"].splitlines()
    # The extras `make install` installs: the tests exercise W&B logging (offline).
    lines += cfg["options.extras_require"]["test"].splitlines()
    lines += cfg["options.extras_require"]["wandb"].splitlines()
    pins = {}
    for line in lines:
        line = line.strip()
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==")
            pins[name.strip()] = version.strip()
    return pins


def test_setup_cfg_pins_ml_dtypes_and_torch():
    pins = _pins()
    assert pins["ml-dtypes"] == "0.6.0" and pins["torch"] == "2.13.0", pins


@pytest.mark.parametrize("name", sorted(_pins()))
def test_the_installed_version_is_the_pinned_one(name):
    installed = metadata.version(name)
    # A local build tag (torch's "+cpu") is the same release.
    assert installed.split("+")[0] == _pins()[name], (name, installed)
