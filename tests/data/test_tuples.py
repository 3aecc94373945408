"""Building Memory-R1 tuples on a generated synthloco fixture: windows, linked questions, the
manager's view, answer tuples, and the three bank builders agreeing where they should.

A hashed bag-of-words embedding stands in for MiniLM here: retrieval only has to be
deterministic and computable by hand, and it keeps these tests free of any model.
"""

from __future__ import annotations

import dataclasses
import json
import re
import zlib
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from configs import memr1 as memr1_config
from memr1.data.locomo import load_locomo
from memr1.data.split import split_conversations
from memr1.data.synthloco import generate as synth
from memr1.data.synthloco.world import get_preset
from memr1.env.answer import gold_answer
from memr1.env.facts import observation_index
from memr1.env.manager_io import ManagerOp
from memr1.tuples.banks import retrieve_for_facts
from memr1.tuples.build import TupleConfig, build_tuples
from memr1.tuples.restore import restore_memory
from memr1.tuples.schema import to_json

DIM = 64


def fake_embed(texts):
    """Unit vectors of hashed lower-cased words: same text, same vector, in any batch."""
    out = np.zeros((len(texts), DIM), np.float32)
    for row, text in enumerate(texts):
        out[row, 0] = 1e-3  # an empty text still gets a unit vector
        for word in re.findall(r"\w+", text.lower()):
            out[row, zlib.crc32(word.encode()) % DIM] += 1.0
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def write_synth(root: Path) -> Path:
    """The tiny synthloco preset (three conversations, one per split file) under ``root``."""
    synth.write_dataset(synth.generate_dataset(get_preset("tiny", 0)), root, "tiny")
    return root


def synth_conversations(root: Path) -> list:
    """The three tiny conversations, category 5 dropped (as every tuple split does)."""
    convs = [c for s in ("train", "validation", "test") for c in load_locomo(root / f"{s}.json")]
    return list(split_conversations(convs, (1,), names=("all",))["all"])


def tuple_config(**overrides) -> TupleConfig:
    """The tuples of configs/memr1.py (3 memories per fact and 4 per speaker, the full prompt
    style), with `overrides` (TupleConfig fields) replaced."""
    config = memr1_config.get_config()
    config.memory.update(k_per_fact=3, k_per_speaker=4)
    config.agents.style = "full"
    return dataclasses.replace(TupleConfig.from_config(config), **overrides)


def build(convs, teacher=None, **overrides):
    cfg = tuple_config(**overrides)
    return build_tuples(convs, embed=fake_embed, dim=DIM, cfg=cfg, teacher=teacher)


def without_builder(tuples):
    return [dataclasses.replace(t, builder="") for t in tuples]


def add_every_fact(facts, retrieved):
    return [ManagerOp("ADD", text=fact) for fact in facts]


def merge_into_first(facts, retrieved):
    """UPDATEs the best retrieved memory with the first fact, ADDs the other facts."""
    if not retrieved:
        return add_every_fact(facts, retrieved)
    memory_id, text = retrieved[0]
    merged = ManagerOp("UPDATE", memory_id, f"{text} | {facts[0]}", old_memory=text)
    return [merged, *add_every_fact(facts[1:], retrieved)]


class AddEveryFactPolicy:
    """Stands in for a TextPolicy: reads the new facts out of the manager prompt, ADDs each."""

    name = "add-every-fact"

    def __init__(self):
        self.calls = 0

    def complete(self, chats, sampling, *, key, num_samples=1, params=None):
        out = []
        for messages in chats:
            self.calls += 1
            after = messages[-1]["content"].split("New facts:", 1)[1].lstrip()
            facts, _ = json.JSONDecoder().raw_decode(after)
            ops = [{"id": str(50 + i), "text": f, "event": "ADD"} for i, f in enumerate(facts)]
            reply = json.dumps({"memory": ops})
            out.append([SimpleNamespace(text=reply, ids=np.zeros(3, np.int32))])
        return out


