"""Saving and loading banks with Orbax, crash-safe.

A bank directory is an Orbax ``CheckpointManager`` directory: one numbered sub-directory per save,
each holding two items, ``bank`` (the arrays, ``StandardSave``) and ``config`` (a JSON sidecar
with the format name, the bank shape and the overflow policy). This is the same mechanism the
model checkpoints use, so one set of tools reads both.

Why a save can be killed at any moment and the previous bank still loads: Orbax writes a save
into ``<dir>/<n>.orbax-checkpoint-tmp-<stamp>/``, writes ``commit_success.txt`` and only then
renames it to ``<dir>/<n>/`` (``AtomicRenameTemporaryPath.finalize`` in orbax-checkpoint 0.12.8;
a rename within one file system is atomic on POSIX). The manager lists only finalised numbered
directories, and it deletes the older save only after the new one is finalised. Saving with
``force=True`` into a fixed path would not be safe: Orbax removes the old directory before writing.
"""

from __future__ import annotations

import os
from pathlib import Path

import flax.serialization
import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

from memr1.memory.bank import MemoryBank, bank_config, empty_bank

FORMAT = "memr1.memory_bank"
FORMAT_VERSION = 1
_ITEMS = ("bank", "config")


class NotABankError(ValueError):
    """The directory given to :func:`load_bank` does not hold a saved memory bank."""


def _manager(directory: Path, *, read_only: bool, keep: int = 1) -> ocp.CheckpointManager:
    options = ocp.CheckpointManagerOptions(
        max_to_keep=None if read_only else keep,
        enable_async_checkpointing=False,
        create=not read_only,
        read_only=read_only,
        # Removes the ``*.orbax-checkpoint-tmp-*`` left behind by a save that was killed.
        cleanup_tmp_directories=not read_only,
    )
    return ocp.CheckpointManager(directory, options=options, item_names=_ITEMS)


def save_bank(directory: str | os.PathLike, bank: MemoryBank, *, keep: int = 1) -> int:
    """Saves a (possibly batched) bank as a new numbered version under ``directory``.

    Args:
      directory: the bank directory; created if absent.
      bank: the bank, any batch shape.
      keep: how many finalised versions to keep (older ones go after the new one is final).

    Returns:
      The version number written (the previous latest plus one).
    """
    directory = Path(directory).absolute()
    config = {"format": FORMAT, "format_version": FORMAT_VERSION, **bank_config(bank)}
    state = flax.serialization.to_state_dict(jax.device_get(bank))
    state = jax.tree.map(np.asarray, state)
    manager = _manager(directory, read_only=False, keep=keep)
    try:
        latest = manager.latest_step()
        if latest is not None:
            # Refuses to write a bank into, say, a model checkpoint directory (and, with keep=1,
            # delete the model): what is already there must be a bank.
            _read_config(manager, latest, directory)
        version = 0 if latest is None else latest + 1
        manager.save(
            version,
            args=ocp.args.Composite(
                bank=ocp.args.StandardSave(state), config=ocp.args.JsonSave(config)
            ),
        )
        manager.wait_until_finished()
    finally:
        manager.close()
    return version


def _read_config(manager: ocp.CheckpointManager, version: int, directory: Path) -> dict:
    try:
        restored = manager.restore(version, args=ocp.args.Composite(config=ocp.args.JsonRestore()))
        config = dict(restored["config"])
    except Exception as err:  # Orbax raises several types for a missing or foreign item.
        raise NotABankError(
            f"{directory} (version {version}) is not a memory bank: its 'config' item cannot be "
            f"read ({type(err).__name__}: {err})"
        ) from err
    if config.get("format") != FORMAT:
        raise NotABankError(
            f"{directory} (version {version}) is not a memory bank: config format is "
            f"{config.get('format')!r}, expected {FORMAT!r}"
        )
    if config.get("format_version") != FORMAT_VERSION:
        raise NotABankError(
            f"{directory} holds memory-bank format version {config.get('format_version')}, "
            f"this code reads version {FORMAT_VERSION}"
        )
    return config


def load_bank(directory: str | os.PathLike, version: int | None = None) -> MemoryBank:
    """Loads the latest finalised bank (or ``version``) saved under ``directory``.

    Raises:
      FileNotFoundError: ``directory`` does not exist.
      NotABankError: it holds no finalised save, or the save is not a memory bank.
    """
    directory = Path(directory).absolute()
    if not directory.is_dir():
        raise FileNotFoundError(f"memory bank directory {directory} does not exist")
    manager = _manager(directory, read_only=True)
    try:
        versions = manager.all_steps()
        if not versions:
            raise NotABankError(
                f"{directory} is not a memory bank: it holds no finalised save "
                "(expected numbered sub-directories written by memr1.memory.save_bank)"
            )
        if version is None:
            version = max(versions)
        elif version not in versions:
            raise NotABankError(f"{directory} has no bank version {version}; it has {versions}")
        config = _read_config(manager, version, directory)
        template = empty_bank(
            config["capacity"],
            config["text_bytes"],
            config["emb_dim"],
            config["log_capacity"],
            overflow=config["overflow"],
        )
        batch_shape = tuple(config["batch_shape"])
        template = jax.tree.map(lambda x: jnp.broadcast_to(x, batch_shape + x.shape), template)
        abstract = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype),
            flax.serialization.to_state_dict(template),
        )
        restored = manager.restore(
            version, args=ocp.args.Composite(bank=ocp.args.StandardRestore(abstract))
        )
    finally:
        manager.close()
    state = jax.tree.map(jnp.asarray, restored["bank"])
    return flax.serialization.from_state_dict(template, state)
