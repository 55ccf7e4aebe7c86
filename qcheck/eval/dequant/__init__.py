"""Dequantisers: each turns one module's stored tensors (the producer's exact layout) into a float32 weight.

One module per family: ``fp8`` (per-tensor, per-channel, 2-D block, MXFP8), ``fp4`` (NVFP4 from ModelOpt and
compressed-tensors, MXFP4 from gpt-oss and compressed-tensors), ``awq``, ``gptq``, ``compressed`` (compressed-
tensors pack-quantized and int-quantized), ``mlx`` (affine) and ``gguf`` (gguf-py's own dequantisers plus the
GGUF -> Hugging Face name map and rotary un-permutation). They take torch tensors as safetensors loads them
and raise ``InputError`` naming the tensor when shapes or dtypes contradict the layout, so a malformed
checkpoint never becomes a silently wrong weight. ``qcheck.eval.simulate`` chooses which one applies.
"""

from __future__ import annotations
