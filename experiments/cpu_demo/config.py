"""The CPU demo's configuration: its synthloco world, its teachers and traces, every stage's size.

  python -m experiments.cpu_demo --config experiments/cpu_demo/config.py        # the demo
  python -m experiments.cpu_demo --config experiments/cpu_demo/config.py:quick  # = --quick

Keys of the arg string: quick (every stage in a few steps on a world of four conversations,
the end-to-end test: nothing learns). The returned ConfigDict is locked.

Everything the demo trains and measures is sized here. One seed takes about 20.5 minutes on
two CPU cores with the machine to itself (2-core Intel Xeon, AVX-512; seed 0 of a fresh run):
copy pretraining 239 s, SFT 429 s, answer GRPO 196 s, manager GRPO 275 s, the evaluations 77 s
(docs/benchmarks.md). The values were chosen on the validation split, never the test split, by
watching the EM of the warm start and of each RL stage and the warm start's probes
(tools/op_probe.py, tools/copy_probe.py); docs/demo.md has the measurements.
`commands.stage_overrides` turns this config into the fields of configs/memr1.py that each
stage's `memr1.train` or `memr1.evaluate` runs with.
"""

from __future__ import annotations

import ml_collections

from configs import base
from experiments.cpu_demo.answer_teacher import LIST_AND_PLAN_KINDS
from memr1.data.synthloco.world import SynthConfig

DEFAULTS: dict[str, object] = {"quick": False}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """Returns the locked demo config selected by `arg` ("quick" or nothing).

    The recipe measured on validation for a Memory Manager that learns its operations
    (docs/demo.md, 2026-12-04 and 2026-12-05): a backbone pretrained to copy a marked string, a
    warm start that samples every operation at a collision, a manager stage rewarded through
    the questions of the turn and of its shown memories, with a KL weight to the warm start."""
    v = base.parse_arg(arg, DEFAULTS)
    config = ml_collections.ConfigDict()
    config.synth = world()
    # The byte-level BPE tokenizer's size; the tiny backbone's vocabulary matches it.
    config.vocab_size = 2048
    # The prompts of both agents: the compact style, whose prompts fit in max_prompt_tokens.
    config.style = "compact"
    config.max_prompt_tokens = 512
    # Memory banks: rows, bytes per memory text, exact search, facts read from synthloco's
    # observations; memories shown to the manager per fact and to the answerer per speaker. One
    # memory per speaker gives the banks retrieval pressure (about 5 memories a speaker against
    # 1 read; LoCoMo's hundreds against 30): a stale value or a cancellation stored beside the
    # plan competes with the current memory for the one slot, so the manager's reward sees it.
    config.memory = dict(
        capacity=128,
        text_bytes=256,
        retriever="exact_numpy",
        fact_source="observation",
        k_per_fact=3,
        k_per_speaker=1,
    )
    # The careless answer teacher (answer_teacher.CarelessAnswerTeacher): the oldest related
    # memory half of the time, other speakers' memories of the topic counted as related, and,
    # given several related memories, always every answer joined by " or " (it never selects).
    # List and plan questions, whose answers the manager's operations decide, it reads without
    # these flaws (careful_kinds: the asked person's newest memory, a list answered whole), so
    # that the frozen Answer Agent can show the manager stage what a merge or a DELETE is worth.
    config.answer_teacher = dict(
        stale_bias=0.5, person_blind=True, hedge=1.0, careful_kinds=LIST_AND_PLAN_KINDS
    )
    # Whose banks the states are built on: "teacher" (the Mem0-like manager teacher, whose lists
    # are often split or lost) or "careful" (teacher.CAREFUL: lists merged, values replaced,
    # cancelled plans deleted). The Answer Agent's traces and RL states read both, so that it
    # meets whole lists to answer from, as the paper's Answer Agent read a capable manager's
    # banks; the manager stage's states hold the careful bank before their turn, so that the
    # turn's own operation decides its linked answers.
    config.banks = dict(answer=("teacher", "careful"), manager="careful")
    config.traces = traces()
    config.pretrain = copy_pretraining()
    config.sft = warm_start()
    config.answer = answer_stage()
    config.manager = manager_stage()
    # Both RL stages: G samples per state, learning-rate warm-up steps, no KL penalty to the
    # warm start. Every stage keeps its last checkpoint (and its best validated one).
    config.group_size = 8
    config.warmup_steps = 5
    config.kl_beta = 0.0
    config.keep = 1
    # Rows per sampler call in evaluation.
    config.eval_batch_size = 8
    if v["quick"]:
        quick(config)
    config.lock()
    return config


