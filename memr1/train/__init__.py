"""The sharded update steps (SFT, GRPO, PPO), the train state, checkpoints and metric logging.

A training loop calls, in order: `mesh.maybe_initialize_distributed()`, `mesh.build_mesh(...)`,
`state.create_train_state(...)` (and `state.make_reference(...)` when the KL β > 0), one of
`sft.make_sft_step` / `steps.make_grpo_step` (with β > 0 after `steps.make_grpo_reference`, the
reference's forward pass once per rollout) / `steps.make_ppo_prepare` + `steps.make_ppo_step`,
then per step `update.shard_batch` and the step; `checkpoint.Checkpointer` saves and resumes,
and `metrics_log` writes what the steps report. Fault drills build the step with
`faults.inject_nonfinite`, from the same update's spec (`steps.grpo_spec`, `sft.sft_spec`).
"""
