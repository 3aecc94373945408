"""The SFT warm start's data: the imperfect teachers' replies on the training tuples, as JSONL.

Every row is ``{"messages": [...], "target": "..."}``, the format ``python -m memr1.train``
reads for ``algo=sft``. Prompts come from the tuples' own renderers (``ManagerTuple
.manager_input``, ``AnswerTuple.answer_input``), targets from the agents' formatters
(``format_manager_output``, ``format_answer_output``), so the warm-started policies learn exactly
the text the pipeline and the RL stages will show them and parse from them.

One policy is warm-started on both agents' traces (the prompts tell the two jobs apart), so that
the demo has one "base model" to run the prompted baselines with, as the paper runs Mem0 and
LoCoMo-RAG on an off-the-shelf instruction model. A share of the answer traces uses the
no-distillation prompt (answer line only), the answer style of the Mem0 baseline.

The paper starts from pretrained LLMs; the demo's backbone starts from random weights, and a
randomly initialised model learns the traces' format and frequent names long before it learns to
copy from its prompt. Three kinds of extra rows are therefore available (sizes in
``experiments.cpu_demo.settings``): "full-text" rows (an empty prompt and the whole rendered trace
as the
target, so every token is in the loss; off by default: at lr 3e-3 the warm start copied better
without them), manager copy rows and answer copy rows over random words (``manager_copy_rows``,
``answer_copy_rows``: they can only be learned by copying; the manager ones are on by default),
and the copy warm-up's rows (``copy_rows``). docs/demo.md has what each measured.
"""

from __future__ import annotations

import collections
import json
import os
import random
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from experiments.cpu_demo.answer_teacher import CarelessAnswerTeacher
from experiments.cpu_demo.teacher import MemZeroLikeTeacher
from memr1.atomic import atomic_file
from memr1.env.answer_io import format_answer_output, render_answer_input
from memr1.env.manager_io import ADD, ManagerOp, format_manager_output, render_manager_input
from memr1.env.prompts import to_prompt_text
from memr1.tuples.schema import AnswerTuple, ManagerTuple

MONTHS = (
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December",
)  # fmt: skip


def manager_rows(
    tuples: Iterable[ManagerTuple], teacher: MemZeroLikeTeacher, style: str
) -> tuple[list[dict[str, Any]], collections.Counter]:
    """One row per manager tuple: the teacher's ops for the turn, formatted as the reply.

    Returns:
      (rows, counts of the op mixes the teacher chose, e.g. "DELETE+ADD").
    """
    rows, mix = [], collections.Counter()
    for t in tuples:
        messages, id_map = t.manager_input(style=style)
        ops = teacher(list(t.facts), list(t.retrieved))
        mix["+".join(op.kind for op in ops) or "NOOP"] += 1
        rows.append(
            {"messages": messages, "target": format_manager_output(ops, id_map, style=style)}
        )
    return rows, mix


def answer_rows(
    tuples: Sequence[AnswerTuple],
    teacher: CarelessAnswerTeacher,
    style: str,
    *,
    direct_fraction: float,
    seed: int,
) -> list[dict[str, Any]]:
    """One row per answer tuple with distillation, plus ``direct_fraction`` of them without."""
    rows = []
    for t in tuples:
        memories = t.memories_by_speaker()
        rows.append(
            {
                "messages": t.answer_input(distill=True, style=style),
                "target": teacher.reply(t.question, memories, distill=True),
            }
        )
    picked = random.Random(seed).sample(range(len(tuples)), int(direct_fraction * len(tuples)))
    for i in sorted(picked):
        t = tuples[i]
        rows.append(
            {
                "messages": t.answer_input(distill=False, style=style),
                "target": teacher.reply(t.question, t.memories_by_speaker(), distill=False),
            }
        )
    return rows


