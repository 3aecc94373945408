"""A language-model policy with a text interface: chat messages in, completions out.

This is where text meets tokens. Everything upstream (prompts, parsers) speaks text; the sampler
and the trainer speak token ids. A `TextPolicy` keeps the token ids and per-token log-probs of
each completion next to its text, so an RL stage can train on exactly the tokens that were
sampled without re-tokenising the decoded text.

Every call is one run of the rollout engine (`memr1.sampling.engine`) over all of its prompts:
`batch_size` prompts' worth of decode slots (`batch_size` × G rows at once), refilled as rows
end, so the engine compiles per prompt-length bucket, not per call size. Slots that the mesh's
data × fsdp devices divide let each device decode only its own rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from memr1.env.prompts import Message, Shrinkable, to_prompt_text
from memr1.models.config import ModelConfig
from memr1.sampling import rollout_params
from memr1.sampling.engine import Engine, EngineSettings, EngineStats


@dataclasses.dataclass(frozen=True)
class Completion:
    """One sampled continuation of one prompt."""

    text: str
    prompt_ids: np.ndarray  # [P] int32, the real prompt tokens (no padding)
    ids: np.ndarray  # [R] int32, the generated tokens up to and including the stop token
    logprobs: np.ndarray  # [R] float32, under log_softmax(logits / temperature)
    finished: bool  # stopped on EOS rather than running out of max_new_tokens
    prompt_truncated: bool = False  # some of its droppable items went to fit the budget


class PromptTooLongError(ValueError):
    """A prompt over `agents.max_prompt_tokens` with nothing left that may be dropped: its fixed
    part (instructions, question, facts) alone is over the budget."""


@dataclasses.dataclass(frozen=True)
class SamplingConfig:
    """How one agent samples. `temperature` and `max_new_tokens` come from the config
    (`from_config`); top-k / top-p are not configured (None: off)."""

    temperature: float
    max_new_tokens: int
    top_k: int | None = None
    top_p: float | None = None

    @classmethod
    def from_config(cls, config, use: str) -> SamplingConfig:
        """How `use` samples: "extract", "manager" or "answer" (an agent of the memory
        pipeline, at agents.temperature), or "rollout" (the policy being trained, config.stage,
        at train.temperature). Each agent has one budget, `agent_budget`, whatever samples it."""
        if use == "rollout":
            return cls(
                temperature=config.train.temperature,
                max_new_tokens=agent_budget(config, config.stage),
            )
        return cls(temperature=config.agents.temperature, max_new_tokens=agent_budget(config, use))


def agent_budget(config, agent: str) -> int:
    """`agents.<agent>_max_new_tokens`, the one reply budget of an agent: its training rollouts
    and validation, the manager stage's reward (the frozen Answer Agent's replies) and
    evaluation all read it, so an agent is never trained at one budget and scored at another."""
    a = config.agents
    budgets = {
        "extract": a.extract_max_new_tokens,
        "manager": a.manager_max_new_tokens,
        "answer": a.answer_max_new_tokens,
    }
    if agent not in budgets:
        raise ValueError(f"sampling use {agent!r}: expected rollout or one of {list(budgets)}")
    return int(budgets[agent])


class TextPolicy:
    """A backbone + tokenizer + rollout engine, addressed with chat messages.

    `last_run` holds the engine's statistics of the latest `complete` call (slot occupancy,
    preemptions, pages), for the caller to log.
    """

    def __init__(
        self,
        cfg: ModelConfig,
        graphdef: Any,
        params: Any,
        tokenizer: Any,
        *,
        eos_ids: Sequence[int],
        pad_id: int,
        batch_size: int = 8,
        max_prompt_tokens: int = 4096,
        name: str = "policy",
        engine: EngineSettings | None = None,
    ):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.cfg = cfg
        self.graphdef = graphdef
        self.params = params
        self.tokenizer = tokenizer
        self.eos_ids = tuple(int(i) for i in eos_ids)
        self.pad_id = int(pad_id)
        self.batch_size = int(batch_size)
        self.max_prompt_tokens = int(max_prompt_tokens)
        self.name = name
        self.engine = Engine(cfg, graphdef, pad_id=self.pad_id, settings=engine)
        self.last_run: EngineStats | None = None

    # -- text <-> tokens ---------------------------------------------------------------------

    def render(self, messages: Sequence[Message]) -> str:
        """The prompt text for chat messages (the tokenizer's chat template when it has one)."""
        return to_prompt_text(messages, self.tokenizer)

    def _ids(self, messages: Sequence[Message]) -> list[int]:
        # A chat template writes its own special tokens into the text; a plain prompt gets the
        # tokenizer's (e.g. LLaMA's BOS) the way `generate` would add them.
        templated = bool(getattr(self.tokenizer, "chat_template", None))
        return list(self.tokenizer.encode(self.render(messages), add_special_tokens=not templated))

    def _too_long(self, n_tokens: int, part: str) -> PromptTooLongError:
        return PromptTooLongError(
            f"{self.name}: {part} is {n_tokens} tokens, over agents.max_prompt_tokens="
            f"{self.max_prompt_tokens}; raise the budget or shorten the prompt"
        )

    def encode(self, text: str) -> tuple[np.ndarray, bool]:
        """Token ids of a rendered prompt with nothing droppable (a PromptTooLongError when it is
        over `max_prompt_tokens`: cutting it would lose its instructions or its question)."""
        templated = bool(getattr(self.tokenizer, "chat_template", None))
        ids = list(self.tokenizer.encode(text, add_special_tokens=not templated))
        if len(ids) > self.max_prompt_tokens:
            raise self._too_long(len(ids), "a prompt with nothing that may be dropped")
        return np.asarray(ids, np.int32), False

    def fit(self, prompt: Sequence[Message] | Shrinkable) -> tuple[np.ndarray, bool]:
        """(token ids, whether items were dropped) of chat messages or of a `Shrinkable` prompt
        within `max_prompt_tokens`. A Shrinkable keeps as many of its best-ranked items as fit
        (a binary search over `build(keep)`); its fixed part, `build(0)`, is never cut, and a
        PromptTooLongError names the budget and that part's length when it alone is over."""
        if not isinstance(prompt, Shrinkable):
            return self.encode(self.render(prompt))
        ids = self._ids(prompt)
        if len(ids) <= self.max_prompt_tokens:
            return np.asarray(ids, np.int32), False
        fixed = self._ids(prompt.build(0))
        if len(fixed) > self.max_prompt_tokens:
            part = f"the prompt without its {prompt.what} (its fixed part)"
            raise self._too_long(len(fixed), part)
        lo, hi, best = 0, prompt.n - 1, fixed  # build(lo) fits; build(hi + 1) does not
        while lo < hi:
            mid = (lo + hi + 1) // 2
            mid_ids = self._ids(prompt.build(mid))
            if len(mid_ids) <= self.max_prompt_tokens:
                lo, best = mid, mid_ids
            else:
                hi = mid - 1
        return np.asarray(best, np.int32), True

    def decode(self, ids: np.ndarray) -> str:
        ids = [int(i) for i in ids if int(i) not in self.eos_ids]
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    # -- sampling ------------------------------------------------------------------------------

    def complete(
        self,
        conversations: Sequence[Sequence[Message] | Shrinkable],
        sampling: SamplingConfig,
        *,
        key: jax.Array,
        num_samples: int = 1,
        params: Any = None,
        progress: Callable[[list[int]], None] | None = None,
    ) -> list[list[Completion]]:
        """Samples `num_samples` completions for each chat (messages, or a `Shrinkable` prompt
        that drops its lowest-ranked items to fit `max_prompt_tokens`: `fit`); returns them per
        chat, `prompt_truncated` marking a prompt that dropped some."""
        prompts = [self.fit(m) for m in conversations]
        return self.complete_ids(
            prompts, sampling, key=key, num_samples=num_samples, params=params, progress=progress
        )

    def complete_ids(
        self,
        prompts: Sequence[tuple[np.ndarray, bool]],
        sampling: SamplingConfig,
        *,
        key: jax.Array,
        num_samples: int = 1,
        params: Any = None,
        progress: Callable[[list[int]], None] | None = None,
    ) -> list[list[Completion]]:
        """Like `complete`, for prompts already tokenised as (ids, truncated) pairs.

        One engine run decodes every prompt, `batch_size` × `num_samples` rows at a time;
        sample g of prompt b draws from fold_in(fold_in(key, b), g), whatever the batch.
        `progress` gets the indices of the prompts whose samples have all ended, as they end.
        The prompts are decoded from one copy of the weights laid out for decoding (compute
        dtype, whole on every data × fsdp device: `memr1.sampling.layout.rollout_params`), made
        once per call and dropped when it returns; weights already so laid out are used as is.
        """
        self.last_run = None
        if not prompts:
            return []
        params = self._decode_params(params)
        result = self.engine.generate(
            params,
            [ids for ids, _ in prompts],
            key=key,
            max_new_tokens=sampling.max_new_tokens,
            num_samples=num_samples,
            temperature=sampling.temperature,
            top_k=sampling.top_k,
            top_p=sampling.top_p,
            eos_ids=self.eos_ids,
            slots=self.batch_size * num_samples,
            progress=progress,
        )
        self.last_run = result.stats
        out: list[list[Completion]] = []
        for b, (prompt_ids, truncated) in enumerate(prompts):
            samples = []
            for g in range(num_samples):
                row = b * num_samples + g
                n = result.lengths[row]
                ids = result.tokens[row, :n].copy()
                samples.append(
                    Completion(
                        text=self.decode(ids),
                        prompt_ids=prompt_ids,
                        ids=ids,
                        logprobs=result.logprobs[row, :n].copy(),
                        finished=bool(result.done[row]),
                        prompt_truncated=truncated,
                    )
                )
            out.append(samples)
        return out

    def _decode_params(self, params: Any = None) -> Any:
        params = self.params if params is None else params
        if not all(getattr(x, "is_fully_addressable", True) for x in jax.tree.leaves(params)):
            # Each process of a multi-host run samples its own prompts, on its own devices.
            raise ValueError(
                f"{self.name}: the sampling parameters live partly on other processes' devices; "
                "pass a process-local copy (memr1.train.multihost.local_replica)"
            )
        return rollout_params(params, self.cfg)

    def decode_copy(self, params: Any = None) -> TextPolicy:
        """The same policy holding `params` (default: its own) laid out for decoding once
        (`rollout_params`), so that the sampler calls of one rollout share one copy instead of
        each laying out its own; drop it when the rollout ends."""
        return self.with_params(self._decode_params(params))

    def with_batch_size(self, batch_size: int) -> TextPolicy:
        """The same policy (sharing its engine, which compiles the new shape once) decoding
        `batch_size` prompts' rows at a time, e.g. a whole validation set at once."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        clone = self.with_params(self.params)
        clone.batch_size = int(batch_size)
        return clone

    def with_params(self, params: Any) -> TextPolicy:
        """The same policy (sharing its compiled engine) with other parameters."""
        clone = object.__new__(TextPolicy)
        clone.__dict__.update(self.__dict__)
        clone.params = params
        return clone
