"""The demo's sizes: its synthloco preset, the tiny policies' budgets, and the quick variant.

Everything the demo trains and measures is sized here, in one place, so that a run fits the
budget the README promises (one seed in at most 15 minutes on two CPU cores). The numbers were
chosen on the validation split (never the test split) by watching the EM of the warm start and of
each RL stage; the comments say what each one trades.
"""

from __future__ import annotations

import dataclasses

from memr1.data.synthloco.world import SynthConfig

# A smaller world than synthloco's "demo" preset: fewer, shorter conversations, so that the whole
# pipeline (bank building, SFT, two RL stages, four evaluations) runs on a laptop CPU, and a
# smaller vocabulary, so that a few-million-parameter model sees every name and city often enough
# during a short warm start. Values change at most once (max_changes=1): a stale and a current
# memory then differ in their wording ("lives in" / "moved from ... to"), which a tiny reader can
# learn to tell apart; two changes would need date arithmetic on timestamps.
DEMO_SYNTH = SynthConfig(
    splits=(("train", 32), ("validation", 6), ("test", 10)),
    sessions=(4, 6),
    turns_per_session=(8, 10),
    facts_per_session=(3, 5),
    max_changes=1,
    qa_per_conversation=20,
    min_qa=10,
    num_names=10,
    num_species=3,
    num_pet_names=12,
    num_cities=6,
    num_destinations=6,
    num_jobs=6,
    num_hobbies=6,
    num_foods=6,
    num_events=4,
)

# The test's shrunken world: two short conversations per split.
QUICK_SYNTH = dataclasses.replace(
    DEMO_SYNTH,
    splits=(("train", 2), ("validation", 1), ("test", 1)),
    sessions=(3, 3),
    min_qa=6,
    qa_per_conversation=8,
)


@dataclasses.dataclass(frozen=True)
class DemoSettings:
    """One demo run's sizes.

    Attributes:
      synth: the synthloco world (its seed is replaced by the run's seed).
      vocab_size: the byte-level BPE tokenizer's size; the tiny backbone's vocabulary matches it.
      k_per_fact, k_per_speaker: memories shown to the manager per fact and to the answerer per
        speaker (the tiny config's compact values).
      capacity, text_bytes: bank rows and bytes per memory text.
      stale_bias: how often the answer teacher takes the oldest related memory.
      person_blind: whether the answer teacher counts the other speaker's memories of the topic
        as related (answer_teacher.CarelessAnswerTeacher).
      hedge: how often the answer teacher, given several related memories, answers with all of
        their answers joined by " or " instead of selecting one.
      direct_fraction: share of answer traces also written in the no-distillation style.
      full_text_fraction: share of traces also written as full-text rows (see traces.py).
      rename_fraction: share of trace rows whose entities are renamed (see augment.py).
      rename_pool: 0 permutes the entities within the world's own lists; N > 0 renames them
        onto N made-up words (augment.pseudo_words), so that no name is ever frequent.
      rl_rename_copies: the Answer Agent's RL states are the train split's answer tuples plus
        this many copies of each with the entities renamed (augment.renamed_answer_states);
        0 uses the tuples alone.
      manager_copy_rows: manager rows of random word sequences stored by ADD, mixed into the
        warm start's traces (traces.manager_copy_rows); 0 adds none.
      manager_repeat_fraction: share of those rows whose fact is one of the shown memories
        verbatim, the reply NONE.
      answer_copy_rows: answer rows of a recall task over random word memories (find the memory,
        distil it, answer the word after the asked one: traces.answer_copy_rows); 0 adds none.
      copy_steps, copy_batch, copy_lr, copy_words: the copy warm-up before SFT (traces.copy_rows):
        random word sequences of copy_words words, repeated back; 0 steps skips it (the default:
        see docs/demo.md for what it measured).
      sft_steps, sft_batch, sft_lr: the warm start (one policy, both agents); its sequence
        length is the longest trace's, rounded up.
      answer_steps, answer_batch, answer_lr, answer_max_new: GRPO/PPO of the Answer Agent.
      manager_steps, manager_batch, manager_lr, manager_max_new: GRPO/PPO of the manager.
      answer_oversample: the answer stage (GRPO) rolls out this many times answer_batch states
        a step and updates on answer_batch groups, those with a reward spread first
        (`memr1.train.batches.signal_first_groups`); 1 = off.
      group: G samples per state; kl_beta: KL penalty to the warm start.
      drop_zero_signal: GRPO updates skip groups whose G rewards are all equal
        (`memr1.train.batches.keep_signal_groups`).
      eval_batch: rows per sampler call in evaluation.
    """

    synth: SynthConfig = DEMO_SYNTH
    vocab_size: int = 2048
    k_per_fact: int = 3
    k_per_speaker: int = 2
    capacity: int = 128
    text_bytes: int = 256
    stale_bias: float = 0.5
    person_blind: bool = True
    hedge: float = 1.0
    direct_fraction: float = 0.3
    full_text_fraction: float = 0.0
    rename_fraction: float = 0.8
    rename_pool: int = 0
    rl_rename_copies: int = 3
    manager_copy_rows: int = 800
    manager_repeat_fraction: float = 0.0
    answer_copy_rows: int = 0
    copy_steps: int = 0
    copy_batch: int = 32
    copy_lr: float = 3e-3
    copy_words: tuple[int, int] = (6, 16)
    sft_steps: int = 2200
    sft_batch: int = 8
    sft_lr: float = 3e-3
    answer_steps: int = 120
    answer_batch: int = 16
    answer_lr: float = 3e-4
    answer_max_new: int = 40
    answer_oversample: int = 1
    manager_steps: int = 30
    manager_batch: int = 4
    manager_lr: float = 1e-4
    manager_max_new: int = 64
    group: int = 8
    kl_beta: float = 0.0
    drop_zero_signal: bool = False
    eval_batch: int = 8

    def with_seed(self, seed: int) -> SynthConfig:
        """The world of one seed."""
        return dataclasses.replace(self.synth, seed=int(seed)).validate()


FULL = DemoSettings()
# A run that exercises every stage in about a minute (the end-to-end test): nothing learns.
QUICK = DemoSettings(
    synth=QUICK_SYNTH,
    vocab_size=512,
    manager_copy_rows=8,
    answer_copy_rows=8,
    copy_steps=3,
    copy_batch=4,
    copy_words=(2, 4),
    sft_steps=4,
    sft_batch=4,
    answer_steps=2,
    answer_batch=2,
    manager_steps=2,
    manager_batch=2,
    group=2,
    answer_max_new=24,
    answer_oversample=2,
    manager_max_new=32,
    eval_batch=8,
)
