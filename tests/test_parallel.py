"""parallel.py: 2 processes (torchrun, gloo on CPU) train exactly what one process trains.

Each run loads a tiny checkpoint, adds the same seeded rank-4 LoRA (B made non-zero, so every gradient
is), trains 2 steps of AdamW on fixed packed micro-batches and returns the adapter and the grad norms.
One torchrun launch runs every 2-process case (this file is also its script); the one-process references
run in the test process. Each test compares one case."""
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import checkpoint
import grpo
import lora
import parallel
import tiny

ROOT = Path(__file__).resolve().parent.parent
LOSS = dict(objective="tis", tis_cap=2.0, eps_low=0.2, eps_high=0.28, ratio_cap=None, beta=0.0)
F32, BF16 = torch.float32, torch.bfloat16
CASES = {   # name: (model type, mode, micro-batches per step, base dtype); mode None = no wrapping, no collective
    "ddp-lfm3": ("lfm3", "ddp", 4, F32), "ddp-moe": ("lfm2_moe", "ddp", 4, F32),
    "fsdp-lfm3": ("lfm3", "fsdp", 4, F32), "fsdp-moe": ("lfm2_moe", "fsdp", 4, F32),
    "ddp-uneven": ("lfm3", "ddp", 3, F32), "fsdp-uneven": ("lfm2_moe", "fsdp", 3, F32),
    "ddp-fewer-than-ranks": ("lfm3", "ddp", 1, F32), "fsdp-fewer-than-ranks": ("lfm3", "fsdp", 1, F32),
    "fsdp-bf16-base": ("lfm3", "fsdp", 4, BF16),     # bf16 base + fp32 LoRA in one unit: gathered in bf16
    "no-collective": ("lfm3", None, 4, F32),
}
# fp32: AdamW's first step moves a weight by lr * g / (|g| + eps), so a gradient component near zero carries
# its summation-order noise into the weight times up to lr / eps = 1e6: ~8e-6 seen on CPU (a real fault: ~lr)
TOL = {F32: 1e-4, BF16: 1e-4}


def steps(vocab, micro_batches, n=2, seed=0):
    """n steps of fixed packed batches: seeded token ids, prompts untrained, behaviour logprobs and
    advantages random but seeded."""
    rng, out = random.Random(seed), []
    for _ in range(n):
        seqs = []
        for _ in range(6):
            length, prompt = rng.randint(10, 24), rng.randint(2, 6)
            seqs.append(grpo.Sequence([rng.randrange(vocab) for _ in range(length)], [0] * prompt + [1] * (length - prompt),
                                   [0.0] * prompt + [rng.uniform(-7, -5.5) for _ in range(length - prompt)],
                                   rng.gauss(0, 1)))
        packed = grpo.pack(seqs, token_budget=160 * micro_batches, micro_batches=micro_batches, min_shared=None)
        assert len(packed.micro_batches) == micro_batches and not packed.waiting
        out.append(packed)
    return out


def train(ckpt, mode, micro_batches, dtype=F32):
    """(adapter tensors on rank 0, grad norm per step, the adapter before training)."""
    model = checkpoint.load_model(ckpt, dtype=dtype, device="cpu")
    lora.add_lora(model, rank=4, alpha=8, adapters=("a",), seed=1)
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for lin in lora.lora_layers(model).values():
            lin.lora_B["a"].copy_(0.05 * torch.randn(lin.lora_B["a"].shape, generator=g))
    for p in lora.lora_parameters(model, "a"):
        p.requires_grad_(True)
    lora.set_adapter(model, "a")
    model.train()
    before = {k: v.clone() for k, v in lora.adapter_state(model, "a").items()}
    net = parallel.wrap(model, mode) if mode else model
    params = [p for p in net.parameters() if p.requires_grad]          # after wrapping (FSDP2: shards)
    opt = torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1)
    norms = []
    for packed in steps(model.config.vocab_size, micro_batches):
        def loss_fn(m, mb):
            h = m(mb.input_ids, mb.position_ids, return_hidden=True)
            logp = grpo.token_logprobs(h, model.lm_head.weight, mb.targets)
            return grpo.grpo_loss(logp, mb.old_logp, mb.advantages, mb.mask, totals=packed.totals, **LOSS)
        _, norm = parallel.optimizer_step(net, opt, params, packed.micro_batches, loss_fn, grad_clip=1.0)
        norms.append(norm)
    # a checkpoint as train.py writes it (whole tensors, by parameter index), and loaded back: a no-op
    saved = parallel.whole({"params": [p.detach() for p in params], "opt": opt.state_dict()})
    mine = [p.detach().clone() for p in params]
    parallel.load_whole(params, saved["params"], opt, saved["opt"])
    assert all(torch.equal(getattr(a, "_local_tensor", a), getattr(p.detach(), "_local_tensor", p.detach()))
               for a, p in zip(mine, params))
    return parallel.adapter_state(net, "a"), norms, before, saved


