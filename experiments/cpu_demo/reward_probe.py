"""The reward probe: which operations can the manager stage's outcome reward tell apart?

GRPO can only teach the manager an operation that earns more reward than the one it replaces.
This probe measures that directly. On every state of the manager stage (a train-split turn with
linked questions, as the stage samples them), it writes four fixed behaviours as manager replies
and rewards them exactly as a GRPO group is rewarded
(:func:`memr1.env.manager_reward.manager_rewards`, through a given frozen Answer Agent):

  clean       the demo teacher's rules with every choice made right: merge another list item
              into its list, UPDATE a changed value, DELETE a cancelled plan, NONE for a repeat,
              ADD the rest
  add         ADD every fact (a changed value beside the stale one, a repeat as a duplicate)
  delete_add  DELETE the related memory and ADD the fact (a list keeps only the new item)
  overwrite   UPDATE the top shown memory with the fact, whatever it is (a new fact written
              over an unrelated memory: ADD where nothing is shown)
  none        the empty reply

States are grouped by the turn's gold operation (synthloco's labels, read here only to group the
report; no reward sees them), UPDATE split into list items and changed values. Where ``clean``
and ``add`` score alike, no outcome reward through that answerer can teach UPDATE over ADD;
where ``overwrite`` and ``add`` do at new facts, none can teach the manager to keep what it
overwrites. The states' questions are those the stage's reward reads (its
``config.manager.linked_qa``: `memr1.train.stages.linked_questions`).

:func:`spread_table` asks the same of the replies a manager actually samples: a GRPO group
whose G rewards are equal carries no gradient, and it says why a group is flat. Each group's
candidates are rewarded through the frozen Answer Agent and through the careful rule reader on
the same banks: a group the rule reader ranks and the Answer Agent does not is one the banks
decide and the reader does not read; a group in which no linked question retrieves a
different memory text ("unseen") no reader could rank.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Callable, Mapping
from typing import Any

import jax
import numpy as np

from experiments.cpu_demo.teacher import CAREFUL, ManagerRates, MemZeroLikeTeacher
from memr1.env.manager_io import ADD, UPDATE, ManagerOp, format_manager_output

Facts = list[str]
Shown = list[tuple[int, str]]


def _teacher(rates: ManagerRates) -> Callable[[Facts, Shown], list[ManagerOp]]:
    """The demo teacher at ``rates`` (rates of 0 or 1 draw nothing that matters, so the replies
    do not depend on the teacher's seed)."""
    return MemZeroLikeTeacher(0, rates)


def _overwrite(facts: Facts, retrieved: Shown) -> list[ManagerOp]:
    """The first fact written over the top shown memory, the others ADDed."""
    if not retrieved:
        return [ManagerOp(ADD, None, fact) for fact in facts]
    first, *rest = facts
    return [ManagerOp(UPDATE, retrieved[0][0], first)] + [ManagerOp(ADD, None, f) for f in rest]


# Each behaviour's ops for a turn's facts and shown memories.
BEHAVIOURS: dict[str, Callable[[Facts, Shown], list[ManagerOp]]] = {
    "clean": _teacher(CAREFUL),
    # never merges, never deletes, never skips: every fact becomes a new memory
    "add": _teacher(ManagerRates(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)),
    "delete_add": _teacher(
        ManagerRates(
            list_merge=0.0,
            list_delete_add=1.0,
            change_update=0.0,
            change_delete_add=1.0,
            cancel_delete=1.0,
            repeat_noop=1.0,
        )
    ),
    "overwrite": _overwrite,
    "none": lambda facts, retrieved: [],
}
GROUPS = ("ADD", "UPDATE-list", "UPDATE-change", "DELETE", "NOOP")


def behaviour_replies(t: Any, style: str = "compact") -> dict[str, str]:
    """Each behaviour's manager reply to the ManagerTuple ``t``."""
    _, id_map = t.manager_input(style=style)
    return {
        name: format_manager_output(ops(list(t.facts), list(t.retrieved)), id_map, style=style)
        for name, ops in BEHAVIOURS.items()
    }


def gold_group(gold: Mapping[str, Any]) -> str:
    """The report group of one synthloco gold entry."""
    if gold["op"] == "UPDATE":
        return "UPDATE-change" if gold["delete_add_ok"] else "UPDATE-list"
    return gold["op"]


def gold_index(path) -> dict[tuple[str, str], dict]:
    """(sample_id, dia_id) -> gold entry, from a synthloco gold_ops.json."""
    with open(path, encoding="utf-8") as f:
        conversations = json.load(f)["conversations"]
    return {(sid, op["dia_id"]): op for sid, conv in conversations.items() for op in conv["ops"]}


def probe_rewards(
    states: list[Any], gold: Mapping[tuple[str, str], Mapping], env: Any
) -> dict[str, Any]:
    """Mean reward of each behaviour per gold group over the ManagerTuples ``states``, through
    the manager stage's own reward path and frozen answerer (``env``, a
    `memr1.env.manager_reward.RewardEnv`).

    Returns:
      {"states", "groups": {group: {"n", "reward": {behaviour: mean}}}}; a state whose turn has
      no gold entry is an error (the probe needs a synthloco world).
    """
    from memr1.env.manager_reward import manager_rewards
    from memr1.env.rollout import manager_state_from_tuple

    rewards: dict[str, dict[str, list[float]]] = collections.defaultdict(
        lambda: collections.defaultdict(list)
    )
    for t in states:
        entry = gold.get((t.sample_id, t.dia_id))
        if entry is None:
            raise KeyError(f"no gold operation for {t.sample_id} {t.dia_id}")
        replies = behaviour_replies(t)
        got = manager_rewards(
            [manager_state_from_tuple(t)], [list(replies.values())], env, key=jax.random.key(0)
        ).rewards[0]
        for name, r in zip(replies, got):
            rewards[gold_group(entry)][name].append(float(r))
    groups = {
        g: {
            "n": len(rewards[g]["none"]),
            "reward": {name: float(np.mean(rewards[g][name])) for name in BEHAVIOURS},
        }
        for g in GROUPS
        if g in rewards
    }
    return {"states": len(states), "groups": groups}


SPREAD_KEYS = ("reader", "rules", "rules_only_reader_zero", "rules_only_reader_flat",
               "reader_only", "unseen")  # fmt: skip


def spread_table(
    states: list[Any], replies: list[list[str]], reader_env: Any, rules_env: Any
) -> dict[str, Any]:
    """Which of G sampled replies' groups the manager stage's reward can rank.

    ``states``: ManagerTuples as the stage builds them; ``replies``: G reply texts per state;
    ``reader_env`` and ``rules_env``: RewardEnvs alike but for their answerer (the frozen
    Answer Agent, the careful rule reader).

    Returns:
      {"groups", "group_size", and the share of the groups that: "reader" (have a reward
      spread through the Answer Agent), "rules" (through the rule reader),
      "rules_only_reader_zero" / "rules_only_reader_flat" (a spread through the rule reader
      only, the Answer Agent scoring every candidate 0 / one reward above 0), "reader_only",
      "unseen" (no linked question retrieves a different memory text from the G candidate
      banks)}.
    """
    from memr1.env.answer import retrieve
    from memr1.env.manager_reward import candidate_banks, manager_rewards
    from memr1.env.rollout import manager_state_from_tuple

    if len(replies) != len(states) or not states:
        raise ValueError(f"{len(replies)} groups of replies for {len(states)} states")
    manager_states = [manager_state_from_tuple(t) for t in states]
    key = jax.random.key(0)
    reader = manager_rewards(manager_states, replies, reader_env, key=key).rewards
    rules = manager_rewards(manager_states, replies, rules_env, key=key).rewards
    counts = collections.Counter()
    k = rules_env.answer.k_per_speaker
    for state, group, r, q in zip(manager_states, replies, reader, rules, strict=True):
        by_reader, by_rules = bool(np.ptp(r) > 0), bool(np.ptp(q) > 0)
        counts["reader"] += by_reader
        counts["rules"] += by_rules
        counts["reader_only"] += by_reader and not by_rules
        if by_rules and not by_reader:
            counts["rules_only_reader_zero" if r[0] == 0 else "rules_only_reader_flat"] += 1
        views, _ = candidate_banks(state, group, rules_env)
        seen = False
        for question, _ in state.qa:
            hits = retrieve([question] * len(views), views, rules_env.embed, k)
            shown = {tuple((n, tuple(h.text for h in hs)) for n, hs in h.items()) for h in hits}
            seen = seen or len(shown) > 1
        counts["unseen"] += not seen
    n = len(states)
    return {
        "groups": n,
        "group_size": len(replies[0]),
        **{name: counts[name] / n for name in SPREAD_KEYS},
    }


def checkpoint_policy(seed_run, checkpoint: str, *, batch_size: int = 64):
    """The policy saved in ``checkpoint`` (an Orbax train directory, DIR:STEP or DIR:best) on
    the seed's backbone, with the manager stage's prompt budget (agents.max_prompt_tokens), as
    the stage loads its frozen answerer: an Answer Agent, or a manager to sample from."""
    from memr1.env import load
    from memr1.train.checkpoint import restore_params

    backbone = load.load_backbone(hf_dir=str(seed_run.base))
    params = restore_params(checkpoint, backbone.params)
    budget = manager_config(seed_run).agents.max_prompt_tokens
    return load.make_policy(backbone, params, batch_size=batch_size, max_prompt_tokens=budget)


def rollout_sampling(seed_run):
    """How the seed's manager stage samples its rollouts (temperature and reply budget)."""
    from memr1.env.policy import SamplingConfig

    return SamplingConfig.from_config(manager_config(seed_run), "rollout")


def probe_seed(seed_run, answerer, *, max_states: int | None = None) -> dict:
    """The probe over a demo seed's manager-stage states through ``answerer`` (a policy, e.g.
    ``checkpoint_policy``, or the rule reader); the seed's memory sizes, embedder, states and
    linked questions, as the manager stage uses them (`memr1.train.stages.rl_states`)."""
    states = stage_states(seed_run, max_states)
    return probe_rewards(
        states, gold_index(seed_run.data / "gold_ops.json"), reward_env(seed_run, answerer)
    )


def stage_states(seed_run, max_states: int | None = None) -> list:
    """The seed's manager-stage states (ManagerTuples), as `memr1.train.stages.rl_states`
    builds them from its config: the first ``max_states`` (default: all)."""
    from memr1.train.stages import manager_records
    from memr1.tuples import read_tuples

    m = seed_run.c.manager
    states = manager_records(
        read_tuples(seed_run.rl_tuples, "manager"),
        linked_qa=m.linked_qa,
        min_overlap=m.min_overlap,
        source=seed_run.rl_tuples,
    )
    return states[:max_states] if max_states else states


def reward_env(seed_run, answerer):
    """The manager stage's reward settings of a demo seed (its own config), through
    ``answerer``."""
    from memr1.env.answer import AnswerConfig
    from memr1.env.manager_reward import RewardEnv
    from memr1.env.memory_store import BankSpec

    config = manager_config(seed_run)
    return RewardEnv(
        answerer=answerer,
        embed=seed_run.encoder().encode,
        answer=AnswerConfig.from_config(config),
        bank=BankSpec.from_config(config),
    )


def manager_config(seed_run):
    """The configs/memr1.py config the seed's manager stage runs with."""
    from experiments.cpu_demo.commands import load_config, stage_overrides

    overrides = stage_overrides(seed_run.c, seed_run.seed, stage="manager", algo=seed_run.algo)
    return load_config(f"stage=manager,algo={seed_run.algo},runlocal", overrides)
