"""lora.py against PEFT on transformers' models (test-only reference), multi-adapter routing, format rules."""
import json
import math
import threading
from types import SimpleNamespace

import pytest
import torch

import checkpoint
import lora
from families import FAMILIES
from model import _RMSNorm
import tiny
from test_model import DEVICE, TOL, rand_ids, save_hf

peft = pytest.importorskip("peft")


def randomize(model, adapter, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in lora.lora_parameters(model, adapter):
            p.copy_(0.1 * torch.randn(p.shape, generator=g))


def logits(m, ids):
    with torch.no_grad():
        out = m(ids)
    return out.logits if hasattr(out, "logits") else out


def ours_and_peft(tmp_path, model_type, trainable=False):
    """Our model with a random rank-8 adapter, and transformers' model with that adapter loaded by PEFT."""
    ref, ours = save_hf(tmp_path / "base", model_type)
    lora.add_lora(ours, rank=8, alpha=16)
    randomize(ours, "default")
    lora.set_adapter(ours, "default")
    lora.save_adapter(ours, tmp_path / "adapter")
    return ours, peft.PeftModel.from_pretrained(ref, tmp_path / "adapter", is_trainable=trainable)


@pytest.mark.parametrize("model_type", ["lfm2", "lfm2_moe", "lfm3", "qwen3"])
def test_our_adapter_loaded_by_peft_gives_same_logits(tmp_path, model_type):
    ours, peft_model = ours_and_peft(tmp_path, model_type)
    peft_model.eval()
    ids = rand_ids(2, 13)
    got, want = logits(ours, ids), logits(peft_model, ids)
    assert (got - want).abs().max().item() <= TOL
    lora.set_adapter(ours, None)
    assert (logits(ours, ids) - want).abs().max().item() > 1e-3    # the adapter does change the output


@pytest.mark.parametrize("model_type", ["lfm2", "lfm2_moe", "lfm3"])
def test_peft_adapter_loads_here_with_same_logits(tmp_path, model_type):
    ref, ours = save_hf(tmp_path / "base", model_type)
    cfg = peft.LoraConfig(r=4, lora_alpha=12, target_modules=list(FAMILIES[model_type].lora_targets), init_lora_weights=False,
                          task_type="CAUSAL_LM")
    peft_model = peft.get_peft_model(ref, cfg).eval()
    peft_model.save_pretrained(tmp_path / "peft")
    lora.load_adapter(ours, tmp_path / "peft", adapter="from-peft")
    lora.set_adapter(ours, "from-peft")
    ids = rand_ids(1, 17)
    assert (logits(ours, ids) - logits(peft_model, ids)).abs().max().item() <= TOL


@pytest.mark.parametrize("model_type", ["lfm2", "lfm2_moe", "lfm3"])
def test_lora_gradients_match_peft(tmp_path, model_type):
    """The hand-written backwards (LoRA layer, RMSNorm) against PEFT + transformers' autograd."""
    ours, peft_model = ours_and_peft(tmp_path, model_type, trainable=True)
    ids, tgt = rand_ids(2, 13), rand_ids(2 * 13)
    for m in (ours, peft_model):
        out = m(ids)
        out = out.logits if hasattr(out, "logits") else out
        torch.nn.functional.cross_entropy(out.flatten(0, 1), tgt).backward()
    want = {n: p.grad for n, p in peft_model.named_parameters() if p.grad is not None}
    got = {}
    for name, mod in lora.lora_layers(ours).items():
        for part in ("lora_A", "lora_B"):
            got[f"base_model.model.{name}.{part}.default.weight"] = getattr(mod, part)["default"].grad
    assert set(got) == set(want) and len(got) > 20
    for k, g in got.items():
        scale = want[k].abs().max().item()
        assert scale > 0 and (g - want[k]).abs().max().item() <= 1e-4 * max(1.0, scale), k


def test_hand_written_backwards_pass_gradcheck():
    import torch.nn.functional as F
    g = torch.Generator().manual_seed(0)
    x, w, b = (torch.randn(*s, generator=g, dtype=torch.double, requires_grad=True) for s in ((2, 3, 6), (5, 6), (5,)))
    A, B = (torch.randn(*s, generator=g, dtype=torch.double, requires_grad=True) for s in ((3, 6), (5, 3)))
    assert torch.autograd.gradcheck(lambda *t: lora._LoRA.apply(*t, 0.7), (x, w, b, A, B))
    # frozen base and frozen input (the first layer): only A and B get gradients, and the right ones
    x0, w0 = x.detach(), w.detach()
    lora._LoRA.apply(x0, w0, None, A, B, 0.7).sum().backward()
    ga, gb = A.grad.clone(), B.grad.clone()
    A.grad = B.grad = None
    (F.linear(x0, w0) + 0.7 * (x0 @ A.t()) @ B.t()).sum().backward()
    assert torch.allclose(ga, A.grad) and torch.allclose(gb, B.grad)
    h = torch.randn(2, 5, 16, generator=g, dtype=torch.double, requires_grad=True)
    nw = torch.randn(16, generator=g, dtype=torch.double, requires_grad=True)
    assert torch.autograd.gradcheck(lambda h, nw: _RMSNorm.apply(h, nw, 1e-5), (h, nw))


def test_peft_targets_the_same_modules_as_we_do(tmp_path):
    """PEFT's all-linear on the HF model picks the same layers as our target list (minus lm_head/router)."""
    for model_type in ("lfm2", "lfm2_moe", "lfm3"):
        ref, ours = save_hf(tmp_path / model_type, model_type)
        pm = peft.get_peft_model(ref, peft.LoraConfig(r=2, target_modules="all-linear"))
        theirs = {n.removeprefix("base_model.model.") for n, m in pm.named_modules() if hasattr(m, "lora_A")
                  and isinstance(m.lora_A, torch.nn.ModuleDict)}
        theirs = {n for n in theirs if not n.endswith("feed_forward.gate")}     # PEFT also takes the router
        ours_ = set(lora.lora_layers(lora.add_lora(ours, rank=2, alpha=32)))
        assert ours_ == theirs, model_type


def test_new_adapter_equals_base(tmp_path):
    _, ours = save_hf(tmp_path, "lfm3")
    ids = rand_ids(2, 11)
    base = logits(ours, ids)
    lora.add_lora(ours, rank=32, alpha=32, adapters=("a", "b"))
    lora.set_adapter(ours, "a")
    assert torch.equal(logits(ours, ids), base)


def test_an_adapters_seed_fixes_its_init_and_leaves_the_global_rng_alone(tmp_path):
    """Each trainer's adapter starts from its own A (train.py: seed + trainer index); the run's RNG is not reset."""
    _, ours = save_hf(tmp_path, "lfm3")
    torch.manual_seed(5)
    state = torch.get_rng_state()
    for name, seed in (("a", 0), ("b", 1), ("c", 0)):
        lora.add_lora(ours, rank=4, alpha=4, adapters=(name,), seed=seed)
    assert torch.equal(torch.get_rng_state(), state)
    a, b, c = (lora.lora_parameters(ours, n)[0] for n in "abc")
    assert torch.equal(a, c) and not torch.equal(a, b)


def test_only_lora_parameters_train_and_other_adapters_stay_untouched(tmp_path):
    _, ours = save_hf(tmp_path, "lfm2_moe")
    lora.add_lora(ours, rank=4, alpha=32, adapters=("a", "b"))
    randomize(ours, "b", seed=1)
    before = {n: p.detach().clone() for n, p in ours.named_parameters()}
    for p in lora.lora_parameters(ours, "a"):
        p.requires_grad_(True)
    lora.set_adapter(ours, "a")
    opt = torch.optim.AdamW(lora.lora_parameters(ours, "a"), lr=1e-2)
    ours.train()
    ours(rand_ids(1, 9)).logsumexp(-1).mean().backward()
    opt.step()
    trained = {n for n, p in ours.named_parameters() if p.grad is not None}
    assert trained and all(".lora_A.a" in n or ".lora_B.a" in n for n in trained)
    assert all(not p.requires_grad for n, p in ours.named_parameters() if ".lora_" not in n)
    changed = {n for n, p in ours.named_parameters() if not torch.equal(p, before[n])}
    assert changed and all(".lora_A.a" in n or ".lora_B.a" in n for n in changed)


def test_recomputed_layers_use_the_forwards_adapter_in_another_thread(tmp_path):
    """Activation checkpointing recomputes each layer in backward - on a GPU in autograd's own thread, where the
    per-thread adapter routing is unset (found by bench/gpu.sh on an H200: "a different number of tensors was saved",
    the base model's layers recomputed). Backward from another thread here: the gradients equal those without
    checkpointing."""
    ours = checkpoint.load_model(tiny.write_tiny_checkpoint(tmp_path, "lfm3"), dtype=torch.float32, device=DEVICE)
    lora.add_lora(ours, rank=4, alpha=8, adapters=("a", "b"), seed=0)
    randomize(ours, "a", seed=1)
    for p in lora.lora_parameters(ours, "a"):
        p.requires_grad_(True)
    lora.set_adapter(ours, "a")
    ours.train()
    ids, grads = rand_ids(1, 40, high=ours.config.vocab_size), []
    for ckpt in (False, True):
        ours.gradient_checkpointing = ckpt
        for p in lora.lora_parameters(ours, "a"):
            p.grad = None
        loss, errors = ours(ids).logsumexp(-1).mean(), []
        t = threading.Thread(target=lambda: _backward(loss, errors))
        t.start()
        t.join()
        assert not errors, errors[0]
        grads.append([p.grad.clone() for p in lora.lora_parameters(ours, "a")])
    assert all(torch.allclose(g, h, atol=1e-6) for g, h in zip(*grads))
    assert any(g.abs().sum() > 0 for g in grads[0])


def _backward(loss, errors):
    try:
        loss.backward()
    except Exception as e:     # (a thread's exception would only be printed)
        errors.append(e)


def test_per_row_adapters_equal_running_each_row_alone(tmp_path):
    _, ours = save_hf(tmp_path, "lfm3")
    lora.add_lora(ours, rank=4, alpha=32, adapters=("a",))
    lora.add_lora(ours, rank=8, alpha=16, adapters=("b",))      # another rank: the stacks are [4 + 8] wide
    randomize(ours, "a", 1)
    randomize(ours, "b", 2)
    ids = rand_ids(3, 10)
    rows = ["b", None, "a"]
    lora.set_adapter(ours, rows)
    got = logits(ours, ids)
    for i, name in enumerate(rows):
        lora.set_adapter(ours, name)
        assert (got[i] - logits(ours, ids[i:i + 1])[0]).abs().max() <= TOL
    # and with a decoding cache (the embedded server's path)
    lora.set_adapter(ours, rows)
    cache = ours.new_cache(3)
    with torch.no_grad():
        steps = [ours(ids[:, :6], cache=cache)] + [ours(ids[:, t:t + 1], cache=cache) for t in range(6, 10)]
    assert (torch.cat(steps, 1) - got).abs().max() <= TOL


def per_row_layer(ranks, seed=0):
    """One LoRALinear 24 -> 20 with frozen adapters of the given ranks (random A and B of outputs ~1, scaling
    alpha / r)."""
    g = torch.Generator().manual_seed(seed)
    lin = lora.LoRALinear(torch.nn.Linear(24, 20), lora.Routing())
    for name, r in ranks.items():
        lin.put(name, torch.nn.Parameter(0.2 * torch.randn(r, 24, generator=g), requires_grad=False),
                torch.nn.Parameter(0.2 * torch.randn(20, r, generator=g), requires_grad=False), 16 / r)
    return lin.requires_grad_(False)


def one_row(lin, x, name):
    """The reference: the base plus one adapter's s (x A^T) B^T, written out."""
    y = torch.nn.functional.linear(x, lin.weight, lin.bias)
    return y if name is None else y + lin.scaling[name] * (x @ lin.lora_A[name].t()) @ lin.lora_B[name].t()


@pytest.mark.parametrize("three_d", [False, True])
def test_stacked_per_row_lora_equals_each_row_with_its_own_adapter(three_d):
    """Two matmuls over the batch's stacked adapters == each row through its own adapter: rows with no adapter,
    ranks 2 / 8 / 32 side by side, an adapter this layer lacks, [B*T, in] (model.py's flat tokens) and [B, T, in]."""
    lin = per_row_layer({"r2": 2, "r8": 8, "r32": 32})
    rows = ["r8", None, "r32", "r2", "r8", "elsewhere", None]     # "elsewhere": an adapter on other layers only
    lora.set_adapter(SimpleNamespace(lora_routing=lin.routing, lora_config=dict.fromkeys(rows)), rows)
    x = torch.randn(len(rows), 5, 24, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        got = lin(x if three_d else x.flatten(0, 1)).view(len(rows), 5, 20)
        for i, name in enumerate(rows):
            assert (got[i] - one_row(lin, x[i], None if name == "elsewhere" else name)).abs().max() <= TOL, i


def test_a_stale_stack_is_never_used(tmp_path):
    """The per-layer cache of stacked adapters follows in-place writes (copy_, a trainer's AdamW step on an
    adapter the server also routes to) and a name removed then added back with other weights (a load in place)."""
    _, ours = save_hf(tmp_path, "lfm2")
    lora.add_lora(ours, rank=4, alpha=32, adapters=("a", "b", "live"))
    for i, name in enumerate(("a", "b", "live")):
        randomize(ours, name, i)
    for p in lora.lora_parameters(ours, "a") + lora.lora_parameters(ours, "b"):
        p.requires_grad_(False)        # served snapshots are frozen; "live" trains
    ids, rows = rand_ids(3, 7), ["a", "b", "live"]

    def check(what):
        lora.set_adapter(ours, rows)
        got = logits(ours, ids)
        for i, name in enumerate(rows):
            lora.set_adapter(ours, name)
            assert (got[i] - logits(ours, ids[i:i + 1])[0]).abs().max() <= TOL, (what, name)
    check("first")                     # builds and caches the stacks
    lin = next(iter(lora.lora_layers(ours).values()))
    fresh = lambda names: lin.stacked(names, torch.float32)[0] is not lin.stacked(names, torch.float32)[0]  # noqa: E731
    assert fresh(("a", "b", "live"))   # "live" trains: never cached
    rows = ["a", "b", None]
    check("frozen only")
    assert not fresh(("a", "b"))       # frozen ones are
    with torch.no_grad():              # an in-place write on a cached adapter
        for p in lora.lora_parameters(ours, "a"):
            p.mul_(-2)
    check("after copy_")
    config, sd = lora.snapshot(ours, "live")
    lora.install_adapter(ours, config, sd, "b", replace=True)       # inference.py's load_inplace
    check("after a load in place")
    lora.remove_adapter(ours, "a")
    lora.add_lora(ours, rank=8, alpha=8, adapters=("a",))           # same name, new weights (B = 0: the base)
    randomize(ours, "a", 7)
    for p in lora.lora_parameters(ours, "a"):
        p.requires_grad_(False)
    check("after remove + add")
    rows = ["live", "a", "b"]
    check("with the live adapter")
    for fused in (False, True):       # fused AdamW writes without bumping _version: the live one is never cached
        opt = torch.optim.AdamW(lora.lora_parameters(ours, "live"), lr=0.05, fused=fused)
        lora.set_adapter(ours, "live")
        ours(ids).logsumexp(-1).mean().backward()
        opt.step()
        check(f"after an AdamW step, fused={fused}")


def test_per_row_gradients_equal_separate_forwards(tmp_path):
    """With gradients on, the per-row path trains every adapter of the batch as separate forwards would."""
    _, ours = save_hf(tmp_path, "lfm3")
    lora.add_lora(ours, rank=4, alpha=32, adapters=("a", "b"))
    randomize(ours, "a", 1)
    randomize(ours, "b", 2)
    ids, rows = rand_ids(3, 6), ["b", None, "a"]
    grads = []
    for per_row in (True, False):
        for p in lora.lora_parameters(ours, "a") + lora.lora_parameters(ours, "b"):
            p.grad = None
        if per_row:
            lora.set_adapter(ours, rows)
            ours(ids).logsumexp(-1).sum().backward()
        else:
            for i, name in enumerate(rows):
                if name:                # the base row has nothing to train
                    lora.set_adapter(ours, name)
                    ours(ids[i:i + 1]).logsumexp(-1).sum().backward()
        grads.append([p.grad.clone() for p in lora.lora_parameters(ours, "a") + lora.lora_parameters(ours, "b")])
    for g, want in zip(*grads):
        assert (g - want).abs().max() <= 1e-4 * max(1.0, want.abs().max().item())   # as the PEFT gradient test


def test_remove_and_add_at_run_time_leave_others_alone(tmp_path):
    _, ours = save_hf(tmp_path, "lfm2")
    lora.add_lora(ours, rank=4, alpha=32, adapters=("a", "b"))
    randomize(ours, "a", 3)
    ids = rand_ids(1, 8)
    lora.set_adapter(ours, "a")
    want = logits(ours, ids)
    lora.remove_adapter(ours, "b")
    lora.add_lora(ours, rank=8, alpha=32, adapters=("c",))
    assert torch.equal(logits(ours, ids), want)
    assert lora.adapter_names(ours) == ["a", "c"]
    with pytest.raises(lora.AdapterError, match="already loaded"):
        lora.add_lora(ours, rank=32, alpha=32, adapters=("a",))
    with pytest.raises(lora.AdapterError, match="unknown adapter 'b'"):
        lora.set_adapter(ours, "b")


def test_saved_config_and_keys_meet_vllm_rules(tmp_path):
    ours = checkpoint.load_model(tiny.write_tiny_checkpoint(tmp_path / "m", "lfm2"), dtype=torch.float32, device=DEVICE)
    lora.add_lora(ours, rank=32, alpha=32)      # the recipe's numbers: rank 32, alpha 32
    out = lora.save_adapter(ours, tmp_path / "pi-v1")
    cfg = json.loads((out / "adapter_config.json").read_text())
    assert cfg["peft_type"] == "LORA" and cfg["task_type"] == "CAUSAL_LM" and cfg["bias"] == "none"
    assert cfg["r"] == 32 and cfg["r"] in lora.VLLM_RANKS and cfg["lora_alpha"] == 32 and not cfg["use_dora"]
    # vLLM's LFM2 packs q/k/v -> qkv_proj and w1/w3 -> w13; the rest keep HF names
    vllm_lfm2 = {"q_proj", "k_proj", "v_proj", "out_proj", "in_proj", "w1", "w2", "w3"}
    assert set(cfg["target_modules"]) <= vllm_lfm2
    from safetensors.torch import load_file
    sd = load_file(out / "adapter_model.safetensors")
    for k, v in sd.items():
        m = __import__("re").fullmatch(r"base_model\.model\.(model\.layers\.\d+\.(self_attn|conv|feed_forward)\.\w+)"
                                       r"\.lora_([AB])\.weight", k)
        assert m, k
        assert v.shape[0 if m.group(3) == "A" else 1] == 32
    assert not list(tmp_path.glob(".pi-v1.*")), "temp dir left behind"


def test_misfit_adapters_are_refused_naming_the_key_and_nothing_is_loaded(tmp_path):
    _, ours = save_hf(tmp_path / "a", "lfm2")
    lora.add_lora(ours, rank=4, alpha=32)
    lora.save_adapter(ours, tmp_path / "ad")
    _, other = save_hf(tmp_path / "other", "lfm2", hidden_size=64)     # same layout, other width
    with pytest.raises(lora.AdapterError, match=r"lora_A .* do not fit .*other base model"):
        lora.load_adapter(other, tmp_path / "ad", adapter="x")
    small = checkpoint.load_model(tiny.write_tiny_checkpoint(tmp_path / "tiny", "lfm2"), dtype=torch.float32, device=DEVICE)
    with pytest.raises(lora.AdapterError, match=r"self_attn.k_proj.lora_A.weight.*not a module of this model"):
        lora.load_adapter(small, tmp_path / "ad", adapter="x")
    assert lora.adapter_names(other) == [] and all("lora_A" not in n or not len(m.lora_A)
                                                 for n, m in other.named_modules() if isinstance(m, lora.LoRALinear))
    from safetensors.torch import load_file, save_file
    sd = load_file(tmp_path / "ad" / "adapter_model.safetensors")
    bad = dict(sd, **{"base_model.model.lm_head.lora_A.weight": torch.zeros(4, 48)})
    save_file(bad, tmp_path / "ad" / "adapter_model.safetensors")
    with pytest.raises(lora.AdapterError, match=r"lm_head.lora_A.weight.*not a LoRA target"):
        lora.load_adapter(ours, tmp_path / "ad", adapter="y")
    bad = {k: v for k, v in sd.items() if not k.endswith("layers.0.conv.in_proj.lora_B.weight")}
    save_file(bad, tmp_path / "ad" / "adapter_model.safetensors")
    with pytest.raises(lora.AdapterError, match=r"layers.0.conv.in_proj has lora_A but not its pair"):
        lora.load_adapter(ours, tmp_path / "ad", adapter="y")
    cfg = json.loads((tmp_path / "ad" / "adapter_config.json").read_text())
    (tmp_path / "ad" / "adapter_config.json").write_text(json.dumps(dict(cfg, use_dora=True)))
    with pytest.raises(lora.AdapterError, match="use_dora"):
        lora.load_adapter(ours, tmp_path / "ad", adapter="y")
    assert "y" not in lora.adapter_names(ours)


def test_merge_and_merged_export_match_the_adapter(tmp_path):
    torch.manual_seed(0)        # the input ids: the same whichever tests ran before (fp32 rounding varies with them)
    path = tiny.write_tiny_checkpoint(tmp_path / "base", "lfm3")
    ours = checkpoint.load_model(path, dtype=torch.float32, device=DEVICE)
    lora.add_lora(ours, rank=4, alpha=32)
    randomize(ours, "default")
    lora.set_adapter(ours, "default")
    ids = rand_ids(1, 12, high=ours.config.vocab_size)
    want = logits(ours, ids)
    lora.save_merged(ours, path, tmp_path / "merged")
    merged = checkpoint.load_model(tmp_path / "merged", dtype=torch.float32, device=DEVICE)
    assert (logits(merged, ids) - want).abs().max() <= TOL
    assert (tmp_path / "merged" / "tokenizer.json").exists()
    lora.merge_adapter(ours, "default")
    assert lora.adapter_names(ours) == [] and (logits(ours, ids) - want).abs().max() <= TOL


def test_rslora_scaling_is_honoured(tmp_path):
    ref, ours = save_hf(tmp_path / "base", "lfm2")
    cfg = peft.LoraConfig(r=4, lora_alpha=8, use_rslora=True, target_modules=["q_proj", "w2"],
                          init_lora_weights=False)
    pm = peft.get_peft_model(ref, cfg).eval()
    pm.save_pretrained(tmp_path / "peft")
    lora.load_adapter(ours, tmp_path / "peft")
    lora.set_adapter(ours, "default")
    assert all(math.isclose(lin.scaling["default"], 8 / 2) for lin in lora.lora_layers(ours).values()
               if "default" in lin.scaling)     # alpha / sqrt(r), not alpha / r
    ids = rand_ids(1, 9)
    assert (logits(ours, ids) - logits(pm, ids)).abs().max() <= TOL
