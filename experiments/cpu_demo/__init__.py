"""The CPU demo: Memory-R1's recipe in miniature (``python -m experiments.cpu_demo``; see
docs/demo.md).

config         the demo's config: its synthloco world, teachers, traces and every stage's size
sentences      reading synthloco facts, memories and questions back into structure
teacher        the Mem0-like Memory Manager teacher (imperfect by design) and the careful one
answer_teacher the careless Answer Agent teacher (imperfect by design)
traces         the SFT warm start's JSONL rows from the teachers' replies (+ manager copy rows)
read_rows      answer rows over random words that only reading the prompt can answer
augment        entity renaming of trace rows (copying becomes the only way to be right)
run            one seed, stage by stage, through the train and evaluate entry points
commands       the config overrides per stage and the train subprocess
report, plots  results.md and the figures, read from the runs' own files
probe          the reading probe of a policy (tools/copy_probe.py)
reward_probe   what the manager stage's reward can tell apart (tools/reward_probe.py)
"""
