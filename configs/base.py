"""Config sections shared by every memr1 experiment, and the `arg` string parser.

Each section is a function returning a ConfigDict, so an experiment config composes the ones it
needs and later stages (training, the memory pipeline) add their own sections next to these
without touching the existing ones. This file imports nothing heavy: loading a config must not
pull in JAX.
"""

from __future__ import annotations

import ml_collections
from ml_collections import config_dict


def model_section(
    size: str,
    *,
    dtype: str = "bfloat16",
    param_dtype: str = "float32",
    remat: bool = False,
    remat_policy: str = "full",
    scan_layers: bool = False,
    attention: str = "auto",
) -> ml_collections.ConfigDict:
    """The backbone: a size name from `memr1.models.config.SIZES` plus numerics overrides.

    `dtype` is the compute dtype of matmuls and activations; `param_dtype` the storage dtype
    of the weights (float32 master weights for training, bfloat16 is enough for sampling).
    `remat` recomputes each block in the backward pass, keeping what `remat_policy` names
    ("full": only the block's input; "minimal": also its weight matmuls' outputs);
    `scan_layers` runs the blocks as one `lax.scan`, without which XLA:CPU keeps every block's
    activations despite remat (see `memr1.models.config.ModelConfig` and docs/benchmarks.md).
    `attention` is the kernel of prefill and training passes: "auto" (packed GRPO rows: flash
    on GPU, splash on TPU; other passes: cuDNN on GPU, splash on TPU; chunked elsewhere),
    "einsum", "chunked", "cudnn", "splash" or "flash" (see `memr1.models.attention`).
    """
    return ml_collections.ConfigDict(
        {
            "size": size,
            "dtype": dtype,
            "param_dtype": param_dtype,
            "remat": remat,
            "remat_policy": remat_policy,
            "scan_layers": scan_layers,
            "attention": attention,
        }
    )


def mesh_section(data: int = 1, fsdp: int = -1, tensor: int = 1) -> ml_collections.ConfigDict:
    """Device mesh shape over (data, fsdp, tensor); -1 takes all devices left over."""
    return ml_collections.ConfigDict({"data": data, "fsdp": fsdp, "tensor": tensor})


def hf_dir_field() -> config_dict.FieldReference:
    """A local HF checkpoint directory, unset by default (random init), typed as a string."""
    return config_dict.placeholder(str)


def parse_arg(arg: str | None, defaults: dict[str, object]) -> dict[str, object]:
    """Parses "key=value,key=value" into a copy of `defaults`.

    A bare key (e.g. "runlocal") sets a boolean default to True. Unknown keys raise a ValueError
    that lists the valid ones, so a typo never silently falls back to a default.
    """
    out = dict(defaults)
    for item in filter(None, (part.strip() for part in (arg or "").split(","))):
        key, sep, value = item.partition("=")
        key = key.strip()
        if key not in defaults:
            raise ValueError(
                f"unknown config arg key {key!r} in {arg!r}; valid: {sorted(defaults)}"
            )
        if isinstance(defaults[key], bool):
            if sep and value.strip().lower() not in ("true", "false", "1", "0"):
                raise ValueError(f"config arg {key!r} takes true/false, got {value!r}")
            out[key] = not sep or value.strip().lower() in ("true", "1")
        elif not sep:
            raise ValueError(f"config arg {key!r} needs a value ({key}=...)")
        else:
            out[key] = value.strip()
    return out


def data_section(dataset: str) -> ml_collections.ConfigDict:
    """Which conversations to run on.

    `path` is a local file or folder in the dataset's own schema. `split` picks a part of the
    Memory-R1 split (`ratios` by conversation, in file order) or "all"; synthloco files are already
    one split each, so they default to "all". `gold_ops` is synthloco's gold-operation file, used
    only to score operation accuracy. -1 means no limit.
    """
    return ml_collections.ConfigDict(
        {
            "kind": dataset,
            "path": config_dict.placeholder(str),
            "split": "all" if dataset in ("synthloco", "longmemeval", "msc") else "test",
            "ratios": "1:1:8",
            "drop_categories": "5",
            "max_conversations": -1,
            "max_questions": -1,
            "gold_ops": config_dict.placeholder(str),
        }
    )


