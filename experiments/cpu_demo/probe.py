"""The reading probe: does a warm-started policy copy what it must copy from its prompt?

Greedy EM mixes everything a tiny model can get wrong. This probe isolates the one capability the
demo's RL cannot create (docs/demo.md): copying entities from the prompt into the reply. On the
teachers' replies to a held-out split (the rows SFT would be trained on, had that split been
used), it scores, under teacher forcing, every target token that names something -- a
capitalised word that also occurs in the prompt (people, pets, cities) -- by the policy's
probability of it and whether it is the policy's top-1 token. A policy that copies scores near
1; one that guesses from its training prior scores about 1 / (number of names) however long it
trains. The copy tokens that open a manager reply's memory text (the fact's person: every
synthloco fact opens with a name) are also scored apart: a warm start can copy the later names
of a fact and still write the wrong person first (teacher-forced top-1 0.08 against 0.71 for
the other names on a 2-core Intel Xeon, AVX-512; docs/demo.md, 2026-12-06), which the mean
over all copy tokens hides.
"""

from __future__ import annotations

import dataclasses
import random
import re
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from memr1.models import transformer

AGENTS = ("manager", "answer")


@dataclasses.dataclass(frozen=True)
class CopyScores:
    """Teacher-forced scores of the copy tokens of one agent's rows."""

    rows: int
    tokens: int
    top1: float
    mean_prob: float
    opening_tokens: int = 0
    opening_top1: float = float("nan")

    def as_dict(self) -> dict[str, float | int]:
        return dataclasses.asdict(self)


def is_copy_token(piece: str) -> bool:
    """A token that names something: a capitalised alphabetic word piece."""
    word = piece.strip()
    return word[:1].isupper() and word.isalpha()


def copy_positions(prompt: Sequence[int], target: Sequence[int], tokenizer: Any) -> list[int]:
    """Indices into ``target`` of its copy tokens that also occur in ``prompt``."""
    seen = set(prompt)
    return [
        k for k, tok in enumerate(target) if tok in seen and is_copy_token(tokenizer.decode([tok]))
    ]


# The end of a reply's text before a memory text's first token, in the JSON of either style.
_OPENS_TEXT = re.compile(r'"text":\s*"$')


def opening_positions(target: Sequence[int], positions: Sequence[int], tokenizer: Any) -> list[int]:
    """Those of ``positions`` (copy tokens of ``target``) that open a memory's text in a manager
    reply (the token right after ``"text": "``)."""
    return [k for k in positions if _OPENS_TEXT.search(tokenizer.decode(list(target[:k])))]


def score_rows(
    graphdef: Any,
    params: Any,
    tokenizer: Any,
    encode_prompt,
    rows: Mapping[str, Sequence[Mapping[str, Any]]],
    *,
    batch: int = 8,
) -> dict[str, CopyScores]:
    """CopyScores per agent for ``rows`` ({agent: [{messages, target}, ...]}).

    Args:
      encode_prompt: messages -> prompt token ids (the policy's own rendering and encoding).
    """

    @jax.jit
    def log_probs(params, tokens_BT):
        b, t = tokens_BT.shape
        positions = jnp.broadcast_to(jnp.arange(t), (b, t))
        causal = jnp.tril(jnp.ones((t, t), bool))[None]
        h, _ = transformer.forward(graphdef, params, tokens_BT, positions, causal)
        return jax.nn.log_softmax(transformer.logits_fn(graphdef, params, h), axis=-1)

    out = {}
    for agent, agent_rows in rows.items():
        encoded = []
        for row in agent_rows:
            prompt = list(encode_prompt(row["messages"]))
            target = list(tokenizer.encode(row["target"], add_special_tokens=False))
            encoded.append((prompt, target, copy_positions(prompt, target, tokenizer)))
        hits, probs, opening = [], [], []
        length = max((len(p) + len(t) for p, t, _ in encoded), default=1)
        length = -(-length // 16) * 16  # one compiled shape for every batch
        for start in range(0, len(encoded), batch):
            chunk = encoded[start : start + batch]
            tokens = np.zeros((batch, length), np.int32)
            for i, (p, t, _) in enumerate(chunk):
                tokens[i, : len(p) + len(t)] = p + t
            lp = np.asarray(log_probs(params, jnp.asarray(tokens)))
            for i, (p, t, positions) in enumerate(chunk):
                opens = set(opening_positions(t, positions, tokenizer))
                for k in positions:
                    row_lp = lp[i, len(p) + k - 1]
                    hits.append(float(np.argmax(row_lp) == t[k]))
                    probs.append(float(np.exp(row_lp[t[k]])))
                    if k in opens:
                        opening.append(hits[-1])
        out[agent] = CopyScores(
            rows=len(encoded),
            tokens=len(hits),
            top1=float(np.mean(hits)) if hits else float("nan"),
            mean_prob=float(np.mean(probs)) if probs else float("nan"),
            opening_tokens=len(opening),
            opening_top1=float(np.mean(opening)) if opening else float("nan"),
        )
    return out


def teacher_rows(seed_run, split: str, *, max_rows: int = 200) -> dict[str, list[dict]]:
    """The two teachers' rows on ``split`` of a demo seed (banks built by the manager teacher,
    as for the training traces, replies in the run's own format: traces.op_first), at most
    ``max_rows`` per agent, manager rows in a seeded random order."""
    from experiments.cpu_demo import traces
    from experiments.cpu_demo.teacher import MemZeroLikeTeacher

    built = seed_run.teacher_tuples(split)
    teacher = MemZeroLikeTeacher(seed_run.seed)
    manager, _ = traces.manager_rows(
        built.manager, teacher, seed_run.c.style, op_first=seed_run.c.traces.op_first
    )
    random.Random(seed_run.seed).shuffle(manager)
    answer = traces.answer_rows(
        built.answer,
        seed_run.answer_teacher(),
        seed_run.c.style,
        direct_fraction=0.0,
        seed=seed_run.seed,
    )
    return {"manager": manager[:max_rows], "answer": answer[:max_rows]}


def probe_checkpoint(
    seed_run, checkpoint: str, split: str, *, max_rows: int = 200, reading: bool = False
) -> dict:
    """CopyScores per agent of the policy saved in ``checkpoint`` (an Orbax train directory)
    on the teachers' rows of ``split``; the backbone's shapes and tokenizer are the seed's.
    With ``reading``, also its greedy answers to the same questions, readable or not
    (`reading.reading_scores`), under "reading"."""
    from memr1.env import load
    from memr1.train.checkpoint import restore_params

    backbone = load.load_backbone(hf_dir=str(seed_run.base))
    params = restore_params(checkpoint, backbone.params)
    policy = load.make_policy(backbone, params)
    rows = teacher_rows(seed_run, split, max_rows=max_rows)
    scores = score_rows(
        backbone.graphdef,
        params,
        backbone.tokenizer,
        lambda messages: policy.encode(policy.render(messages))[0],
        rows,
    )
    out = {
        "checkpoint": str(checkpoint),
        "split": split,
        "rows": {agent: len(r) for agent, r in rows.items()},
        "scores": {agent: scores[agent].as_dict() for agent in AGENTS},
    }
    if reading:
        from experiments.cpu_demo.reading import reading_scores
        from experiments.cpu_demo.reward_probe import reward_env

        tuples = seed_run.teacher_tuples(split).answer[:max_rows]
        cfg = reward_env(seed_run, policy).answer  # evaluation's answer settings
        out["reading"] = reading_scores(tuples, policy, cfg, seed_run.answer_teacher())
    return out
