"""PPO: rewards on the final token, GAE + whitening in `prepare`, actor and critic both learn."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from memr1.rl import critic, ppo
from memr1.train import mesh, state, steps, update
from tests.train import tiny

# Compiles models or runs whole commands: tens of seconds on 2 cores (make test-fast skips it).
pytestmark = pytest.mark.slow


def _flat(params) -> dict:
    return {p: v.get_value() for p, v in nnx.to_flat_state(params)}


@pytest.mark.parametrize("tied", [True, False])
def test_the_critic_starts_from_the_policy_without_its_lm_head(tied):
    """verl's start: the critic's trunk is a copy of the policy's weights (in buffers of its own:
    the state is donated), without an LM head, and the zero value head makes every value 0."""
    cfg = tiny.CFG.replace(tie_embeddings=tied)
    m = mesh.build_mesh(1, 1, 1)
    setup, s0 = state.create_train_state(
        m, cfg, tiny.optim(), seed=1, critic_cfg=cfg, critic_optim=tiny.optim(critic=True)
    )
    policy, value = _flat(s0.params), _flat(s0.critic_params)
    trunk = {p[1:]: v for p, v in value.items() if p[0] == "trunk"}
    assert set(trunk) == set(policy) - {("lm_head",)}
    assert ("lm_head",) in policy or tied
    for path, x in trunk.items():
        np.testing.assert_array_equal(np.asarray(x), np.asarray(policy[path]), err_msg=str(path))
        assert x.sharding == policy[path].sharding, path
        assert x.unsafe_buffer_pointer() != policy[path].unsafe_buffer_pointer(), path
    assert set(value) - {("trunk", *p) for p in trunk} == {("head",), ("bias",)}
    np.testing.assert_array_equal(np.asarray(value[("head",)]), 0.0)
    assert float(value[("bias",)]) == 0.0
    batch = tiny.grpo_batch()
    values = critic.critic_values(
        setup.critic_graphdef, s0.critic_params, batch["tokens"], batch["valid"]
    )
    np.testing.assert_array_equal(np.asarray(values), 0.0)


def test_the_critic_trunk_takes_its_own_dtype_and_refuses_another_size():
    m = mesh.build_mesh(1, 1, 1)
    half = tiny.CFG.replace(param_dtype="bfloat16")
    critic = dict(critic_optim=tiny.optim(critic=True))
    _, s0 = state.create_train_state(m, tiny.CFG, tiny.optim(), critic_cfg=half, **critic)
    got = s0.critic_params["trunk"]["embed"][...]
    assert got.dtype == jnp.bfloat16
    np.testing.assert_array_equal(got, s0.params["embed"][...].astype(jnp.bfloat16))
    with pytest.raises(ValueError, match="cannot start from the policy.*layers/0/mlp"):
        wide = tiny.CFG.replace(d_ff=64)
        state.create_train_state(m, tiny.CFG, tiny.optim(), critic_cfg=wide, **critic)
    with pytest.raises(ValueError, match="critic_from_policy=False"):
        state.create_train_state(
            m, tiny.CFG, tiny.optim(), critic_cfg=tiny.CFG, critic_params=s0.critic_params, **critic
        )


def test_reward_sits_on_each_rows_last_response_token():
    mask = jnp.array([[0, 1, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0]], bool)
    got = ppo.final_token_rewards(jnp.array([2.0, -1.0, 5.0]), mask)
    np.testing.assert_array_equal(got, [[0, 0, 2, 0], [0, 0, 0, -1], [0, 0, 0, 0]])


def test_prepare_then_updates_train_actor_and_critic():
    m = mesh.build_mesh(1, 1, 1)
    critic_optim = state.OptimConfig(lr=5e-3, warmup_steps=0)
    setup, s0 = state.create_train_state(
        m, tiny.CFG, state.OptimConfig(lr=3e-3, warmup_steps=0), seed=1,
        critic_cfg=tiny.CFG, critic_optim=critic_optim,
    )  # fmt: skip
    cfg = tiny.ppo_config(n_micro=2, lam=0.9)
    raw = tiny.grpo_batch()
    raw.pop("advantages")
    raw["rewards"] = np.array([1, 0, 1, 1, 0, 0, 1, 0], np.float32)

    batch, prep_metrics = steps.make_ppo_prepare(setup, cfg)(s0, raw)
    mask = raw["response_mask"]
    adv = np.asarray(batch["advantages"])
    # Whitened over the batch's response tokens only; zero elsewhere.
    assert adv[mask].mean() == pytest.approx(0.0, abs=1e-5)
    assert adv[mask].std() == pytest.approx(1.0, abs=1e-3)
    assert np.all(adv[~mask] == 0)
    # The zero-initialised value head predicts 0, so each return is the reward discounted by
    # λ^(tokens to the end) (γ = 1), and exactly the reward on the final token.
    np.testing.assert_array_equal(np.asarray(batch["old_values"]), 0.0)
    returns = np.asarray(batch["returns"])
    for row in range(tiny.ROWS):
        cols = np.flatnonzero(mask[row])
        expected = raw["rewards"][row] * 0.9 ** (cols[-1] - cols)
        np.testing.assert_allclose(returns[row, cols], expected, rtol=1e-5)
    assert float(prep_metrics["reward_mean"]) == pytest.approx(0.5)

    step = steps.make_ppo_step(setup, cfg)
    s = tiny.copy_tree(s0)
    history = []
    for _ in range(3):
        s, metrics = step(s, batch)
        history.append(jax.device_get(metrics))
    # On-policy first epoch: ratio 1 and a whitened advantage sum to a zero surrogate.
    assert float(history[0]["pg_loss"]) == pytest.approx(0.0, abs=1e-5)
    values = [float(h["value_loss"]) for h in history]
    assert values[2] < 0.8 * values[0], f"the critic does not fit the returns: {values}"
    assert all(float(h["update_refused"]) == 0 for h in history)
    assert float(history[0]["critic_grad_norm"]) > 0
    assert not tiny.leaves_equal(s.params, s0.params)
    assert not tiny.leaves_equal(s.critic_params, s0.critic_params)


def test_ppo_without_a_critic_is_refused_before_compute(policy):
    setup, _ = policy
    with pytest.raises(ValueError, match="needs a critic"):
        steps.make_ppo_prepare(setup, tiny.ppo_config())
    with pytest.raises(ValueError, match="has none"):
        steps.make_ppo_step(setup, tiny.ppo_config())


def test_ppo_config_reads_the_train_section():
    config = tiny.config("stage=answer,algo=ppo")
    defaults = ppo.PPOConfig.from_config(config)
    assert (defaults.gamma, defaults.lam, defaults.kl_beta) == (1.0, 1.0, 0.0)  # verl's defaults
    config.train.update(clip_eps=0.3, kl_beta=0.01, kl_estimator="k2", temperature=0.7, n_micro=2)
    config.train.update(gamma=0.99, lam=0.95)
    cfg = ppo.PPOConfig.from_config(config)
    got = {k: getattr(cfg, k) for k in ("clip_eps", "kl_beta", "kl_estimator", "temperature")}
    assert got == {"clip_eps": 0.3, "kl_beta": 0.01, "kl_estimator": "k2", "temperature": 0.7}
    assert (cfg.n_micro, cfg.gamma, cfg.lam) == (2, 0.99, 0.95)
    config.train.lam = 1.5
    with pytest.raises(ValueError, match=r"train\.lam"):
        ppo.PPOConfig.from_config(config)
    for key, bad in (("kl_estimator", "k4"), ("temperature", 0.0)):
        with pytest.raises(ValueError, match=rf"train\.{key}"):
            ppo.PPOConfig.from_config(tiny.config("runlocal,algo=ppo", **{key: bad}))


def test_ppo_with_a_reference_scores_it_once_in_prepare():
    """With β > 0, `prepare` fixes the reference's log-probs (the policy's log-prob function on
    the reference weights) beside the old ones, and the update reads them off the batch: a
    different reference moves the KL, the same weights give KL 0."""
    m = mesh.build_mesh(1, 1, 1)
    setup, s0 = state.create_train_state(
        m, tiny.CFG, tiny.optim(), seed=3, critic_cfg=tiny.CFG, critic_optim=tiny.optim(critic=True)
    )
    other = state.create_train_state(m, tiny.CFG, tiny.optim(), seed=4)[1]
    cfg = tiny.ppo_config(n_micro=2, kl_beta=0.1)
    raw = {k: v for k, v in tiny.grpo_batch().items() if k != "advantages"}
    raw["rewards"] = np.linspace(-1.0, 1.0, tiny.ROWS, dtype=np.float32)
    prepare, step = (
        steps.make_ppo_prepare(setup, cfg),
        steps.make_ppo_step(setup, cfg, grads_only=True),
    )
    kls = []
    for start in (s0.params, other.params):
        ref = state.make_reference(setup, start)
        batch, _ = prepare(s0, raw, ref)
        want = update.make_logprob_fn(setup, chunk=tiny.CHUNK)(ref, raw)
        mask = raw["response_mask"]
        np.testing.assert_allclose(
            np.asarray(batch["ref_logp"]), np.asarray(want) * mask, atol=1e-6
        )
        kls.append(float(step(s0, batch)[2]["kl"]))
    assert kls[0] == pytest.approx(0.0, abs=1e-6) and kls[1] > 1e-3, kls
    no_ref = {k: v for k, v in batch.items() if k != "ref_logp"}
    with pytest.raises(ValueError, match="'ref_logp'"):
        step(s0, no_ref)