def memory_section() -> ml_collections.ConfigDict:
    """The banks and retrieval (the paper: top 30 per speaker for answers).

    `extract_from`: what the "llm" fact extractor reads, "utterance" (one turn, memr1's) or
    "pair" (two messages at a time, once for each speaker's bank: Mem0's LoCoMo feed,
    recipe=paper; `memr1.env.facts.fact_units`).
    """
    return ml_collections.ConfigDict(
        {
            "capacity": 1024,
            "text_bytes": 512,
            "log_capacity": 4096,
            "overflow": "evict_oldest",
            "retriever": "scann",
            "fact_source": "llm",
            "extract_from": "utterance",
            "k_per_fact": 5,
            "k_per_speaker": 30,
        }
    )


def agents_section() -> ml_collections.ConfigDict:
    """Prompt style, batching and generation budgets of the extractor, manager and answerer.

    `<agent>_max_new_tokens` is the agent's one reply budget (`memr1.env.policy.agent_budget`):
    evaluation, the agent's own RL rollouts and validation (`train` has no budget of its own)
    and, for the answerer, the manager stage's reward all stop its replies there.

    `manager_checkpoint` / `answer_checkpoint` are memr1 training checkpoint directories; each
    agent can come from a different one (unset: the backbone's own weights).

    `style`: "full" (memr1's prompts for instruction-tuned models), "compact" (the tiny CPU
    models') or "paper" (the paper's Figures 9-11 in our words: Mem0's update prompt for the
    manager, the answer prompt with its rules and step-by-step approach; `memr1.env.prompts`).
    Three of memr1's own choices about the manager, each kept by default and dropped by
    recipe=paper (`memr1.env.manager_io.ManagerRules`; their shares are logged,
    `duplicate_id_frac` and `extra_add_frac`): `manager_date` shows the conversation's date
    (and asks for relative time to become a date); `repeated_id` "first" keeps the first op on
    a shown id, "in_order" applies every op in reply order (Mem0); `adds_per_fact` k > 0 keeps
    at most k ADDs per new fact, 0 every ADD (Mem0).
    """
    return ml_collections.ConfigDict(
        {
            "style": "full",
            "distill": True,
            "batch_size": 8,
            "max_prompt_tokens": 4096,
            "extract_max_new_tokens": 256,
            "manager_max_new_tokens": 512,
            "answer_max_new_tokens": 256,
            "temperature": 0.0,
            "manager_checkpoint": config_dict.placeholder(str),
            "answer_checkpoint": config_dict.placeholder(str),
            "manager_date": True,
            "repeated_id": "first",
            "adds_per_fact": 1,
        }
    )


def engine_section() -> ml_collections.ConfigDict:
    """The rollout engine every sampled reply goes through (`memr1.sampling.engine`): rollouts,
    validation, the manager stage's frozen answerer, evaluation.

    Its KV cache is a pool of pages of `page_size` tokens (a power of two): a prompt's pages
    are written once and read by all of its samples, and each reply holds the pages its live
    tokens need. `kv_tokens` is the pool of each data × fsdp device in tokens; 0 sizes it for
    the worst case (every prompt slot at the run's prompt bucket and every decode slot at the
    full budget), where no row is ever preempted; a smaller pool fits more slots in the same
    memory, and when it runs short the newest rows are preempted and decoded again later (the
    same tokens: each row draws with keys of its own). `round_steps`: decode steps between two
    visits of the host, which refills the slots of rows that ended (a round also ends once a
    sixteenth of the slots have ended while rows wait). `prefill_prompts`: prompts a device
    prefills in one program at most (a prefill's activations grow with it; each power of two up
    to it is a program to compile). `shrink_tail`: once no row waits, rounds run fewer slots
    (eighths of them from 32 slots, halves below), so a run's tail does not decode the slots of
    finished rows; False runs one round program (a program to compile per smaller size, which
    a check that counts compiles may not want). `attention`: the decode attention's kernel,
    "xla" (gathers every page a table names), "pallas" (a Pallas kernel that walks only a
    row's live pages; interpreted off a GPU; rows split over data × fsdp only) or "auto"
    (pallas on a GPU). Decode slots are
    the callers' batch sizes (`agents.batch_size`, `train.rollout_batch_size`,
    `train.val_batch_size`) × G.
    """
    return ml_collections.ConfigDict(
        {
            "page_size": 16,
            "kv_tokens": 0,
            "round_steps": 16,
            "prefill_prompts": 4,
            "shrink_tail": True,
            "attention": "auto",
        }
    )


