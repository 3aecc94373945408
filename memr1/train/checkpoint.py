"""Checkpoints of the train state and the data position (an Orbax CheckpointManager).

One checkpoint step holds two items: `state`, the whole `TrainState` (policy parameters,
optimiser state, critic and its optimiser state, step, RNG key, refused-update count), and
`data`, a small JSON dict saying where the data stream stands (epoch, index, shuffling seed...:
whatever the loop needs to continue exactly).

Atomicity: Orbax writes a step into `<dir>/<step>.orbax-checkpoint-tmp-<timestamp>` and renames it
to `<dir>/<step>` only once every item is written (on file systems with atomic rename, i.e.
local and network POSIX file systems; on GCS it writes a `commit_success.txt` marker into the
step directory instead). A crash mid-save therefore leaves only a temporary directory, which
`all_steps`/`latest_step` do not list and `restore_latest` never reads. At this Orbax version the
rename mode also writes `commit_success.txt` before renaming, but treats any directory named by a
bare step number as final; we additionally require the marker, so a step directory copied in by
hand and cut short (rsync, a full disk) is skipped as well.

The best checkpoint (`keep_best=True`): the loop's validation names a best step in the data
position it saves (`"best": {"step", "value", "metric"}`, `memr1.train.validation`), and that
step is kept beside the last `keep` ones, so a run's best weights stay loadable however long it
trains after them; the record travels in every later step's position, so a resumed run continues
it. (Orbax's own BestN policy ranks by metrics that this Orbax version writes only under the
legacy `best_fn` option, which then keeps the N best instead of the last N; hence the pruning
here.) Every reader names a checkpoint as `DIR` (the latest step), `DIR:STEP` or `DIR:best`
(`resolve_checkpoint`).

Saving: synchronous by default (the state is on disk when `save` returns); `async_save=True`
(what `memr1.train` uses) returns once the arrays are copied off the devices and writes them in
a background thread while training continues, so a 7B GRPO state (~92 GB: float32 weights and
two AdamW moments) costs the loop a device-to-host copy, not the write. That copy is ours
(`memr1.train.host_memory.host_copy`): every array moved, in its own sharding, into the
devices' host memory space (`pinned_host`) before `save` returns, and Orbax writes from it. The
device then holds nothing for the save: the next step, which donates the state, reuses its
buffers while the write runs, and each host holds its own devices' shards until the write ends.
Orbax's own transfer would not guarantee that: on the CPU backend it hands the writer numpy
views of the device buffers, which keep them alive and make the donating step allocate a second
state beside them (an SFT run on CPU held 2x the state while a save was in flight;
tests/train/test_checkpoint_memory.py).
Whatever reads the directory waits for an unfinished save first (`all_steps`, `latest_step`,
`position`, `restore*`, metadata), as do the next `save` and `close`, so at most one save is in
flight, a reader never sees a half-written step as missing and a process never exits before its
last save is on disk; a process killed mid-write leaves only Orbax's temporary directory, and
the previous checkpoints stay. Under `keep_best` the pruning of old steps waits until the new
step is final, so a kill mid-write never finds them deleted.

Directories: a local or network POSIX path, or a `gs://bucket/...` URL, which Orbax writes
through its own GCS support (commit marker instead of a rename). A bucket mounted with gcsfuse
does not rename directories atomically (and may not list them consistently): give the gs:// URL
instead (experiments/README.md).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import jax
import orbax.checkpoint as ocp
from etils import epath

from memr1.train import lora
from memr1.train.host_memory import host_copy
from memr1.train.state import TrainState

COMMIT_MARKER = "commit_success.txt"  # written by Orbax as the last file of a step
BEST = "best"  # the step name of the best checkpoint in `DIR:best`


class CheckpointNotFoundError(FileNotFoundError):
    """A named checkpoint (a step, "best", or any) is not in its directory."""


class Checkpointer:
    """Keeps the last `keep` checkpoints of a run directory (and, with `keep_best`, the best one)
    and restores the latest one."""

    def __init__(
        self,
        directory: str | os.PathLike,
        *,
        keep: int = 3,
        keep_best: bool = False,
        async_save: bool = False,
        metadata: Mapping[str, Any] | None = None,
    ):
        """`metadata`: JSON-serialisable settings saved with every step (e.g. the LoRA rank and
        alpha, which a reader needs to merge the adapters); see `step_metadata`. `keep_best`:
        also keep the step that the saved data position names as `"best"` (module docstring)."""
        self.directory = _absolute(directory)
        self._metadata = dict(metadata) if metadata else None
        self._keep, self._keep_best = keep, keep_best
        self._async = async_save
        self._unpruned = False  # a keep_best save whose pruning waits for its commit
        self._best: Mapping[str, Any] | None = None
        options = ocp.CheckpointManagerOptions(
            # Under keep_best the pruning is ours (`_prune`): Orbax would delete the best step.
            max_to_keep=None if keep_best else keep,
            enable_async_checkpointing=async_save,
            create=True,
        )
        self._manager = ocp.CheckpointManager(
            self.directory, options=options, item_names=("state", "data")
        )

    def save(
        self, step: int, state: TrainState, data_position: Mapping[str, Any], *, force: bool = False
    ) -> bool:
        """Writes `state` and the JSON-serialisable `data_position` as checkpoint `step` (in the
        background under `async_save`: see the module docstring).

        Returns False if the manager's save policy skipped this step.
        """
        self.wait()  # the previous save is final (Orbax would wait too) and pruned
        if self._async:  # written from host memory: the devices keep nothing for it
            state = host_copy(state)
        args = ocp.args.Composite(
            state=ocp.args.PyTreeSave(state),
            data=ocp.args.JsonSave(dict(data_position)),
        )
        saved = self._manager.save(
            int(step), args=args, force=force, custom_metadata=self._metadata
        )
        if saved and self._keep_best:
            self._best, self._unpruned = data_position.get(BEST), True
            if not self._async:
                self._prune()
        return saved

    def _prune(self) -> None:
        """Deletes the finalised steps that are neither among the last `keep` nor the best
        (named by the last save's position); called once that save is final."""
        self._unpruned = False
        best = self._best
        steps = self._final_steps()
        kept = set(steps[-self._keep :]) | ({int(best["step"])} if best else set())
        for step in steps:
            if step not in kept:
                self._manager.delete(step)

    def position(self, step: int) -> dict[str, Any]:
        """The data position saved with `step` (no arrays are read)."""
        self.wait()
        args = ocp.args.Composite(data=ocp.args.JsonRestore())
        return dict(self._manager.restore(int(step), args=args)["data"])

    def best_record(self) -> dict[str, Any] | None:
        """The best record ({"step", "value", "metric"}) of the latest step's position, or None
        when the run kept no best (no validation, or train.keep_best unset)."""
        step = self.latest_step()
        return None if step is None else self.position(step).get(BEST)

    def all_steps(self) -> list[int]:
        """Finalised steps, oldest first (temporary or marker-less step directories excluded);
        waits for an unfinished save first."""
        self.wait()
        return self._final_steps()

    def _final_steps(self) -> list[int]:
        steps = self._manager.all_steps(read=True)
        return sorted(s for s in steps if self._commit_marker(s).exists())

    def latest_step(self) -> int | None:
        """The newest finalised step, or None."""
        steps = self.all_steps()
        return steps[-1] if steps else None

    def _commit_marker(self, step: int) -> epath.Path:
        return epath.Path(self.directory) / str(step) / COMMIT_MARKER

    def step_metadata(self, step: int) -> dict[str, Any]:
        """The custom metadata saved with `step` ({} when none was)."""
        self.wait()
        return dict(self._manager.metadata(int(step)).custom_metadata or {})

    def param_metadata(self, step: int) -> dict[tuple[str, ...], Any]:
        """Shape and dtype metadata of each policy parameter saved in `step`, keyed by its path
        (strings, e.g. ("layers", "0", "attn", "wq")); read from the step, no arrays loaded."""
        self.wait()
        step_dir = epath.Path(self.directory) / str(int(step)) / "state"
        tree = ocp.PyTreeCheckpointer().metadata(step_dir).item_metadata
        out = {}
        for path, leaf in jax.tree_util.tree_flatten_with_path(tree["params"])[0]:
            names = tuple(str(getattr(k, "key", k)) for k in path)
            out[names[:-1] if names[-1] == "value" else names] = leaf
        return out

    def restore(
        self, step: int, abstract_state: TrainState, shardings: TrainState | None = None
    ) -> tuple[TrainState, dict[str, Any]]:
        """Restores step `step` straight into the target shardings.

        Args:
          abstract_state: the state's shapes and dtypes (ShapeDtypeStructs or arrays), e.g.
            `setup.abstract_state`, which carries the shardings too.
          shardings: a matching tree of shardings (e.g. `setup.state_shardings`); if None, every
            leaf of `abstract_state` must carry its own. Each array is read shard by shard onto
            its target devices, never gathered on one host.
        Returns:
          (state, data_position).
        """
        self.wait()
        target = _with_shardings(abstract_state, shardings)
        args = ocp.args.Composite(
            state=ocp.args.PyTreeRestore(
                item=target, restore_args=ocp.checkpoint_utils.construct_restore_args(target)
            ),
            data=ocp.args.JsonRestore(),
        )
        restored = self._manager.restore(int(step), args=args)
        return restored["state"], dict(restored["data"])

    def restore_params(
        self, abstract_params: Any, shardings: Any = None, step: int | None = None
    ) -> Any:
        """Only the policy parameters of a checkpoint (latest by default), e.g. for a sampler or
        an evaluation that has no optimiser state and does not know whether a critic was saved.

        Args:
          abstract_params: the parameter state's shapes (e.g. `setup.abstract_state.params`, or
            `memr1.models.transformer.abstract_model(cfg)[1]` with `shardings`).
          shardings: matching shardings, or None if `abstract_params` carries them.
        Raises:
          FileNotFoundError: if the directory holds no finalised checkpoint.
        """
        self.wait()
        step = self.latest_step() if step is None else step
        if step is None:
            raise FileNotFoundError(f"{self.directory}: no finalised checkpoint to restore")
        target = {"params": _with_shardings(abstract_params, shardings)}
        args = ocp.args.Composite(
            state=ocp.args.PyTreeRestore(
                item=target,
                restore_args=ocp.checkpoint_utils.construct_restore_args(target),
                partial_restore=True,
            )
        )
        return self._manager.restore(int(step), args=args)["state"]["params"]

    def restore_latest(
        self, abstract_state: TrainState, shardings: TrainState | None = None
    ) -> tuple[TrainState, dict[str, Any]] | None:
        """`restore` of the newest finalised step, or None when the directory has none."""
        step = self.latest_step()
        if step is None:
            return None
        return self.restore(step, abstract_state, shardings)

    def wait(self) -> None:
        """Blocks until an asynchronous save is final (then prunes under `keep_best`); a no-op
        when none is under way. Raises what the background write raised."""
        self._manager.wait_until_finished()
        if self._unpruned:
            self._prune()

    def close(self) -> None:
        try:
            self.wait()
        finally:
            self._manager.close()

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _absolute(directory: str | os.PathLike) -> str:
    """An absolute local path, or a URL (gs://...) as given."""
    text = os.fspath(directory)
    return text if "://" in text else os.path.abspath(text)


def _with_shardings(abstract: Any, shardings: Any) -> Any:
    if shardings is None:
        return jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), abstract
        )
    return jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), abstract, shardings
    )


