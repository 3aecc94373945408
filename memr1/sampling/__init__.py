"""The jitted KV-cache rollout engine: prefill, a while-loop decode, sampling filters, stops."""

from memr1.sampling.layout import rollout_params
from memr1.sampling.logits_processing import choose_tokens, filter_logits
from memr1.sampling.output import SampleOutput
from memr1.sampling.sampler import Sampler, left_pad
from memr1.sampling.stopping import StringStops, make_stop_set, truncate_at_stop_strings

__all__ = [
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
