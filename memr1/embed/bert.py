"""A BERT encoder in Flax NNX with sentence pooling: the sentence-transformers recipe.

Post-LN transformer layers (residual add, then LayerNorm), exact-erf GELU unless the config asks
for the tanh form, absolute position and token-type embeddings. The sentence vector is the mean of
the last hidden states over real tokens (or the [CLS] state), L2-normalised so that a dot product
is the cosine similarity that retrieval ranks by.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from memr1.embed.checkpoint import BertSpec

# PyTorch's F.normalize and sentence-transformers' mean pooling use these floors; matching them
# keeps the all-padding rows of a batch bucket finite instead of NaN.
_NORM_EPS = 1e-12
_COUNT_EPS = 1e-9


def _layer_norm(d: int, eps: float, rngs: nnx.Rngs) -> nnx.LayerNorm:
    # The two-pass variance matches PyTorch's LayerNorm more closely than E[x^2] - E[x]^2.
    return nnx.LayerNorm(d, epsilon=eps, use_fast_variance=False, rngs=rngs)


class BertEmbeddings(nnx.Module):
    """Word + position + token-type embeddings followed by LayerNorm."""

    def __init__(self, spec: BertSpec, rngs: nnx.Rngs):
        d = spec.hidden_size
        self.word = nnx.Embed(spec.vocab_size, d, rngs=rngs)
        self.position = nnx.Embed(spec.max_position, d, rngs=rngs)
        self.token_type = nnx.Embed(spec.type_vocab_size, d, rngs=rngs)
        self.norm = _layer_norm(d, spec.layer_norm_eps, rngs)

    def __call__(self, ids_BT: jax.Array) -> jax.Array:
        """ids_BT int32 [B, T] -> x_BTD float32 [B, T, D]. All tokens use token type 0."""
        t = ids_BT.shape[1]
        x_BTD = self.word(ids_BT) + self.position.embedding[:t][None] + self.token_type.embedding[0]
        return self.norm(x_BTD)


class BertLayer(nnx.Module):
    """One post-LN block: self-attention, add & norm, GELU feed-forward, add & norm."""

    def __init__(self, spec: BertSpec, rngs: nnx.Rngs):
        d, f = spec.hidden_size, spec.intermediate_size
        self.num_heads = spec.num_heads
        self.approximate_gelu = spec.approximate_gelu
        self.query = nnx.Linear(d, d, rngs=rngs)
        self.key = nnx.Linear(d, d, rngs=rngs)
        self.value = nnx.Linear(d, d, rngs=rngs)
        self.attn_out = nnx.Linear(d, d, rngs=rngs)
        self.attn_norm = _layer_norm(d, spec.layer_norm_eps, rngs)
        self.up = nnx.Linear(d, f, rngs=rngs)
        self.down = nnx.Linear(f, d, rngs=rngs)
        self.out_norm = _layer_norm(d, spec.layer_norm_eps, rngs)

    def __call__(self, x_BTD: jax.Array, mask_BT: jax.Array) -> jax.Array:
        """x_BTD [B, T, D], mask_BT bool [B, T] (True = real token) -> [B, T, D]."""
        b, t, d = x_BTD.shape
        h = self.num_heads
        q_BTHN = self.query(x_BTD).reshape(b, t, h, d // h)
        k_BSHN = self.key(x_BTD).reshape(b, t, h, d // h)
        v_BSHN = self.value(x_BTD).reshape(b, t, h, d // h)
        logits_BHTS = jnp.einsum("bthn,bshn->bhts", q_BTHN, k_BSHN) / np.sqrt(d // h)
        # The most negative finite float (not -inf) keeps rows with no real key, the padding
        # rows of a batch bucket, a harmless uniform softmax rather than NaN.
        logits_BHTS = jnp.where(
            mask_BT[:, None, None, :], logits_BHTS, jnp.finfo(logits_BHTS.dtype).min
        )
        probs_BHTS = jax.nn.softmax(logits_BHTS, axis=-1)
        ctx_BTD = jnp.einsum("bhts,bshn->bthn", probs_BHTS, v_BSHN).reshape(b, t, d)
        x_BTD = self.attn_norm(x_BTD + self.attn_out(ctx_BTD))
        ff_BTF = jax.nn.gelu(self.up(x_BTD), approximate=self.approximate_gelu)
        return self.out_norm(x_BTD + self.down(ff_BTF))


class SentenceBert(nnx.Module):
    """BERT encoder + pooling + L2 normalisation: token ids in, unit sentence vectors out."""

    def __init__(self, spec: BertSpec, pooling: str, rngs: nnx.Rngs):
        if pooling not in ("mean", "cls"):
            raise ValueError(f"pooling must be 'mean' or 'cls', got {pooling!r}")
        self.pooling = pooling
        self.embeddings = BertEmbeddings(spec, rngs)
        self.layers = nnx.List([BertLayer(spec, rngs) for _ in range(spec.num_layers)])

    def hidden_states(self, ids_BT: jax.Array, mask_BT: jax.Array) -> jax.Array:
        """Last-layer token states [B, T, D], as BertModel's ``last_hidden_state``."""
        x_BTD = self.embeddings(ids_BT)
        for layer in self.layers:
            x_BTD = layer(x_BTD, mask_BT)
        return x_BTD

    def __call__(self, ids_BT: jax.Array, mask_BT: jax.Array) -> jax.Array:
        """ids_BT int32 [B, T], mask_BT bool [B, T] -> emb_BD float32 [B, D], unit norm."""
        x_BTD = self.hidden_states(ids_BT, mask_BT)
        if self.pooling == "cls":
            pooled_BD = x_BTD[:, 0]
        else:
            w_BT = mask_BT.astype(x_BTD.dtype)
            total_BD = jnp.einsum("btd,bt->bd", x_BTD, w_BT)
            pooled_BD = total_BD / jnp.maximum(w_BT.sum(axis=1, keepdims=True), _COUNT_EPS)
        norm_B1 = jnp.linalg.norm(pooled_BD, axis=-1, keepdims=True)
        return pooled_BD / jnp.maximum(norm_B1, _NORM_EPS)


