"""How tuples are built (`TupleConfig`): the config's tuples section, and the memory and
agents settings they share with evaluation."""

from __future__ import annotations

import dataclasses

from memr1.env.facts import FACT_SOURCES
from memr1.env.manager_io import MEMR1_RULES, ManagerRules
from memr1.env.memory_store import BankSpec
from memr1.env.policy import SamplingConfig

BUILDERS = ("observation", "teacher")
WHOLE_HISTORY = -1


@dataclasses.dataclass(frozen=True)
class TupleConfig:
    """How tuples are built: the config's tuples section, and the memory and agents settings
    they share with evaluation (`from_config`).

    Attributes:
      builder: "observation" (every fact ADDed; free) or "teacher" (a manager policy or a
        callable; see ``build_tuples``).
      window: W, the number of turns before t the bank is built from; -1 for all of them.
        The paper's text says 24 and its Algorithm 1 says 50.
      k_per_fact: memories retrieved per fact for the manager's view (Mem0's code: 5).
      k_per_speaker: memories per speaker in an answer tuple (the paper: 30, 60 in all).
      only_with_qa: keep only turns that some question cites (what the paper trains on).
      fact_source: "observation" (the dataset's facts), "turn" (the utterance) or "llm"
        (extracted by a policy).
      bank: the bank's capacity, text width, overflow policy and retriever.
      style: the manager prompt style for a policy teacher ("full" or "compact").
      teacher_sampling: a policy teacher's sampling (greedy by default).
      extract_sampling: the "llm" fact extractor's sampling.
      jobs_per_batch: windows a policy teacher builds side by side.
      rules: what a policy teacher is shown and how its replies are read (`ManagerRules`).
    """

    builder: str
    window: int
    k_per_fact: int
    k_per_speaker: int
    only_with_qa: bool
    fact_source: str
    bank: BankSpec
    style: str
    teacher_sampling: SamplingConfig
    extract_sampling: SamplingConfig
    jobs_per_batch: int
    rules: ManagerRules = MEMR1_RULES

    @classmethod
    def from_config(cls, config) -> TupleConfig:
        """The tuples of a `configs/memr1.py` config (see `configs/base.py` tuples_section)."""
        t, m = config.tuples, config.memory
        # Tuples want every memory kept: an evicting bank would silently drop part of the
        # history, so a full bank raises instead (raise memory.capacity). Exact search is the
        # reference and is cheap at the sizes of one conversation's bank.
        bank = dataclasses.replace(
            BankSpec.from_config(config), overflow="raise", retriever="exact_numpy"
        )
        return cls(
            builder=t.builder,
            window=t.window,
            k_per_fact=m.k_per_fact,
            k_per_speaker=m.k_per_speaker,
            only_with_qa=t.only_with_qa,
            fact_source=t.fact_source,
            bank=bank,
            style=config.agents.style,
            teacher_sampling=SamplingConfig.from_config(config, "manager"),
            extract_sampling=SamplingConfig.from_config(config, "extract"),
            jobs_per_batch=t.jobs_per_batch,
            rules=ManagerRules.from_config(config),
        )

    def validate(self) -> None:
        """Raises ValueError naming the first bad setting by its config key."""
        if self.builder not in BUILDERS:
            raise ValueError(f"config tuples.builder={self.builder!r}: expected one of {BUILDERS}")
        if self.fact_source not in FACT_SOURCES:
            raise ValueError(
                f"config tuples.fact_source={self.fact_source!r}: expected one of {FACT_SOURCES}"
            )
        if self.window < WHOLE_HISTORY:
            raise ValueError(
                f"config tuples.window={self.window}: must be >= 0, or -1 for the whole history"
            )
        for key in ("memory.k_per_fact", "memory.k_per_speaker", "tuples.jobs_per_batch"):
            value = getattr(self, key.split(".")[1])
            if value < 1:
                raise ValueError(f"config {key}={value}: must be >= 1")