def judge_section() -> ml_collections.ConfigDict:
    """LLM judge: "none", "openai" (an OpenAI-compatible endpoint) or "local" (the backbone).

    Evaluation's J, and the reward under `train.reward="judge"`. `api_key_env` names the
    variable holding the endpoint's key ("" for a server that needs none).
    """
    return ml_collections.ConfigDict(
        {
            "kind": "none",
            "base_url": config_dict.placeholder(str),
            "model": config_dict.placeholder(str),
            "api_key_env": "OPENAI_API_KEY",
        }
    )


def tuples_section() -> ml_collections.ConfigDict:
    """Building the training tuples (paper Algorithm 1, `python -m memr1.tuples`).

    `window` is W, the turns before each turn t whose bank the manager tuple of t holds (-1:
    every turn before t): the paper says 24 in its text and 50 in Algorithm 1; 50 here.
    `builder` is "observation" (the dataset's facts ADDed as they are, no model) or "teacher"
    (a manager policy, --hf_dir, writes the banks). `fact_source` is where a turn's facts come
    from: "observation" (the dataset's), "turn" (the utterance) or "llm" (extracted by the
    policy). `only_with_qa` keeps the manager tuples of turns that some question cites (what the
    paper trains on). `jobs_per_batch` is how many windows a policy teacher builds side by side.
    The rest is shared with evaluation: the banks take the `memory` section's capacity, text
    bytes and log (a full bank raises rather than evict, and is searched exactly), the views
    its k_per_fact and k_per_speaker, and a teacher or extractor the `agents` section's style,
    temperature and token budgets.
    """
    return ml_collections.ConfigDict(
        {
            "builder": "observation",
            "window": 50,
            "fact_source": "observation",
            "only_with_qa": True,
            "jobs_per_batch": 32,
        }
    )


