"""Feature specs and record-to-example conversion shared by every memr1 TFDS builder.

Two configs, one per granularity, because their examples have nothing in common:

* ``qa``: one example per question, keyed ``"<sample_id>/<qa index>"``. This is what training
  and evaluation iterate over.
* ``conversations``: one example per conversation, keyed by ``sample_id``, holding its sessions,
  turns and questions (questions without evidence: nested variable-length lists are left out, and
  the ``qa`` config has the evidence under the same sample id and index), and the whole record as
  JSON (``record``, see ``memr1.data.record_json``), which is what memr1 reads back.

Absent optional values are stored as ``""`` (text) so that every feature has a fixed type.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow_datasets as tfds

from memr1.data.record_json import conversation_to_json
from memr1.data.records import QA, Conversation

QA_CONFIG = "qa"
CONVERSATIONS_CONFIG = "conversations"

_text = tfds.features.Text


def qa_features() -> tfds.features.FeaturesDict:
    """Features of the ``qa`` config."""
    return tfds.features.FeaturesDict(
        {
            "sample_id": _text(doc="id of the conversation the question is about"),
            "qa_index": tfds.features.Scalar(np.int32, doc="position of the question in it"),
            "source": _text(doc="dataset name: locomo, synthloco, longmemeval, msc, ..."),
            "question": _text(),
            "answer": _text(doc="gold answer as text (LoCoMo category 5: the adversarial one)"),
            "adversarial_answer": _text(doc="LoCoMo category 5 only, else empty"),
            "category": tfds.features.Scalar(np.int32, doc="LoCoMo category 1-5, 0 elsewhere"),
            "question_type": _text(doc="LongMemEval / MSC question type, else empty"),
            "question_date": _text(doc="ISO date the question is asked, or empty"),
            "abstention": tfds.features.Scalar(np.bool_, doc="the history holds no answer"),
            "evidence": tfds.features.Sequence(_text(), doc="dia_ids of supporting turns"),
        }
    )


def conversation_features() -> tfds.features.FeaturesDict:
    """Features of the ``conversations`` config."""
    return tfds.features.FeaturesDict(
        {
            "sample_id": _text(),
            "source": _text(),
            "speaker_a": _text(),
            "speaker_b": _text(),
            "sessions": tfds.features.Sequence(
                {
                    "index": np.int32,
                    "date_time": _text(doc="ISO 8601, minutes"),
                    "date_time_raw": _text(doc="as written in the source file"),
                    "session_id": _text(doc="LongMemEval haystack id, else empty"),
                }
            ),
            "turns": tfds.features.Sequence(
                {
                    "speaker": _text(),
                    "dia_id": _text(),
                    "text": _text(),
                    "session": np.int32,
                    "image_caption": _text(doc="caption of a shared image, else empty"),
                }
            ),
            "qa": tfds.features.Sequence(
                {"question": _text(), "answer": _text(), "category": np.int32}
            ),
            "record": _text(doc="the whole Conversation as JSON (memr1.data.record_json)"),
        }
    )


def qa_example(conversation: Conversation, index: int, qa: QA) -> dict[str, Any]:
    """Returns the ``qa``-config example of question ``index`` of ``conversation``."""
    return {
        "sample_id": conversation.sample_id,
        "qa_index": index,
        "source": conversation.source,
        "question": qa.question,
        "answer": qa.answer,
        "adversarial_answer": qa.adversarial_answer or "",
        "category": qa.category,
        "question_type": qa.question_type or "",
        "question_date": "" if qa.question_date is None else qa.question_date.isoformat(),
        "abstention": qa.abstention,
        "evidence": list(qa.evidence),
    }


def conversation_example(conversation: Conversation) -> dict[str, Any]:
    """Returns the ``conversations``-config example of ``conversation``."""
    return {
        "sample_id": conversation.sample_id,
        "source": conversation.source,
        "speaker_a": conversation.speaker_a,
        "speaker_b": conversation.speaker_b,
        "sessions": [
            {
                "index": s.index,
                "date_time": s.date_time.isoformat(timespec="minutes"),
                "date_time_raw": s.date_time_raw,
                "session_id": s.session_id or "",
            }
            for s in conversation.sessions
        ],
        "turns": [
            {
                "speaker": t.speaker,
                "dia_id": t.dia_id,
                "text": t.text,
                "session": t.session,
                "image_caption": t.image_caption or "",
            }
            for t in conversation.iter_turns()
        ],
        "qa": [
            {"question": q.question, "answer": q.answer, "category": q.category}
            for q in conversation.qa
        ],
        "record": conversation_to_json(conversation),
    }
