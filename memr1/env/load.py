"""Building the policies of a run from its config: a local HF checkpoint or a random tiny model.

Nothing here downloads anything: `hf_dir` and `tokenizer_dir` are local directories. A random
model (no `hf_dir`) still needs a tokenizer directory, because the pipeline speaks text.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import jax
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from memr1.env.policy import SamplingConfig, TextPolicy
from memr1.models import config as model_config
from memr1.models import transformer
from memr1.models.hf_io import load_hf
from memr1.models.tokenizer import load_tokenizer, special_ids
from memr1.sampling.engine import EngineSettings
from memr1.sharding import logical_to_spec


@dataclasses.dataclass
class Backbone:
    """A loaded backbone: shapes, graph, base parameters and tokenizer."""

    cfg: model_config.ModelConfig
    graphdef: Any
    params: Any
    tokenizer: Any
    eos_ids: tuple[int, ...]
    pad_id: int
    source: str


def load_backbone(
    *,
    hf_dir: str | None,
    size: str = "tiny",
    tokenizer_dir: str | None = None,
    dtype: str = "float32",
    param_dtype: str = "float32",
    seed: int = 0,
    mesh: Mesh | None = None,
    attention: str = "auto",
) -> Backbone:
    """Loads `hf_dir` when given, else initialises `size` randomly with `tokenizer_dir`'s vocab.

    With a `mesh`, every parameter is created in its shards (by its logical axis names, see
    `memr1.sharding`), never as a whole on one device; without, on the default device.
    `attention` is the model's attention kernel (`memr1.models.config.ModelConfig.attention`).
    """
    if hf_dir:
        cfg, graphdef, params = load_hf(
            hf_dir, dtype=dtype, param_dtype=param_dtype, shardings=mesh
        )
        if cfg.attention != attention:
            cfg = cfg.replace(attention=attention)
            graphdef = transformer.abstract_model(cfg)[0]  # the same parameters, another kernel
        tok = load_tokenizer(hf_dir)
        special = special_ids(tok, hf_dir)
        return Backbone(cfg, graphdef, params, tok, special.eos_ids, special.pad_id, str(hf_dir))
    if not tokenizer_dir:
        raise ValueError(
            "a randomly initialised backbone needs a tokenizer: set tokenizer_dir (or hf_dir)"
        )
    if not Path(tokenizer_dir).is_dir():
        raise FileNotFoundError(f"tokenizer_dir {tokenizer_dir}: not a directory")
    tok = load_tokenizer(tokenizer_dir)
    special = special_ids(tok, tokenizer_dir)
    cfg = model_config.get_size(size, dtype=dtype, param_dtype=param_dtype, attention=attention)
    if len(tok) > cfg.vocab_size:
        cfg = cfg.replace(vocab_size=len(tok))
    if mesh is None:
        graphdef, params = transformer.init_model(cfg, seed=seed)
    else:
        graphdef, abstract = transformer.abstract_model(cfg)
        specs = nnx.get_partition_spec(abstract)
        shardings = jax.tree.map(
            lambda spec: NamedSharding(mesh, logical_to_spec(tuple(spec))),
            specs,
            is_leaf=lambda x: isinstance(x, PartitionSpec),
        )
        params = jax.jit(
            lambda: transformer.init_model(cfg, seed=seed)[1], out_shardings=shardings
        )()
    source = f"random {size} (seed {seed}), tokenizer {tokenizer_dir}"
    return Backbone(cfg, graphdef, params, tok, special.eos_ids, special.pad_id, source)


def make_policy(
    backbone: Backbone,
    params: Any = None,
    *,
    batch_size: int = 8,
    max_prompt_tokens: int = 4096,
    name: str = "policy",
    engine: EngineSettings | None = None,
) -> TextPolicy:
    """A TextPolicy over the backbone, with its own parameters when given; `engine`: the
    rollout engine's settings (`EngineSettings.from_config(config)`; default: its defaults)."""
    return TextPolicy(
        backbone.cfg,
        backbone.graphdef,
        backbone.params if params is None else params,
        backbone.tokenizer,
        eos_ids=backbone.eos_ids,
        pad_id=backbone.pad_id,
        batch_size=batch_size,
        max_prompt_tokens=max_prompt_tokens,
        name=name,
        engine=engine,
    )


# A local judge's replies: greedy, up to a verdict's length (not an agent of the config).
JUDGE_SAMPLING = SamplingConfig(temperature=0.0, max_new_tokens=128)


def local_judge(
    backbone: Backbone,
    params: Any = None,
    *,
    batch_size: int,
    engine: EngineSettings | None = None,
):
    """`prompts -> replies` of a model through the project's rollout engine (an LLM judge's
    backend, `memr1.eval.judge_backends.backend_from_config`): each prompt one user message,
    greedy up to `JUDGE_SAMPLING.max_new_tokens`, with the backbone's weights unless `params`
    are given; `engine` as `make_policy`'s."""
    policy = make_policy(backbone, params, batch_size=batch_size, name="judge", engine=engine)

    def complete(prompts: list[str]) -> list[str]:
        chats = [[{"role": "user", "content": p}] for p in prompts]
        done = policy.complete(chats, JUDGE_SAMPLING, key=jax.random.key(0))
        return [samples[0].text for samples in done]

    return complete
