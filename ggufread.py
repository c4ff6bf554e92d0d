"""Reading a llama.cpp GGUF file: its metadata as a Hugging Face config dict, its tensors dequantized under
Hugging Face names, its byte-level BPE tokenizer rebuilt (checkpoint.convert_gguf writes them as a folder).

`open_gguf` checks the magic and that no tensor runs past the end of the file (a truncated download) before the optional
`gguf` package reads it. A llama3-style rope_freqs tensor is refused rather than silently ignored; the q/k rows that
llama.cpp's converter interleaves for its rotary kernel are put back in Hugging Face order (`unpermute`). Errors are
`GGUFError`, naming the file and the field.

Left out: architectures other than llama, SentencePiece (`llama`) tokenizers, pre-tokenizers other than gpt-2
and smollm, RoPE scalings other than linear, sharded GGUFs, writing anything (checkpoint.py does).
"""
from __future__ import annotations

from pathlib import Path

GGUF_INSTALL = "pip install gguf==0.19.0 (optional dependency for GGUF checkpoints)"


class GGUFError(ValueError):
    """A GGUF file that cannot be converted; checkpoint.py reports it as a CheckpointError."""


# GGUF tensor name (inside blk.N.) -> Hugging Face module name
_LAYER_NAMES = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
                "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
                "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm",
                "ffn_norm": "post_attention_layernorm"}
_TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
_PRE_TOKENIZERS = ("gpt-2", "smollm")    # llama.cpp's names; both are GPT-2's regex, smollm splits digits first
_CONTROL, _USER_DEFINED = 3, 4           # llama.cpp token types


def import_gguf(what):
    try:
        import gguf
    except ImportError:
        raise GGUFError(f"{what}: reading a GGUF file needs the gguf package: {GGUF_INSTALL}") from None
    return gguf


def open_gguf(path: Path):
    gguf = import_gguf(path)
    if not path.is_file():
        raise GGUFError(f"{path}: no such GGUF file")
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise GGUFError(f"{path}: cannot read: {e}") from None
    if magic != b"GGUF":
        raise GGUFError(f"{path}: not a GGUF file (it starts with {magic!r}, not b'GGUF')")
    try:
        reader = gguf.GGUFReader(path)
    except Exception as e:   # the reader fails in many ways on a damaged header
        raise GGUFError(f"{path}: not a readable GGUF file, truncated or corrupt? ({type(e).__name__}: {e})") \
            from None
    size = path.stat().st_size
    for t in reader.tensors:
        if t.data_offset + t.n_bytes > size or t.data.nbytes != t.n_bytes:
            raise GGUFError(f"{path}: truncated: tensor {t.name} ends at byte {t.data_offset + t.n_bytes}, "
                            f"the file has {size}")
    return gguf, reader


def _meta(reader, path, key, default=KeyError):
    field = reader.fields.get(key)
    if field is None:
        if default is KeyError:
            raise GGUFError(f"{path}: missing metadata {key!r}")
        return default
    return field.contents()


def _f32(x: float) -> float:
    """A float32 metadata value as the shortest decimal that reads back to it (9.99999974e-06 -> 1e-05)."""
    import numpy as np
    return float(str(np.float32(x)))


