"""The rollout engine against the reference sampler (`Sampler`: dense cache, static batch), the
trainer's log-probs, and its own contracts: replies independent of slots and order, preemption
that changes nothing, one program set per shape bucket, named errors."""

import dataclasses

import jax
import numpy as np
import pytest

from memr1.models import transformer
from memr1.models.config import get_size
from memr1.sampling import Sampler
from memr1.sampling.device_schedule import PoolTooSmallError
from memr1.sampling.engine import Engine, EngineSettings
from tests.sampling.reference import TEST_CFG, noisy_model, trainer_logprobs

# Compiles models: tens of seconds on 2 cores (make test-fast skips it).
pytestmark = pytest.mark.slow

# Ragged: rows of one prompt slot table span 1 to 4 pages of 4 tokens.
PROMPTS = [[5, 17, 3], [9, 1, 44, 2, 71, 30, 8, 62, 11, 90, 4], [33, 2, 58, 7, 19, 100, 6],
           [12, 13], [40, 41, 42, 43, 44, 45]]  # fmt: skip
NEW, G = 10, 2
# Few slots, small pages and rounds: slots refill, reply pages grow, rounds end early.
SMALL = EngineSettings(page_size=4, round_steps=3)


@pytest.fixture(scope="module")
def model():
    return noisy_model()


@pytest.fixture(scope="module")
def parity_model():
    """Weights at half the noise: at 0.1 the reference sampler's own log-probs move by
    9.5e-7 when only its prompt bucket changes (16 to 32 columns), the floor of any change of
    summation order; at 0.05 by 7.2e-7, which leaves the 1e-6 bar room to test."""
    return noisy_model(scale=0.05)


@pytest.fixture(scope="module")
def sampler(model):
    return Sampler(TEST_CFG, model[0], pad_id=0)


@pytest.fixture(scope="module")
def engine(model):
    return Engine(TEST_CFG, model[0], pad_id=0, settings=SMALL)


def _same(out, ref, atol=1e-6):
    for name in ("tokens", "lengths", "done", "mask"):
        np.testing.assert_array_equal(out[name], np.asarray(ref[name]), err_msg=name)
    np.testing.assert_allclose(out["logprobs"], np.asarray(ref["logprobs"]), rtol=0, atol=atol)


def _fields(out):
    return {k: getattr(out, k) for k in ("tokens", "logprobs", "lengths", "done", "mask")}


def _greedy_stops(sampler, params):
    """EOS and a 2-token stop sequence taken from the greedy replies: some rows stop on each,
    others run into the budget."""
    free = sampler.generate(params, PROMPTS, key=jax.random.key(0), max_new_tokens=NEW,
                            temperature=0.0)  # fmt: skip
    tokens = np.asarray(free.tokens)
    return [int(tokens[0, 3])], [[int(t) for t in tokens[1, 4:6]], [99, 98, 97]]


@pytest.mark.parametrize(
    "settings, slots",
    [
        (SMALL, 3),
        (EngineSettings(page_size=16, round_steps=16), None),
        (EngineSettings(page_size=2, round_steps=4, kv_tokens=40), 4),
    ],  # fmt: skip
    ids=["3-slots", "all-rows", "preempting-pool"],
)
def test_greedy_equals_the_reference_sampler(parity_model, settings, slots):
    graphdef, params = parity_model
    sampler = Sampler(TEST_CFG, graphdef, pad_id=0)
    eos, stop_seqs = _greedy_stops(sampler, params)
    kw = dict(key=jax.random.key(0), max_new_tokens=NEW, num_samples=G, temperature=0.0,
              eos_ids=eos, stop_sequences=stop_seqs)  # fmt: skip
    ref = sampler.generate(params, PROMPTS, **kw)
    lengths = np.asarray(ref.lengths)
    assert {int(n) for n in lengths} > {NEW} and (lengths < NEW).any()  # stops and cuts both
    out = Engine(TEST_CFG, graphdef, pad_id=0, settings=settings).generate(
        params, PROMPTS, slots=slots, **kw
    )
    _same(_fields(out), ref._asdict())
    np.testing.assert_array_equal(out.prompt_tokens, np.asarray(ref.prompt_tokens))
    if settings.kv_tokens:
        assert out.stats.preempted > 0  # the pool was short: rows were decoded again


