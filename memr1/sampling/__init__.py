"""Rollouts: the engine every caller samples with (`engine`: a paged KV cache in which a prompt is
stored once for its G samples, continuous batching over fixed decode slots, per-row PRNG keys;
`scheduler` its host side, `paged` its cache and attention, `programs` its compiled prefill and
decode round), the dense reference sampler it is tested against (`sampler`), the decode copy
of the weights (`layout`), and the sampling filters and stops both use."""

from memr1.sampling.engine import Engine, EngineOutput, EngineSettings, EngineStats
from memr1.sampling.layout import rollout_params
from memr1.sampling.logits_processing import choose_tokens, filter_logits
from memr1.sampling.output import SampleOutput
from memr1.sampling.sampler import Sampler, left_pad
from memr1.sampling.stopping import StringStops, make_stop_set, truncate_at_stop_strings

__all__ = [
    "Engine",
    "EngineOutput",
    "EngineSettings",
    "EngineStats",
    "SampleOutput",
    "Sampler",
    "StringStops",
    "choose_tokens",
    "filter_logits",
    "left_pad",
    "make_stop_set",
    "rollout_params",
    "truncate_at_stop_strings",
]
