"""The rollout engine against no-cache references, and its sampling / stopping contracts."""

import jax
import numpy as np
import pytest

from memr1.models.vocab import OutOfVocabError
from memr1.sampling import Sampler
from tests.sampling.reference import TEST_CFG, naive_greedy, noisy_model, trainer_logprobs

# Compiles models or runs whole commands: tens of seconds on 2 cores (make test-fast skips it).
pytestmark = pytest.mark.slow

# Different lengths, so rows are left-padded by different amounts inside one bucket.
PROMPTS = [[5, 17, 3], [9, 1, 44, 2, 71, 30, 8, 62, 11, 90, 4], [33, 2, 58, 7, 19, 100, 6]]
NEW = 10


@pytest.fixture(scope="module")
def model():
    return noisy_model()


@pytest.fixture(scope="module")
def sampler(model):
    return Sampler(TEST_CFG, model[0], pad_id=0)


@pytest.fixture(scope="module")
def greedy_tokens(model):
    return naive_greedy(*model, PROMPTS, NEW)


def _greedy(sampler, params, **kw):
    return sampler.generate(
        params, PROMPTS, key=jax.random.key(0), max_new_tokens=NEW, temperature=0.0, **kw
    )


def test_greedy_equals_full_forward_reference(model, sampler, greedy_tokens):
    out = _greedy(sampler, model[1])
    np.testing.assert_array_equal(np.asarray(out.tokens), greedy_tokens)
    np.testing.assert_array_equal(np.asarray(out.lengths), [NEW] * 3)
    assert not np.asarray(out.done).any() and np.asarray(out.mask).all()
    # Greedy log-probs are taken under the untempered distribution.
    ref = trainer_logprobs(*model, out, temperature=1.0)
    np.testing.assert_allclose(np.asarray(out.logprobs), ref, atol=1e-5)


@pytest.mark.parametrize("temperature, top_p", [(1.0, None), (0.7, 0.9)])
def test_sampler_logprobs_equal_trainer_logprobs(model, sampler, temperature, top_p):
    out = sampler.generate(
        model[1],
        PROMPTS,
        key=jax.random.key(3),
        max_new_tokens=NEW,
        num_samples=2,
        temperature=temperature,
        top_p=top_p,
        eos_ids=[7],
    )
    ref = trainer_logprobs(*model, out, temperature)
    np.testing.assert_allclose(np.asarray(out.logprobs), ref, atol=1e-5)
    assert np.asarray(out.logprobs)[np.asarray(out.mask)].max() < 0.0


@pytest.mark.parametrize("filters", [{"top_k": 1}, {"top_p": 1e-6}])
def test_degenerate_filters_equal_greedy(model, sampler, greedy_tokens, filters):
    out = sampler.generate(
        model[1], PROMPTS, key=jax.random.key(5), max_new_tokens=NEW, num_samples=2, **filters
    )
    tokens = np.asarray(out.tokens)
    np.testing.assert_array_equal(tokens[0::2], greedy_tokens)
    np.testing.assert_array_equal(tokens[1::2], greedy_tokens)


def test_group_samples_differ_when_sampling_and_agree_when_greedy(model, sampler):
    g = 2  # the same program as the temperature-1 log-prob test
    sampled = sampler.generate(
        model[1], PROMPTS, key=jax.random.key(1), max_new_tokens=NEW, num_samples=g
    )
    tokens = np.asarray(sampled.tokens).reshape(len(PROMPTS), g, NEW)
    for group in tokens:
        assert len({tuple(row) for row in group}) > 1
    greedy = _greedy(sampler, model[1], num_samples=g)
    tokens = np.asarray(greedy.tokens).reshape(len(PROMPTS), g, NEW)
    assert (tokens == tokens[:, :1]).all()
    # Prompts are repeated prompt-major: row b * G + g holds prompt b.
    np.testing.assert_array_equal(
        np.asarray(greedy.prompt_tokens)[::g, -3:], [p[-3:] for p in PROMPTS]
    )


def test_same_key_same_output_other_key_other_output(model, sampler):
    def run(seed):
        kw = dict(max_new_tokens=NEW, num_samples=2, temperature=0.7, top_p=0.9)
        return np.asarray(sampler.generate(model[1], PROMPTS, key=jax.random.key(seed), **kw)[0])

    np.testing.assert_array_equal(run(11), run(11))
    assert (run(11) != run(12)).any()


def _expected_length(row, eos, stop_sequences):
    for i, token in enumerate(row):
        if token in eos or any(list(row[i + 1 - len(s) : i + 1]) == s for s in stop_sequences):
            return i + 1
    return len(row)