def train_section(stage: str, algo: str) -> ml_collections.ConfigDict:
    """Training of one agent (paper: actor lr 1e-6 with warmup, critic 1e-5, temperature 1.0).

    `batch_size` counts states (prompts) per step; GRPO samples `group_size` outputs for each.
    `lr_decay`: the rate after `warmup_steps`, "constant" (the paper's) or "cosine" (to 0 at
    `steps`, as verl's and TRL's SFT trainers decay theirs: `memr1.train.optim.lr_schedule`).
    Rollouts stop at the stage's agent budget, `agents.<stage>_max_new_tokens` (paper: 2048
    response tokens); the update's rows are as wide as each step's longest prompt and reply
    (`memr1.train.batches.width_bucket`), and the share of padding they hold is logged as
    `train/pad_frac`. For the manager stage
    the frozen Answer Agent answers exactly as evaluation does: the `agents` section's
    temperature and `answer_max_new_tokens`, the `memory` section's retriever and k_per_speaker.
    LoRA (`memr1.train.lora`, through qwix): `lora_rank` > 0 trains only rank-r adapters on the
    weights of the modules matching `lora_module_path` (a regex over paths like
    `layers/0/attn`), scaled by `lora_alpha / lora_rank`; 0 trains every weight (the paper).
    `shared_prompt` (GRPO): the update packs each group into one row, its prompt once and its G
    replies back to back (`memr1.rl.packing`, `memr1.rl.logprobs.packed_logprobs`: the row
    layout's values, without running the prompt G times or padding a reply to the longest);
    a row is then a group, and `micro_rows` counts groups. PPO keeps one row a sample.
    `width_classes` (GRPO, packed): the step's groups are sorted by length into up to this many
    classes of equal count, each packed at the bucketed width of its own longest group
    (`memr1.train.batches.pack_step_classes`) and run as its share of the update's micro-batches
    in the one program: as many classes as divide `n_micro` (one when the update is a single
    micro-batch; logged as `train/width_classes`); 1 pads every group to the step's longest.
    Each combination of class widths is its own compiled program.
    `drop_zero_signal` (GRPO): groups whose G rewards are all equal
    (zero advantages) skip the update (`memr1.train.batches.keep_signal_groups`); off in the
    paper's setting, it changes the loss normalisation. `oversample` (GRPO): each step rolls
    out `oversample` x `batch_size` states and updates on `batch_size` groups, those with a
    reward spread first (`memr1.train.batches.signal_first_groups`); 1 (the paper) = off.
    `n_micro` splits each update into that many micro-batches (gradient accumulation);
    `micro_rows` > 0 derives it at run time instead, from the mesh: micro-batches of
    `micro_rows` rows on each data x fsdp shard (packed groups under `shared_prompt`;
    `memr1.train.mesh.micro_batch_count`). Set one of the two, not both.
    `sft_length` (SFT): the longest row; a batch pads to the shortest of `sft_buckets` widths
    (multiples of 16 spread evenly up to it: one compiled program each) that holds its longest
    row. `sft_group_by_length` = k > 0 (SFT) batches rows of similar
    length together within chunks of k batches (`memr1.train.order`), so that a step pads to
    its own rows' length; 0 draws batches at random. Logged: `train/pad_frac`.
    `gamma` and `lam` (PPO): the GAE discount and λ over response tokens, 1.0 and 1.0 as in verl
    (the outcome reward on the last token then reaches every token undiscounted).
    `eval_every` > 0 validates the policy (`memr1.train.validation`: verl's `test_freq` with
    `val_before_train`) on --val_tuples (RL; greedy, the stage's own reward) or --val_sft_data
    (SFT: the target loss) before the first step, every `eval_every` steps and after the last;
    0 = off. `keep_best` names the metric of the best checkpoint, kept beside the last `keep`
    and loadable as `DIR:best` ("val/em" maximised; a leading "-" minimises, as "-val/loss";
    "" keeps none). `val_batch_size`: prompts per sampler call of a validation pass (0 = every
    prompt of the process's share in one call). `rollout_batch_size`: prompts per sampler call
    of the policy's rollouts (0 = all of a process's states of a step in one call, G samples
    each: the fewest calls, as large a KV cache as the step needs; set it lower where that does
    not fit). `agents.batch_size` stays evaluation's (and the frozen answerer's) setting.
    `min_overlap` > 0 (manager stage): its states are only the turns whose fact shares at
    least that share of its content words with its top shown memory
    (`memr1.env.collision.collision_states`: a label-free proxy for a repeat, change, list item
    or cancellation; 0.5 finds 91% of the demo's collision turns at 98.7% precision); 0 = every
    turn (with `only_turns_with_qa`, the paper's). `linked_qa` (manager stage): the questions
    a state's reward reads, "cites" (the paper's: every question whose evidence cites the turn)
    "answerable" (only those whose every evidence turn was said by then) or "shown" (the
    answerable ones and those about the memories shown to the manager, so that an overwrite
    costs what it destroys: `memr1.train.stages.linked_questions`).
    `reward`: how an answer is rewarded, in both stages (the Answer Agent's own reply; the
    frozen Answer Agent's answers over the bank a manager reply writes) and in validation
    (`memr1.eval.reward`): "em" (the paper's), "em_normalized" (after the LoCoMo scorer's
    normaliser), "f1" (token-set F1) or "judge" (the `judge` section's LLM judge, CORRECT = 1;
    paper Table 2). `wandb_project`: a Weights & Biases project that every metric also goes to,
    with the run's config, resumed into the same W&B run after a restart (`WANDB_MODE=offline`
    needs no account); "" = off (`memr1.train.wandb_log`).
    """
    return ml_collections.ConfigDict(
        {
            "steps": 200,
            "batch_size": 16,
            "group_size": 8,
            "lr": 1e-6 if algo != "sft" else 1e-5,
            "critic_lr": 1e-5,
            "warmup_steps": 10,
            "lr_decay": "constant",
            "clip_eps": 0.2,
            # Dual clip (verl's clip_ratio_c, always on there): a token with A < 0 adds at
            # most dual_clip·|A| to the loss, whatever its ratio; 0 turns it off.
            "dual_clip": 3.0,
            "kl_beta": 0.001 if algo == "grpo" else 0.0,
            "kl_estimator": "k3",
            "gamma": 1.0,
            "lam": 1.0,
            "n_micro": 1,
            "micro_rows": 0,
            "shared_prompt": True,
            "width_classes": 1,
            "drop_zero_signal": False,
            "oversample": 1,
            "temperature": 1.0,
            "sft_length": 2048,
            "sft_group_by_length": 0,
            "sft_buckets": 4,
            "checkpoint_every": 50,
            "keep": 3,
            "eval_every": 0,
            "keep_best": "-val/loss" if algo == "sft" else "val/em",
            "val_batch_size": 0,
            # Prompts per sampler call of a rollout; 0: a process's states of a step in one call.
            "rollout_batch_size": 0,
            "on_nonfinite": "skip",
            "only_turns_with_qa": True,
            "min_overlap": 0.0,
            "linked_qa": "cites",
            "lora_rank": 0,
            "lora_alpha": 16.0,
            "lora_module_path": ".*attn|.*mlp",
            "reward": "em",
            "wandb_project": "",
        }
    )
