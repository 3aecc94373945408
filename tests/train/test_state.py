"""The train state: sharded creation, the optimiser, the reference copy, a trainable subset."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

from memr1.models import params as params_lib
from memr1.train import mesh, optim, sft, state
from tests.train import tiny


def test_warmup_then_constant_schedule():
    schedule = optim.warmup_constant(1e-6, 4)
    got = [float(schedule(jnp.asarray(c))) for c in range(6)]
    np.testing.assert_allclose(got, [0.25e-6, 0.5e-6, 0.75e-6, 1e-6, 1e-6, 1e-6], rtol=1e-6)
    assert float(optim.warmup_constant(1e-5, 0)(jnp.asarray(0))) == pytest.approx(1e-5)
    constant = optim.lr_schedule(optim.OptimConfig(lr=1e-6, warmup_steps=4, total_steps=6))
    assert [float(constant(jnp.asarray(c))) for c in range(6)] == got


def test_cosine_schedule_warms_up_then_decays_to_zero_at_the_last_update():
    cfg = optim.OptimConfig(lr=1.0, warmup_steps=2, decay="cosine", total_steps=6)
    got = [float(optim.lr_schedule(cfg)(jnp.asarray(c))) for c in range(7)]
    half = 0.5 * (1 + np.cos(np.pi / 4))  # a quarter of the way through the decay
    np.testing.assert_allclose(got, [0.5, 1.0, half, 0.5, 1 - half, 0.0, 0.0], atol=1e-6)
    # Without warmup the decay starts at the first update.
    first = optim.lr_schedule(
        optim.OptimConfig(lr=1.0, warmup_steps=0, decay="cosine", total_steps=2)
    )
    np.testing.assert_allclose([float(first(jnp.asarray(c))) for c in range(2)], [0.5, 0.0])


def test_the_optimizer_steps_by_the_cosine_schedule():
    cfg = optim.OptimConfig(lr=0.1, warmup_steps=2, decay="cosine", total_steps=6, weight_decay=0)
    tx = optim.make_optimizer(cfg)
    w = {"w": jnp.zeros((2, 2))}
    opt_state = tx.init(w)
    steps = []
    for _ in range(6):  # a constant gradient: Adam's step is then the rate itself
        update, opt_state = tx.update({"w": jnp.full((2, 2), 0.5)}, opt_state, w)
        steps.append(-float(update["w"][0, 0]))
    want = [float(optim.lr_schedule(cfg)(jnp.asarray(c))) for c in range(6)]
    np.testing.assert_allclose(steps, want, rtol=1e-4, atol=1e-7)
    assert steps[-1] == 0.0 and steps[1] == pytest.approx(0.1, rel=1e-4)


def test_bad_learning_rate_decays_are_refused_by_name():
    with pytest.raises(ValueError, match="train.lr_decay must be one of .*'linear'"):
        optim.OptimConfig(lr=1.0, warmup_steps=0, decay="linear", total_steps=10)
    with pytest.raises(ValueError, match=r"needs train.steps \(10\) above train.warmup_steps"):
        optim.OptimConfig(lr=1.0, warmup_steps=10, decay="cosine", total_steps=10)


def test_optimisers_read_the_train_section():
    config = tiny.config("", warmup_steps=3)
    actor, critic = (state.OptimConfig.from_config(config, critic=c) for c in (False, True))
    assert (actor.lr, critic.lr) == (1e-6, 1e-5)  # the paper's rates
    assert actor.warmup_steps == critic.warmup_steps == 3
    assert actor.decay == critic.decay == "constant"
    cosine = tiny.config("", warmup_steps=3, lr_decay="cosine", steps=20)
    assert state.OptimConfig.from_config(cosine).total_steps == 20


def test_optimizer_clips_and_decays_only_matrices():
    tx = state.make_optimizer(state.OptimConfig(lr=0.1, warmup_steps=0, weight_decay=0.5))
    params = {"w": jnp.ones((2, 2)), "b": jnp.ones((2,))}
    zero = jax.tree.map(jnp.zeros_like, params)
    updates, _ = tx.update(zero, tx.init(params), params)
    np.testing.assert_allclose(updates["w"], -0.1 * 0.5 * np.ones((2, 2)), rtol=1e-6)
    np.testing.assert_array_equal(updates["b"], np.zeros(2))


@pytest.mark.parametrize("clip_norm, follows_second_gradient", [(1.0, True), (1e12, False)])
def test_global_norm_clipping_keeps_a_spike_from_dominating_adam(
    clip_norm, follows_second_gradient
):
    """A 1e6 gradient spike, then a unit gradient the other way: with clipping to norm 1 the
    spike counts like any other step and the second update follows the new gradient; without
    clipping the spike's first moment still dominates and the update keeps the old direction."""
    optim = state.OptimConfig(lr=1.0, warmup_steps=0, weight_decay=0.0, clip_norm=clip_norm)
    tx = state.make_optimizer(optim)
    params = {"w": jnp.ones((2, 2))}
    _, opt = tx.update({"w": jnp.full((2, 2), 1e6)}, tx.init(params), params)
    second, _ = tx.update({"w": jnp.full((2, 2), -0.5)}, opt, params)
    assert bool((second["w"] > 0).all()) == follows_second_gradient


