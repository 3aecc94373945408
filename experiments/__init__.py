"""Experiments beside the library: launch scripts for GPU nodes and TPU pods, and the CPU demo."""
