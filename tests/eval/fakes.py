"""Test doubles for judge backends (deterministic, no model, no network)."""

from __future__ import annotations

import re


class KeywordJudgeBackend:
    """Answers a LoCoMo judge prompt by checking whether the gold answer's words all appear.

    It reads the gold and generated answers back out of the prompt, so a test also checks that
    the prompt carries them. ``replies`` overrides the reply for a given call index.
    """

    def __init__(self, replies: dict[int, str] | None = None):
        self.replies = dict(replies or {})
        self.prompts: list[str] = []

    def complete(self, prompts: list[str]) -> list[str]:
        out = []
        for prompt in prompts:
            index = len(self.prompts)
            self.prompts.append(prompt)
            if index in self.replies:
                out.append(self.replies[index])
                continue
            gold = re.search(r"Gold answer: (.*)", prompt).group(1).lower().split()
            answer = re.search(r"Generated answer: (.*)", prompt).group(1).lower()
            label = "CORRECT" if all(w in answer for w in gold) else "WRONG"
            out.append(f'The answers are compared word by word.\n{{"label": "{label}"}}')
        return out


class ScriptedBackend:
    """Returns fixed replies in order and records the prompts it was given."""

    def __init__(self, replies: list[str]):
        self.replies = list(replies)
        self.prompts: list[str] = []

    def complete(self, prompts: list[str]) -> list[str]:
        start = len(self.prompts)
        self.prompts.extend(prompts)
        return self.replies[start : start + len(prompts)]
