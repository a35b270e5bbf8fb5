"""Monorail engine: config, reference model, tokenizer, chat template, sampling, native bridge.

This package never imports Qt. It is the only package that imports ``engine._native``.
"""

__version__ = "0.1.0"
