"""Memory-R1 experiments: one backbone, one RL algorithm, one agent stage, one dataset.

  --config configs/memr1.py:backbone=qwen2.5-7b,algo=grpo,stage=manager,dataset=locomo
  --config configs/memr1.py:runlocal        (tiny model, one device, short rollouts: a laptop)

Keys of the arg string: backbone (a size in `memr1.models.config.SIZES`), algo (grpo | ppo |
sft), stage (manager | answer), dataset (synthloco | locomo | longmemeval | msc), system
(locomo_rag | mem0 | memory_r1 | memory_sft: what `memr1.evaluate` runs), recipe (default |
paper: the paper's training settings, `paper_recipe`) and runlocal.
The returned ConfigDict is locked: overriding a field that does not exist is an error.
"""

from __future__ import annotations

import ml_collections

from configs import base
from memr1.models.config import SIZES

CHOICES: dict[str, tuple[str, ...]] = {
    "backbone": tuple(SIZES),
    "algo": ("grpo", "ppo", "sft"),
    "stage": ("manager", "answer"),
    "dataset": ("synthloco", "locomo", "longmemeval", "msc"),
    "system": ("locomo_rag", "mem0", "memory_r1", "memory_sft"),
    "recipe": ("default", "paper"),
}
DEFAULTS: dict[str, object] = {
    "backbone": "tiny",
    "algo": "grpo",
    "stage": "manager",
    "dataset": "synthloco",
    "system": "memory_r1",
    "recipe": "default",
    "runlocal": False,
}
# The backbones of the paper's main tables and its scaling study.
SWEEP_BACKBONES = ("llama3.1-8b", "qwen2.5-3b", "qwen2.5-7b", "qwen2.5-14b")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """Returns the locked experiment config selected by `arg` ("key=value,...")."""
    v = base.parse_arg(arg, DEFAULTS)
    for key, allowed in CHOICES.items():
        if v[key] not in allowed:
            raise ValueError(f"config arg {key}={v[key]!r} is not one of {list(allowed)}")
    runlocal = bool(v["runlocal"])
    backbone = "tiny" if runlocal else str(v["backbone"])

    config = ml_collections.ConfigDict()
    config.algo = v["algo"]
    config.stage = v["stage"]
    config.seed = 0
    # The tiny backbone is for CPUs, where bfloat16 matmuls are slow and imprecise.
    small = backbone == "tiny"
    config.model = base.model_section(backbone, dtype="float32" if small else "bfloat16")
    config.hf_dir = base.hf_dir_field()
    config.mesh = base.mesh_section()
    # The memory pipeline and its evaluation (memr1.evaluate).
    config.system = v["system"]
    config.tokenizer_dir = base.hf_dir_field()
    config.data = base.data_section(str(v["dataset"]))
    config.memory = base.memory_section()
    config.agents = base.agents_section()
    config.engine = base.engine_section()
    config.judge = base.judge_section()
    config.tuples = base.tuples_section()
    config.train = base.train_section(str(v["stage"]), str(v["algo"]))
    if small:
        # Tiny models see short prompts: the compact prompt style and few memories.
        config.agents.style = "compact"
        config.agents.max_prompt_tokens = 1024
        config.memory.k_per_speaker = 5
        config.memory.fact_source = "observation"
    if v["recipe"] == "paper":
        paper_recipe(config)
    if runlocal:
        config.mesh = base.mesh_section(data=1, fsdp=1, tensor=1)
        # Short replies of a tiny model: each agent's one budget (training, reward, evaluation).
        config.agents.update(manager_max_new_tokens=48, answer_max_new_tokens=32)
        config.train.update(
            steps=20,
            batch_size=4,
            group_size=4,
            lr=1e-4,
            warmup_steps=2,
            sft_length=512,
            checkpoint_every=10,
        )
    config.lock()
    return config