def test_greedy_at_qwen2_5_3b_widths_equals_the_reference_sampler():
    """Real widths (d_model 2048, 16 heads over 2 kv heads of 128, d_ff 11008, the 151,936-token
    vocabulary), 2 blocks, random weights. Tokens are equal. Log-probs sit near -8, where a
    float32 step is 9.5e-7: the reference itself moves by 2-3 such steps when only its prompt
    bucket changes, and differs as much from the trainer's. That spread is the float32 floor of
    a log-prob here; the engine (which sums its attention in another order, two partial
    softmaxes merged) is as far from the exact value as the reference may be on the other
    side, so the two differ by at most twice the floor (4.8e-6 against a floor of 2.9e-6 under
    the suite's XLA flags, 2026-12-07)."""
    cfg = get_size("qwen2.5-3b", n_layers=2, dtype="float32", param_dtype="float32")
    graphdef, _ = transformer.abstract_model(cfg)
    params = jax.jit(lambda: transformer.init_model(cfg, 0)[1])()
    rng = np.random.default_rng(0)
    prompts = [list(rng.integers(1, cfg.vocab_size, n)) for n in (5, 19, 12)]
    kw = dict(key=jax.random.key(0), max_new_tokens=6, num_samples=2, temperature=0.0)
    ref = Sampler(cfg, graphdef).generate(params, prompts, **kw)
    wider = Sampler(cfg, graphdef, prompt_buckets=(64,)).generate(params, prompts, **kw)
    out = Engine(cfg, graphdef, settings=EngineSettings(page_size=16)).generate(
        params, prompts, slots=4, **kw
    )
    floor = max(
        np.abs(np.asarray(wider.logprobs) - np.asarray(ref.logprobs)).max(),
        np.abs(trainer_logprobs(graphdef, params, ref, 1.0) - np.asarray(ref.logprobs)).max(),
    )
    assert 1e-6 < floor < 5e-6, floor
    _same(_fields(out), ref._asdict(), atol=2 * floor)


@pytest.mark.parametrize("temperature, top_p", [(1.0, None), (0.7, 0.9)])
def test_sampled_logprobs_equal_the_trainers(model, engine, temperature, top_p):
    out = engine.generate(
        model[1], PROMPTS, key=jax.random.key(3), max_new_tokens=NEW, num_samples=G,
        temperature=temperature, top_p=top_p, eos_ids=[7], slots=3,
    )  # fmt: skip
    ref = trainer_logprobs(*model, out, temperature)
    np.testing.assert_allclose(out.logprobs, ref, atol=1e-5)
    assert out.logprobs[out.mask].max() < 0.0


def test_replies_do_not_depend_on_slots_pages_pool_or_order(model, engine):
    """A row's reply is a function of (key, prompt id, sample): the same with 3 slots and 7,
    other pages, a pool that preempts, and the prompts in another order."""
    graphdef, params = model
    kw = dict(key=jax.random.key(9), max_new_tokens=NEW, num_samples=G, temperature=1.0,
              top_p=0.95, eos_ids=[7, 30])  # fmt: skip
    a = engine.generate(params, PROMPTS, slots=3, **kw)
    order = [3, 0, 4, 2, 1]
    other = Engine(TEST_CFG, graphdef, settings=EngineSettings(page_size=2, round_steps=5,
                                                               kv_tokens=48))  # fmt: skip
    b = other.generate(params, [PROMPTS[i] for i in order], slots=7, prompt_ids=order, **kw)
    assert b.stats.preempted > 0
    rows = np.asarray([i * G + g for i in order for g in range(G)])
    _same({k: v[rows] for k, v in _fields(a).items()}, _fields(b))
    # Sampling draws differ between samples and between keys.
    tokens = a.tokens.reshape(len(PROMPTS), G, NEW)
    assert any(len({tuple(r) for r in group}) > 1 for group in tokens)
    c = engine.generate(params, PROMPTS, slots=3, **{**kw, "key": jax.random.key(10)})
    assert (c.tokens != a.tokens).any()


def test_slot_occupancy_counts_the_live_rows(model, engine):
    out = engine.generate(model[1], PROMPTS, key=jax.random.key(1), max_new_tokens=NEW,
                          num_samples=G, eos_ids=[7, 30, 41], slots=4)  # fmt: skip
    s = out.stats
    # Each row's first token comes from the prefill, every other one from a live slot-step.
    assert s.preempted == 0 and s.live_slot_steps == int((out.lengths - 1).sum())
    assert 0 < s.live_slot_steps < s.slot_steps and 0.0 < s.slot_occupancy < 1.0
    assert s.slots == 4 and s.peak_pages <= s.pool_pages - 1


def test_a_first_token_that_stops_and_a_budget_of_one(model, sampler, engine):
    ref = sampler.generate(model[1], PROMPTS, key=jax.random.key(0), max_new_tokens=NEW,
                           temperature=0.0)  # fmt: skip
    first = int(np.asarray(ref.tokens)[0, 0])
    out = engine.generate(model[1], PROMPTS, key=jax.random.key(0), max_new_tokens=NEW,
                          temperature=0.0, eos_ids=[first])  # fmt: skip
    assert out.lengths[0] == 1 and out.done[0] and out.tokens[0, 0] == first
    one = engine.generate(model[1], PROMPTS, key=jax.random.key(0), max_new_tokens=1,
                          temperature=0.0)  # fmt: skip
    np.testing.assert_array_equal(one.tokens[:, 0], np.asarray(ref.tokens)[:, 0])
    assert (one.lengths == 1).all() and not one.done.any() and one.stats.rounds == 0


