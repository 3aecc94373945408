"""The XLA flags a multi-device subprocess inherits: the run's own flags, its own device count."""

from __future__ import annotations

from tests.fake_devices import xla_flags


def test_subprocess_flags_keep_the_isa_cap_and_replace_the_device_count(monkeypatch):
    monkeypatch.setenv(
        "XLA_FLAGS", "--xla_cpu_max_isa=AVX2 --xla_force_host_platform_device_count=2"
    )
    assert xla_flags(8) == "--xla_cpu_max_isa=AVX2 --xla_force_host_platform_device_count=8"
    assert xla_flags() == "--xla_cpu_max_isa=AVX2"
    monkeypatch.delenv("XLA_FLAGS")
    assert xla_flags(3) == "--xla_force_host_platform_device_count=3"
