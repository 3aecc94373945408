"""The CPU demo: Memory-R1's recipe in miniature (``python -m experiments.cpu_demo``; see
docs/demo.md).

settings       sizes of the demo's synthloco world, of its models and of every stage
sentences      reading synthloco facts, memories and questions back into structure
teacher        the Mem0-like Memory Manager teacher (imperfect by design)
answer_teacher the careless Answer Agent teacher (imperfect by design)
traces         the SFT warm start's JSONL rows from the teachers' replies (+ copy warm-up rows)
augment        entity renaming of trace rows (copying becomes the only way to be right)
run            one seed, stage by stage, through the train and evaluate entry points
commands       the config overrides per stage and the train subprocess
report, plots  results.md and the figures, read from the runs' own files
"""