@pytest.fixture(scope="module")
def convs(tmp_path_factory):
    return synth_conversations(write_synth(tmp_path_factory.mktemp("synth")))


@pytest.fixture(scope="module")
def every_turn(convs):
    """Observation tuples of every turn with facts (no QA filter), whole history."""
    return build(convs, window=-1, only_with_qa=False)


def _context(convs, sample_id):
    conv = next(c for c in convs if c.sample_id == sample_id)
    turns = list(conv.iter_turns())
    return conv, turns, {t.dia_id: p for p, t in enumerate(turns)}, observation_index(conv)


@pytest.mark.parametrize("window", [0, 5, 17])
def test_bank_holds_exactly_the_facts_of_the_window(convs, window):
    tuples = build(convs, window=window, only_with_qa=False).manager
    assert tuples
    for m in tuples:
        conv, turns, position, facts = _context(convs, m.sample_id)
        t = m.turn_index
        assert turns[t].dia_id == m.dia_id and turns[t].speaker == m.speaker
        assert m.window_start == max(0, t - window)
        expected = [f for p in range(m.window_start, t) for f in facts.get(turns[p].dia_id, [])]
        assert sorted(x.text for x in m.bank) == sorted(expected), m.dia_id
        for memory in m.bank:
            assert m.window_start <= position[memory.dia_id] < t, (m.dia_id, memory)
            assert memory.owner == m.speakers.index(conv.turn(memory.dia_id).speaker)
    if window == 0:
        assert all(not m.bank and not m.retrieved for m in tuples)


def test_whole_history_equals_a_window_longer_than_any_conversation(convs, every_turn):
    longest = build(convs, window=10_000, only_with_qa=False)
    assert longest.manager == every_turn.manager
    assert longest.answer == every_turn.answer
    # Built incrementally, the bank before t is everything said before t.
    assert any(len(m.bank) > 5 for m in every_turn.manager)


def test_linked_questions_are_those_citing_the_turn(convs, every_turn):
    by_id = {c.sample_id: c for c in convs}
    turns_with_facts = {
        (c.sample_id, d) for c in convs for d, fs in observation_index(c).items() if fs
    }
    assert {(m.sample_id, m.dia_id) for m in every_turn.manager} == turns_with_facts
    for m in every_turn.manager:
        conv = by_id[m.sample_id]
        cited = [i for i, qa in enumerate(conv.qa) if m.dia_id in qa.evidence]
        assert [q.qa_index for q in m.qa] == cited and m.has_qa == bool(cited)
        for q in m.qa:
            qa = conv.qa[q.qa_index]
            assert (q.question, q.answer, q.category) == (qa.question, gold_answer(qa), qa.category)
            assert q.category != 5
    flagged = [m for m in every_turn.manager if not m.has_qa]
    assert flagged and len(flagged) < len(every_turn.manager)
    # The default keeps only cited turns, and keeps them unchanged.
    filtered = build(convs, window=-1)
    assert filtered.manager == [m for m in every_turn.manager if m.has_qa]
    counts = filtered.counts
    assert counts["manager_written"] == counts["manager_with_qa"] == len(filtered.manager)
    assert counts["manager_without_qa"] == len(flagged)


def test_retrieved_are_the_speakers_best_memories_in_the_bank(every_turn):
    k = 3
    for m in every_turn.manager:
        bank = {x.id: x for x in m.bank}
        ids = [i for i, _ in m.retrieved]
        assert len(set(ids)) == len(ids) and set(ids) <= set(bank)
        assert all(bank[i].text == text and bank[i].owner == m.owner for i, text in m.retrieved)
        _, shown = m.manager_input()
        assert list(shown.values()) == ids
        own = [x for x in m.bank if x.owner == m.owner]
        assert len(ids) >= min(k, len(own)) and len(ids) <= k * len(m.facts)
        if len(m.facts) == 1 and own:
            # One fact: the view is its top k, best first, by cosine.
            q = fake_embed(m.facts)[0]
            score = {x.id: float(fake_embed([x.text])[0] @ q) for x in own}
            got = [score[i] for i in ids]
            assert got == sorted(got, reverse=True)
            others = [s for i, s in score.items() if i not in ids]
            assert not others or min(got) >= max(others) - 1e-6