def worker(out_dir, ckpts):    # under torchrun: every case, rank 0 writes the results
    rank, world, _ = parallel.init()
    assert world == 2
    torch.set_num_threads(1)
    results = {name: train(ckpts[mt], mode, n, dtype) for name, (mt, mode, n, dtype) in CASES.items()}
    results = {name: (r[0], r[1], r[3]) for name, r in results.items()}
    if rank == 0:
        torch.save(results, Path(out_dir) / "results.pt")
    parallel.close()


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    d = tmp_path_factory.mktemp("ckpt")
    return {mt: str(tiny.write_tiny_checkpoint(d / mt, mt)) for mt in ("lfm3", "lfm2_moe")}


@pytest.fixture(scope="module")
def two_ranks(ckpts, tmp_path_factory):
    out = tmp_path_factory.mktemp("ranks")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           __file__, str(out), ckpts["lfm3"], ckpts["lfm2_moe"]]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)   # a hang fails, not stalls
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
    return torch.load(out / "results.pt")


_refs = {}


def one_process(ckpts, model_type, micro_batches, dtype=F32):
    key = (model_type, micro_batches, dtype)
    if key not in _refs:
        _refs[key] = train(ckpts[model_type], None, micro_batches, dtype)
    return _refs[key]


def max_diff(a, b):
    assert a.keys() == b.keys() and a
    return max((a[k] - b[k]).abs().max().item() for k in a)


@pytest.mark.parametrize("case", [c for c in CASES if CASES[c][1]])
def test_two_ranks_train_the_same_adapter_as_one_process(case, two_ranks, ckpts):
    mt, mode, n, dtype = CASES[case]
    state, norms, saved = two_ranks[case]
    ref_state, ref_norms, before, ref_saved = one_process(ckpts, mt, n, dtype)
    d = max_diff(state, ref_state)
    print(f"{case}: max |delta| = {d:.2e}, grad norms {norms} vs {ref_norms}")
    assert d <= TOL[dtype], f"{case}: adapters differ by {d:.2e}"
    assert norms == pytest.approx(ref_norms, rel=1e-4)      # the sum over ranks, not their mean (x2)
    assert max_diff(ref_state, before) > 1e-3                # training did move the weights
    # the checkpoint's tensors: whole, the same as one process's (FSDP2's shards gathered), optimizer state too
    ours = {f"p{i}": v for i, v in enumerate(saved["params"])} | {
        f"o{i}.{k}": v for i, s in saved["opt"]["state"].items() for k, v in s.items() if v.dim()}
    ref = {f"p{i}": v for i, v in enumerate(ref_saved["params"])} | {
        f"o{i}.{k}": v for i, s in ref_saved["opt"]["state"].items() for k, v in s.items() if v.dim()}
    assert max_diff(ours, ref) <= TOL[dtype] * 10, case      # Adam's second moments: squared gradients


def test_without_the_collective_ranks_diverge(two_ranks, ckpts):
    state, norms, _ = two_ranks["no-collective"]
    ref_state, ref_norms, _, _ = one_process(ckpts, "lfm3", 4)
    assert max_diff(state, ref_state) > 1e-3
    assert norms != pytest.approx(ref_norms, rel=1e-3)


def test_shard_gives_every_rank_the_same_count():
    mbs = steps(100, 5, n=1)[0].micro_batches
    for n, world in ((4, 2), (3, 2), (1, 2), (0, 2), (4, 1), (5, 4)):
        shares = [parallel.shard(mbs[:n], r, world) for r in range(world)]
        assert {len(s) for s in shares} == {-(-n // world)}
        real = [id(m) for s in shares for m in s if m is not None]
        assert sorted(real) == sorted(id(m) for m in mbs[:n])      # each micro-batch exactly once


def test_bench_gpu_parallel_smoke_runs_on_two_cpu_ranks():
    """bench/gpu.py --parallel, the 2-GPU rows' script, on gloo at a tiny shape: it runs and prints its rows."""
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                        str(ROOT / "bench" / "gpu.py"), "--parallel", "--smoke", "--steps", "1", "--budget", "2048",
                        "--median", "300"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    rows = [line.split()[0] for line in r.stdout.splitlines() if line.split() and line.split()[0] in ("one", "ddp", "fsdp")]
    assert rows == ["one", "ddp", "fsdp"], r.stdout


if __name__ == "__main__":
    worker(sys.argv[1], {"lfm3": sys.argv[2], "lfm2_moe": sys.argv[3]})
