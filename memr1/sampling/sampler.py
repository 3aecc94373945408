"""The reference sampler: a static batch over a dense KV cache.

Every caller in memr1 samples with the rollout engine (`memr1.sampling.engine`: paged cache,
a prompt stored once for its G samples, slots refilled as rows end). This sampler stays as the
simplest correct implementation of the same contract: the engine's parity tests compare against
it (tokens, log-probs, stops, budgets), `tools/bench_generate.py` times the engine beside it,
and the pod-step cost tools compile it. What it costs at scale is why the engine exists: each
prompt's KV copied G times, every row sized to the prompt bucket plus the whole budget, and a
call that runs until its longest reply.

One call of `Sampler.generate` is one compiled program: a prefill over the left-padded prompts,
then a `lax.while_loop` that feeds one token per row per step into a preallocated KV cache and
exits as soon as every row has stopped (or `max_new_tokens` is reached).

Shapes, and hence compilations, are fixed per (batch, prompt bucket, G, max_new_tokens, greedy,
top_k, top-p on/off, stop-set shape). Prompts are left-padded to a bucket width (powers of two by
default) so that a trainer whose prompt lengths drift from batch to batch reuses a handful of
programs. Parameters, temperature, top_p and the PRNG key are ordinary arguments: a trainer can
update the weights between rollouts without recompiling. The KV cache is allocated inside the
program and written in place by the loop (its compiled form holds no copy of the cache), so there
is no buffer to donate; the parameters are never donated, since the trainer keeps them.

G samples per prompt: the prompts are prefilled once ([B, P]) and the cache is then repeated G
times while it is copied into the [B*G, S] decode cache, which has to be written anyway. This does
1/G of the prefill work of repeating the prompts first, and costs nothing extra in memory beyond
the small [B, P] prefill cache. Row r of every output holds sample r % G of prompt r // G.

The sampler runs the model without remat (`transformer.without_remat`): remat only pays where
gradients are taken, and `nnx.remat` cannot run inside the decode loop. Given a decode copy of
the weights (`memr1.sampling.layout.rollout_params`), each device decodes its own rows; the
outputs come back replicated, so every process can read them.

Padding: `pad_id` may lie outside the model's vocabulary (the model clamps ids into its table and
padded positions are masked); a real prompt token outside it raises `OutOfVocabError`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from memr1.models import transformer
from memr1.models.config import ModelConfig
from memr1.models.masks import causal_mask, positions_from_valid
from memr1.sampling import stopping
from memr1.sampling.layout import row_sharding
from memr1.sampling.logits_processing import choose_tokens
from memr1.sampling.output import SampleOutput, sample_output, splitter
from memr1.sampling.request import PromptBatch, check_request, default_bucket, left_pad

__all__ = ["PromptBatch", "Sampler", "default_bucket", "left_pad"]


class Sampler:
    """Batched autoregressive sampling from one backbone with a preallocated KV cache."""

    def __init__(
        self,
        cfg: ModelConfig,
        graphdef: Any,
        *,
        pad_id: int = 0,
        prompt_buckets: Sequence[int] | None = None,
        cache_dtype: Any = None,
    ):
        """Args:
        cfg: the backbone's config.
        graphdef: its NNX graph definition (`init_model(cfg)[0]` or the checkpoint loader's).
        pad_id: token written after a row's end and in prompt padding.
        prompt_buckets: allowed padded prompt widths, ascending; default: powers of two >= 16.
        cache_dtype: KV cache dtype; default: the config's compute dtype.
        """
        self.cfg = cfg
        self.graphdef = graphdef
        self.pad_id = int(pad_id)
        self.prompt_buckets = tuple(sorted(prompt_buckets)) if prompt_buckets else None
        self.cache_dtype = jnp.dtype(cache_dtype or cfg.jnp_dtype)
        self._jitted = jax.jit(
            self._generate,
            static_argnames=(
                "num_samples",
                "max_new_tokens",
                "greedy",
                "top_k",
                "use_top_p",
                "row_split",
            ),
        )

    def bucket(self, length: int) -> int:
        """The padded prompt width used for a batch whose longest prompt has `length` tokens."""
        if self.prompt_buckets is None:
            return default_bucket(length)
        for width in self.prompt_buckets:
            if width >= length:
                return width
        raise ValueError(
            f"prompt of {length} tokens exceeds the largest bucket {self.prompt_buckets[-1]}"
        )

    def compiled_programs(self) -> int:
        """How many programs the jitted generate has compiled so far (for recompile checks)."""
        return self._jitted._cache_size()

    def generate(
        self,
        params: Any,
        prompt_tokens: PromptBatch,
        *,
        key: jax.Array,
        max_new_tokens: int,
        num_samples: int = 1,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        eos_ids: Sequence[int] = (),
        stop_sequences: Sequence[Sequence[int]] = (),
        live_prompts: int | None = None,
    ) -> SampleOutput:
        """Generates `num_samples` continuations of each prompt.

        Args:
          params: model parameters (an nnx.State matching `graphdef`); never donated.
          prompt_tokens: B prompts of token ids (lists or 1-D arrays, any lengths >= 1), or a 2-D
            int array whose rows are all-valid prompts of equal length.
          key: PRNG key; the same key, params and inputs give the same output.
          max_new_tokens: columns of the output (static).
          num_samples: G, samples per prompt.
          temperature: 0 means greedy (argmax); otherwise sampling at this temperature.
          top_k: keep only the k most likely tokens (None or 0: off). Changing k recompiles.
          top_p: nucleus mass in (0, 1] (None: off); applied after top_k.
          eos_ids: token ids that end a row.
          stop_sequences: token-id sequences that end a row (see `memr1.sampling.stopping`).
          live_prompts: only the first this many prompts are wanted (None: all); the rest fill a
            fixed batch shape. Their rows start finished (length 0, `done` True), so the decode
            loop ends when the wanted rows end instead of running on for a filler's sample.
        Returns:
          SampleOutput with B * G rows.
        """
        args, static = self._arguments(
            params,
            prompt_tokens,
            key=key,
            max_new_tokens=max_new_tokens,
            num_samples=num_samples,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            eos_ids=eos_ids,
            stop_sequences=stop_sequences,
            live_prompts=live_prompts,
        )
        return self._jitted(*args, **static)

    def lower(self, params: Any, prompt_tokens: PromptBatch, **kwargs) -> jax.stages.Lowered:
        """The program `generate` would run for these arguments, lowered (for HLO inspection)."""
        args, static = self._arguments(params, prompt_tokens, **kwargs)
        return self._jitted.lower(*args, **static)

    def _arguments(
        self,
        params,
        prompt_tokens,
        *,
        key,
        max_new_tokens,
        num_samples=1,
        temperature=1.0,
        top_k=None,
        top_p=None,
        eos_ids=(),
        stop_sequences=(),
        live_prompts=None,
    ) -> tuple[tuple, dict]:
        """Checks `generate`'s arguments; returns the jitted program's (arguments, static ones)."""
        prompts, top_k = check_request(
            self.cfg,
            prompt_tokens,
            max_new_tokens=max_new_tokens,
            num_samples=num_samples,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
        )
        lengths = [len(p) for p in prompts]
        live = len(lengths) if live_prompts is None else int(live_prompts)
        if not 1 <= live <= len(lengths):
            raise ValueError(f"live_prompts={live_prompts} must be in [1, {len(lengths)}]")
        greedy = temperature == 0.0
        tokens, valid = left_pad(prompts, self.bucket(max(lengths)), self.pad_id)
        stops = stopping.make_stop_set(eos_ids, stop_sequences)
        args = (
            params,
            tokens,
            valid,
            key,
            np.float32(temperature if not greedy else 1.0),
            np.float32(top_p if top_p is not None else 1.0),
            stops,
            np.arange(len(lengths)) < live,
        )
        static = dict(
            num_samples=int(num_samples),
            max_new_tokens=int(max_new_tokens),
            greedy=greedy,
            top_k=None if greedy else top_k,
            use_top_p=not greedy and top_p is not None and top_p < 1.0,
            row_split=row_sharding(params, len(lengths)),
        )
        return args, static

    # ------------------------------------------------------------------------------------------
    # The compiled program.
    # ------------------------------------------------------------------------------------------

    def _generate(
        self,
        params,
        prompt_BP,
        valid_BP,
        key,
        temperature,
        top_p,
        stops: stopping.StopSet,
        live_B,
        *,
        num_samples: int,
        max_new_tokens: int,
        greedy: bool,
        top_k: int | None,
        use_top_p: bool,
        row_split: jax.sharding.NamedSharding | None,
    ) -> SampleOutput:
        g, new = num_samples, max_new_tokens
        b, p = prompt_BP.shape
        rows = b * g
        # The last generated token is never fed back, so the cache needs P + new - 1 slots.
        s = p + new - 1
        graphdef = transformer.without_remat(self.graphdef, params)
        split = splitter(row_split)
        prompt_BP, valid_BP = split(prompt_BP), split(valid_BP)

        logits_BV, cache = self._prefill(graphdef, params, prompt_BP, valid_BP, g, s, split)

        # Every generated slot is valid for the rows' own queries; causality (slot <= the current
        # one) is applied per step with one [S] comparison, so no [B, S, S] mask is rebuilt.
        valid_RS = jnp.pad(jnp.repeat(valid_BP, g, axis=0), ((0, 0), (0, s - p)), constant_values=1)
        prompt_len_R = jnp.sum(valid_RS[:, :p], axis=-1, dtype=jnp.int32)
        pad = jnp.int32(self.pad_id)
        choose = functools.partial(
            choose_tokens,
            greedy=greedy,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p if use_top_p else None,
        )

        record = functools.partial(_record, pad=pad, stops=stops)
        state = (
            jnp.full((rows, new), pad, jnp.int32),
            jnp.zeros((rows, new), jnp.float32),
            # Filler rows (not `live`) start finished: they never hold the decode loop open.
            split(~jnp.repeat(live_B, g)),
            stopping.empty_tail(rows, stops.patterns_QL.shape[1]),
            jnp.zeros((rows,), jnp.int32),
        )
        token_R, logp_R = choose(jnp.repeat(logits_BV, g, axis=0), jax.random.fold_in(key, 0))
        token_R, state = record(0, token_R, logp_R, state)

        def cond(carry):
            i, _, _, state = carry
            return (i < new) & ~jnp.all(state[2])

        def body(carry):
            i, cache, token_R, state = carry
            slot = p + i - 1  # where the token generated at step i - 1 is written
            mask_R1S = (valid_RS & (jnp.arange(s) <= slot)[None, :])[:, None, :]
            h_R1D, cache = transformer.forward(
                graphdef,
                params,
                token_R[:, None],
                (prompt_len_R + i - 1)[:, None],
                mask_R1S,
                cache,
                slot,
            )
            cache = jax.tree.map(split, cache)
            logits_RV = transformer.logits_fn(graphdef, params, h_R1D)[:, 0]
            token_R, logp_R = choose(logits_RV, jax.random.fold_in(key, i))
            token_R, state = record(i, token_R, logp_R, state)
            return i + 1, cache, token_R, state

        steps, _, _, state = jax.lax.while_loop(cond, body, (jnp.int32(1), cache, token_R, state))
        return sample_output(state, steps, prompt_BP, valid_BP, g, new, row_split)

    def _prefill(self, graphdef, params, prompt_BP, valid_BP, g: int, s: int, split):
        """Prefills once per prompt into a P-slot cache, then copies it G times into the S-slot
        decode cache. Returns (last-position logits [B, V], cache)."""
        b, p = prompt_BP.shape
        cache = transformer.init_cache(self.cfg, b, p, self.cache_dtype)
        h_BPD, cache = transformer.forward(
            graphdef,
            params,
            prompt_BP,
            positions_from_valid(valid_BP),
            causal_mask(valid_BP),
            cache,
            0,
        )
        logits_BV = transformer.logits_fn(graphdef, params, h_BPD[:, -1:])[:, 0]
        pad_slots = ((0, 0), (0, 0), (0, s - p), (0, 0))  # cache is [B, K, S, N]
        cache = jax.tree.map(lambda x: split(jnp.pad(jnp.repeat(x, g, axis=0), pad_slots)), cache)
        return logits_BV, cache


def _record(i, token_R, logp_R, state, *, pad, stops: stopping.StopSet):
    """Writes step i's tokens for live rows, pads finished ones, updates stop flags."""
    tokens_RT, logps_RT, done_R, tail_RW, count_R = state
    token_R = jnp.where(done_R, pad, token_R)
    logp_R = jnp.where(done_R, 0.0, logp_R)
    tokens_RT = jax.lax.dynamic_update_slice(tokens_RT, token_R[:, None], (0, i))
    logps_RT = jax.lax.dynamic_update_slice(logps_RT, logp_R[:, None], (0, i))
    count_R = count_R + (~done_R).astype(jnp.int32)
    tail_RW = stopping.push_tail(tail_RW, token_R)
    done_R = done_R | stopping.hits_stop(token_R, tail_RW, stops)
    return token_R, (tokens_RT, logps_RT, done_R, tail_RW, count_R)