def test_parameters_and_adam_moments_carry_their_logical_shardings(policy):
    setup, s0 = policy
    embed = s0.params["embed"]
    assert embed.sharding.spec == P("tensor", "fsdp")  # ("vocab", "embed")
    wq = s0.params["layers"][0]["attn"]["wq"]
    assert wq.sharding.spec == P("fsdp", "tensor", None)  # ("embed", "q_heads", "head_dim")
    mu = s0.opt_state[1][0].mu  # chain(clip, adamw) -> adamw's ScaleByAdamState
    assert mu["embed"].sharding.spec == P("tensor", "fsdp")
    assert s0.step.sharding.spec == P() and s0.rng.sharding.spec == P()
    assert embed.dtype == jnp.float32  # master weights, whatever the compute dtype


def test_reference_is_a_real_copy(policy):
    setup, s0 = policy
    ref = state.make_reference(setup, s0.params)
    assert tiny.leaves_equal(ref, s0.params)
    a, b = jax.tree.leaves(ref)[0], jax.tree.leaves(s0.params)[0]
    assert a.unsafe_buffer_pointer() != b.unsafe_buffer_pointer()
    half = state.make_reference(setup, s0.params, dtype="bfloat16")
    assert {x.dtype for x in jax.tree.leaves(half)} == {jnp.dtype("bfloat16")}


def test_abstract_setup_allocates_nothing_and_checks_divisibility():
    m = mesh.build_mesh(1, 1, 1)
    setup, s = state.create_train_state(m, tiny.CFG, tiny.optim(), materialize=False)
    assert s is None
    (leaf,) = jax.tree.leaves(setup.abstract_state.params["embed"])
    assert isinstance(leaf, jax.ShapeDtypeStruct) and leaf.sharding.spec == P("tensor", "fsdp")
    abstract = {"w": jax.ShapeDtypeStruct((6, 4), jnp.float32)}
    shardings = {"w": jax.sharding.NamedSharding(m, P("fsdp", None))}
    state.check_divisible(abstract, shardings)  # fsdp = 1 divides everything
    fake_mesh = jax.sharding.AbstractMesh((1, 4, 1), ("data", "fsdp", "tensor"))
    bad = {"w": jax.sharding.NamedSharding(fake_mesh, P("fsdp", None))}
    with pytest.raises(ValueError, match=r"\['w'\] \(6, 4\)"):
        state.check_divisible(abstract, bad)


def test_only_the_trainable_subset_moves():
    """The LoRA pattern: an nnx filter picks what the optimiser sees; the rest stays bitwise."""
    m = mesh.build_mesh(1, 1, 1)
    only_mlp = nnx.All(nnx.Param, nnx.PathContains("mlp"))
    optim = state.OptimConfig(lr=1e-2, warmup_steps=0)
    setup, s0 = state.create_train_state(m, tiny.CFG, optim, trainable=only_mlp)
    n_mlp = sum(x.size for x in jax.tree.leaves(s0.params["layers"][0]["mlp"]))
    assert sum(x.size for x in jax.tree.leaves(s0.opt_state[1][0].mu)) == n_mlp
    step = sft.make_sft_step(setup, tiny.sft_config())
    s1, metrics = step(tiny.copy_tree(s0), tiny.sft_batch())
    assert float(metrics["update_refused"]) == 0.0
    frozen_before = params_lib.split_trainable(s0.params, only_mlp)[1]
    frozen_after = params_lib.split_trainable(s1.params, only_mlp)[1]
    assert tiny.leaves_equal(frozen_after, frozen_before)
    assert not tiny.leaves_equal(s1.params["layers"][0]["mlp"], s0.params["layers"][0]["mlp"])


def test_weight_decay_spares_norms_and_attention_biases():
    from memr1.models import transformer
    from memr1.models.config import get_size

    _, params = transformer.init_model(get_size("tiny"))
    mask = optim.decay_mask(params)
    flat = {
        jax.tree_util.keystr(path): bool(v)
        for path, v in jax.tree_util.tree_flatten_with_path(mask)[0]
    }
    assert flat["['layers'][0]['attn']['bq'].value"] is False  # 2-D [heads, head_dim] bias
    assert flat["['layers'][0]['attn_norm']['scale'].value"] is False
    assert flat["['layers'][0]['attn']['wq'].value"] is True
    assert flat["['embed'].value"] is True
