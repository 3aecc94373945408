"""Grouped-query attention kernels, chosen per call by backend and shape.

Every kernel computes the same function of `q_BTHN` [B, T, H, N], keys and values `k_BKSN`,
`v_BKSN` [B, K, S, N] (head-major, as the KV cache stores them) and a mask: a boolean
`mask_BTS` [B, T, S] (query t may read key slot s), or for packed GRPO rows a
`masks.PackedMask` (their segment ids; `dense()` is the [B, T, T] boolean):
softmax(q k^T / sqrt(N), masked) v, with query head h reading key/value head h // G (G = H / K).
They differ in what they materialise and what they skip:

  einsum   the reference: float32 scores [B, K, T·G, S] for the whole T at once. At 4,096-token
           prompts that is 1 GiB per row and layer at Qwen2.5-3B widths, 1.75 GiB at 7B.
  chunked  the same computation over blocks of `chunk` query positions in a `lax.scan` whose
           body is rematerialised in the backward pass: scores [B, K, chunk·G, S] at a time.
           Each row's softmax is computed whole, as in einsum. Runs on every backend.
  cudnn    `jax.nn.dot_product_attention(implementation="cudnn")`, a fused flash kernel (GPU,
           bfloat16/float16 only). The mask goes in as a [B, 1, T, S] boolean (cuDNN adds it as
           a bias), T and S padded to even lengths as cuDNN's biased backward needs.
  splash   the Pallas splash kernel (TPU). Full causal passes (T == S): causality is its static
           causal mask and padding its segment ids (0 on padding, 1 on real tokens, read off
           the mask's last row), so it needs the mask `masks.causal_mask(valid)` that every full
           pass of the model is given. Packed rows: their mask as splash's dynamic mask, whose
           empty blocks it skips (`kernels.splash_packed`).
  flash    our Pallas flash attention lowered to Triton (GPU) for packed rows: it reads the
           segment ids and computes only the live blocks, forward and backward
           (`kernels.flash_gpu`). A full causal pass runs it with every real token in the
           prompt segment (the mask's last row, as splash reads it).
Under an active mesh the Pallas kernels run in `shard_map`, per shard of batch and heads.

"auto" picks einsum for one query position (the decode step: its scores are [B, K, G, S]); for
packed rows flash on GPU and splash on TPU where they apply; otherwise cudnn on GPU where it
applies, splash on TPU for T == S, and chunked elsewhere (CPU included). An explicit choice
applies to every call with T > 1; decode steps keep einsum, and splash and flash leave calls with
T != S (a cache extended by several tokens) to chunked. The Pallas kernels need their
accelerator, or `kernels.launch.pallas_mode("interpret")` (any backend: the tests).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from memr1 import sharding
from memr1.models import masks
from memr1.models.config import ATTENTION_IMPLEMENTATIONS
from memr1.models.kernels import launch

NEG_INF = -1e30  # finite, so a row with every slot masked (padding) stays NaN-free
SPLASH_BLOCK = 128  # the splash kernel's tile; T is padded to a multiple of it


def backend() -> str:
    """The platform the current trace compiles for: the active mesh's devices, else the default."""
    mesh = sharding.active_mesh()
    if mesh is not None:
        return mesh.devices.flat[0].platform
    return jax.default_backend()


def resolve(
    implementation: str,
    *,
    t: int,
    s: int,
    head_dim: int,
    dtype,
    platform: str | None = None,
    packed: bool = False,
) -> str:
    """The kernel one attention call uses (see the module docstring); raises on impossible asks.

    Args:
      implementation: one of `ATTENTION_IMPLEMENTATIONS` (the model config's `attention`).
      t, s: query positions and key slots of the call.
      head_dim, dtype: N and the compute dtype of q, k and v.
      platform: "cpu", "gpu", "tpu" ...; default: `backend()`.
      packed: the call's mask is a `masks.PackedMask` (packed GRPO rows).
    """
    if implementation not in ATTENTION_IMPLEMENTATIONS:
        raise ValueError(
            f"attention={implementation!r} is not one of {list(ATTENTION_IMPLEMENTATIONS)}"
        )
    platform = platform or backend()
    gpu = platform in ("gpu", "cuda")
    dtype = jnp.dtype(dtype)
    if implementation == "einsum" or t == 1:
        return "einsum"
    if implementation == "auto":
        if packed and gpu and _flash_fits(head_dim, dtype):
            return "flash"
        if packed and platform == "tpu" and head_dim % 128 == 0:
            return "splash"
        if gpu and _cudnn_fits(head_dim, dtype):
            return "cudnn"
        if platform == "tpu" and t == s and head_dim % 128 == 0:
            return "splash"
        return "chunked"
    if implementation == "cudnn":
        if not gpu:
            raise ValueError(f"attention='cudnn' needs a GPU, but this program runs on {platform}")
        if dtype not in (jnp.bfloat16, jnp.float16):
            raise ValueError(
                f"attention='cudnn' needs a bfloat16 or float16 compute dtype, got {dtype}; "
                "set model.dtype=bfloat16 or use attention='chunked'"
            )
        if head_dim % 8:
            raise ValueError(f"attention='cudnn' needs head_dim % 8 == 0, got {head_dim}")
    if implementation in ("splash", "flash"):
        native = "tpu" if implementation == "splash" else "gpu"
        if platform.replace("cuda", "gpu") != native and launch.current_mode() == "native":
            raise ValueError(
                f"attention={implementation!r} needs a {native.upper()}, but this program runs "
                f"on {platform} (memr1.models.kernels.launch.pallas_mode('interpret') runs it "
                "anywhere, slowly)"
            )
        if implementation == "flash" and gpu and not _flash_fits(head_dim, dtype):
            raise ValueError(
                f"attention='flash' needs a power-of-two head_dim in [16, 256] on a GPU, got "
                f"{head_dim}"
            )
        if t != s:
            return "chunked"
    return implementation