def paper_recipe(config: ml_collections.ConfigDict) -> None:
    """Memory-R1's reported training settings (paper App. B; what it does not report, G and the
    KL beta, keep the defaults of `base.train_section`).

    Rollouts at temperature 1.0 of up to 2,048 new tokens after prompts of up to 4,096, 128
    prompts per update at actor lr 1e-6 (critic 1e-5), every device on the FSDP axis, and each
    block recomputed in the backward pass. The rollout engine's slots and pool are sized for
    8 devices of 80 GB (`tools/bench/rollout_engine.py`). Validation every 10 steps (greedy, on
    the validation split's tuples, conv-30 of LoCoMo: `--val_tuples`; the paper validates on
    that split but does not say how often). `micro_rows` sets the micro-batch from the mesh at
    run time (`memr1.train.mesh.micro_batch_count`): the paper ran 2 rows per GPU; here a GRPO
    row is one packed group (`train.shared_prompt`: a prompt and its G replies, ~3-6k tokens at
    answer-stage lengths), so 1 puts one group on each device per micro-batch. Sized in rows,
    not tokens as verl's `ppo_max_token_len_per_gpu` is: a jitted step needs fixed shapes. GRPO
    packs a step's groups in 2 width classes (`train.width_classes`,
    `batches.pack_step_classes`): the shorter half of the groups at its own bucketed width, the
    longer half at the step's longest, so fewer of the update's positions are padding while a
    run compiles a handful of update programs (docs/benchmarks.md measures both).

    The agents are the paper's (experiments/README.md, "The paper's agents"): its prompts
    (`agents.style="paper"`; the tiny backbone keeps the compact prompts its context holds), the
    manager shown no date and read as Mem0 reads it (every op in reply order, every ADD kept),
    and an LLM extractor fed two messages at a time, as Mem0 feeds LoCoMo (the tiny backbone's
    dataset facts stay per turn). The reward stays exact match (`train.reward`).
    """
    if config.model.size != "tiny":
        config.agents.style = "paper"
    config.agents.update(manager_date=False, repeated_id="in_order", adds_per_fact=0)
    if config.memory.fact_source == "llm":
        config.memory.extract_from = "pair"
    config.mesh.update(data=1, fsdp=-1, tensor=1)
    config.model.remat = True
    # One compiled block for the cache-free passes (update, reference, scoring), as MaxText's
    # `scan_layers` default: remat's recompute then runs one block an iteration, which no XLA
    # pass can hoist (XLA:CPU drops remat's barriers in an unrolled loop and keeps every block's
    # activations), and compile time does not grow with depth. It costs a stacked copy of the
    # block weights and its gradient inside the step (FSDP-sharded); decoding with a KV cache
    # keeps the layer loop (`memr1.models.transformer`), LoRA turns it off (`train.lora`).
    config.model.scan_layers = True
    config.agents.max_prompt_tokens = 4096
    # Both agents' one budget: their rollouts, validation, the manager stage's reward (the
    # frozen Answer Agent) and evaluation at this config all stop replies at 2,048 tokens.
    config.agents.update(manager_max_new_tokens=2048, answer_max_new_tokens=2048)
    config.train.update(
        lr=1e-6,
        critic_lr=1e-5,
        batch_size=128,
        temperature=1.0,
        micro_rows=1,
        eval_every=10,
        # 64 prompts x G = 8 rows decoded at once, 64 slots a device on 8, refilled as replies
        # end: the slot-steps on finished rows stay under 15% of a step's 128 rows a device
        # (tools/bench/rollout_engine.py).
        rollout_batch_size=64,
    )
    # The frozen answerer's and evaluation's runs (G = 1) decode 512 prompts at once, 64 slots
    # a device, as the rollouts do.
    config.agents.batch_size = 512
    # The engine's pool: 128k KV tokens a device (7 GiB at 7B: a rollout step holds ~50k at
    # 64 slots; a G = 1 run of 64 slots ~170k, admitted as the pool allows), and one prompt a
    # device a prefill (the memory estimate's einsum prefill scores: ~2.6 GiB a prompt at 7B).
    config.engine.update(kv_tokens=131072, prefill_prompts=1)
    if config.algo == "grpo":
        config.train.width_classes = 2


def sweep() -> list[str]:
    """Arg strings of the main sweep: every paper backbone under both RL algorithms."""
    return [f"backbone={b},algo={a}" for b in SWEEP_BACKBONES for a in ("ppo", "grpo")]
