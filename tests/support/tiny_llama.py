"""A real, tiny LlamaForCausalLM with a real byte-level BPE tokenizer, built in-process in about a second.

Tests cannot download models, yet everything downstream (quantisers, GGUF export, transformers loading,
llama.cpp, the eval harness) must run on a genuine checkpoint. This module trains a small BPE tokenizer on
a built-in multilingual corpus and saves a randomly initialised Llama with ``save_pretrained``; both are
deterministic for a seed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: a small multilingual corpus: enough for a few hundred merges across scripts, digits and punctuation
CORPUS: tuple[str, ...] = (
    "The quick brown fox jumps over the lazy dog. A quantised model should answer like its reference.",
    "Quantisation maps weights to fewer bits; the loss is measured as KL divergence per token.",
    "In 2024 the model scored 71.3% on the test, and 68.9% after 4-bit quantisation.",
    "def add(a, b):\n    return a + b\n\nprint(add(2, 3))  # 5",
    "Le renard brun rapide saute par-dessus le chien paresseux. Où est la bibliothèque ?",
    "Der schnelle braune Fuchs springt über den faulen Hund. Größe, Maß und Übung.",
    "El rápido zorro marrón salta sobre el perro perezoso. ¿Dónde está la estación?",
    "Быстрая коричневая лиса прыгает через ленивую собаку. Квантование весов модели.",
    "敏捷的棕色狐狸跳过了懒狗。模型量化可以减少内存。",
    "素早い茶色の狐が怠け者の犬を飛び越える。量子化されたモデル。",
    "빠른 갈색 여우가 게으른 개를 뛰어넘는다. 모델 양자화.",
    "Η γρήγορη καφέ αλεπού πηδά πάνω από τον τεμπέλη σκύλο.",
    "الثعلب البني السريع يقفز فوق الكلب الكسول.",
    "तेज़ भूरी लोमड़ी आलसी कुत्ते के ऊपर कूदती है।",
    "Question: What is 12 + 30? Answer: 42. Question: Which planet is red? Answer: Mars.",
    '{"name": "qcheck", "bits": 4, "group_size": 128, "ok": true}',
    "Emoji and symbols: ✓ ✗ → ← ≤ ≥ ± € £ ¥ 🙂 🚀",
)

BOS_TOKEN = "<s>"
EOS_TOKEN = "</s>"
PAD_TOKEN = "<pad>"


def build_tokenizer(vocab_size: int = 512) -> Any:
    """Train a GPT-2 style byte-level BPE (``tokenizers``) on ``CORPUS``; returns a ``PreTrainedTokenizerFast``.

    Byte-level means every string is encodable (no unknown token), which also makes the vocabulary exportable
    to GGUF as ``tokenizer.ggml.model = "gpt2"`` for llama.cpp. BOS is prepended by the post-processor.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[BOS_TOKEN, EOS_TOKEN, PAD_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(CORPUS) * 2, trainer=trainer)
    bos_id = tok.token_to_id(BOS_TOKEN)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS_TOKEN} $A", pair=f"{BOS_TOKEN} $A $B:1", special_tokens=[(BOS_TOKEN, bos_id)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=BOS_TOKEN, eos_token=EOS_TOKEN, pad_token=PAD_TOKEN,
        model_max_length=2048,
    )


def make_tiny_llama(
    path: str | Path,
    seed: int = 0,
    hidden_size: int = 64,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    intermediate: int = 128,
    vocab_size: int = 512,
    *,
    dtype: str = "float32",
    init_std: float = 0.15,
    max_position_embeddings: int = 2048,
    tie_embeddings: bool = False,
) -> Path:
    """Save a random LlamaForCausalLM (safetensors) and its tokenizer into ``path``; returns ``path``.

    ``vocab_size`` is the BPE training target; the model's vocabulary is exactly the tokenizer's size (the
    trainer may stop short of the target on a small corpus). ``init_std`` (default 0.15, larger than
    transformers' 0.02) keeps the logits spread out, so quantisation changes the predicted distribution
    measurably instead of everything being near-uniform. ``lm_head`` is a separate matrix unless
    ``tie_embeddings`` (then the checkpoint stores only the embeddings, as tied models do).
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(vocab_size)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_position_embeddings,
        rms_norm_eps=1e-5,
        initializer_range=init_std,
        tie_word_embeddings=tie_embeddings,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    generator_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
        with torch.no_grad():
            gen = torch.Generator().manual_seed(seed + 1)
            for name, param in model.named_parameters():
                if name.endswith("norm.weight"):
                    # non-trivial norm gains, so a wrong norm mapping cannot go unnoticed
                    param.copy_(1.0 + 0.1 * torch.randn(param.shape, generator=gen))
    finally:
        torch.random.set_rng_state(generator_state)
    return save_quietly(model.to(getattr(torch, dtype)), tokenizer, out)


def save_quietly(model: Any, tokenizer: Any, out: Path) -> Path:
    """``save_pretrained`` of the model (safetensors) and its tokenizer into ``out``, without progress bars."""
    from transformers.utils import logging as hf_logging

    model.generation_config.pad_token_id = tokenizer.pad_token_id
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # no "Writing model shards" bars in test and CI logs
    try:
        model.save_pretrained(out, safe_serialization=True)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    tokenizer.save_pretrained(out)
    return out
