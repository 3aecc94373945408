"""Memory-R1 as a system: ingest conversations into banks, answer questions, and the baselines."""
