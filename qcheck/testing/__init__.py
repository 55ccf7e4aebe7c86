"""Builders of real, tiny test models (a Llama saved by transformers, its GGUF export) for qcheck's tests,
examples and benchmarks. They need the ``eval`` extra (torch, transformers, tokenizers)."""
