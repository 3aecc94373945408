"""The two sides of tools/bench/bench_train.py: memr1's jitted GRPO step and the same step in
PyTorch.

An engine has `name`, `n_params`, `step()` (blocks until done; returns the first-step loss
figures on its first call, None after) and `finish()` (extra report fields; frees its memory);
`bench_train.measure` drives them. The PyTorch side computes the loss of `memr1.rl.grpo`
(token-mean PPO-clipped surrogate plus beta times the k3 KL to a frozen reference) on HF
transformers' model, with global-norm clipping and AdamW decaying what memr1's optimizer decays.
"""

from __future__ import annotations

import contextlib
import time

import numpy as np

# ----------------------------------------------------------------------------------------------
# memr1 side.
# ----------------------------------------------------------------------------------------------


class JaxEngine:
    """memr1's jitted, donating GRPO step on the train state."""

    name = "memr1 (JAX)"

    def __init__(self, setup, state, batch, ref, args, n_params: int, peak_fn):
        from memr1.rl.grpo import GRPOConfig
        from memr1.train.steps import make_grpo_reference, make_grpo_step
        from memr1.train.update import shard_batch

        self.n_params, self.state, self.peak_fn = n_params, state, peak_fn
        # The loss the PyTorch side computes: k3 KL, log-probs at temperature 1, one micro-batch.
        cfg = GRPOConfig(
            clip_eps=args.clip_eps,
            kl_beta=args.kl_beta,
            kl_estimator="k3",
            temperature=1.0,
            n_micro=1,
            pack_group=args.group if args.shared_prompt else 1,
            dual_clip=3.0,
            logprob_chunk=args.logprob_chunk,
        )
        step = make_grpo_step(setup, cfg)
        if cfg.packed:  # one row a group, as the loop feeds the update
            from memr1.train.batches import pack_step_groups

            batch = pack_step_groups(batch, args.group)
        self.batch = shard_batch(setup, batch)
        # With β > 0 a step is two programs, as in training: the reference's forward pass
        # (scored on every step here, as the PyTorch side does), then the update.
        self.ref, self.ref_compiled = ref, None
        t0 = time.perf_counter()
        self.ref_input = dict(self.batch)  # the reference program's input: no ref_logp
        if args.kl_beta > 0:
            self.ref_compiled = make_grpo_reference(setup, cfg).lower(ref, self.ref_input).compile()
            self.batch["ref_logp"] = self.ref_compiled(ref, self.ref_input)
        # Compiled ahead of time, so compile time is reported apart from the first step and
        # XLA's own memory plan of the step (temporaries, donated buffers) lands in the report.
        self.compiled = step.lower(state, self.batch).compile()
        self.compile_s = time.perf_counter() - t0
        plan = self.compiled.memory_analysis()
        self.xla = {
            k: getattr(plan, f"{k}_size_in_bytes", None)
            for k in ("temp", "argument", "output", "alias", "generated_code")
        }
        self.first = True

    def step(self) -> dict | None:
        import jax

        # The state is donated to the step: rebind it every time.
        if self.ref_compiled is not None:
            self.batch["ref_logp"] = self.ref_compiled(self.ref, self.ref_input)
        self.state, metrics = self.compiled(self.state, self.batch)
        jax.block_until_ready((self.state, metrics))
        if not self.first:
            return None
        self.first = False
        m = jax.device_get(metrics)
        check = {k: float(m[k]) for k in ("loss", "grad_norm", "pg_loss")}
        if "kl" in m:
            check["kl"] = float(m["kl"])
        return check

    def finish(self) -> dict:
        extra = {"peak_device_bytes": self.peak_fn(), "compile_s": self.compile_s}
        self.state = self.batch = self.compiled = self.ref_compiled = self.ref = None
        self.ref_input = None
        return {**extra, "xla_memory": self.xla}


# ----------------------------------------------------------------------------------------------
# PyTorch + transformers side.
# ----------------------------------------------------------------------------------------------


def torch_logprobs(logits, tokens, temperature: float = 1.0):
    """[B, T] log-probs of tokens[:, t] given tokens[:, :t]; column 0 is zero, as ours."""
    import torch

    logits = logits[:, :-1].float() / temperature
    taken = torch.gather(logits, -1, tokens[:, 1:, None])[..., 0]
    return torch.nn.functional.pad(taken - torch.logsumexp(logits, dim=-1), (1, 0))