def split_spec(spec: str | os.PathLike) -> tuple[str, str | None]:
    """(directory, step name) of a checkpoint spec: `DIR:best`, `DIR:STEP` or `DIR` (None: the
    latest). A suffix that is neither a step number nor "best" belongs to the directory."""
    text = os.fspath(spec)
    head, sep, tail = text.rpartition(":")
    if sep and head and (tail == BEST or tail.isdigit()):
        return head, tail
    return text, None


def resolve_checkpoint(spec: str | os.PathLike) -> tuple[str, int]:
    """(directory, step) of a checkpoint spec (`split_spec`): the one resolver every reader
    uses (memr1.train's --init_checkpoint / --answer_checkpoint, memr1.evaluate, export_hf, the
    demo).

    Raises:
      FileNotFoundError: the directory does not exist.
      CheckpointNotFoundError: it holds no finalised step, not the named one, or no best record
        (a run without validation or train.keep_best).
    """
    directory, name = split_spec(spec)
    if not epath.Path(directory).is_dir():
        raise FileNotFoundError(f"{directory}: checkpoint directory does not exist")
    with Checkpointer(directory) as ckpt:
        steps = ckpt.all_steps()
        if not steps:
            raise CheckpointNotFoundError(f"{directory}: no finalised checkpoint to restore")
        if name is None:
            return directory, steps[-1]
        if name == BEST:
            best = ckpt.best_record()
            if best is None:
                raise CheckpointNotFoundError(
                    f"{directory}:best: the run recorded no best checkpoint (it validated "
                    "nothing: train.eval_every=0 or train.keep_best empty); name a step "
                    f"({steps}) or the latest (the bare directory)"
                )
            step = int(best["step"])
        else:
            step = int(name)
        if step not in steps:
            raise CheckpointNotFoundError(
                f"{directory}:{name}: step {step} is not a finalised checkpoint there "
                f"(steps: {steps})"
            )
    return directory, step