def test_programs_are_a_bounded_set_per_shape_bucket(model):
    """Weights, prompts within a bucket, keys, temperature, top_p and stop ids are arguments:
    runs that vary them compile no more than the bucket's set (prefills per power-of-two batch,
    rounds per tail slot count), and a repeated run compiles nothing."""
    engine = Engine(TEST_CFG, model[0], pad_id=0, settings=SMALL)
    kw = dict(max_new_tokens=NEW, num_samples=G, top_p=0.5, slots=3)
    rng = np.random.default_rng(0)
    for i in range(4):
        params = jax.tree.map(lambda x: x * (1 + 0.01 * i), model[1])  # noqa: B023
        prompts = [p + [1 + i] * int(rng.integers(0, 3)) for p in PROMPTS]  # <= 13: 16 wide
        engine.generate(params, prompts, key=jax.random.key(i), temperature=0.5 + 0.2 * i,
                        eos_ids=[7 + i, 30], **{**kw, "top_p": 0.5 + 0.1 * i})  # fmt: skip
    plan = engine.plan([13], num_samples=G, max_new_tokens=NEW, slots=3, devices=1)
    assert plan.reply_pages <= 8  # one reply width: the budget's
    prefills = engine.settings.prefill_prompts.bit_length()  # batches 1, 2, 4 <= 4
    rounds = 4  # R = 3 slots: R, R/2, R/4, R/8 in a run's tail
    assert 1 < engine.compiled_programs() <= prefills + rounds
    before = engine.compiled_programs()
    engine.generate(model[1], PROMPTS, key=jax.random.key(0), temperature=0.5, eos_ids=[7], **kw)
    engine.generate(model[1], PROMPTS, key=jax.random.key(0), temperature=0.5, eos_ids=[7], **kw)
    assert engine.compiled_programs() == before


def test_progress_names_each_prompt_once(model, engine):
    seen = []
    engine.generate(model[1], PROMPTS, key=jax.random.key(2), max_new_tokens=NEW,
                    num_samples=G, eos_ids=[7], slots=3, progress=seen.extend)  # fmt: skip
    assert sorted(seen) == list(range(len(PROMPTS)))


def test_bad_requests_are_named_errors(model, engine):
    params = model[1]
    with pytest.raises(ValueError, match="empty"):
        engine.generate(params, [[1], []], key=jax.random.key(0), max_new_tokens=2)
    with pytest.raises(ValueError, match="max_position"):
        engine.generate(params, PROMPTS, key=jax.random.key(0), max_new_tokens=510)
    with pytest.raises(ValueError, match="prompt_ids"):
        engine.generate(params, PROMPTS, key=jax.random.key(0), max_new_tokens=2,
                        prompt_ids=[0, 1])  # fmt: skip
    tiny_pool = Engine(TEST_CFG, model[0], settings=EngineSettings(page_size=2, kv_tokens=8))
    with pytest.raises(PoolTooSmallError, match="engine.kv_tokens"):
        tiny_pool.generate(params, PROMPTS, key=jax.random.key(0), max_new_tokens=4)
    with pytest.raises(ValueError, match="page_size"):
        EngineSettings(page_size=3)


def test_a_run_without_a_shrinking_tail_compiles_one_prefill_and_one_round(model):
    """What a check that counts compiles sets (engine.prefill_prompts 1, shrink_tail off): a
    run compiles two programs, and the replies are the same as with a shrinking tail."""
    settings = EngineSettings(page_size=4, round_steps=3, prefill_prompts=1, shrink_tail=False)
    engine = Engine(TEST_CFG, model[0], pad_id=0, settings=settings)
    kw = dict(key=jax.random.key(6), max_new_tokens=NEW, num_samples=G, eos_ids=[7, 30], slots=4)
    out = engine.generate(model[1], PROMPTS, **kw)
    assert engine.compiled_programs() == 2 and out.stats.prefills == len(PROMPTS)
    shrinking = Engine(TEST_CFG, model[0], pad_id=0, settings=SMALL)
    _same(_fields(out), _fields(shrinking.generate(model[1], PROMPTS, **kw)))


def test_the_pallas_kernel_decodes_what_the_xla_path_decodes(model):
    """engine.attention "pallas" (interpreted on the CPU) walks only the live pages and merges
    its parts as the XLA path does: the same tokens, log-probs within float32 rounding."""
    kw = dict(key=jax.random.key(8), max_new_tokens=NEW, num_samples=G, eos_ids=[7, 30], slots=3,
              temperature=1.0)  # fmt: skip
    xla = Engine(TEST_CFG, model[0], settings=SMALL).generate(model[1], PROMPTS, **kw)
    settings = dataclasses.replace(SMALL, attention="pallas")
    out = Engine(TEST_CFG, model[0], settings=settings).generate(model[1], PROMPTS, **kw)
    _same(_fields(out), _fields(xla), atol=2e-6)
    with pytest.raises(ValueError, match="engine.attention"):
        EngineSettings(attention="cudnn")