def full_text_rows(rows: Sequence[dict[str, Any]], fraction: float, seed: int) -> list[dict]:
    """``fraction`` of ``rows`` as language-modelling rows: no prompt, the whole trace as target."""
    picked = random.Random(seed).sample(range(len(rows)), int(fraction * len(rows)))
    out = []
    for i in sorted(picked):
        text = to_prompt_text(rows[i]["messages"]) + rows[i]["target"]
        out.append({"messages": [], "target": text})
    return out


def write_jsonl(path: str | os.PathLike, rows: Iterable[dict[str, Any]]) -> Path:
    """Writes rows as JSONL under a temporary name, then renames it into place."""
    path = Path(path)
    with atomic_file(path) as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def single_token_words(texts: Iterable[str], tokenizer: Any) -> list[str]:
    """The words of ``texts`` that ``tokenizer`` encodes as one token, alone and after a space."""
    words = sorted({w for text in texts for w in text.split() if w.isalpha()})
    one = [
        w
        for w in words
        if all(len(tokenizer.encode(x, add_special_tokens=False)) == 1 for x in (w, " " + w))
    ]
    if not one:
        raise ValueError("single_token_words: no word of the texts is a single token")
    return one


def copy_rows(words: Sequence[str], n_rows: int, lengths: tuple[int, int], seed: int) -> list[dict]:
    """Copy-task rows: the user turn is a random sequence of the corpus words, the reply repeats it.

    A randomly initialised model learns the format and the word frequencies of the traces long
    before it learns to look things up in its prompt: after 1,500 SFT steps on the traces alone
    the tiny model wrote "Nadia's favorite food is pizza." for every fact, its prediction of the
    name unchanged whatever name the prompt held. A random sequence can only be predicted by
    copying it, so a few hundred steps on these rows form the attention circuits that copy
    (induction heads); the SFT on the traces then starts from a model that can read its prompt.
    """
    if not words:
        raise ValueError("copy_rows: no words to copy")
    rng = random.Random(seed)
    rows = []
    for _ in range(n_rows):
        sequence = " ".join(rng.choices(words, k=rng.randint(*lengths)))
        # Plain rows: the listed-and-quoted variant ("- w1 w2" -> '"w1 w2"', as a fact is listed
        # and then quoted in the manager's JSON) showed no phase change in 600 steps where these
        # did at 300-450 (docs/demo.md, items 5, 7 and 9).
        rows.append({"messages": [{"role": "user", "content": sequence}], "target": sequence})
    return rows


def manager_copy_rows(
    words: Sequence[str],
    n_rows: int,
    lengths: tuple[int, int],
    seed: int,
    style: str,
    repeat_fraction: float = 0.0,
) -> list[dict]:
    """Manager rows whose fact and shown memories are random sequences of ``words``, the reply
    the ADD of the fact, rendered by the manager's own renderer and formatter; in
    ``repeat_fraction`` of the rows one shown memory is the fact itself, and the reply is NONE
    (the empty op list).

    Trained on the traces alone, the tiny manager writes the format and the training prior ("Jon
    lives in Austin." for "Sam lives in Chicago."): its copy probe (experiments/cpu_demo/probe.py)
    stays at chance however names are renamed. A random fact can only be stored by copying it from
    the Facts line into the JSON reply, past the ids and the memories above it; mixed into the warm
    start, these rows raised the probe from 0.19 to 0.68 (docs/demo.md, item 16). The repeat rows
    were meant to teach the other half of reading the prompt, whether the fact is stored already (a
    random fact gives that away only by comparison with every shown memory); measured, the warm
    start instead stopped replying NONE almost anywhere (item 40), so the demo leaves them off.
    """
    if not words:
        raise ValueError("manager_copy_rows: no words to copy")
    if not 0.0 <= repeat_fraction <= 1.0:
        raise ValueError(f"manager_copy_rows: repeat_fraction {repeat_fraction} is not in [0, 1]")
    rng = random.Random(seed)

    def sentence() -> str:
        return " ".join(rng.choices(words, k=rng.randint(*lengths))) + "."

    drawn = []
    for _ in range(n_rows):
        fact = sentence()
        drawn.append((fact, [sentence() for _ in range(rng.randint(0, 3))]))
    # Repeats are drawn from a stream of their own, so that repeat_fraction 0 gives the rows of
    # the ADD-only version exactly; a repeat needs a memory to stand in for, at least one shown.
    pick = random.Random(f"repeat-{seed}")
    can = [i for i, (_, shown) in enumerate(drawn) if shown]
    repeats = set(pick.sample(can, min(len(can), round(repeat_fraction * n_rows))))
    rows = []
    for i, (fact, texts) in enumerate(drawn):
        ops = [ManagerOp(ADD, text=fact)]
        if i in repeats:
            texts[pick.randrange(len(texts))] = fact
            ops = []
        messages, id_map = render_manager_input([fact], list(enumerate(texts)), style=style)
        rows.append(
            {"messages": messages, "target": format_manager_output(ops, id_map, style=style)}
        )
    return rows


