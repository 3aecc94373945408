"""Scoring answers: harness metrics, LoCoMo's own scorer, LLM judges and result tables.

metrics           EM / F1 / BLEU-1 exactly as the Mem0 and A-Mem harness (what papers report)
locomo_scorer     the LoCoMo benchmark's own stemmed, per-category scorer
judge             the LoCoMo LLM judge (J): prompt, verdict parsing, batch scoring
judge_backends    where judge prompts go: an OpenAI-compatible HTTP server or any callable
longmemeval_judge LongMemEval's per-question-type yes/no judge and its summary
aggregate         per-category and overall tables under both category labellings
reward            the RL answer reward (train.reward): em, em_normalized, f1 or the judge's verdict
"""