def _flash_fits(head_dim: int, dtype) -> bool:
    # Triton tiles are powers of two; a dot needs at least 16 along its contraction.
    pow2 = head_dim & (head_dim - 1) == 0
    return pow2 and 16 <= head_dim <= 256 and dtype in (jnp.bfloat16, jnp.float16, jnp.float32)


def _cudnn_fits(head_dim: int, dtype) -> bool:
    # cuDNN's flash kernels take head dims up to 128 on every GPU it supports (256 from Hopper).
    return dtype in (jnp.bfloat16, jnp.float16) and head_dim % 8 == 0 and head_dim <= 128


def attend(
    q_BTHN: jax.Array,
    k_BKSN: jax.Array,
    v_BKSN: jax.Array,
    mask_BTS: jax.Array | masks.PackedMask,
    *,
    implementation: str = "auto",
    chunk: int = 512,
) -> jax.Array:
    """Attention output [B, T, H, N] in the dtype of `v_BKSN`, by the kernel `resolve` picks."""
    b, t, h, n = q_BTHN.shape
    packed = isinstance(mask_BTS, masks.PackedMask)
    kernel = resolve(
        implementation,
        t=t,
        s=k_BKSN.shape[2],
        head_dim=n,
        dtype=q_BTHN.dtype,
        packed=packed,
    )
    if kernel in ("flash", "splash") and packed:
        return packed_kernel_attention(kernel, q_BTHN, k_BKSN, v_BKSN, mask_BTS.segments_BT)
    if kernel == "flash":  # a full causal pass: every real token in the prompt segment
        seg_BT = jnp.where(mask_BTS[:, -1, :], 0, -1)
        return packed_kernel_attention(kernel, q_BTHN, k_BKSN, v_BKSN, seg_BT)
    if packed:
        mask_BTS = mask_BTS.dense()
    if kernel == "einsum":
        return einsum_attention(q_BTHN, k_BKSN, v_BKSN, mask_BTS)
    if kernel == "chunked":
        return chunked_attention(q_BTHN, k_BKSN, v_BKSN, mask_BTS, chunk=chunk)
    if kernel == "cudnn":
        return cudnn_attention(q_BTHN, k_BKSN, v_BKSN, mask_BTS)
    return splash_attention(q_BTHN, k_BKSN, v_BKSN, mask_BTS)


def per_shard(fn, in_names, out_names):
    """`fn` run per shard of its arguments' logical axes under the active mesh (`shard_map`);
    `fn` itself without one. A Pallas call is opaque to XLA's partitioner."""
    mesh = sharding.active_mesh()
    if mesh is None:
        return fn
    spec = functools.partial(sharding.logical_to_spec, rules=sharding.active_rules())
    return jax.shard_map(
        fn,
        mesh=mesh,
        in_specs=tuple(spec(names) for names in in_names),
        out_specs=spec(out_names),
        check_vma=False,
    )


def packed_kernel_attention(kernel: str, q_BTHN, k_BKSN, v_BKSN, segments_BT) -> jax.Array:
    """The block-skipping `kernel` ("flash" or "splash") over rows with segment ids [B, T]
    (`masks.packed_allowed`), per shard of batch and heads under a mesh."""
    from memr1.models.kernels import flash_gpu, splash_packed

    fn = flash_gpu.flash_attention if kernel == "flash" else splash_packed.splash_packed_attention
    q_names = ("batch", "length", "q_heads", "head_dim")
    kv_names = ("batch", "kv_heads", "length", "head_dim")
    run = per_shard(fn, (q_names, kv_names, kv_names, ("batch", "length")), q_names)
    return run(q_BTHN, k_BKSN, v_BKSN, segments_BT)


