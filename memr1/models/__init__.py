"""Decoder-only backbones (Qwen-2 / Qwen-2.5 and LLaMA-3.1) and their HF checkpoint I/O."""
