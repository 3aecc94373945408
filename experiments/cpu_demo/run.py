"""One seed of the demo, stage by stage, through the same functions a user calls.

  data       synthloco world of the seed: train / validation / test conversations + gold ops
  tuples     the train split's banks, built turn by turn by the Mem0-like manager teacher
  careful_tuples  the same banks built by the careful manager (teacher.CAREFUL): lists merged,
             values replaced, cancelled plans deleted
  traces     SFT rows: the manager teacher's ops, the answer teacher's replies on the banks of
             ``banks.answer``, manager copy rows and answer reading rows (read_rows.py)
  tokenizer  byte-level BPE on the train split's text (train_bpe_tokenizer), HF format
  base       the tiny backbone, randomly initialised (and copy-pretrained with pretrain.steps
             > 0: pretrain.py), exported as an HF checkpoint
  sft        one policy warm-started on both agents' traces (memr1.train.train, algo=sft)
  rl_tuples  both RL stages' states: the answer tuples of ``banks.answer`` plus entity-renamed
             copies of them, and the manager tuples of ``banks.manager``
  rl_answer  GRPO (or PPO) of the Answer Agent from the warm start, reward = EM
  rl_manager GRPO (or PPO) of the manager from the warm start, reward = EM of the FROZEN
             RL-trained Answer Agent over the bank each sampled output produces
  eval/*     memr1.evaluate.evaluate of the four systems on the held-out split

Every stage writes into its own folder of the seed's directory and is skipped when its output is
already there, so an interrupted demo picks up where it stopped (training resumes from its last
Orbax checkpoint). Every folder records the settings it was built with, those of the stages
it starts from or reads included, and is reused or resumed only under the same ones
(seed_tuples.check_built_with: a ValueError otherwise, the folder left as it is; an evaluation
is run again instead: checkpoints.py). Wall time per stage goes to ``timings.json``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_collections

from experiments.cpu_demo import augment, checkpoints, read_rows, sft_data, traces
from experiments.cpu_demo.commands import config_flags, load_config, run_module, stage_overrides
from experiments.cpu_demo.config import synth_config
from experiments.cpu_demo.seed_tuples import SeedTuples, check_built_with, record_build
from experiments.cpu_demo.teacher import MemZeroLikeTeacher
from memr1.data.synthloco import generate as synth
from memr1.train.checkpoint import COMMIT_MARKER

SYSTEMS = ("locomo_rag", "mem0", "memory_sft", "sft_manager_rl_answer", "memory_r1")
# The trained systems: memr1.evaluate's system and the stages whose checkpoints are the manager
# and the Answer Agent. sft_manager_rl_answer is the ablation that isolates the manager stage:
# memory_r1's RL Answer Agent on the banks of the SFT manager.
TRAINED = {
    "memory_sft": ("memory_sft", "sft", "sft"),
    "sft_manager_rl_answer": ("memory_r1", "sft", "rl_answer"),
    "memory_r1": ("memory_r1", "rl_manager", "rl_answer"),
}
PRESET_NAME = "experiments.cpu_demo"


class SeedRun(SeedTuples):
    """The folders and stages of one seed (see the module docstring).

    Args:
      config: the demo's config (experiments/cpu_demo/config.py).
      seed: the seed of the synthloco world, the teachers and every stage.
      root: the seed's folder.
      algo: the RL algorithm of both RL stages, "grpo" or "ppo".
      log: prints a progress line.
    """

    def __init__(self, config: ml_collections.ConfigDict, seed: int, root: Path, *, algo: str, log):
        self.c, self.seed, self.root, self.algo = config, int(seed), Path(root), algo
        self.log: Callable[[str], None] = log
        self.timings: dict[str, float] = {}
        self.data = self.root / "data"
        self.tuples = self.root / "tuples"
        self.careful_tuples = self.root / "careful_tuples"
        self.rl_tuples = self.root / "rl_tuples"
        self.val_tuples = self.root / "val_tuples"
        self.sft_data = self.root / "traces" / "sft.jsonl"
        self.tokenizer = self.root / "tokenizer"
        self.base = self.root / "base"
        self.sft = self.root / "sft"
        self.sft_export = self.root / "sft_hf"
        self.rl_answer = self.root / f"answer_{algo}"
        self.rl_manager = self.root / f"manager_{algo}"
        self.trace_mix: dict[str, int] = {}
        self._encoder = None

    # -- helpers -----------------------------------------------------------------------------

    def _timed(self, name: str, fn: Callable[[], Any]) -> Any:
        start = time.perf_counter()
        self.log(f"[seed {self.seed}] {name} ...")
        out = fn()
        self.timings[name] = round(time.perf_counter() - start, 1)
        self.log(f"[seed {self.seed}] {name} done in {self.timings[name]:.0f} s")
        return out

    # -- stages ------------------------------------------------------------------------------

    def make_data(self) -> None:
        world = synth_config(self.c, self.seed)
        if (self.data / "metadata.json").is_file():  # reused only if generated as configured
            check_built_with(self.data, dataclasses.asdict(world), entry="config")
            return
        dataset = synth.generate_dataset(world)
        synth.write_dataset(dataset, self.data, preset=PRESET_NAME)

    def make_traces(self) -> None:
        """The warm start's rows: both teachers' replies on the train tuples (the answer teacher's
        on the banks of ``config.banks.answer``), a share of them with their entities renamed,
        the manager copy rows and the answer reading rows (traces.py, augment.py, read_rows.py)."""
        from memr1.tuples import read_tuples

        mix_file = self.sft_data.with_name("manager_mix.json")
        settings = self.trace_settings()
        if self.sft_data.is_file() and mix_file.is_file():
            check_built_with(self.sft_data.parent, settings)
            self.trace_mix = json.loads(mix_file.read_text())
            return
        t = self.c.traces
        turns = read_tuples(self.tuples, "manager")
        manager, mix = traces.manager_rows(
            turns,
            MemZeroLikeTeacher(self.seed),
            self.c.style,
            draws=t.draws_per_turn,
            op_first=t.op_first,
        )
        answer = traces.answer_rows(
            self.answer_tuples(),
            self.answer_teacher(),
            self.c.style,
            direct_fraction=t.direct_fraction,
            seed=self.seed,
        )
        lists = augment.entity_lists(synth_config(self.c, self.seed))
        self.trace_mix = dict(mix.most_common())
        rows = augment.augment_rows(manager + answer, lists, t.rename_fraction, self.seed)
        rows = traces.weigh_events(rows, t.event_weight)  # not the copy rows
        words = traces.target_words(manager + answer)
        rows += traces.manager_copy_rows(
            words,
            t.manager_copy_rows,
            t.copy_row_words,
            self.seed,
            self.c.style,
            op_first=t.op_first,
        )
        k = self.c.memory.k_per_speaker
        rows += read_rows.answer_read_rows(
            words, t.answer_read_rows, k, self.seed + 2, self.c.style
        )
        traces.write_jsonl(self.sft_data, rows)
        record_build(self.sft_data.parent, settings)
        mix_file.write_text(json.dumps(self.trace_mix, indent=1) + "\n")  # the last: "done"

    def trace_settings(self) -> dict:
        """Everything the traces are a function of besides the seed and the tuples: what a
        reused traces folder must have been built with (seed_tuples.check_built_with)."""
        t = self.c.traces.to_dict()
        if t["event_weight"] == 1.0:  # no spans: the rows of a build from before the key
            del t["event_weight"]
        return {
            "traces": t,
            "style": self.c.style,
            "answer_teacher": self.c.answer_teacher.to_dict(),
            "answer_banks": self.c.banks.answer,
            **self.bank_settings(),  # the tuples the rows are written from
        }

    def sft_settings(self) -> dict:
        """What a reused (or resumed) SFT folder must have been trained with: the sft section
        and the traces it read, by content."""
        digest = self.tokenizer_settings()["traces_sha256"]
        return {"sft": self.c.sft.to_dict(), "traces_sha256": digest, **self.base_settings()}

    def tokenizer_settings(self) -> dict:
        """What a reused tokenizer was trained with: its size and the traces it read."""
        digest = hashlib.sha256(self.sft_data.read_bytes()).hexdigest()
        return {"vocab_size": self.c.vocab_size, "traces_sha256": digest}

    def trace_texts(self) -> list[str]:
        """Prompt and target texts of the written SFT traces."""
        with open(self.sft_data, encoding="utf-8") as f:
            return traces.trace_texts(json.loads(line) for line in f)

    def make_tokenizer(self) -> None:
        from memr1.models.tokenizer_train import train_bpe_tokenizer

        settings = self.tokenizer_settings()
        if (self.tokenizer / "tokenizer.json").is_file():
            check_built_with(self.tokenizer, settings)
            return
        texts = [t.text for c in self.conversations("train") for t in c.iter_turns()]
        texts += self.trace_texts()
        train_bpe_tokenizer(texts, self.tokenizer, vocab_size=self.c.vocab_size)
        record_build(self.tokenizer, settings)

    def make_base(self) -> None:
        """The tiny backbone with a vocabulary cut to the tokenizer's, randomly initialised and,
        with pretrain.steps > 0, copy-pretrained (pretrain.py), as an HF checkpoint."""
        from experiments.cpu_demo import pretrain
        from memr1.models import config as model_config
        from memr1.models import transformer
        from memr1.models.hf_export import export_hf
        from memr1.models.tokenizer import load_tokenizer

        settings = self.base_settings()
        if (self.base / "config.json").is_file():
            check_built_with(self.base, settings)
            return
        tok = load_tokenizer(self.tokenizer)
        vocab = -(-len(tok) // 128) * 128
        cfg = model_config.get_size("tiny", vocab_size=vocab)
        _, params = transformer.init_model(cfg, seed=self.seed)
        history = None
        if "pretrain" in settings:
            params, history = pretrain.pretrain(
                cfg, params, self.c.pretrain, **sft_data.copy_task(self.c, tok), seed=self.seed,
                log=lambda line: self.log(f"[seed {self.seed}] {line}"),
            )  # fmt: skip
        export_hf(cfg, params, self.base, tokenizer_dir=self.tokenizer, overwrite=True)
        if history is not None:
            (self.base / "pretrain.json").write_text(json.dumps(history, indent=1) + "\n")
        record_build(self.base, settings)

    def base_settings(self) -> dict:
        """What a reused base folder must have been built with: its tokenizer's settings and
        the pretrain section (none when pretraining is off: a random init is a function of the
        seed and the vocabulary alone)."""
        p = self.c.pretrain.to_dict()
        pretrain = {"pretrain": p} if p["steps"] > 0 else {}
        return {"tokenizer": self.tokenizer_settings(), **pretrain}

    def train_sft(self) -> None:
        from memr1.env import load
        from memr1.models import hf_export
        from memr1.train.checkpoint import restore_params

        settings = self.sft_settings()
        checkpoints.check_stage(self.sft, settings)  # reused or resumed: as configured
        overrides = stage_overrides(self.c, self.seed, stage="sft")
        data = sft_data.rehearsed(self.c, self.seed, self.sft_data, self.base, self.sft)
        overrides["train.sft_length"] = sft_data.longest_row(data, self.base)
        self._train("stage=answer,algo=sft,runlocal", overrides, self.sft, sft_data=data)
        if not checkpoints.built_with(self.sft_export, settings):
            # The warm start as a plain HF checkpoint: the "base model" the prompted baselines
            # (LoCoMo-RAG, Mem0) run on; exported again after SFT under other settings.
            backbone = load.load_backbone(hf_dir=str(self.base))
            params = restore_params(self.sft / "checkpoints", backbone.params)
            hf_export.export_hf(
                backbone.cfg, params, self.sft_export, tokenizer_dir=self.base, overwrite=True
            )
            record_build(self.sft_export, settings)

    def train_answer(self) -> None:
        overrides = stage_overrides(self.c, self.seed, stage="answer", algo=self.algo)
        arg = f"stage=answer,algo={self.algo},runlocal"
        checkpoints.check_stage(self.rl_answer, self.stage_settings("answer"))
        self._train(arg, overrides, self.rl_answer, init=self.sft)

    def train_manager(self) -> None:
        overrides = stage_overrides(self.c, self.seed, stage="manager", algo=self.algo)
        arg = f"stage=manager,algo={self.algo},runlocal"
        checkpoints.check_stage(self.rl_manager, self.stage_settings("manager"))
        self._train(arg, overrides, self.rl_manager, init=self.sft, answer=self.rl_answer)

    def stage_settings(self, stage: str) -> dict:
        """What an RL stage ("answer" or "manager") is trained with: its command's config
        fields and the settings of what it starts from and reads (the warm start, the states;
        the manager stage: the Answer Agent and which of its checkpoints rewards it)."""
        command = stage_overrides(self.c, self.seed, stage=stage, algo=self.algo)
        settings = {"algo": self.algo, "command": command}
        if stage == "answer":
            return {**settings, "sft": self.sft_settings(), "states": self.rl_tuple_settings()}
        answer = {"stage": self.stage_settings("answer"), "checkpoint": self.c.answer.checkpoint}
        return {**settings, "answer": answer}

    def _train(self, arg, overrides, workdir: Path, *, sft_data=None, init=None, answer=None):
        """``python -m memr1.train`` for one stage (it resumes from its own checkpoints).

        A stage whose last step is already saved is not started again at all.
        """
        last = workdir / "checkpoints" / str(overrides["train.steps"]) / COMMIT_MARKER
        if last.is_file():
            return
        args = config_flags(arg, overrides)
        args += [f"--workdir={workdir}", f"--hf_dir={self.base}"]
        if sft_data is not None:
            args.append(f"--sft_data={sft_data}")
        else:  # both RL stages read their states from rl_tuples, validate on val_tuples
            args += [f"--tuples={self.rl_tuples}", f"--val_tuples={self.val_tuples}"]
        if init is not None:
            args.append(f"--init_checkpoint={self.checkpoint_of(init)}")
        if answer is not None:
            args.append(f"--answer_checkpoint={self.checkpoint_of(answer)}")
        run_module("memr1.train", args, self.log)

    def evaluate(self, system: str, split: str) -> dict:
        """memr1.evaluate.evaluate of one system. Its folder records what it read (the
        settings of the stages whose checkpoints it loads, and which checkpoints); its
        results.json is reused only under the same record, else the system is evaluated again.

        Evaluation runs in this process (unlike training): the four systems then share one
        Python start-up and one compilation cache.
        """
        from memr1.evaluate import evaluate

        out = self.root / "eval" / split / system
        name, *stages = TRAINED.get(system, (system, None, None))
        overrides = stage_overrides(self.c, self.seed, stage="eval")
        record = {"system": name, "command": overrides, "sft": self.sft_settings()}
        for role, stage in zip(("manager", "answer"), stages):
            if stage is not None and stage != "sft":  # an RL stage: its settings and pick
                pick = self.c[role].checkpoint
                record[role] = {"stage": self.stage_settings(role), "checkpoint": pick}
        if (out / "results.json").is_file():
            if checkpoints.built_with(out, record):
                return json.loads((out / "results.json").read_text())
            self.log(f"[seed {self.seed}] {out}: read other stages or settings; evaluating again")
        manager, answer = (s and self.checkpoint_of(getattr(self, s)) for s in stages)
        overrides["data.path"] = str(self.data / f"{split}.json")
        overrides["data.gold_ops"] = str(self.data / "gold_ops.json")
        config = load_config(f"system={name},dataset=synthloco,runlocal", overrides)
        results = evaluate(
            config,
            hf_dir=str(self.sft_export),
            manager_ckpt=manager,
            answer_ckpt=answer,
            embed_dir=None,
            workdir=str(out),
            overwrite=True,
        )
        record_build(out, record)
        return results

    def checkpoint_of(self, stage: Path) -> str:
        """The checkpoint of a stage that the later stages and the evaluation read: SFT's
        latest step, an RL stage's as its config's ``checkpoint`` says (checkpoints.spec)."""
        name = {self.rl_answer: "answer", self.rl_manager: "manager"}.get(stage)
        if name is None:
            return str(stage / "checkpoints")
        return checkpoints.spec(stage, self.c[name].checkpoint, f"config.{name}.checkpoint")

    # -- all of it -----------------------------------------------------------------------------

    def run(self, split: str = "test") -> dict:
        """Runs every stage; returns the seed's summary (results per system, timings)."""
        start = time.perf_counter()
        self._timed("data", self.make_data)
        self._timed("tuples", self.make_tuples)
        if self.careful_tuples in self.bank_dirs("answer") + self.bank_dirs("manager"):
            self._timed("careful_tuples", self.make_careful_tuples)
        self._timed("traces", self.make_traces)
        self._timed("tokenizer", self.make_tokenizer)
        self._timed("base", self.make_base)
        self._timed("sft", self.train_sft)
        self._timed("rl_tuples", self.make_rl_tuples)
        self._timed("val_tuples", self.make_val_tuples)
        self._timed(f"answer_{self.algo}", self.train_answer)
        self._timed(f"manager_{self.algo}", self.train_manager)
        results = {}
        for system in SYSTEMS:
            job = lambda system=system: self.evaluate(system, split)
            results[system] = self._timed(f"eval_{system}", job)
        self.timings["total"] = round(time.perf_counter() - start, 1)
        summary = {
            "seed": self.seed,
            "algo": self.algo,
            "split": split,
            "timings_s": self.timings,
            "trace_manager_mix": self.trace_mix,
            "results": results,
            "validation": {
                "answer": checkpoints.best_record(self.rl_answer),
                "manager": checkpoints.best_record(self.rl_manager),
            },
        }
        (self.root / "timings.json").write_text(json.dumps(self.timings, indent=1) + "\n")
        return summary


def check_seed_dir(seed_dir: Path, needed: tuple[str, ...], seed: int | None = None) -> int:
    """The seed of a finished demo seed folder, for tools that read one; ValueError if unusable.

    ``needed`` are files (relative to the folder) the tool reads; the seed comes from ``seed``
    or else from the folder's name (``seed-N``).
    """
    for rel in needed:
        if not (seed_dir / rel).is_file():
            raise ValueError(f"{seed_dir}: no {rel} (run `make demo` first, or point at a seed)")
    if seed is not None:
        return seed
    try:
        return int(seed_dir.name.rsplit("-", 1)[1])
    except (IndexError, ValueError):
        raise ValueError(f"{seed_dir}: cannot read the seed from the name; pass --seed") from None