# ----------------------------------------------------------------------------------------------
# einsum and chunked (XLA, every backend)
# ----------------------------------------------------------------------------------------------


def _fold_queries(q_BTHN: jax.Array, kv: int) -> jax.Array:
    """[B, T, H, N] -> [B, K, T·G, N]: the G query heads of a key/value head, time-major."""
    b, t, h, n = q_BTHN.shape
    g = h // kv
    return q_BTHN.reshape(b, t, kv, g, n).transpose(0, 2, 1, 3, 4).reshape(b, kv, t * g, n)


def _unfold_queries(out_BKQN: jax.Array, t: int) -> jax.Array:
    """The inverse of `_fold_queries`: [B, K, T·G, N] -> [B, T, H, N]."""
    b, kv, q, n = out_BKQN.shape
    g = q // t
    return out_BKQN.reshape(b, kv, t, g, n).transpose(0, 2, 1, 3, 4).reshape(b, t, kv * g, n)


def _attend_block(q_BKQN, k_BKSN, v_BKSN, mask_BTS) -> jax.Array:
    """Softmax attention of T·G folded queries: scores [B, K, T·G, S] in float32."""
    b, kv, q, n = q_BKQN.shape
    t, s = mask_BTS.shape[1:]
    g = q // t
    # Both matmuls are plain batched [Q, N] x [S, N] products over (B, K), so XLA inserts no
    # per-step transposes of the cache.
    scores = jnp.einsum("bkqn,bksn->bkqs", q_BKQN, k_BKSN).astype(jnp.float32)
    scores = scores * (n**-0.5)
    mask_BTGS = jnp.broadcast_to(mask_BTS[:, :, None, :], (b, t, g, s))
    scores = jnp.where(mask_BTGS.reshape(b, 1, q, s), scores, NEG_INF)
    probs = jax.nn.softmax(scores, axis=-1).astype(v_BKSN.dtype)
    return jnp.einsum("bkqs,bksn->bkqn", probs, v_BKSN)


def einsum_attention(q_BTHN, k_BKSN, v_BKSN, mask_BTS) -> jax.Array:
    """The reference kernel: all T query positions at once ([B, K, T·G, S] float32 scores)."""
    q_BKQN = _fold_queries(q_BTHN, k_BKSN.shape[1])
    return _unfold_queries(_attend_block(q_BKQN, k_BKSN, v_BKSN, mask_BTS), q_BTHN.shape[1])


def chunked_attention(q_BTHN, k_BKSN, v_BKSN, mask_BTS, *, chunk: int = 512) -> jax.Array:
    """`einsum_attention` over blocks of `chunk` query positions; peak scores [B, K, chunk·G, S].

    T is padded to a multiple of the chunk with fully masked queries (finite: see NEG_INF),
    whose outputs are dropped. Each block is rematerialised in the backward pass, so the
    gradient also holds one block's scores at a time.
    """
    b, t, h, n = q_BTHN.shape
    if chunk < 1:
        raise ValueError(f"attention chunk must be >= 1, got {chunk}")
    if t <= chunk:
        return einsum_attention(q_BTHN, k_BKSN, v_BKSN, mask_BTS)
    kv, s = k_BKSN.shape[1], k_BKSN.shape[2]
    pad = (-t) % chunk
    n_chunks = (t + pad) // chunk
    q_BTHN = jnp.pad(q_BTHN, ((0, 0), (0, pad), (0, 0), (0, 0)))
    mask_BTS = jnp.pad(mask_BTS, ((0, 0), (0, pad), (0, 0)))
    q_CBKQN = _fold_queries(q_BTHN, kv).reshape(b, kv, n_chunks, -1, n).transpose(2, 0, 1, 3, 4)
    mask_CBTS = mask_BTS.reshape(b, n_chunks, chunk, s).swapaxes(0, 1)

    @functools.partial(jax.checkpoint, prevent_cse=False)
    def block(q_BKQN, m_BTS):
        return _attend_block(q_BKQN, k_BKSN, v_BKSN, m_BTS)

    def body(carry, xs):
        return carry, block(*xs)

    _, out_CBKQN = jax.lax.scan(body, None, (q_CBKQN, mask_CBTS))
    out_BKQN = out_CBKQN.transpose(1, 2, 0, 3, 4).reshape(b, kv, -1, n)
    return _unfold_queries(out_BKQN, t + pad)[:, :t]


# ----------------------------------------------------------------------------------------------
# cuDNN (GPU)
# ----------------------------------------------------------------------------------------------


