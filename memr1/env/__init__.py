"""The agents' environment (the paper's Figure 2): both agents, what they read and what scores them.

Text in and out (no JAX):
  prompts       every prompt template ("full", "compact", "paper" styles), and chat rendering
  jsonish       a forgiving, never-raising reader for the JSON that models write
  facts_io      fact extraction: render the dialogue, parse the JSON list of facts
  manager_io    Memory Manager: render memories under ids 0..k-1, format target replies
  manager_read  Memory Manager: read a reply into validated ops (memr1's or Mem0's rules)
  answer_io     Answer Agent: render memories by speaker, extract distilled memories and answer
Running the agents:
  policy        TextPolicy: batched chat generation with a backbone (memr1.sampling)
  memory_store  a conversation's banks per speaker, their embeddings and retriever (BankView)
  facts         fact extraction over a conversation's turns
  ingest        the Memory Manager applying ADD / UPDATE / DELETE / NOOP turn by turn
  answer        the Answer Agent over banks (Algorithm 3), for evaluation and the manager reward
  manager_reward  the answer reward through a frozen Answer Agent over each candidate bank
  rollout       the RL states of both stages: sample G outputs per state and score them
  systems, setup, load, outputs, stats   the four evaluated systems and their results

Every parser accepts any string and never raises; what it had to reject is counted, so a run can
report how often a policy breaks the format.
"""

from memr1.env.answer_io import (
    extract_distilled,
    extract_final_answer,
    format_answer_output,
    render_answer_input,
)
from memr1.env.facts_io import ParsedFacts, format_facts_output, parse_facts, render_fact_input
from memr1.env.manager_io import (
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
from memr1.env.prompts import ANSWER_MARKER, STYLES, get_template, to_prompt_text

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
