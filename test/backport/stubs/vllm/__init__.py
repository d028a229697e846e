"""A stand-in for the one vllm module sglang 0.5.6 and 0.5.7 import on a CPU
without AMX; see test/backport/stubs/stand_in.py."""

from stand_in import stand_in_for

__getattr__ = stand_in_for(__name__, ["vllm.model_executor.layers.activation"])
