"""RL maths as small pure functions: advantages, GAE, clipped losses, KL, log-probs."""