def test_eos_and_stop_sequences_stop_rows_independently(model, sampler, greedy_tokens):
    # Stops chosen from the known greedy continuations: row 0 hits the EOS id, row 1 the
    # two-token stop sequence; row 2 may or may not (the reference decides).
    eos = [int(greedy_tokens[0, 3])]
    stop_seqs = [[int(t) for t in greedy_tokens[1, 5:7]], [999, 998, 997]]
    out = _greedy(sampler, model[1], eos_ids=eos, stop_sequences=stop_seqs)
    expected = [_expected_length(list(r), eos, stop_seqs) for r in greedy_tokens]
    assert expected[0] <= 4 and expected[1] <= 7
    np.testing.assert_array_equal(np.asarray(out.lengths), expected)
    np.testing.assert_array_equal(np.asarray(out.done), [n < NEW for n in expected])
    tokens, logprobs = np.asarray(out.tokens), np.asarray(out.logprobs)
    for b, n in enumerate(expected):
        np.testing.assert_array_equal(tokens[b, :n], greedy_tokens[b, :n])
        assert (tokens[b, n:] == 0).all() and (logprobs[b, n:] == 0).all()
        assert (logprobs[b, :n] < 0).all()
        np.testing.assert_array_equal(np.asarray(out.mask)[b], np.arange(NEW) < n)


def test_stop_sequence_does_not_match_across_the_prompt(model, sampler, greedy_tokens):
    # The last prompt token followed by the first generated one is not a generated sequence.
    seq = [PROMPTS[0][-1], int(greedy_tokens[0, 0])]
    out = _greedy(sampler, model[1], stop_sequences=[seq])
    assert int(out.lengths[0]) == _expected_length(list(greedy_tokens[0]), [], [seq])


def test_new_params_and_prompt_lengths_in_a_bucket_do_not_recompile(model, sampler):
    kw = dict(key=jax.random.key(0), max_new_tokens=NEW, num_samples=2, top_p=0.5)
    sampler.generate(model[1], PROMPTS, **kw)
    before = sampler.compiled_programs()
    shifted = jax.tree.map(lambda x: x * 1.01, model[1])
    longer = [p + [1, 2, 3] for p in PROMPTS]  # 14 tokens: still the 16-wide bucket
    sampler.generate(shifted, longer, **{**kw, "top_p": 0.8}, temperature=0.5, eos_ids=[1, 2])
    assert sampler.compiled_programs() == before


def test_rejects_bad_arguments(model, sampler):
    with pytest.raises(ValueError, match="empty"):
        sampler.generate(model[1], [[1], []], key=jax.random.key(0), max_new_tokens=2)
    with pytest.raises(ValueError, match="top_p"):
        sampler.generate(model[1], PROMPTS, key=jax.random.key(0), max_new_tokens=2, top_p=0.0)
    with pytest.raises(ValueError, match="max_position"):
        sampler.generate(model[1], PROMPTS, key=jax.random.key(0), max_new_tokens=510)


@pytest.mark.parametrize("pad", [TEST_CFG.vocab_size, TEST_CFG.vocab_size + 999])
def test_a_pad_id_outside_the_vocabulary_changes_no_row(model, sampler, pad):
    """Tokenizers may add a pad id past vocab_size; left padding and finished rows hold it."""
    kw = dict(key=jax.random.key(5), max_new_tokens=NEW, num_samples=2, temperature=1.0)
    kw["eos_ids"] = [7, 11, 30]  # some rows end early and feed the pad back in
    ref = sampler.generate(model[1], PROMPTS, **kw)
    out = Sampler(TEST_CFG, model[0], pad_id=pad).generate(model[1], PROMPTS, **kw)
    mask = np.asarray(ref.mask)
    assert not mask.all(), "no row ended early: the test would not feed a pad back"
    np.testing.assert_array_equal(np.asarray(out.lengths), np.asarray(ref.lengths))
    np.testing.assert_array_equal(np.asarray(out.tokens)[mask], np.asarray(ref.tokens)[mask])
    np.testing.assert_array_equal(np.asarray(out.logprobs), np.asarray(ref.logprobs))
    assert (np.asarray(out.tokens)[~mask] == pad).all()


def test_a_prompt_token_outside_the_vocabulary_is_a_named_error(model, sampler):
    for bad in (TEST_CFG.vocab_size, -1):
        with pytest.raises(OutOfVocabError, match=f"prompt 1: position 1 holds token id {bad}"):
            sampler.generate(model[1], [[1, 2], [3, bad]], key=jax.random.key(0), max_new_tokens=2)


def test_filler_prompts_do_not_hold_the_decode_loop_open(model, sampler):
    """A short last batch is filled to the compiled shape (`live_prompts`): the filler rows
    start finished, so the call ends when its real rows do (issue 25 §2)."""
    params = model[1]
    free = _greedy(sampler, params)
    tokens = np.asarray(free.tokens)
    assert int(free.steps) == NEW
    # Stop the first prompt at its first token; the fillers never meet that token.
    eos = int(tokens[0, 0])
    assert eos not in tokens[1:], "pick prompts whose greedy replies avoid the first's token"
    held = _greedy(sampler, params, eos_ids=[eos])
    assert int(held.steps) == NEW  # the fillers decode all NEW columns when they are live
    out = _greedy(sampler, params, eos_ids=[eos], live_prompts=1)
    assert int(out.steps) == 1
    np.testing.assert_array_equal(np.asarray(out.tokens)[0], np.asarray(held.tokens)[0])
    np.testing.assert_array_equal(np.asarray(out.lengths), [1, 0, 0])
    assert np.asarray(out.done).all()
    with pytest.raises(ValueError, match="live_prompts"):
        _greedy(sampler, params, live_prompts=4)
