"""The train state, created already sharded (its optimisers: `memr1.train.optim`).

A `TrainState` is a plain pytree of arrays (step, parameters, optimiser state, RNG key, the
count of refused updates, and optionally a critic with its own optimiser state); everything
static (graph definitions, optimisers, the mesh, the shardings) lives in a `TrainSetup` that the
step factories close over. Parameters and optimiser state never exist unsharded: the
initialiser is jitted with `out_shardings` derived from the logical axis names that every
parameter carries (`out_sharding` metadata, mapped by `memr1.sharding.logical_to_spec`). Optax
keeps the `nnx.Param` wrappers (and their metadata) in Adam's moments, so one rule derives the
shardings of parameters and optimiser state alike.

Numerics: the weights are stored in `cfg.param_dtype` (float32 master weights for training) and
the model casts them to `cfg.dtype` (bfloat16 on accelerators) inside each matmul, so gradients
and Adam moments stay in the storage dtype.

Trainable subset: `trainable` is an nnx filter (default `nnx.Param`, i.e. everything). The
optimiser state covers only the matching parameters and the steps differentiate only them, so
LoRA (adapters as `nnx.LoRAParam`, base weights frozen) is `trainable=nnx.LoRAParam` with a
`module_fn` that returns the adapted model; the steps do not change.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx, struct
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from memr1.models.config import ModelConfig
from memr1.models.params import split_trainable
from memr1.models.transformer import Transformer
from memr1.rl.critic import ValueModel, trunk_from_policy
from memr1.sampling.layout import decode_dtype
from memr1.sharding import DEFAULT_RULES, logical_to_spec
from memr1.train.optim import OptimConfig, lr_schedule, make_optimizer


@struct.dataclass
class TrainState:
    """Everything a step reads and writes (all arrays; donated to the step).

    step: int32 scalar, the number of steps taken (refused updates included).
    params: the policy's full parameter state (trainable and frozen parts).
    opt_state: optimiser state of the trainable parameters only.
    rng: the run's base PRNG key; per-step keys are fold_in(rng, step), see `step_key`.
    n_refused: int32 scalar, how many updates the NaN/inf guard refused so far.
    critic_params / critic_opt_state: the PPO value model, None otherwise.
    """

    step: jax.Array
    params: nnx.State
    opt_state: Any
    rng: jax.Array
    n_refused: jax.Array
    critic_params: nnx.State | None = None
    critic_opt_state: Any = None


@dataclasses.dataclass(frozen=True)
class TrainSetup:
    """The static half of training: graph definitions, optimisers, mesh and shardings."""

    mesh: Mesh
    model_cfg: ModelConfig
    graphdef: nnx.GraphDef
    tx: optax.GradientTransformation
    lr_schedule: optax.Schedule
    trainable: Any  # an nnx filter selecting the trainable parameters
    state_shardings: TrainState  # a TrainState of NamedShardings
    abstract_state: TrainState  # ShapeDtypeStructs with those shardings: a restore target
    rules: tuple = DEFAULT_RULES
    critic_graphdef: nnx.GraphDef | None = None
    critic_tx: optax.GradientTransformation | None = None

    @property
    def param_shardings(self) -> nnx.State:
        return self.state_shardings.params

    @property
    def replicated(self) -> NamedSharding:
        return NamedSharding(self.mesh, PartitionSpec())


def tree_shardings(mesh: Mesh, tree: Any, rules=DEFAULT_RULES) -> Any:
    """NamedShardings for a pytree whose nnx Variables carry logical axis names.

    Leaves outside a Variable (Adam's step count, the RNG key) are replicated.
    """
    specs = nnx.get_partition_spec(tree)
    return jax.tree.map(
        lambda spec: NamedSharding(mesh, logical_to_spec(tuple(spec), rules)),
        specs,
        is_leaf=lambda x: isinstance(x, PartitionSpec),
    )


def check_divisible(abstract: Any, shardings: Any) -> None:
    """Raises a ValueError naming every array whose dimensions its mesh axes do not divide."""
    problems = []
    flat_abs = jax.tree_util.tree_flatten_with_path(abstract)[0]
    for (path, leaf), sharding in zip(flat_abs, jax.tree.leaves(shardings), strict=True):
        for dim, axes in zip(leaf.shape, sharding.spec, strict=False):
            axes = (axes,) if isinstance(axes, str) else tuple(axes or ())
            size = 1
            for axis in axes:
                size *= sharding.mesh.shape[axis]
            if dim % size:
                name = jax.tree_util.keystr(path)
                problems.append(f"{name} {tuple(leaf.shape)} over {sharding.spec}")
    if problems:
        raise ValueError(
            "the mesh does not divide these arrays (a mesh axis must divide each dimension it "
            "shards): " + "; ".join(problems[:8])
        )


def _with_added(
    params: nnx.State, module_fn: Callable[[], nnx.Module], abstract: nnx.State, shardings: Any
) -> nnx.State:
    """`params` plus the parameters of `module_fn`'s model that it lacks, initialised sharded.

    Raises a ValueError when `params` holds a parameter the model does not have.
    """
    have = {path for path, _ in nnx.to_flat_state(params)}
    want = [path for path, _ in nnx.to_flat_state(abstract)]
    extra = sorted(map(str, have - set(want)))
    if extra:
        raise ValueError(f"the start parameters hold entries the model lacks: {extra[:4]}")
    missing = [path for path in want if path not in have]
    if not missing:
        return params
    flat_shardings = dict(nnx.to_flat_state(shardings))

    def init_missing():
        flat = dict(nnx.to_flat_state(nnx.split(module_fn())[1]))
        return nnx.from_flat_state([(path, flat[path]) for path in missing])

    # Only the missing leaves are outputs: XLA drops the rest of the random initialisation.
    out = nnx.from_flat_state([(path, flat_shardings[path]) for path in missing])
    added = jax.jit(init_missing, out_shardings=out)()
    return nnx.merge_state(params, added)


def _init_part(
    mesh: Mesh,
    module_fn: Callable[[], nnx.Module],
    tx: optax.GradientTransformation,
    trainable: Any,
    params: nnx.State | None,
    rules,
    materialize: bool,
    seeded: tuple[Callable[[jax.Array], nnx.Module], int] | None = None,
) -> tuple[nnx.GraphDef, Any, Any, Any]:
    """Graphdef, (params, opt_state) sharded (or None), their shardings and abstract shapes.

    `seeded` = (build, seed), with `module_fn() == build(seed)`, initialises through `build`
    with the seed's key (its uint32 data, which `nnx.Rngs` takes as the key) an argument of the
    compiled program rather than a constant in it: the same weights, bitwise, and one program
    for every seed of a model and its placement (a random initialisation compiles for ~2 s on a
    CPU core even for a tiny model)."""
    graphdef, abstract_params = nnx.split(nnx.eval_shape(module_fn))

    def init_opt(p):
        return tx.init(split_trainable(p, trainable)[0])

    abstract_opt = jax.eval_shape(init_opt, abstract_params)
    p_shard, o_shard = tree_shardings(mesh, (abstract_params, abstract_opt), rules)
    check_divisible(abstract_params, p_shard)
    abstract = (abstract_params, abstract_opt)
    if not materialize:
        return graphdef, (None, None), (p_shard, o_shard), abstract
    if params is None and seeded is not None:
        build, seed = seeded
        init = jax.jit(lambda s: nnx.split(build(s))[1], out_shardings=p_shard)
        # On the host: every process of a multi-host run passes the same replicated value.
        params = init(np.asarray(jax.random.key_data(jax.random.key(seed))))
    elif params is None:
        params = jax.jit(lambda: nnx.split(module_fn())[1], out_shardings=p_shard)()
    else:
        # Host (or differently placed) weights, e.g. from an HF checkpoint: place each shard
        # (arrays already placed so are not copied). Parameters that `module_fn` adds on top of
        # them (LoRA adapters) are initialised by it, straight into their shards.
        params = jax.device_put(_with_added(params, module_fn, abstract_params, p_shard), p_shard)
    opt_state = jax.jit(init_opt, out_shardings=o_shard)(params)
    return graphdef, (params, opt_state), (p_shard, o_shard), abstract


def _init_critic(mesh, cfg, tx, seed, policy_params, params, rules, materialize):
    """`_init_part` of the PPO value model; its trunk copies `policy_params` when given."""
    critic_fn = lambda: ValueModel(cfg, nnx.Rngs(params=seed + 1))
    if policy_params is not None and materialize:
        _, _, (shardings, _), (abstract, _) = _init_part(
            mesh, critic_fn, tx, nnx.Param, None, rules, materialize=False
        )
        # The value head and bias, which the trunk lacks, are initialised (to zero) by critic_fn.
        params = trunk_from_policy(policy_params, abstract, shardings)
    return _init_part(mesh, critic_fn, tx, nnx.Param, params, rules, materialize)


def _transformer_of(model_cfg: ModelConfig) -> Callable[[Any], nnx.Module]:
    """The policy's default module, built from a seed or the uint32 data of its key."""
    return lambda key: Transformer(model_cfg, nnx.Rngs(params=key))


def create_train_state(
    mesh: Mesh,
    model_cfg: ModelConfig,
    optim: OptimConfig,
    *,
    seed: int = 0,
    params: nnx.State | None = None,
    module_fn: Callable[[], nnx.Module] | None = None,
    trainable: Any = nnx.Param,
    critic_cfg: ModelConfig | None = None,
    critic_optim: OptimConfig | None = None,
    critic_params: nnx.State | None = None,
    critic_from_policy: bool = True,
    rules=DEFAULT_RULES,
    materialize: bool = True,
) -> tuple[TrainSetup, TrainState | None]:
    """Builds the sharded train state and its static setup.

    Args:
      mesh: from `memr1.train.mesh.build_mesh`.
      model_cfg: the policy backbone (dtype = compute dtype, param_dtype = master weights).
      optim: the policy optimiser (`OptimConfig.from_config`; paper: lr 1e-6, constant after
        warmup).
      seed: seeds the random initialisation and the state's base RNG key.
      params: weights to start from (e.g. an HF checkpoint); random initialisation if None.
      module_fn: builds the policy module (default `Transformer(model_cfg)`); a LoRA-adapted
        model plugs in here together with `trainable=nnx.LoRAParam` (`memr1.train.lora`).
        `params` may then hold only the base weights: the adapters are initialised by it.
      trainable: nnx filter of the parameters the optimiser updates.
      critic_cfg: if set, a PPO value model (`memr1.rl.critic.ValueModel`) is created too.
      critic_optim: its optimiser (`OptimConfig.from_config(config, critic=True)`; paper: lr
        1e-5); required with `critic_cfg`.
      critic_params: its start weights; only with critic_from_policy=False.
      critic_from_policy: start the critic's trunk as a copy of the policy's start weights (the
        base weights under LoRA, no LM head) with a zero value head, as verl starts its critic
        from the actor (`memr1.rl.critic.trunk_from_policy`); False: `critic_params`, or a
        random trunk if None.
      materialize: False allocates nothing and returns (setup, None), for a resumed run.
    Returns:
      (setup, state), with every array of `state` placed by `setup.state_shardings`.
    """
    _check_critic_args(critic_cfg, critic_optim, critic_params, critic_from_policy)
    seeded = None if module_fn is not None else (_transformer_of(model_cfg), seed)
    module_fn = module_fn or (lambda: seeded[0](seed))
    tx = make_optimizer(optim)
    graphdef, (p, o), (p_sh, o_sh), (p_abs, o_abs) = _init_part(
        mesh, module_fn, tx, trainable, params, rules, materialize, seeded
    )
    c_graphdef, c_tx, (c_p, c_o), (c_psh, c_osh), (c_pabs, c_oabs) = _maybe_critic(
        mesh, critic_cfg, critic_optim, critic_params, critic_from_policy, seed, p, rules,
        materialize,
    )  # fmt: skip
    replicated = NamedSharding(mesh, PartitionSpec())
    shardings = TrainState(replicated, p_sh, o_sh, replicated, replicated, c_psh, c_osh)
    abstract = _abstract_state(seed, (p_abs, o_abs, c_pabs, c_oabs), shardings)
    setup = TrainSetup(
        mesh=mesh,
        model_cfg=model_cfg,
        graphdef=graphdef,
        tx=tx,
        lr_schedule=lr_schedule(optim),
        trainable=trainable,
        state_shardings=shardings,
        abstract_state=abstract,
        rules=tuple(rules),
        critic_graphdef=c_graphdef,
        critic_tx=c_tx,
    )
    if not materialize:
        return setup, None
    state = TrainState(
        step=jax.device_put(jnp.int32(0), replicated),
        params=p,
        opt_state=o,
        rng=jax.device_put(jax.random.PRNGKey(seed), replicated),
        n_refused=jax.device_put(jnp.int32(0), replicated),
        critic_params=c_p,
        critic_opt_state=c_o,
    )
    return setup, state


def _check_critic_args(cfg, optim, params, from_policy) -> None:
    if cfg is not None and optim is None:
        raise ValueError("a critic (critic_cfg) needs its optimiser: pass critic_optim")
    if params is not None and from_policy:
        raise ValueError("critic_params are start weights: pass critic_from_policy=False")


def _maybe_critic(mesh, cfg, optim, params, from_policy, seed, policy_params, rules, materialize):
    """(graphdef, tx, (params, opt state), (shardings...), (abstract...)) of the PPO value model,
    or Nones when `cfg` is None; see `create_train_state` for the arguments."""
    if cfg is None:
        return None, None, (None, None), (None, None), (None, None)
    tx = make_optimizer(optim)
    start = policy_params if from_policy else None
    graphdef, values, shardings, abstract = _init_critic(
        mesh, cfg, tx, seed, start, params, rules, materialize
    )
    return graphdef, tx, values, shardings, abstract


def _abstract_state(seed: int, parts: tuple, shardings: TrainState) -> TrainState:
    """ShapeDtypeStructs of the whole state, each carrying its sharding; `parts` holds the
    abstract (policy params, policy opt state, critic params, critic opt state)."""
    scalar = jax.ShapeDtypeStruct((), jnp.int32)
    key = jax.eval_shape(lambda: jax.random.PRNGKey(seed))
    p_abs, o_abs, c_pabs, c_oabs = parts
    abstract = TrainState(scalar, p_abs, o_abs, key, scalar, c_pabs, c_oabs)
    return jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), abstract, shardings
    )


