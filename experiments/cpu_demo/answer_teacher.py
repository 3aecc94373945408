"""The demo's Answer Agent teacher: reads memories correctly but does not select well.

Given a question and the retrieved memories of both speakers (as an AnswerTuple carries them),
it keeps the memories about the person and topic the question asks about, picks ONE of them, and
answers from that memory alone: the city it names, its list of pets, the date its relative time
expression resolves to against the memory's timestamp, the cuisine of the food it names.

The designed flaws are whose memories count, whether it selects at all, and the pick.
Person-blind (``person_blind``, on in the demo), it takes the other speaker's memory of the same
topic as related to a question about one person. Hedging (``hedge``, 1.0 in the demo: always),
when several memories are related it does not select: it distils all of them and answers with all
their answers joined by " or " ("paella or curry"), which exact match scores 0 ("answers from all
retrieved memories without selecting"). Otherwise it picks ONE related memory: half of the time
the OLDEST (it reads in time order and stops at the first that fits), else any at random; the
prompt asks for the newest. On the demo's validation split (seed 0, teacher-built banks) the
pick alone costs about one EM point, because a stale and a current memory are rarely both
retrieved (77.6 EM); person-blind it scores 64.7, and hedging always as well 45.7 (docs/demo.md).
These systematic errors are what greedy decoding of a policy cloned from it inherits, and what
RL on exact match can repair. The questions whose answer only the right manager operation gets
right (lists and plans, ``LIST_AND_PLAN_KINDS``) it can be told to read without the flaws
(``careful_kinds``, on in the demo), so that the warm start is shown them answered right.

The reply is written with the real formatter (``format_answer_output``): the chosen memories'
texts as the distilled memories (without timestamps: a shorter line is easier for a tiny model
to copy), then ``**Answer:**``. The random choices are seeded by the question and the memories,
so a trace can be regenerated exactly.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import random
from collections.abc import Collection, Mapping, Sequence

import numpy as np

from experiments.cpu_demo.sentences import Question, Sentence, parse_question, parse_sentence
from memr1.data.locomo import parse_locomo_date
from memr1.data.synthloco.dates import resolve
from memr1.data.synthloco.gold import join_items
from memr1.data.synthloco.qa import NO_PLAN
from memr1.data.synthloco.world import FOODS, HOBBIES, NUMBER_WORDS, article
from memr1.env.answer_io import format_answer_output, parse_answer_input
from memr1.env.policy import Completion
from memr1.env.prompts import check_style

UNKNOWN = "unknown"
Memory = tuple[str, str]  # (when, text) as render_answer_input takes them
# The questions whose answer turns on a manager's operation that only the right one gets right:
# a whole list (merged, or split and lost) and a plan (called off and deleted, or kept). The
# demo's teacher reads these carefully (``careful_kinds``), so that the frozen Answer Agent can
# show the manager stage what a merge or a DELETE is worth.
LIST_AND_PLAN_KINDS = ("pet_names", "pet_count", "hobby_list", "trip", "event")


def _day(when: str) -> dt.date | None:
    try:
        return parse_locomo_date(when).date()
    except ValueError:
        return None


def _age_key(when: str) -> dt.datetime:
    """Sort key of a memory's timestamp (unreadable ones count as oldest)."""
    try:
        return parse_locomo_date(when)
    except ValueError:
        return dt.datetime.min


def _date_answer(sentence: Sentence, when: str) -> str:
    """The absolute date of a dated memory; the memory's own day when it carries no time."""
    day = _day(when)
    if day is None:
        return UNKNOWN
    if sentence.when is None:
        return f"{day.day} {day.strftime('%B')} {day.year}"
    return resolve(sentence.when, day).answer()


def _option(options: Sequence[str], wanted: str) -> str:
    """The option that names ``wanted`` (an open-domain choice), else the first option."""
    for option in options:
        if option.lower() == wanted.lower():
            return option
    return options[0] if options else wanted


