"""A stand-in for vllm; see test/backport/stubs/stand_in.py."""

from stand_in import stand_in_for

__getattr__ = stand_in_for(__name__)
