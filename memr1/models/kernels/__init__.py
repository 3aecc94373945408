"""Attention kernels that skip the blocks a packed GRPO row's mask leaves empty.

A packed row (`memr1.rl.packing`) holds a prompt once and G replies back to back; each reply
reads the prompt and itself only (`memr1.models.masks.packed_allowed`), so most of the [T, T]
score square is masked: the replies' cross blocks and everything above the diagonal. The
kernels here read the row's segment ids and compute only the live blocks (`masks.block_live`):

  flash_gpu     a Pallas flash attention lowered to Triton (GPU): forward, dq and dk/dv kernels
                under one `custom_vjp`, grouped-query heads read through the K/V index maps.
  splash_packed the Pallas splash kernel (TPU) with the packed mask as a dynamic mask.
  costs         the FLOPs the kernels run, counted from the block mask (XLA's cost analysis
                counts 0 inside a Pallas call).

`launch` says how a Pallas call runs: natively on its accelerator, in Pallas' interpreter (any
backend: the tests on CPU), or as a zero-FLOP stand-in whose calls are counted in the compiled
program (the pod-step benchmark's `pod_step_costs.py`).
"""