def warm_start() -> dict[str, object]:
    """The SFT warm start: fields of `config.sft`."""
    # The warm start: one policy, both agents; its sequence length is the longest trace's.
    # 2,000 steps at 1e-3 (at the random init's 3e-3 the pretrained circuit is lost: copy
    # probe 0.12 and 0.16; at 1e-3 on one seed of five, seed 4: 0.27), the rate decayed to 0
    # on a cosine (at a constant rate every colliding fact got the same op mix on its own
    # training rows). group_by_length and buckets:
    # train.sft_group_by_length and train.sft_buckets, batches of rows of similar length padded
    # to one of 8 widths (tools/bench/sft_padding.py counts the padding).
    # rehearsal_rows: rows of the copy pretraining task (as token ids) after the traces, so
    # that SFT keeps training the circuit it maps onto a manager reply's fact: without them
    # one SFT run in three never mapped it (a fact's first word copied 0.15 at steps 250 and
    # 2,000 on seed 2; docs/demo.md, 2026-12-06).
    return dict(
        steps=2000,
        batch_size=8,
        lr=1e-3,
        warmup_steps=50,
        group_by_length=16,
        buckets=8,
        lr_decay="cosine",
        rehearsal_rows=1600,
    )


def copy_pretraining() -> dict[str, object]:
    """Copy pretraining of the random backbone before its warm start (pretrain.py): steps
    updates of batch_size rows, each 1-4 (spans) quoted strings of tokens (min, max) uniform
    random ids, one of them marked, and the loss on its copy; AdamW at lr after warmup_steps
    (0 steps: off).

    A manager reply writes a fact whose first word follows a quote, as every memory's in its
    prompt does: a plain copy of one string ([BOS] x [SEP] x) left the warm start unable to
    find it (a fact's first name copied 7-15% of the time on three seeds), the marked copy
    100% on four seeds of five (2-core Intel Xeon, AVX-512; docs/demo.md, 2026-12-05)."""
    return dict(steps=600, batch_size=32, lr=1e-3, warmup_steps=50, tokens=(4, 12), spans=(1, 4))


def world() -> dict[str, object]:
    """The synthloco world: fields of `memr1.data.synthloco.world.SynthConfig` (the seed is the
    run's).

    A smaller world than synthloco's "demo" preset: fewer, shorter conversations, so that the
    whole pipeline (bank building, SFT, two RL stages, five evaluations) runs on a laptop CPU,
    and a smaller vocabulary, so that a few-million-parameter model sees every name and city
    often enough during a short warm start. Values change at most once (max_changes=1): a stale
    and a current memory then differ in their wording ("lives in" / "moved from ... to"), which
    a tiny reader can learn to tell apart; two changes would need date arithmetic on timestamps.
    Every change and cancellation gets a question a stale memory answers wrongly, and repeats
    are cited by the questions they restate (change_questions, cite_repeats), so that the
    manager stage's outcome reward can see every kind of operation. max_cancels, cancel_weight:
    None and 3.0 (a cancellation is a plan's one change, synthloco's default weight); 2 and 6.0
    double the cancellations (docs/demo.md, 2026-12-04).
    """
    return dict(
        splits=(("train", 32), ("validation", 6), ("test", 10)),
        sessions=(4, 6),
        turns_per_session=(8, 10),
        facts_per_session=(3, 5),
        max_changes=1,
        max_cancels=None,
        cancel_weight=3.0,
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
        change_questions=True,
        cite_repeats=True,
    )


def answer_stage() -> dict[str, object]:
    """The Answer Agent's RL stage: fields of `config.answer`.

    GRPO/PPO of the Answer Agent, over the train answer tuples and `renamed_copies` copies
    of each with their entities renamed (augment.renamed_answer_states). 90 steps: on
    validation as good as 120 for the Answer Agent and the manager stage after it
    (docs/demo.md). `eval_every`: both RL stages validate greedily on the validation
    conversations' tuples before their first step, every `eval_every` steps and after the
    last (val/... in their logs, the curves beside the rewards); validating changes no
    update, and each stage's best validated step is kept (DIR:best). oversample_copies:
    further renamed copies of each tuple whose question template is one of oversample_kinds
    (augment.oversampled_answer_states): the list, plan, city and job questions, whose answers
    the manager's operations decide.
    checkpoint: which of the stage's checkpoints the manager stage (its frozen reader) and the
    evaluation read: "last" or "best" (its best validated step, DIR:best). "last": with the
    best validated reader Memory-R1 gained more over SFT on validation (+9.6 against +7.4 EM
    over 5 seeds) but the manager stage learned UPDATE on 3 seeds of 5 against 5
    (docs/demo.md, 2026-12-06, third session).
    oversample: train.oversample, as the manager stage's (1 = off, the paper's). With 2 the
    RL Answer Agent is stronger on every seed of five (SFT manager + RL answerer +5.2 EM on
    validation), but the manager stage rewarded through it gains less (+1.9 +/- 3.0, positive
    on 3 seeds, against +3.5 +/- 1.7 on all 5), so it stays off (docs/demo.md, 2026-12-06,
    sixth session).
    """
    return dict(
        steps=90,
        batch_size=16,
        lr=3e-4,
        max_new_tokens=40,
        renamed_copies=3,
        eval_every=15,
        oversample_kinds=LIST_AND_PLAN_KINDS + ("city", "job"),
        oversample_copies=2,
        checkpoint="last",
        oversample=1,
    )


