"""The tuple stages of one demo seed (`run.SeedRun` inherits them): the synthloco splits'
conversations, the banks the manager teachers build turn by turn, and the RL stages' train and
validation states built on the banks that ``config.banks`` names."""

from __future__ import annotations

import json
from pathlib import Path

from experiments.cpu_demo import augment
from experiments.cpu_demo.answer_teacher import CarelessAnswerTeacher
from experiments.cpu_demo.commands import load_config
from experiments.cpu_demo.config import synth_config
from experiments.cpu_demo.teacher import CAREFUL, MemZeroLikeTeacher
from memr1.atomic import write_json_atomic
from memr1.data.split import split_conversations

BANKS = ("teacher", "careful")  # whose banks a stage's states are built on (config.banks)


class SeedTuples:
    """Needs `c` (the demo config), `seed`, `data`, `tuples`, `careful_tuples`, `rl_tuples`,
    `val_tuples` and `_encoder` (None until first used), as `SeedRun` sets them."""

    def encoder(self):
        if self._encoder is None:
            from memr1.embed import Encoder

            self._encoder = Encoder.from_dir()
        return self._encoder

    def conversations(self, split: str):
        from memr1.data.locomo import load_locomo

        loaded = load_locomo(self.data / f"{split}.json", source="synthloco")
        return list(split_conversations(loaded, (1,), names=("all",))["all"])

    def bank_dirs(self, which: str) -> list[Path]:
        """The tuple folders of ``config.banks.<which>`` ("answer" or "manager")."""
        names = self.c.banks[which]
        names = (names,) if isinstance(names, str) else tuple(names)
        if not names or any(n not in BANKS for n in names):
            raise ValueError(f"config.banks.{which}: expected names from {BANKS}, got {names!r}")
        return [{"teacher": self.tuples, "careful": self.careful_tuples}[n] for n in names]

    def teacher_tuples(self, split: str, teacher: MemZeroLikeTeacher | None = None):
        """The manager and answer tuples of a split, its banks built by ``teacher`` (the
        Mem0-like manager teacher by default)."""
        from memr1.tuples.build import TupleConfig, build_tuples

        enc = self.encoder()
        overrides = {
            "tuples.builder": "teacher",
            "tuples.window": -1,
            "tuples.only_with_qa": False,
            "memory.k_per_fact": self.c.memory.k_per_fact,
            "memory.k_per_speaker": self.c.memory.k_per_speaker,
            "memory.capacity": self.c.memory.capacity,
        }
        cfg = TupleConfig.from_config(load_config("dataset=synthloco,runlocal", overrides))
        return build_tuples(
            self.conversations(split),
            embed=enc.encode,
            dim=enc.dim,
            cfg=cfg,
            teacher=MemZeroLikeTeacher(self.seed) if teacher is None else teacher,
        )

    def answer_teacher(self) -> CarelessAnswerTeacher:
        t = self.c.answer_teacher
        return CarelessAnswerTeacher(
            self.seed, t.stale_bias, t.person_blind, t.hedge, careful_kinds=t.careful_kinds
        )

    def bank_settings(self) -> dict:
        """What every tuple folder is a function of besides the seed and the world: the
        retrieval its manager prompts and answer states show (`teacher_tuples`)."""
        m = self.c.memory
        keys = ("k_per_fact", "k_per_speaker", "capacity")
        return {"memory": {k: m[k] for k in keys}}

    def make_tuples(self) -> None:
        """The train split's tuples on banks built by the Mem0-like manager teacher."""
        self._train_tuples(self.tuples, MemZeroLikeTeacher(self.seed), MemZeroLikeTeacher.name)

    def make_careful_tuples(self) -> None:
        """The train split's tuples on banks built by the careful manager (teacher.CAREFUL)."""
        careful = MemZeroLikeTeacher(self.seed, CAREFUL)
        self._train_tuples(self.careful_tuples, careful, "careful-rules")

    def _train_tuples(self, folder: Path, teacher: MemZeroLikeTeacher, name: str) -> None:
        """The train split's tuples on ``teacher``'s banks into ``folder``, recording the
        retrieval they show; a folder already there is reused only under the same one."""
        from memr1.tuples import write_tuples

        if (folder / "metadata.json").is_file():
            check_built_with(folder, self.bank_settings())
            return
        built = self.teacher_tuples("train", teacher)
        meta = {"teacher": name, "window": -1, "counts": built.counts, **self.bank_settings()}
        write_tuples(folder, built.manager, built.answer, meta, overwrite=True)

    def answer_tuples(self) -> list:
        """The answer tuples of every folder of ``config.banks.answer``, in order."""
        from memr1.tuples import read_tuples

        return [t for folder in self.bank_dirs("answer") for t in read_tuples(folder, "answer")]

    def rl_tuple_settings(self) -> dict:
        """What the RL stages' states are built with (make_rl_tuples)."""
        a = self.c.answer
        return {
            "renamed_copies": a.renamed_copies,
            "oversample_kinds": list(a.oversample_kinds),
            "oversample_copies": a.oversample_copies,
            "banks": self.c.banks.to_dict(),
            **self.bank_settings(),
        }

    def make_rl_tuples(self) -> None:
        """Both RL stages' states: the answer tuples plus renamed copies of them, and the
        manager tuples on the banks of ``config.banks.manager``."""
        from memr1.tuples import read_tuples, write_tuples

        a = self.c.answer
        settings = self.rl_tuple_settings()
        if (self.rl_tuples / "metadata.json").is_file():
            check_built_with(self.rl_tuples, settings)
            return
        manager_banks = self.bank_dirs("manager")
        if len(manager_banks) != 1:
            raise ValueError(f"config.banks.manager: name one kind of bank, got {manager_banks}")
        banks = manager_banks[0]
        lists = augment.entity_lists(synth_config(self.c, self.seed))
        originals = self.answer_tuples()
        answer = augment.renamed_answer_states(originals, lists, a.renamed_copies, self.seed + 7)
        answer += augment.oversampled_answer_states(
            originals, a.oversample_kinds, lists, a.oversample_copies, self.seed + 8
        )
        meta = {"answer_from": [str(d) for d in self.bank_dirs("answer")]}
        meta.update(manager_from=str(banks), **settings)
        write_tuples(self.rl_tuples, read_tuples(banks, "manager"), answer, meta, overwrite=True)

    def make_val_tuples(self) -> None:
        """The RL stages' validation states: the validation conversations' tuples, the answer
        tuples on the banks of ``config.banks.answer`` and the manager tuples on those of
        ``config.banks.manager``, as the train states are built (no renamed copies)."""
        from memr1.tuples import write_tuples

        names = {"answer": self.c.banks.answer, "manager": self.c.banks.manager}
        names = {k: (v,) if isinstance(v, str) else tuple(v) for k, v in names.items()}
        meta = {"split": "validation", "answer_from": names["answer"]}
        meta.update(manager_from=names["manager"][0], **self.bank_settings())
        if (self.val_tuples / "metadata.json").is_file():
            check_built_with(self.val_tuples, meta)
            return
        teachers = {"teacher": None, "careful": MemZeroLikeTeacher(self.seed, CAREFUL)}
        built = {
            n: self.teacher_tuples("validation", teachers[n])
            for n in dict.fromkeys(names["answer"] + names["manager"])
        }
        answer = [t for n in names["answer"] for t in built[n].answer]
        manager = built[names["manager"][0]].manager
        write_tuples(self.val_tuples, manager, answer, meta, overwrite=True)