def _unpermute(w, n_head: int):
    """Undo llama.cpp's rotary row order: it stores each head's rows as (pair, half) where Hugging Face
    has (half, pair) -- rows [0, d/2) and [d/2, d) of a head become interleaved. Works for weights and biases."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def read_config(reader, path: Path, names: set) -> dict:
    arch = _meta(reader, path, "general.architecture")
    if arch != "llama":
        raise GGUFError(f"{path}: architecture {arch!r} is not supported (supported: llama)")

    def get(key, default=KeyError):
        value = _meta(reader, path, f"llama.{key}", default)
        if isinstance(value, list):
            raise GGUFError(f"{path}: llama.{key} varies per layer; only one value for all layers is supported")
        return value

    H, nh = int(get("embedding_length")), int(get("attention.head_count"))
    nkv = int(get("attention.head_count_kv", nh))
    head_dim = int(get("attention.key_length", H // nh))
    if int(get("attention.value_length", head_dim)) != head_dim:
        raise GGUFError(f"{path}: attention.key_length and value_length differ; not supported")
    rot = int(get("rope.dimension_count", head_dim))
    if rot != head_dim:
        raise GGUFError(f"{path}: llama.rope.dimension_count {rot} != head dim {head_dim} (partial rotary) "
                        "is not supported")
    theta = _f32(get("rope.freq_base", 10000.0))
    rope = {"rope_type": "default", "rope_theta": theta}
    scaling = get("rope.scaling.type", "none")
    if scaling == "linear":
        rope = {"rope_type": "linear", "rope_theta": theta, "factor": _f32(get("rope.scaling.factor"))}
    elif scaling != "none":
        raise GGUFError(f"{path}: rope scaling {scaling!r} is not supported (supported: none, linear)")
    if "rope_freqs.weight" in names:
        raise GGUFError(f"{path}: a rope_freqs tensor (llama3-style rope scaling) is not supported")
    emb = next((t for t in reader.tensors if t.name == "token_embd.weight"), None)
    if emb is None:
        raise GGUFError(f"{path}: no token_embd.weight tensor")
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": int(emb.shape[1]), "hidden_size": H, "intermediate_size": int(get("feed_forward_length")),
        "num_hidden_layers": int(get("block_count")), "num_attention_heads": nh, "num_key_value_heads": nkv,
        "head_dim": head_dim, "hidden_act": "silu", "max_position_embeddings": int(get("context_length", 4096)),
        "rms_norm_eps": _f32(get("attention.layer_norm_rms_epsilon")), "rope_theta": theta,
        "rope_parameters": rope, "attention_bias": any(".attn_q.bias" in n for n in names),
        "mlp_bias": any(".ffn_up.bias" in n for n in names),
        "tie_word_embeddings": "output.weight" not in names, "initializer_range": 0.02, "use_cache": True,
        "torch_dtype": "float32",
    }


def _hf_name(name: str) -> str | None:
    parts = name.split(".")
    if parts[0] == "blk" and len(parts) == 4 and parts[1].isdigit() and parts[2] in _LAYER_NAMES:
        return f"model.layers.{parts[1]}.{_LAYER_NAMES[parts[2]]}.{parts[3]}"
    if len(parts) == 2 and parts[0] in _TOP_NAMES:
        return f"{_TOP_NAMES[parts[0]]}.{parts[1]}"
    return None


def read_tensors(gguf, reader, path: Path, cfg: dict) -> dict:
    import numpy as np

    unknown = [t.name for t in reader.tensors if _hf_name(t.name) is None]
    if unknown:
        raise GGUFError(f"{path}: tensors this converter does not know: {', '.join(unknown[:8])}")
    heads = {"q_proj": cfg["num_attention_heads"], "k_proj": cfg["num_key_value_heads"]}
    out = {}
    for t in reader.tensors:
        name = _hf_name(t.name)
        try:
            w = gguf.quants.dequantize(t.data, t.tensor_type)
        except NotImplementedError:
            raise GGUFError(f"{path}: tensor {t.name} has type {t.tensor_type.name}, which gguf "
                            f"{getattr(gguf, '__version__', '')} cannot dequantize") from None
        w = np.asarray(w, dtype=np.float32).reshape([int(n) for n in reversed(t.shape)])
        n_head = heads.get(name.split(".")[-2])      # q/k rows are stored interleaved
        if n_head:
            if w.shape[0] != n_head * cfg["head_dim"]:
                raise GGUFError(f"{path}: tensor {t.name} has {w.shape[0]} rows, the metadata implies "
                                f"{n_head} heads x {cfg['head_dim']}")
            w = _unpermute(w, n_head)
        out[name] = np.ascontiguousarray(w)
    return out


def build_tokenizer(reader, path: Path):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    kind = _meta(reader, path, "tokenizer.ggml.model")
    if kind != "gpt2":
        raise GGUFError(f"{path}: tokenizer model {kind!r} is not supported (supported: gpt2, byte-level BPE)")
    pre = _meta(reader, path, "tokenizer.ggml.pre", "gpt-2")
    if pre not in _PRE_TOKENIZERS:
        raise GGUFError(f"{path}: pre-tokenizer {pre!r} is not supported (supported: {', '.join(_PRE_TOKENIZERS)})")
    tokens = _meta(reader, path, "tokenizer.ggml.tokens")
    types = _meta(reader, path, "tokenizer.ggml.token_type", [1] * len(tokens))
    vocab = {tok: i for i, tok in enumerate(tokens)}
    if len(vocab) != len(tokens):
        raise GGUFError(f"{path}: tokenizer.ggml.tokens lists some token twice")
    merges = []
    for m in _meta(reader, path, "tokenizer.ggml.merges"):
        pair = m.split(" ")
        if len(pair) != 2:
            raise GGUFError(f"{path}: tokenizer.ggml.merges: {m!r} is not two tokens")
        merges.append(tuple(pair))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.pre_tokenizer = (pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
                         if pre == "smollm" else byte_level)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, k in zip(tokens, types) if k == _CONTROL])
    tok.add_tokens([AddedToken(t, special=False, normalized=False)
                    for t, k in zip(tokens, types) if k == _USER_DEFINED])
    ids = {k: _meta(reader, path, f"tokenizer.ggml.{k}_token_id", None) for k in ("bos", "eos", "unknown", "padding")}
    for k, i in ids.items():
        if i is not None and not 0 <= i < len(tokens):
            raise GGUFError(f"{path}: tokenizer.ggml.{k}_token_id {i} is outside the vocabulary")
    add_bos = bool(_meta(reader, path, "tokenizer.ggml.add_bos_token", False))
    if add_bos and ids["bos"] is not None:
        bos = tokens[ids["bos"]]
        tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                                           special_tokens=[(bos, ids["bos"])])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    text = {k: tokens[i] if i is not None else None for k, i in ids.items()}
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": text["bos"], "eos_token": text["eos"],
              "pad_token": text["padding"], "unk_token": text["unknown"], "add_bos_token": add_bos,
              "add_eos_token": False, "clean_up_tokenization_spaces": False}
    template = _meta(reader, path, "tokenizer.chat_template", None)
    if template is not None:
        config["chat_template"] = template
    return tok, config, ids