def frozen_copy(params: Any, shardings: Any, dtype: Any) -> Any:
    """A copy of `params` in `dtype` (cast shard by shard), placed by `shardings`.

    For weights that are only ever read in the compute dtype (the KL reference, the frozen
    Answer Agent): the model casts every weight to it inside each matmul, so a copy stored in it
    computes exactly what the float32 original does at a fraction of the memory. It is a real
    copy even in the same dtype: the train state is donated to every step, so sharing its
    buffers would leave the copy pointing at freed memory.
    """
    dt = jnp.dtype(dtype)
    cast = lambda x: jnp.copy(x) if x.dtype == dt else x.astype(dt)
    return jax.jit(lambda p: jax.tree.map(cast, p), out_shardings=shardings)(params)


def make_reference(setup: TrainSetup, params: nnx.State, dtype: str | None = None) -> nnx.State:
    """The frozen reference policy for the KL term: a copy of `params`, sharded like the policy,
    in `dtype` (default: the compute dtype, `memr1.sampling.layout.decode_dtype`)."""
    dtype = dtype or decode_dtype(setup.model_cfg)
    return frozen_copy(params, setup.param_shardings, dtype)


def start_params(
    setup: TrainSetup, params: nnx.State, module_fn: Callable[[], nnx.Module] | None = None
) -> nnx.State:
    """The policy parameters a fresh train state would start from, without building the state:
    `params` (the start weights) placed in the policy's shardings, plus the parameters
    `module_fn` adds to them (LoRA adapters, B = 0). A resumed run, which restores its state
    into `setup.abstract_state` instead, takes its KL reference from these."""
    if module_fn is None:
        module_fn = lambda: Transformer(setup.model_cfg, nnx.Rngs(params=0))
    shardings = setup.param_shardings
    full = _with_added(params, module_fn, setup.abstract_state.params, shardings)
    return jax.device_put(full, shardings)


def step_key(rng: jax.Array, step: jax.Array | int, stream: int = 0) -> jax.Array:
    """The key of one step (and one stream of randomness within it): fold_in(rng, step)."""
    return jax.random.fold_in(jax.random.fold_in(rng, step), stream)