def restore_params(spec: str | os.PathLike, params_like: Any) -> Any:
    """The policy parameters of a checkpoint (`DIR` latest, `DIR:STEP` or `DIR:best`: see
    `resolve_checkpoint`), shaped and placed like `params_like` (arrays or ShapeDtypeStructs
    carrying shardings), e.g. for evaluation.

    A checkpoint of a LoRA run (`memr1.train.lora`) is returned merged: its adapters are folded
    into the base weights (W + alpha/rank·A·B), so `params_like` is the plain model's state.

    Raises FileNotFoundError (naming the directory) when it does not exist, and
    CheckpointNotFoundError when it holds no finalised checkpoint or not the named one; an
    existing directory is never created or modified.
    """
    directory, step = resolve_checkpoint(spec)
    with Checkpointer(directory) as ckpt:
        saved = ckpt.param_metadata(step)
        adapters = [p for p in saved if lora.is_lora_path(p)]
        if not adapters:
            return ckpt.restore_params(params_like, step=step)
        settings = ckpt.step_metadata(step).get(lora.METADATA_KEY)
        if not settings:
            raise ValueError(
                f"{directory}/{step}: the checkpoint holds LoRA adapters (e.g. "
                f"{'/'.join(adapters[0])}) but no LoRA settings in its metadata, so alpha/rank "
                "is unknown and they cannot be merged"
            )
        target = _with_adapter_targets(params_like, saved, adapters, f"{directory}/{step}")
        full = ckpt.restore_params(target, step=step)
    cfg = lora.LoraConfig(**settings)
    out = jax.tree.map(lambda x: x.sharding, _abstract(params_like))
    return lora.merge_jit(full, cfg.scale, out_shardings=out)


def _abstract(tree: Any) -> Any:
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), tree)


def _with_adapter_targets(params_like: Any, saved: dict, adapters: list, where: str) -> Any:
    """`params_like` (as ShapeDtypeStructs) plus restore targets for the saved adapters, each
    replicated over the devices of its base weight (adapters are small)."""
    from flax import nnx
    from jax.sharding import NamedSharding, PartitionSpec

    flat = dict(nnx.to_flat_state(_abstract(params_like)))
    by_name = {tuple(map(str, path)): (path, var) for path, var in flat.items()}
    out = list(flat.items())
    for names in adapters:
        base = by_name.get(names[:-1] + (lora._base_name(names),))
        if base is None:
            raise ValueError(f"{where}: adapter {'/'.join(names)} has no base weight in the model")
        path, var = base
        sharding = var.get_value().sharding
        if isinstance(sharding, NamedSharding):
            sharding = NamedSharding(sharding.mesh, PartitionSpec())
        leaf = saved[names]
        value = jax.ShapeDtypeStruct(tuple(leaf.shape), leaf.dtype, sharding=sharding)
        out.append((path[:-1] + (names[-1],), nnx.LoRAParam(value)))
    return nnx.from_flat_state(out)