def answer_copy_rows(
    words: Sequence[str], n_rows: int, lengths: tuple[int, int], seed: int, style: str
) -> list[dict]:
    """Answer rows of an associative-recall task over random word memories, rendered by the
    Answer Agent's own renderer and formatter.

    Two speakers (capitalised words) get two memories each, "<Speaker> w1 w2 ... wn." with random
    timestamps; the question names one speaker and a word that occurs in exactly one memory ("What
    did Kalo say after rabbit?"); the reply distils that memory verbatim and answers with the word
    that follows. The traces alone teach the reply's format and the training prior, not reading
    ("Andrew's favorite food is curry." distilled from "Andrew's favorite food is dumplings.");
    a random memory can only be found by matching the question against the prompt and written by
    copying it (docs/demo.md, item 17).
    """
    capitals = [w for w in words if w[:1].isupper()]
    plain = [w for w in words if w.islower()]
    if len(capitals) < 2 or len(plain) < 2:
        raise ValueError("answer_copy_rows: needs two capitalised and two lower-case words")
    rng = random.Random(seed)
    rows: list[dict] = []
    while len(rows) < n_rows:
        speakers = rng.sample(capitals, 2)
        memories = {
            name: [
                (
                    _random_timestamp(rng),
                    f"{name} {' '.join(rng.choices(plain, k=rng.randint(*lengths)))}.",
                )
                for _ in range(2)
            ]
            for name in speakers
        }
        owned = [(name, text) for name in speakers for _, text in memories[name]]
        name, text = rng.choice(owned)
        body = text.rstrip(".").split()[1:]
        every_word = [w for _, other in owned for w in other.rstrip(".").split()]
        unique = [i for i, w in enumerate(body[:-1]) if every_word.count(w) == 1]
        if not unique:
            continue
        i = rng.choice(unique)
        question = f"What did {name} say after {body[i]}?"
        rows.append(
            {
                "messages": render_answer_input(question, memories, distill=True, style=style),
                "target": format_answer_output([text], body[i + 1]),
            }
        )
    return rows


def _random_timestamp(rng: random.Random) -> str:
    """A session timestamp in LoCoMo's form ("9:05 am on 8 May, 2023")."""
    month = rng.choice(MONTHS)
    hour, minute, half = rng.randint(1, 12), rng.randint(0, 59), rng.choice(("am", "pm"))
    return f"{hour}:{minute:02d} {half} on {rng.randint(1, 28)} {month}, {rng.choice((2022, 2023))}"


def target_words(rows: Iterable[dict[str, Any]]) -> list[str]:
    """The distinct alphabetic words of the rows' targets, sorted."""
    return sorted({w for row in rows for w in re.findall(r"[A-Za-z]+", row["target"])})


def trace_texts(rows: Iterable[dict[str, Any]]) -> list[str]:
    """Prompt and target texts of rows (what the tokenizer should learn to cut well)."""
    out = []
    for row in rows:
        out.append(to_prompt_text(row["messages"]))
        out.append(row["target"])
    return out