def torch_grpo_loss(model, ref_model, tb: dict, args):
    """The same loss as memr1.rl.grpo: token-mean clipped surrogate (log-ratio clamped to ±20,
    dual clip c = 3) + beta k3 KL (exponent clamped to ±20, value to ±10), as verl bounds them."""
    import torch

    logp = torch_logprobs(model(input_ids=tb["tokens"], use_cache=False).logits, tb["tokens"])
    mask = tb["mask"]
    n = mask.sum().clamp(min=1.0)
    ratio = torch.exp((logp - tb["old_logp"]).clamp(-20.0, 20.0))
    adv = tb["advantages"][:, None]
    clipped = ratio.clamp(1.0 - args.clip_eps, 1.0 + args.clip_eps)
    per_token = torch.maximum(-ratio * adv, -clipped * adv)
    per_token = torch.where(adv < 0, torch.minimum(per_token, -3.0 * adv), per_token)
    pg = (per_token * mask).sum() / n
    if args.kl_beta == 0:
        return pg, pg, None
    with torch.no_grad():
        ref_logits = ref_model(input_ids=tb["tokens"], use_cache=False).logits
        ref_logp = torch_logprobs(ref_logits, tb["tokens"])
    d = (ref_logp - logp).clamp(-20.0, 20.0)
    kl = ((torch.exp(d) - d - 1.0).clamp(-10.0, 10.0) * mask).sum() / n
    return pg + args.kl_beta * kl, pg, kl


def torch_optimizer(model, args, cuda: bool):
    """AdamW decaying what memr1's optimizer decays: weight matrices, not norms or biases."""
    import torch

    decay, rest = [], []
    for param in model.parameters():
        (decay if param.ndim >= 2 else rest).append(param)
    groups = [{"params": decay, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.999), eps=1e-8, fused=cuda)


class TorchEngine:
    """The same GRPO step on HF transformers' Qwen2ForCausalLM with PyTorch AdamW."""

    def __init__(self, bg, cfg, params, ref_params, batch, args, n_params, device, threads):
        import jax
        import torch

        self.name = "PyTorch + transformers"
        if threads is not None:
            self.name += f" ({threads} thr)"
        self.threads, self.n_params, self.args = threads, n_params, args
        self.cuda = device == "cuda"
        self.model = bg.hf_twin(cfg, params, device).train()
        if args.remat:
            self.model.gradient_checkpointing_enable({"use_reentrant": False})
        self.ref_model = None
        if args.kl_beta > 0:
            ref_cfg = cfg.replace(param_dtype=jax.tree.leaves(ref_params)[0].dtype.name)
            self.ref_model = bg.hf_twin(ref_cfg, ref_params, device).requires_grad_(False)
        tb = {k: torch.from_numpy(np.array(v)).to(device) for k, v in batch.items()}
        tb["tokens"] = tb["tokens"].long()
        tb["mask"] = (tb.pop("response_mask") & tb.pop("valid")).float()
        self.tb = tb
        self.opt = torch_optimizer(self.model, args, self.cuda)
        # fp32 master weights with bf16 matmuls: the numerics of memr1's cast-in-matmul.
        self.autocast = contextlib.nullcontext
        if args.dtype == "bfloat16":
            self.autocast = lambda: torch.autocast(device, dtype=torch.bfloat16)
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()
        self.first = True

    def step(self) -> dict | None:
        import torch

        if self.threads is not None:
            # Process-wide, so set before every step: interleaved engines may differ.
            torch.set_num_threads(self.threads)
        self.opt.zero_grad(set_to_none=True)
        with self.autocast():
            loss, pg, kl = torch_grpo_loss(self.model, self.ref_model, self.tb, self.args)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        if self.cuda:
            torch.cuda.synchronize()
        if not self.first:
            return None
        self.first = False
        check = {"loss": loss.item(), "grad_norm": norm.item(), "pg_loss": pg.item()}
        if kl is not None:
            check["kl"] = kl.item()
        return check

    def finish(self) -> dict:
        import torch

        peak = torch.cuda.max_memory_allocated() if self.cuda else None
        self.model = self.ref_model = self.opt = self.tb = None
        if self.cuda:
            torch.cuda.empty_cache()  # hand the memory back before the JAX step grows its pool
        return {"peak_device_bytes": peak}
