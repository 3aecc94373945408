"""The reliability drill's pieces; `tools/fault_drill.py` runs them and prints the verdict.

workers.py  what runs inside the drill's subprocesses: the train CLI printing save and log
            markers, a loop of bank saves (`python -m memr1.drill.workers train|bank ...`)
child.py    the parent's side: a subprocess whose marker lines are collected as they arrive
checks.py   reading back what a killed run left: checkpoints, train states, metrics.jsonl
parts.py    the drill's four parts: training kills, bank kills, NaN/inf steps, bad settings
"""