def test_answer_tuples_hold_each_speakers_top_k(convs, every_turn):
    answers = every_turn.answer
    assert len(answers) == sum(len(c.qa) for c in convs)
    for a in answers:
        conv, _, _, facts = _context(convs, a.sample_id)
        qa = conv.qa[a.qa_index]
        assert (a.question, a.answer, a.category) == (qa.question, gold_answer(qa), qa.category)
        said = {s: {f for d, fs in facts.items() if conv.turn(d).speaker == s for f in fs}
                for s in a.speakers}  # fmt: skip
        by_speaker = a.memories_by_speaker()
        assert list(by_speaker) == [conv.speaker_a, conv.speaker_b]
        for speaker, rows in by_speaker.items():
            assert len(rows) == min(4, len(said[speaker]))
            assert all(text in said[speaker] for _, text in rows)
        scores = [[x.score for x in a.memories if x.speaker == s] for s in a.speakers]
        assert all(s == sorted(s, reverse=True) for s in scores)
        prompt = a.answer_input()[-1]["content"]
        assert a.question in prompt and f"Memories of {conv.speaker_a}" in prompt


def test_a_restored_snapshot_reproduces_the_managers_view(convs):
    tuples = build(convs, builder="teacher", teacher=merge_into_first, window=-1).manager
    m = max(tuples, key=lambda t: len(t.bank))
    memory, ids = restore_memory(m, embed=fake_embed, dim=DIM, spec=tuple_config().bank)
    assert [(x.text, x.owner, x.updated) for x in memory.memories()] == [
        (x.text, x.owner, x.updated) for x in m.bank
    ]
    view = retrieve_for_facts(memory, fake_embed(m.facts), m.owner, 3)
    assert view == [(ids[i], text) for i, text in m.retrieved]
    # A candidate op on a shown memory applies to the restored bank.
    target = ids[m.retrieved[0][0]]
    memory.apply(
        [ManagerOp("DELETE", target)],
        owner=m.owner,
        timestamp=m.timestamp,
        turn=0,
        embed=fake_embed,
    )
    assert target not in {x.memory_id for x in memory.memories()}


@pytest.mark.parametrize("window", [5, -1])
def test_callable_teacher_adding_every_fact_matches_the_observation_builder(convs, window):
    observed = build(convs, window=window)
    taught = build(convs, builder="teacher", teacher=add_every_fact, window=window)
    assert taught.manager[0].builder == "teacher:add_every_fact"
    assert without_builder(taught.manager) == without_builder(observed.manager)
    assert without_builder(taught.answer) == without_builder(observed.answer)


def test_callable_teacher_sees_the_tuples_view_and_its_updates_land(convs):
    calls = []

    def teacher(facts, retrieved):
        calls.append((tuple(facts), tuple(retrieved)))
        return merge_into_first(facts, retrieved)

    # One bank per conversation, turn after turn: one teacher call per tuple, in tuple order.
    result = build(convs, builder="teacher", teacher=teacher, window=-1, only_with_qa=False)
    assert calls == [(m.facts, m.retrieved) for m in result.manager]
    merged = [x for m in result.manager for x in m.bank if " | " in x.text]
    assert merged, "the teacher's UPDATEs never reached a bank"
    for m in build(convs, builder="teacher", teacher=merge_into_first, window=4).manager:
        _, _, position, _ = _context(convs, m.sample_id)
        assert all(m.window_start <= position[x.dia_id] < m.turn_index for x in m.bank)


