"""Prompts and output parsers of the two agents (and of the fact extractor that feeds them).

prompts     every prompt template, in a "full" and a "compact" style, and chat rendering
jsonish     a forgiving, never-raising reader for the JSON that models write
facts_io    fact extraction: render the dialogue, parse the JSON list of facts
manager_io  Memory Manager: render memories under ids 0..k-1, parse the reply into validated ops
answer_io   Answer Agent: render memories by speaker, extract distilled memories and the answer

Every parser accepts any string and never raises; what it had to reject is counted, so a run can
report how often a policy breaks the format. Each ``format_*_output`` writes the reply a teacher
would give (for SFT data), and the matching parser reads it back unchanged.
"""

from memr1.agents.answer_io import (
    extract_distilled,
    extract_final_answer,
    format_answer_output,
    render_answer_input,
)
from memr1.agents.facts_io import ParsedFacts, format_facts_output, parse_facts, render_fact_input
from memr1.agents.manager_io import (
    ADD,
    COUNTER_KINDS,
    DELETE,
    NOOP,
    UPDATE,
    ManagerOp,
    ParsedOps,
    format_manager_output,
    parse_manager_output,
    render_manager_input,
)
from memr1.agents.prompts import ANSWER_MARKER, STYLES, get_template, to_prompt_text

__all__ = [
    "ADD",
    "ANSWER_MARKER",
    "COUNTER_KINDS",
    "DELETE",
    "NOOP",
    "STYLES",
    "UPDATE",
    "ManagerOp",
    "ParsedFacts",
    "ParsedOps",
    "extract_distilled",
    "extract_final_answer",
    "format_answer_output",
    "format_facts_output",
    "format_manager_output",
    "get_template",
    "parse_facts",
    "parse_manager_output",
    "render_answer_input",
    "render_fact_input",
    "render_manager_input",
    "to_prompt_text",
]