def manager_stage() -> dict[str, object]:
    """The Memory Manager's RL stage: fields of `config.manager`.

    GRPO/PPO of the Memory Manager through the frozen RL Answer Agent. min_overlap: its
    states only the turns whose fact collides with its top shown memory by word overlap
    (train.min_overlap, label-free; 0 = every turn with a linked question). linked_qa:
    train.linked_qa, the questions a state's reward reads ("cites": the paper's, every one
    citing the turn; "answerable": only those the bank after the turn can answer; "shown": also
    the answerable questions about the memories shown to the manager). oversample:
    train.oversample, states rolled out a step per state updated on, those whose group has a
    reward spread first (DAPO's dynamic sampling; 1 = off, the paper's). kl_beta: the stage's
    KL weight to the warm start (train.kl_beta), None = config.kl_beta, shared with the answer
    stage. checkpoint: which of its checkpoints the evaluation reads ("last" or "best").
    eval_every: the stage validates before its first step, every 10 steps and after its last
    (7 validations; validating changes no update, so the interval costs time, not results).

    60 steps of 8 states at 2e-4 on every turn with a linked question, its reward reading the
    answerable questions of the turn and of the memories shown to the manager ("shown": with
    only the turn's own, one seed of five learned broken merges that those questions cannot
    see), with a KL weight of 0.1 (without it the stage dropped every NOOP on two seeds of
    three). About 70% of a step's groups carry no reward spread, so the states a step decide
    how many groups move the policy: with 8 instead of 4 the stage added +5.3 +/- 1.8 EM over the
    SFT manager on validation over 5 seeds (2-core Intel Xeon, AVX-512), positive on all five,
    gold UPDATEs rising on all five and op accuracy +6.5, against +3.5 +/- 1.7 and +2.8 with 4,
    for about 130 s more a seed (docs/demo.md, 2026-12-06, sixth session). On collision turns
    alone (min_overlap 0.5) +1.3, positive on two (2026-12-05).
    """
    return dict(
        steps=60,
        batch_size=8,
        lr=2e-4,
        max_new_tokens=64,
        eval_every=10,
        min_overlap=0.0,
        linked_qa="shown",
        oversample=1,
        kl_beta=0.1,
        checkpoint="last",
    )


def traces() -> dict[str, object]:
    """The warm start's traces (traces.py, augment.py).

    The share of answer traces also written
    without distillation, the share of rows whose entities are renamed, the manager copy
    rows (random word sequences of copy_row_words words stored by ADD; with 400 the warm
    start stopped copying the fact into its reply) and the answer reading rows (random-word
    lists and values to copy from the asked person's memory: read_rows.py).
    draws_per_turn: manager rows per train turn where the teacher has a choice (a fact that
    collides with a shown memory), each a draw of its choice from the turn's random stream
    (the first built the banks: traces.manager_rows); op_first: manager replies with each
    entry's event first and a repeat as an explicit NONE entry, so that the warm start samples
    every operation at a collision (tools/op_probe.py). event_weight: the SFT loss weight of
    each operation word of a teacher's manager reply, the copy rows' excepted
    (traces.weigh_events).
    """
    return dict(
        direct_fraction=0.3,
        rename_fraction=0.8,
        manager_copy_rows=1600,
        copy_row_words=(4, 9),
        answer_read_rows=2400,
        draws_per_turn=4,
        op_first=True,
        event_weight=10.0,
    )


def quick(config: ml_collections.ConfigDict) -> None:
    """Shrinks the world to four short conversations and every stage to a few steps."""
    config.synth.update(
        splits=(("train", 2), ("validation", 1), ("test", 1)),
        sessions=(3, 3),
        min_qa=6,
        qa_per_conversation=8,
    )
    config.vocab_size = 512
    config.traces.manager_copy_rows = 8
    config.traces.answer_read_rows = 8
    config.sft.update(steps=4, batch_size=4, warmup_steps=1, rehearsal_rows=8)
    config.pretrain.update(steps=min(config.pretrain.steps, 3), batch_size=4, tokens=(2, 6))
    config.answer.update(steps=2, batch_size=2, max_new_tokens=24, eval_every=2)
    config.manager.update(steps=2, batch_size=2, max_new_tokens=32, eval_every=2)
    config.group_size = 2


def synth_config(config: ml_collections.ConfigDict, seed: int) -> SynthConfig:
    """The synthloco world of one seed."""
    return SynthConfig(**config.synth.to_dict(), seed=int(seed)).validate()
