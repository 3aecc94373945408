"""memr1: Memory-R1 in JAX/Flax.

Two LLM agents share an external memory: a Memory Manager that turns dialogue facts into
ADD / UPDATE / DELETE / NOOP operations on a memory bank, and an Answer Agent that distils the
retrieved memories and answers. Both are trained with outcome-only RL (exact match of the answer).

Rooms of the package, lowest layer first (a room imports only rooms above it in this list;
tests/test_layering.py checks it):
  torchless.py  a command's transformers without PyTorch (tokenizers and configs only)
  atomic.py   files and folders written under a temporary name and renamed into place
  models/     decoder-only backbones (Qwen-2.5, LLaMA-3.1), HF checkpoint import/export
  sampling/   the rollout engine (paged KV, continuous batching) and its reference sampler
  embed/      the Flax MiniLM sentence encoder used for memory retrieval
  memory/     memory banks as fixed-capacity arrays and their pure operations
  retrieval/  top-k search over banks (ScaNN, exact)
  data/       LoCoMo / LongMemEval / MSC loaders, the synthloco generator, TFDS builders
  eval/       metrics (EM, F1, BLEU-1, LoCoMo scorer), LLM judges, aggregation
  env/        the agents' environment: prompts, parsers, the text policy, the memory store,
              ingestion (Memory Manager), answering (Answer Agent), rewards and rollouts
  tuples/     Algorithm 1: the training tuples of both agents, built by running env/
  rl/         GRPO and PPO losses, the critic, advantages, GAE, log-prob helpers
  train/      infrastructure: train state, jitted steps, loop, mesh, LoRA, checkpoints, logs
  drill/      the reliability drill's workers and checks (run by tools/fault_drill.py)
The jobs evaluate.py, generate.py and quickstart.py sit on top; experiments/ (beside the package)
holds the launch scripts and the CPU demo.

Axis legend, used in einsum strings and as array-name suffixes (``logits_BTV``, ``q_BTHN``):
  B batch        T time (query positions)   S key/value positions (cache slots)
  D model dim    F feed-forward dim         V vocabulary
  H query heads  K key/value heads          N head dim
  L layers       G group (samples per state) M memories (bank capacity)
  E embedding dim of the sentence encoder   Q queries
The rollout engine (memr1/sampling/) adds:
  C chips: the data × fsdp devices that decode rows of their own
  R decode slots (the rows of a round)      P pages of the KV pool (`page` token slots each)
  W stop window (generated tokens a stop test remembers)
"""

__version__ = "0.1.0"