def check_built_with(folder: Path, settings: dict, *, entry: str = "build") -> None:
    """A stage's folder is reused only if it was built with ``settings`` (its metadata's
    ``entry`` entries: "build" as `record_build` or `memr1.tuples.write_tuples` wrote them,
    "config" for a synthloco world): a run with other settings would otherwise train on data it
    did not ask for, silently.

    Raises:
      ValueError: naming the folder and each differing setting with both values, or saying that
        the folder holds no record of its settings (a folder from before they were recorded).
    """
    meta = folder / "metadata.json"
    if not meta.is_file():
        raise ValueError(
            f"{folder} holds no record of the settings it was built with ({meta.name} is "
            "missing): delete it or run with --fresh"
        )
    built = _flat(json.loads(meta.read_text()).get(entry, {}))
    want = _flat(json.loads(json.dumps(settings)))  # tuples compare as JSON's lists
    diff = [
        f"{k}: built {built.get(k, '(none)')!r}, config {v!r}"
        for k, v in want.items()
        if built.get(k, "(none)") != v
    ]
    if diff:
        raise ValueError(
            f"{folder} was built with other settings ({'; '.join(diff)}): delete it or run "
            "with --fresh"
        )


def record_build(folder: Path, settings: dict) -> None:
    """Writes ``settings`` as ``folder``'s metadata.json "build" entries (atomically), for
    `check_built_with` to compare a later run's settings against."""
    folder.mkdir(parents=True, exist_ok=True)
    write_json_atomic(folder / "metadata.json", {"build": json.loads(json.dumps(settings))})


def _flat(settings: dict, prefix: str = "") -> dict:
    """``settings`` with its nested sections' keys spelled out ("traces.draws_per_turn")."""
    out = {}
    for k, v in settings.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out
