"""RL with `model.remat` (as experiments/gpu_node.sh runs it): rollouts sample from the model
without remat, the update recomputes, and one GRPO step of each stage runs end to end."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx

from memr1.env import rollout
from memr1.env.policy import SamplingConfig, TextPolicy
from memr1.models.tokenizer_train import train_bpe_tokenizer
from memr1.models.transformer import without_remat
from memr1.train import loop, mesh, state
from tests.train import tiny
from tests.train.test_loop import STATES
from tests.train.test_manager_reward import STATE as MANAGER_STATE
from tests.train.test_manager_reward import env as reward_env


@pytest.fixture(scope="module")
def remat_policy(tmp_path_factory):
    texts = [f"{s.question} {s.memories[0][1][0][1]} **Answer:** {s.gold}" for s in STATES] * 5
    texts += [m["text"] for m in MANAGER_STATE.bank] + list(MANAGER_STATE.facts)
    tok = train_bpe_tokenizer(texts, tmp_path_factory.mktemp("tok"), vocab_size=300)
    cfg = tiny.CFG.replace(
        vocab_size=len(tok), n_layers=2, max_position=512, remat=True, scan_layers=True
    )
    m = mesh.build_mesh(1, 1, 1, model_cfgs=[cfg])
    setup, s0 = state.create_train_state(m, cfg, state.OptimConfig(lr=1e-3, warmup_steps=1))
    # The manager's prompt is ~390 tokens: whole (an over-budget manager prompt is an error).
    kw = dict(eos_ids=[tok.eos_token_id], pad_id=tok.pad_token_id, max_prompt_tokens=448)
    policy = TextPolicy(cfg, setup.graphdef, None, tok, batch_size=2, **kw)
    # The frozen answerer of the manager stage is a plain model, as `prepare_models` loads it.
    plain = cfg.replace(remat=False, scan_layers=False)
    answer_setup, _ = state.create_train_state(m, plain, tiny.optim(), materialize=False)
    answerer = TextPolicy(plain, answer_setup.graphdef, s0.params, tok, batch_size=2, **kw)
    update = loop.make_rl_update(setup, "grpo", grpo_cfg=tiny.grpo_config(chunk=64, kl_beta=0.0))
    return setup, s0, policy, answerer, update


def test_the_sampler_graph_has_remat_off_and_the_same_parameters(remat_policy):
    setup, s0, *_ = remat_policy
    model = nnx.merge(without_remat(setup.graphdef, s0.params), s0.params)
    cfgs = [m.cfg for _, m in nnx.iter_modules(model) if hasattr(m, "cfg")]
    assert cfgs and not any(c.remat for c in cfgs)
    assert model.cfg.scan_layers
    assert jax.tree.structure(nnx.state(model)) == jax.tree.structure(s0.params)
    assert nnx.merge(setup.graphdef, s0.params).cfg.remat  # the update's graph keeps it


@pytest.mark.parametrize("stage", ["answer", "manager"])
def test_one_grpo_step_with_remat(remat_policy, stage, tmp_path):
    setup, s0, policy, answerer, update = remat_policy
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=6)

    def do_rollout(params, states, key):
        if stage == "answer":
            return rollout.answer_rollout(
                policy, params, states, group_size=2, sampling=sampling, key=key, style="compact"
            )
        return rollout.manager_rollout(
            policy,
            params,
            states,
            group_size=2,
            sampling=sampling,
            key=key,
            style="compact",
            env=reward_env(answerer, capacity=8, k_per_speaker=2, text_bytes=256),
        )

    states = STATES if stage == "answer" else [MANAGER_STATE] * 2
    final = loop.run_rl(
        setup,
        tiny.copy_tree(s0),
        update,
        states,
        do_rollout,
        cfg=tiny.loop_config(steps=1, batch_size=2, group_size=2),
        response_width=6,
        pad_id=policy.pad_id,
    )
    assert int(final.step) == 1 and int(final.n_refused) == 0
    moved = [
        not np.array_equal(np.asarray(a), np.asarray(b))
        for a, b in zip(jax.tree.leaves(s0.params), jax.tree.leaves(final.params), strict=True)
    ]
    assert any(moved), "the update changed no weight"
