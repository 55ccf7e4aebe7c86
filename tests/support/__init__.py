"""Test support code shared by the test modules, the examples generator and the benchmarks (never shipped in
the wheel): fixture builders (``builders``, ``gguf_helpers``, ``gate_helpers``, ``eval_helpers``), the reference
packers of every producer's layout (``packing``), the tiny real models (``tiny_llama``, ``gguf_export``), and
fake servers on 127.0.0.1 (``hubserver``, ``engine_fake_server``, ``llamaserver``). Test modules import from here,
never from each other; ``tests/`` is on ``sys.path`` (pytest's rootdir conftest), so ``from support import x``."""