def _relevant(question: Question, name: str | None, memories: Sequence[Memory]):
    """(line, sentence) of the memories of ``name`` (of anyone when None) about the question's
    topic, in given order."""
    out = []
    for when, text in memories:
        s = parse_sentence(text)
        if s is None or (name is not None and s.name != name) or s.key != question.key:
            continue
        if question.kind in ("city_date", "job_date", "pet_date"):
            if question.target not in s.items:
                continue
        out.append(((when, text), s))
    return out


def read_answer(question: Question, sentence: Sentence, when: str) -> str:
    """The answer one memory gives to a single-person question."""
    kind = question.kind
    if kind in NO_PLAN and sentence.kind == "cancel":
        return NO_PLAN[kind]  # the plan is off, and no other is known
    if kind in ("city", "job", "food", "trip", "event", "hobby", "pet_name"):
        return sentence.value
    if kind in ("city_date", "job_date", "pet_date"):
        return _date_answer(sentence, when)
    if kind == "species":
        return sentence.species or UNKNOWN
    if kind in ("pet_names", "hobby_list"):
        return join_items(list(sentence.items))
    if kind in ("pet_count", "pet_count_asof"):
        return NUMBER_WORDS[min(len(sentence.items), 9)]
    if kind == "cuisine":
        return _option(question.options, dict(FOODS).get(sentence.value, UNKNOWN))
    if kind == "gift":
        return _option(question.options, f"{article(sentence.species or 'pet')} toy")
    if kind == "venue":
        venues = [dict(HOBBIES).get(item, "") for item in sentence.items]
        return next((o for o in question.options if o in venues), _option(question.options, ""))
    return UNKNOWN


def absent_answer(question: Question) -> str:
    """The answer when no memory is related: no plan for a plan question, else unknown."""
    return NO_PLAN.get(question.kind, UNKNOWN)


def _joint_answer(question: Question, picks: Sequence[Sentence | None]) -> str:
    """The answer of a two-person question from one picked memory per person (or None)."""
    items = [set(p.items) if p is not None else set() for p in picks]
    if question.kind == "joint_hobby":
        shared = [h for h in (picks[0].items if picks[0] else ()) if h in items[1]]
        return join_items(shared) if shared else UNKNOWN
    counts = [len(x) for x in items]
    if question.kind == "joint_total":
        return NUMBER_WORDS[min(sum(counts), 9)]
    return question.names[0] if counts[0] >= counts[1] else question.names[1]


def _hedged(question: Question, relevant, rng: random.Random) -> tuple[list[str], str]:
    """Every related memory distilled, in random order, and their distinct answers joined by
    " or ": the reply of a reader that does not select."""
    order = list(relevant)
    rng.shuffle(order)
    answers: list[str] = []
    for (when, _), sentence in order:
        answer = read_answer(question, sentence, when)
        if answer not in answers:
            answers.append(answer)
    return [text for (_, text), _ in order], " or ".join(answers)


