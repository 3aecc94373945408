"""What a run trains and samples with: the backbone loaded into its shards, the train state
(or only its abstract layout when the run resumes), the KL reference and the manager stage's
frozen Answer Agent (`prepare_models`, called by `memr1.train`'s `train()`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import jax
from flax import nnx

from memr1.env import load
from memr1.models import config as model_config
from memr1.models.hf_io import config_from_hf
from memr1.models.tokenizer import load_tokenizer
from memr1.sampling.layout import decode_dtype
from memr1.train import lora, mesh, state
from memr1.train.checkpoint import Checkpointer, restore_params


def _model_shapes(config, hf_dir: str | None) -> model_config.ModelConfig:
    """The backbone's shapes without its weights (the checkpoint's config.json, or the size table
    widened to the tokenizer as `load.load_backbone` does), for checks before anything loads."""
    if hf_dir:
        return config_from_hf(hf_dir)
    cfg = model_config.get_size(config.model.size)
    if config.tokenizer_dir and Path(config.tokenizer_dir).is_dir():
        vocab = len(load_tokenizer(config.tokenizer_dir))
        cfg = cfg.replace(vocab_size=max(cfg.vocab_size, vocab))
    return cfg


@dataclasses.dataclass
class Models:
    """What a run trains and samples with, every array sharded on the run's mesh.

    backbone: tokenizer, special ids and shapes; its `params` are None (the weights live only in
      `state`) and its graphdef is the policy's (with LoRA adapters when they are on).
    setup / state: the policy's train state (`memr1.train.state`); state is None for a run that
      resumes (it restores its state into `setup.abstract_state`, and never builds a fresh one
      beside it).
    reference: the KL reference (β > 0 RL runs, else None): a compute-dtype copy of the start
      weights (HF or --init_checkpoint), also when the run resumes.
    answerer: the manager stage's frozen Answer Agent (None for other runs), with
      `answer_backbone` (the plain model's graphdef) to sample it.
    """

    mesh: Any
    backbone: load.Backbone
    setup: state.TrainSetup
    state: state.TrainState
    lora: lora.LoraConfig | None
    answerer: Any = None
    answer_backbone: load.Backbone | None = None
    reference: Any = None


# The model section's keys that shape the training passes only (the loaded backbone has the rest).
TRAINING_MODEL_KEYS = ("remat", "remat_policy", "scan_layers", "attention")


def training_model_settings(config) -> dict:
    """The `ModelConfig` fields the config's model section sets on the loaded backbone."""
    return {k: config.model[k] for k in TRAINING_MODEL_KEYS}


def prepare_models(
    config, *, hf_dir, init_checkpoint=None, answer_checkpoint=None, resuming: bool = False
) -> Models:
    """Loads the backbone into its shards and builds the train state (and the frozen answerer).

    No parameter ever exists whole on one device: the HF weights (or the random initialisation)
    are created in the shards the train state uses, checkpoints are restored into them, and
    the backbone's own reference to the weights is dropped once the train state holds them, so
    training keeps no second full copy of them. The frozen answerer of the manager stage (a
    separate model, so its own copy) is restored, or copied from the backbone, into the same
    shardings, in the compute dtype (it is only sampled). A checkpoint from a LoRA run is merged
    into plain weights when it is loaded.

    `resuming`: a checkpoint of this run exists, so only the train state's abstract shapes are
    built (its state comes from the checkpoint, `loop.resume`): a fresh state beside the restored
    one would double the state's memory. What must start from the start weights, not the resumed
    ones, still does: the KL reference (made here from them before they are dropped) and the
    frozen answerer; the PPO critic, part of the train state, is restored with it.
    """
    lora_cfg = lora.LoraConfig.from_config(config)
    m = mesh.mesh_from_config(config.mesh, [_model_shapes(config, hf_dir)])
    backbone = load.load_backbone(
        hf_dir=hf_dir,
        size=config.model.size,
        tokenizer_dir=config.tokenizer_dir,
        dtype=config.model.dtype,
        param_dtype=config.model.param_dtype,
        seed=config.seed,
        mesh=m,
    )
    model_cfg = backbone.cfg.replace(**training_model_settings(config))
    like = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), backbone.params
    )
    answerer = _frozen_answerer(config, answer_checkpoint, backbone.params, like, model_cfg)
    start, backbone.params = backbone.params, None
    needs_reference = config.algo != "sft" and config.train.kl_beta > 0
    # A resumed run reads the start weights only for its reference.
    if init_checkpoint and (needs_reference or not resuming):
        del start  # freed before the checkpoint's weights arrive
        start = restore_params(init_checkpoint, like)
    module_fn = None if lora_cfg is None else lora.module_fn(model_cfg, lora_cfg, config.seed)
    setup, st = state.create_train_state(
        m,
        model_cfg,
        state.OptimConfig.from_config(config),
        seed=config.seed,
        params=start,
        module_fn=module_fn,
        trainable=nnx.Param if lora_cfg is None else nnx.LoRAParam,
        critic_cfg=model_cfg if config.algo == "ppo" else None,
        critic_optim=state.OptimConfig.from_config(config, critic=True),
        materialize=not resuming,
    )
    reference = None
    if needs_reference:
        first = st.params if st is not None else state.start_params(setup, start, module_fn)
        reference = state.make_reference(setup, first)
        del first
    del start
    answer_backbone = None
    if answerer is not None:
        answer_backbone = dataclasses.replace(backbone)
        answerer = jax.device_put(answerer, _shardings(_base_params(setup.abstract_state.params)))
    return Models(
        mesh=m,
        backbone=dataclasses.replace(backbone, graphdef=setup.graphdef),
        setup=setup,
        state=st,
        lora=lora_cfg,
        answerer=answerer,
        answer_backbone=answer_backbone,
        reference=reference,
    )


def _frozen_answerer(config, answer_checkpoint, params, like, model_cfg):
    """The manager stage's frozen Answer Agent (None for other runs): the backbone's own weights
    or a checkpoint's, only ever read in the compute dtype, so kept as a copy in it (the train
    state is donated), cast in its shards."""
    if config.algo == "sft" or config.stage != "manager":
        return None
    answerer = restore_params(answer_checkpoint, like) if answer_checkpoint else params
    return state.frozen_copy(answerer, _shardings(like), decode_dtype(model_cfg))


def _shardings(tree):
    return jax.tree.map(lambda x: x.sharding, tree)


def _base_params(params):
    """The plain model's part of a parameter state (without LoRA adapters)."""
    return lora.base_part(params) if lora.has_adapters(params) else params


def has_checkpoint(directory: Path) -> bool:
    """Whether `directory` holds a finalised checkpoint to resume from (creates nothing)."""
    if not directory.is_dir():
        return False
    with Checkpointer(directory) as ckpt:
        return ckpt.latest_step() is not None