def test_teacher_ops_are_checked(convs):
    def deletes_a_stranger(facts, retrieved):
        return [ManagerOp("DELETE", 10_000)]

    with pytest.raises(ValueError, match=r"synth-\w+-000 turn D\d+:\d+.*not among"):
        build(convs, builder="teacher", teacher=deletes_a_stranger)
    with pytest.raises(TypeError, match="not a list of ops"):
        build(convs, builder="teacher", teacher=lambda facts, retrieved: None)


@pytest.mark.parametrize("window", [3, -1])
def test_policy_teacher_runs_through_ingest_and_agrees(convs, window):
    policy = AddEveryFactPolicy()
    taught = build(convs, builder="teacher", teacher=policy, window=window, jobs_per_batch=4)
    assert policy.calls > 0 and taught.manager[0].builder == "teacher:add-every-fact"
    observed = build(convs, window=window)
    assert without_builder(taught.manager) == without_builder(observed.manager)
    assert without_builder(taught.answer) == without_builder(observed.answer)


def test_building_is_deterministic(convs):
    first = build(convs, builder="teacher", teacher=merge_into_first, window=5)
    second = build(convs, builder="teacher", teacher=merge_into_first, window=5)
    assert [to_json(t) for t in first.manager] == [to_json(t) for t in second.manager]
    assert [to_json(t) for t in first.answer] == [to_json(t) for t in second.answer]


@pytest.mark.parametrize(
    ("overrides", "teacher", "message"),
    [
        ({"builder": "llm"}, None, r"tuples\.builder='llm'"),
        ({"window": -2}, None, r"tuples\.window=-2"),
        ({"k_per_fact": 0}, None, r"memory\.k_per_fact=0"),
        ({"fact_source": "summary"}, None, r"tuples\.fact_source='summary'"),
        ({"builder": "teacher"}, None, "needs a teacher"),
        ({}, add_every_fact, "takes no teacher"),
    ],
)
def test_bad_settings_are_named(convs, overrides, teacher, message):
    with pytest.raises(ValueError, match=message):
        build(convs, teacher=teacher, **overrides)


def test_duplicate_conversations_are_refused(convs):
    with pytest.raises(ValueError, match="distinct sample_ids"):
        build([convs[0], convs[0]])


def test_tuple_config_reads_the_config():
    config = memr1_config.get_config()
    cfg = TupleConfig.from_config(config)
    # Algorithm 1's W (its text says 24), the dataset's own facts, no model, cited turns only.
    assert (cfg.window, cfg.builder, cfg.fact_source, cfg.only_with_qa) == (
        50,
        "observation",
        "observation",
        True,
    )
    config.tuples.update(window=24, builder="teacher", only_with_qa=False, jobs_per_batch=3)
    config.memory.update(capacity=77, text_bytes=99, k_per_fact=2, k_per_speaker=6)
    config.memory.update(overflow="evict_oldest", retriever="scann")
    config.agents.update(temperature=0.5, manager_max_new_tokens=11, extract_max_new_tokens=12)
    config.agents.style = "full"
    cfg = TupleConfig.from_config(config)
    got = (cfg.window, cfg.builder, cfg.only_with_qa, cfg.jobs_per_batch)
    assert got == (24, "teacher", False, 3)
    assert (cfg.k_per_fact, cfg.k_per_speaker, cfg.style) == (2, 6, "full")
    # Every memory is kept (a full bank raises) and searched exactly, whatever evaluation uses.
    bank = cfg.bank
    assert (bank.capacity, bank.text_bytes, bank.overflow, bank.retriever) == (
        77,
        99,
        "raise",
        "exact_numpy",
    )
    teacher, extract = cfg.teacher_sampling, cfg.extract_sampling
    assert (teacher.temperature, teacher.max_new_tokens) == (0.5, 11)
    assert (extract.temperature, extract.max_new_tokens) == (0.5, 12)