def cudnn_arguments(q_BTHN, k_BKSN, v_BKSN, mask_BTS) -> tuple[tuple, dict]:
    """The positional and keyword arguments `cudnn_attention` passes to dot_product_attention.

    Returns ((query [B, T', H, N], key [B, S', K, N], value [B, S', K, N]),
    {"mask": [B, 1, T', S'] bool, "scale": N^-1/2}) with T' and S' the even lengths: the padded
    queries read nothing and the padded key slots are read by no query.
    """
    b, t, h, n = q_BTHN.shape
    s = k_BKSN.shape[2]
    pt, ps = t % 2, s % 2
    query = jnp.pad(q_BTHN, ((0, 0), (0, pt), (0, 0), (0, 0)))
    key = jnp.pad(k_BKSN.transpose(0, 2, 1, 3), ((0, 0), (0, ps), (0, 0), (0, 0)))
    value = jnp.pad(v_BKSN.transpose(0, 2, 1, 3), ((0, 0), (0, ps), (0, 0), (0, 0)))
    mask = jnp.pad(mask_BTS.astype(bool), ((0, 0), (0, pt), (0, ps)))[:, None]
    return (query, key, value), {"mask": mask, "scale": float(n**-0.5)}


def cudnn_attention(q_BTHN, k_BKSN, v_BKSN, mask_BTS, *, implementation="cudnn") -> jax.Array:
    """cuDNN's fused attention; `implementation="xla"` runs the same call on any backend."""
    args, kwargs = cudnn_arguments(q_BTHN, k_BKSN, v_BKSN, mask_BTS)
    out = jax.nn.dot_product_attention(*args, **kwargs, implementation=implementation)
    return out[:, : q_BTHN.shape[1]]


# ----------------------------------------------------------------------------------------------
# Splash (TPU)
# ----------------------------------------------------------------------------------------------


def splash_segments(mask_BTS: jax.Array) -> tuple[jax.Array, int]:
    """Segment ids [B, T'] (1 on real tokens, 0 on padding) and T', T padded to the tile.

    For a full causal pass (T == S, mask = causal & key validity, as `masks.causal_mask`
    builds it) the last query reads every real key, so the mask's last row is the validity.
    """
    t = mask_BTS.shape[1]
    padded = -(-t // SPLASH_BLOCK) * SPLASH_BLOCK
    valid_BS = mask_BTS[:, -1, :].astype(jnp.int32)
    return jnp.pad(valid_BS, ((0, 0), (0, padded - t))), padded


def splash_attention(
    q_BTHN, k_BKSN, v_BKSN, mask_BTS, *, interpret: bool | None = None
) -> jax.Array:
    """The Pallas splash kernel over (batch, key/value head), each a multi-query call of G heads.

    `interpret=True` runs the kernel in Pallas' interpreter (any backend; tests); default: as
    `kernels.launch.pallas_mode` says.
    """
    from jax.experimental.pallas.ops.tpu import splash_attention as splash

    if interpret is None:
        interpret = launch.current_mode() == "interpret"
    b, t, h, n = q_BTHN.shape
    kv, s = k_BKSN.shape[1], k_BKSN.shape[2]
    if t != s:
        raise ValueError(f"splash attention runs full causal passes (T == S), got T={t}, S={s}")
    g = h // kv
    seg_BT, tp = splash_segments(mask_BTS)
    dt = v_BKSN.dtype
    scaled = (q_BTHN.astype(jnp.float32) * (n**-0.5)).astype(dt)
    q_BKGTN = jnp.pad(scaled, ((0, 0), (0, tp - t), (0, 0), (0, 0)))
    q_BKGTN = q_BKGTN.reshape(b, tp, kv, g, n).transpose(0, 2, 3, 1, 4)
    pad_s = ((0, 0), (0, 0), (0, tp - s), (0, 0))
    k_BKSN = jnp.pad(k_BKSN.astype(dt), pad_s)
    v_BKSN = jnp.pad(v_BKSN, pad_s)
    causal = splash.MultiHeadMask([splash.CausalMask((tp, tp))] * g)
    kernel = splash.make_splash_mqa_single_device(causal, interpret=interpret)

    def one_row(q_KGTN, k_KSN, v_KSN, seg_T):
        ids = splash.SegmentIds(q=seg_T, kv=seg_T)
        return jax.vmap(lambda q, k, v: kernel(q, k, v, segment_ids=ids))(q_KGTN, k_KSN, v_KSN)

    def rows(q, k, v, seg):
        return jax.vmap(one_row)(q, k, v, seg)

    kv_names = ("batch", "kv_heads", None, None)
    rows = per_shard(
        rows,
        (("batch", "kv_heads", None, None, None), kv_names, kv_names, ("batch", None)),
        ("batch", "kv_heads", None, None, None),
    )
    out_BKGTN = rows(q_BKGTN, k_BKSN, v_BKSN, seg_BT)
    out_BTHN = out_BKGTN.transpose(0, 3, 1, 2, 4).reshape(b, tp, h, n)
    return out_BTHN[:, :t].astype(dt)