class CarelessAnswerTeacher:
    """``teacher(question, memories_by_speaker) -> (distilled lines, answer)``.

    Args:
      seed: mixes into every question's random stream.
      stale_bias: how often it takes the oldest related memory rather than a random one.
      person_blind: for a question about one person, it takes the memories about the topic of
        BOTH speakers as related, without checking whose they are (it answers "What is Andrew's
        favorite food?" from Maria's favourite food as readily as from Andrew's).
      hedge: how often, when several memories are related to a one-person question, it does not
        select at all: it distils every related memory (in random order) and answers with their
        distinct answers joined by " or " ("Austin or Chicago"), which exact match scores 0.
      newest: pick the newest related memory, as the prompt asks, instead of the careless pick
        (``stale_bias``). With ``person_blind`` and ``hedge`` off this is the careful reader
        of the reward probe (``RuleReader``): every flaw removed, still one memory per person.
      careful_kinds: question kinds (``sentences.Question.kind``) it reads as the careful
        reader does whatever the flags above say: the asked person's newest related memory, no
        hedging. A list question is then answered with that memory's whole list.
    """

    name = "careless-reader-rules"

    def __init__(
        self,
        seed: int = 0,
        stale_bias: float = 0.5,
        person_blind: bool = False,
        hedge: float = 0.0,
        newest: bool = False,
        careful_kinds: Collection[str] = (),
    ):
        if not 0.0 <= float(hedge) <= 1.0:
            raise ValueError(f"CarelessAnswerTeacher.hedge: expected a probability, got {hedge}")
        self.seed = int(seed)
        self.stale_bias = float(stale_bias)
        self.person_blind = bool(person_blind)
        self.hedge = float(hedge)
        self.newest = bool(newest)
        self.careful_kinds = frozenset(careful_kinds)

    def _rng(self, question: str, memories: Mapping[str, Sequence[Memory]]) -> random.Random:
        blob = json.dumps(
            [self.seed, question, {k: list(map(list, v)) for k, v in memories.items()}]
        )
        return random.Random(hashlib.sha256(blob.encode("utf-8")).hexdigest())

    def __call__(
        self, question: str, memories_by_speaker: Mapping[str, Sequence[Memory]]
    ) -> tuple[list[str], str]:
        """The memory texts it relies on and its short answer."""
        parsed = parse_question(question)
        if parsed is None:
            return [], UNKNOWN
        rng = self._rng(question, memories_by_speaker)
        lines, picks = [], []
        one_person = len(parsed.names) == 1
        careful = parsed.kind in self.careful_kinds
        # Person-blind on a one-person question: every speaker's memories, nobody's name checked.
        blind = self.person_blind and one_person and not careful
        for name in parsed.names:
            if blind:
                everyone = [m for speaker in memories_by_speaker.values() for m in speaker]
                relevant = _relevant(parsed, None, everyone)
            else:
                relevant = _relevant(parsed, name, memories_by_speaker.get(name, ()))
            if not relevant:
                picks.append(None)
                continue
            hedging = self.hedge and one_person and not careful and len(relevant) > 1
            if hedging and rng.random() < self.hedge:
                return _hedged(parsed, relevant, rng)
            # The designed flaw: the oldest related memory, or any; never a deliberate newest.
            if self.newest or careful:
                (when, text), sentence = max(relevant, key=lambda r: _age_key(r[0][0]))
            elif rng.random() < self.stale_bias:
                (when, text), sentence = min(relevant, key=lambda r: _age_key(r[0][0]))
            else:
                (when, text), sentence = rng.choice(relevant)
            lines.append(text)
            picks.append((sentence, when))
        if len(parsed.names) == 2:
            return lines, _joint_answer(parsed, [p[0] if p else None for p in picks])
        if picks[0] is None:
            return lines, absent_answer(parsed)
        return lines, read_answer(parsed, *picks[0])

    def reply(
        self, question: str, memories_by_speaker: Mapping[str, Sequence[Memory]], *, distill: bool
    ) -> str:
        """The full reply text, with the distilled lines or (``distill=False``) without."""
        lines, answer = self(question, memories_by_speaker)
        return format_answer_output(lines if distill else [], answer)


def careful_reader() -> CarelessAnswerTeacher:
    """The careful reader: the teacher with every flaw off (the asked person's newest related
    memory, no hedging), as the reward probe's `RuleReader` and `answer_errors` read."""
    return CarelessAnswerTeacher(stale_bias=0.0, newest=True)


class RuleReader:
    """A frozen Answer Agent made of rules, with a policy's ``complete``: it reads the chat the
    Answer Agent gets (``parse_answer_input``) and answers as the careful reader (the teacher
    with ``newest`` and no flaws), without distilled lines.

    The reward probe rewards manager behaviours through it to ask what the bank itself decides:
    which operations a reader that reads well would reward (tools/reward_probe.py --answer rules).
    """

    def __init__(self, style: str = "compact", batch_size: int = 64):
        self.style = check_style(style)
        self.batch_size = batch_size
        self.teacher = careful_reader()

    def complete(self, conversations, sampling=None, *, key=None, num_samples: int = 1):
        """One reply per chat (``num_samples`` copies of it: the reader is deterministic)."""
        out = []
        for chat in conversations:
            question, memories = parse_answer_input(chat, style=self.style)
            text = format_answer_output([], self.teacher(question, memories)[1])
            empty = np.zeros(0, np.int32)
            done = Completion(text, empty, empty, np.zeros(0, np.float32), finished=True)
            out.append([done] * num_samples)
        return out
