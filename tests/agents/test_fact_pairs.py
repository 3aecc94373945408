"""Facts as Mem0 feeds LoCoMo (`memory.extract_from="pair"`): the LLM extractor reads a session's
messages two at a time, once for each speaker's bank, so a reply keeps what it answers; and the
pair's facts go through the real ingestion path into the bank of the speaker they are about."""

from __future__ import annotations

import json
import re
from datetime import datetime
from types import SimpleNamespace

import jax
import numpy as np
import pytest

from memr1.data.records import Conversation, Session, Turn
from memr1.env.facts import check_extract_from, fact_units
from memr1.env.ingest import IngestConfig, ingest
from memr1.env.memory_store import BankSpec, ConversationMemory
from tests.train import tiny

SPEAKERS = ("Ann", "Bob")
TEXTS = [
    (0, "Did you go to Lisbon?"),
    (1, "Yes, last week!"),
    (0, "I started a pottery class."),
    (1, "Nice, which day?"),
    (0, "Tuesdays."),
]


def conversation() -> Conversation:
    turns = tuple(
        Turn(SPEAKERS[who], f"D1:{i + 1}", text, 1, i + 1) for i, (who, text) in enumerate(TEXTS)
    )
    session = Session(1, datetime(2023, 5, 8, 13, 56), "1:56 pm on 8 May, 2023", turns)
    return Conversation("conv-x", *SPEAKERS, (session,), (), "locomo")


def test_pairs_close_on_every_second_turn_and_a_sessions_odd_last_turn():
    conv = conversation()
    turns = list(conv.iter_turns())
    due = [[(about, [t.dia_id for t in read]) for _, _, about, read in fact_units(conv, t, "pair")]
           for t in turns]  # fmt: skip
    pair = lambda *ids: [("Ann", list(ids)), ("Bob", list(ids))]
    assert due == [[], pair("D1:1", "D1:2"), [], pair("D1:3", "D1:4"), pair("D1:5")]
    assert [fact_units(conv, t, "utterance")[0][2:] for t in turns[:2]] == [
        ("Ann", (turns[0],)),
        ("Bob", (turns[1],)),
    ]


def test_pairs_need_an_llm_extractor_and_a_known_value():
    with pytest.raises(ValueError, match=r"memory\.extract_from='pair'.*fact_source='turn'"):
        check_extract_from("pair", "turn")
    with pytest.raises(ValueError, match=r"memory\.extract_from='both'"):
        check_extract_from("both", "llm")
    check_extract_from("utterance", "observation")


class Agents:
    """The extractor and the manager: the extractor lists, about its person, the last line of
    the dialogue it read, prefixed by who is asked about; the manager ADDs every fact."""

    def __init__(self):
        self.extracted: list[str] = []

    def complete(self, chats, sampling, key=None, num_samples=1):
        out = []
        for chat in chats:
            user = chat[-1]["content"]
            if "Dialogue:" in user:  # the extractor
                self.extracted.append(user)
                about = re.search(r"List only facts about (\w+)", user).group(1)
                last = user.strip().splitlines()[-1]
                text = json.dumps([f"{about} read: {last}"])
            else:
                facts = re.search(r"New facts:\n(.*)\n\nReply", user, re.S).group(1)
                adds = [{"id": "99", "text": f, "event": "ADD"} for f in json.loads(facts)]
                text = json.dumps({"memory": adds})
            out.append([SimpleNamespace(text=text, ids=np.zeros(2, np.int32), finished=True)])
        return out


def embed(texts):
    out = np.zeros((len(texts), 8), np.float32)
    out[:, 0] = 1.0
    return out


def test_ingest_reads_each_pair_once_for_each_speakers_bank():
    conv = conversation()
    config = tiny.config()
    config.memory.update(fact_source="llm", extract_from="pair", retriever="exact_numpy")
    config.agents.style = "full"
    memory = ConversationMemory(conv.sample_id, SPEAKERS, BankSpec.from_config(config), 8)
    agents = Agents()
    records = ingest(
        [conv], {conv.sample_id: memory}, embed=embed, cfg=IngestConfig.from_config(config),
        key=jax.random.key(0), extractor=agents, manager=agents,
    )  # fmt: skip
    # Three pairs (1-2, 3-4, 5), each read for Ann and for Bob.
    assert len(agents.extracted) == 6
    lisbon = [u for u in agents.extracted if "Yes, last week!" in u]
    assert len(lisbon) == 2 and all("Ann: Did you go to Lisbon?" in u for u in lisbon)
    assert [(r.dia_id, r.speaker) for r in records] == [
        ("D1:2", "Ann"), ("D1:2", "Bob"), ("D1:4", "Ann"), ("D1:4", "Bob"),
        ("D1:5", "Ann"), ("D1:5", "Bob"),
    ]  # fmt: skip
    for owner, name in enumerate(SPEAKERS):
        texts = [h.text for h in memory.memories(owner)]
        assert texts == [
            f"{name} read: Bob: Yes, last week!",
            f"{name} read: Bob: Nice, which day?",
            f"{name} read: Ann: Tuesdays.",
        ]