def _param_slots(model: SentenceBert) -> dict[str, tuple[nnx.Variable, bool]]:
    """Checkpoint name -> (NNX variable, whether the tensor is a transposed Linear weight)."""
    emb = model.embeddings
    slots = {
        "embeddings.word_embeddings.weight": (emb.word.embedding, False),
        "embeddings.position_embeddings.weight": (emb.position.embedding, False),
        "embeddings.token_type_embeddings.weight": (emb.token_type.embedding, False),
        "embeddings.LayerNorm.weight": (emb.norm.scale, False),
        "embeddings.LayerNorm.bias": (emb.norm.bias, False),
    }
    for i, layer in enumerate(model.layers):
        p = f"encoder.layer.{i}."
        linears = {
            "attention.self.query": layer.query,
            "attention.self.key": layer.key,
            "attention.self.value": layer.value,
            "attention.output.dense": layer.attn_out,
            "intermediate.dense": layer.up,
            "output.dense": layer.down,
        }
        for name, lin in linears.items():
            # PyTorch stores Linear weights as [out, in]; NNX kernels are [in, out].
            slots[f"{p}{name}.weight"] = (lin.kernel, True)
            slots[f"{p}{name}.bias"] = (lin.bias, False)
        for name, norm in (
            ("attention.output.LayerNorm", layer.attn_norm),
            ("output.LayerNorm", layer.out_norm),
        ):
            slots[f"{p}{name}.weight"] = (norm.scale, False)
            slots[f"{p}{name}.bias"] = (norm.bias, False)
    return slots


def build_sentence_bert(
    spec: BertSpec, pooling: str, weights: dict[str, np.ndarray]
) -> SentenceBert:
    """Creates the model without random initialisation and fills it from checkpoint tensors.

    ``weights`` holds the un-prefixed checkpoint names of ``checkpoint.expected_tensors``; shapes
    were already checked against the config there, and are checked again against the modules so
    that a mapping mistake cannot load silently.
    """
    model = nnx.eval_shape(lambda: SentenceBert(spec, pooling, nnx.Rngs(0)))
    slots = _param_slots(model)
    missing = sorted(set(slots) - set(weights))
    if missing:
        raise ValueError(f"checkpoint lacks tensors the encoder needs: {missing[:5]}")
    for name, (var, transpose) in slots.items():
        arr = weights[name].T if transpose else weights[name]
        want = var.get_value().shape
        if arr.shape != want:
            raise ValueError(f"tensor {name!r}: shape {arr.shape} does not fit module {want}")
        var.set_value(jnp.asarray(arr, dtype=jnp.float32))
    return model
