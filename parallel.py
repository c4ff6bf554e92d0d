"""Data-parallel LoRA training on torch.distributed: N processes compute exactly the update one process does.

Each rank holds the same base and adapter and trains its `shard` of a step's micro-batches. The loss is reduced over
the step's *global* counts (grpo.Totals: e.g. its trained tokens), so gradients are summed over ranks (DDP's and
FSDP2's default mean is switched off). Every rank runs as many forward/backward passes as the others, since each
enters collectives. Rank 0 drives:
`call(learner.update, *args)` runs it on every rank, the others waiting in `follow`. A checkpoint is the same file at
any world size (`whole` / `load_whole`).

Left out: tensor / pipeline / expert parallelism, ZeRO for DDP, several trainable adapters in one wrapped model (DDP
would need find_unused_parameters), sharded checkpoints (adapter and optimizer state are small: gathered whole), and
who does what on rank 0 (pools, server, I/O: train.py).
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import gc
import os
import sys
import warnings

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor, distribute_tensor
from torch.nn.parallel import DistributedDataParallel as DDP

import lora

MODES = ("ddp", "fsdp")


# ----------------------------------------------------------------------------- processes

def env():
    """(rank, world size, local rank) from torchrun's environment; (0, 1, 0) outside it."""
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("LOCAL_RANK", 0))


def init(device=None, timeout=None):
    """(rank, world, device) for this process; with world > 1 under torchrun it joins the process group (NCCL for
    CUDA tensors + gloo for CPU ones on GPUs, gloo alone on CPU). device: default cuda:LOCAL_RANK, else the CPU.
    timeout: seconds a collective may wait (torch's default, 30 min for gloo, is less than a step may wait)."""
    rank, world, local = env()
    device = torch.device(device) if device else torch.device("cuda", local) if torch.cuda.is_available() else \
        torch.device("cpu")
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.set_device(device)
    if world > 1 and not dist.is_initialized():
        _die_with_parent()
        dist.init_process_group("cuda:nccl,cpu:gloo" if cuda else "gloo", device_id=device if cuda else None,
                                timeout=datetime.timedelta(seconds=timeout) if timeout else None)
    return rank, world, device


_PARENT = os.getppid()         # torchrun's agent (it may itself be pid 1, in a container)


def _die_with_parent():
    """Have the kernel kill this process when torchrun's agent dies (Linux): workers run in sessions of their own,
    so a kill -9 of torchrun would leave rank 0 writing the run that a --resume then opens a second time."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, 9)       # PR_SET_PDEATHSIG, SIGKILL
    except (OSError, AttributeError):                       # not Linux: rundir's lock still refuses a 2nd writer
        pass
    if os.getppid() != _PARENT:                             # the parent died before the call above
        os._exit(1)


def _rank_world():
    return (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)


def world():
    """The number of ranks training together (1 outside torchrun)."""
    return _rank_world()[1]


def broadcast(obj):
    """Rank 0's `obj` on every rank (pickled through the process group); `obj` itself in one process."""
    if world() == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def gather(items):
    """Every rank's list, concatenated in rank order, on rank 0 ([] elsewhere); `items` in one process."""
    rank, world = _rank_world()
    if world == 1:
        return items
    out = [None] * world if rank == 0 else None
    dist.gather_object(items, out, dst=0)
    return [x for part in out for x in part] if rank == 0 else []


_busy = []      # lockstep work in progress on rank 0: a failure inside it leaves the others inside a collective


@contextlib.contextmanager
def lockstep(what):
    """Rank 0 and the others are in the same collective code (a `call`, or building the wrapped model): if it
    raises, this rank is `broken` - the others cannot be told anything any more."""
    if broken():
        raise RuntimeError(f"{what}: an earlier collective ({_busy[0]}) failed half-way; no further one")
    _busy.append(what)
    yield
    _busy.pop()


def broken():
    """True once lockstep work failed half-way on this rank (then: no collective, no `release`)."""
    return bool(_busy) and world() > 1


def call(method, *args):
    """On rank 0: run bound method(*args) (learner.update) on every rank - the others, in `follow`, get its object's
    `name`, the method and rank 0's args - and return rank 0's result. One process: a plain call."""
    with lockstep(method.__name__):
        if world() > 1:
            broadcast((method.__self__.name, method.__name__, args))
        return method(*args)


def follow(objs):
    """On ranks > 0: run rank 0's `call`s on the objects of the same names until it calls `release`."""
    by_name = {o.name: o for o in objs}
    while (msg := broadcast(None)) is not None:
        name, method, args = msg
        getattr(by_name[name], method)(*args)


def close():
    """Leave the process group together (a barrier, then destroy): a rank that exits while another still reads
    its last message makes gloo abort that one (SIGABRT). FSDP's/DDP's last async work handles go first."""
    if dist.is_initialized():
        gc.collect()
        dist.barrier()
        dist.destroy_process_group()


def end(status=None):
    """sys.exit(status) - but under torchrun, after `close`, exit at once (os._exit, output flushed): gloo's worker
    threads can still abort the interpreter's teardown ("terminate called without an active exception", SIGABRT,
    pytorch#179291; seen in CI on a loaded machine after a run that had finished and saved everything)."""
    if env()[1] == 1:
        sys.exit(status)
    if isinstance(status, str):
        print(status, file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if status is None else status if isinstance(status, int) else 1)


def release():
    """On rank 0: end the other ranks' `follow` (or their wait to start). False, sending nothing, if a call failed
    half-way (the others are inside a collective): the caller exits non-zero and torchrun stops them."""
    if broken():
        return False
    if world() > 1:
        broadcast(None)
    return True


# ----------------------------------------------------------------------------- splitting a step

def shard(micro_batches, rank, world):
    """This rank's share of a step's micro-batches: longest first, dealt out in snake order (0 1 .. N-1
    N-1 .. 1 0 ..) so the ranks' token counts stay close; padded with None to ceil(n / world) entries on
    every rank (3 on 2 ranks: [a, None] and [b, c]; 1 on 2 ranks: [a] and [None])."""
    order = sorted(range(len(micro_batches)), key=lambda i: -micro_batches[i].num_tokens)
    mine = [micro_batches[i] for k, i in enumerate(order)
            if (k % world if (k // world) % 2 == 0 else world - 1 - k % world) == rank]
    return mine + [None] * (-(-len(micro_batches) // world) - len(mine))


def _blank(mb):
    """A one-token micro-batch with no trained token, for a padding slot: it runs the same modules (so the
    same collectives) as a real one at almost no cost."""
    cut = {f.name: getattr(mb, f.name)[:, :1] for f in dataclasses.fields(mb)
           if isinstance(getattr(mb, f.name), torch.Tensor)}
    cut["position_ids"], cut["mask"] = torch.zeros_like(cut["position_ids"]), torch.zeros_like(cut["mask"])
    return dataclasses.replace(mb, **cut, sequences=[], shared=[])


# ----------------------------------------------------------------------------- wrapping

def _sum_hook(state, bucket):
    """DDP's all-reduce without its division by the world size (see the module docstring). A comm hook
    rather than loss * world: the loss keeps its meaning (the step's token mean) and no rounding is added."""
    return dist.all_reduce(bucket.buffer(), async_op=True).get_future().then(lambda f: f.value()[0])


def wrap(model, mode, reduce_dtype=torch.float32):
    """The model for training on this process group (one process: `model` unchanged); build the optimizer after it.
    "ddp": the DDP module (rank 0's parameters broadcast): call it for the forward, reach the model as `.module`.
    "fsdp": in place, adapters set to rank 0's; one unit per decoder block, LoRA gradients summed in `reduce_dtype`,
    gathers in the base's dtype (a bf16 base with fp32 LoRA must gather uniformly), block inputs uncast (fp32 RoPE
    tables); the frozen embedding / tied lm_head / final norm stay whole on every rank, for the loss to use."""
    if mode not in MODES:
        raise ValueError(f"parallel.wrap: mode must be one of {MODES}, not {mode!r}")
    world = _rank_world()[1]
    if world == 1:
        return model
    if mode == "ddp":
        dev = model.lm_head.weight.device
        ddp = DDP(model, device_ids=[dev.index] if dev.type == "cuda" else None, forward_sync_buffers=False)
        ddp.register_comm_hook(None, _sum_hook)
        return ddp
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                dist.broadcast(p, src=0)
    mesh = init_device_mesh(model.lm_head.weight.device.type, (world,))
    mp = MixedPrecisionPolicy(param_dtype=model.lm_head.weight.dtype, reduce_dtype=reduce_dtype,
                              cast_forward_inputs=False)
    for block in model.model.layers:
        fully_shard(block, mesh=mesh, mp_policy=mp)
    in_blocks = {id(p) for p in model.model.layers.parameters()}
    whole = {p for p in model.parameters() if id(p) not in in_blocks}
    if any(p.requires_grad for p in whole):
        raise ValueError("parallel.wrap: fsdp keeps the embedding / lm_head / final norm whole and frozen; "
                         "a trainable one there is not supported")
    fully_shard(model, mesh=mesh, mp_policy=mp, ignored_params=whole)
    # FSDP2 warns that an in-place op on the returned view would skip its backward hook; the loss never writes to it
    warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module \(FSDPCausalLM\) returned a view tensor")
    for m in model.modules():
        if isinstance(m, FSDPModule):
            m.set_gradient_divide_factor(1.0)
            m.set_force_sum_reduction_for_comms(True)
    return model


def _sync(model, last):
    """Gradient sync on the last micro-batch of a step only (accumulate locally before it)."""
    if isinstance(model, DDP):
        return contextlib.nullcontext() if last else model.no_sync()
    if isinstance(model, FSDPModule):
        model.set_requires_gradient_sync(last)
    return contextlib.nullcontext()


# ----------------------------------------------------------------------------- one step

def optimizer_step(model, opt, params, micro_batches, loss_fn, grad_clip, alone=False):
    """One optimizer step, this rank taking its `shard` of the step's micro-batches (the same list on every rank);
    every rank must call it. loss_fn(model, mb) -> (its share of the step's loss, over the step's global counts, stats). Returns
    ([(loss, stats) per own micro-batch], global grad norm before clipping, or None: no micro-batch, nothing changed).
    alone: the whole step in this process (a model not wrapped for the other ranks)."""
    rank, world = (0, 1) if alone else _rank_world()
    share = shard(micro_batches, rank, world)
    opt.zero_grad(set_to_none=True)
    out = []
    for i, mb in enumerate(share):
        with _sync(model, last=i == len(share) - 1):
            loss, stats = loss_fn(model, mb if mb is not None else _blank(micro_batches[0]))
            (loss if mb is not None else loss * 0).backward()
        if mb is not None:
            out.append((loss.detach(), stats))
    if not share:
        return out, None
    # DDP's gradients are the same on every rank; FSDP2's are shards, a partial norm until full_tensor() reduces it
    norm = torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
    if isinstance(norm, DTensor):
        norm = norm.full_tensor()
    torch.nn.utils.clip_grads_with_norm_(params, grad_clip, norm)
    opt.step()
    return out, norm.item()


# ----------------------------------------------------------------------------- saving

def adapter_state(model, name) -> dict:
    """Adapter `name` as PEFT-key tensors, whole and on the CPU, on rank 0; {} elsewhere. Under FSDP2 every rank must
    call it, and `name` must be the adapter being trained (only trainable tensors are gathered). Its config:
    lora.snapshot on the unwrapped model."""
    rank, _ = _rank_world()
    if isinstance(model, FSDPModule):
        sd = get_model_state_dict(model, options=StateDictOptions(
            full_state_dict=True, cpu_offload=True, ignore_frozen_params=True))
        out = {}
        for k, v in sd.items():
            module, _, rest = k.rpartition(".lora_")
            if rest in (f"A.{name}", f"B.{name}"):
                out[f"{lora.PREFIX}{module}.lora_{rest[0]}.weight"] = v
        return out if rank == 0 else {}
    if rank != 0:
        return {}
    return {k: v.cpu().clone() for k, v in lora.adapter_state(getattr(model, "module", model), name).items()}


# ----------------------------------------------------------------------------- checkpoints at any world size

def whole(obj):
    """obj (a state dict, nested) with every DTensor replaced by its full tensor (a collective: every rank
    calls it, in the same order); plain tensors and other values as they are."""
    if isinstance(obj, DTensor):
        return obj.full_tensor()
    if isinstance(obj, dict):
        return {k: whole(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(whole(v) for v in obj)
    return obj


def _like(t, p):
    """Whole tensor t as parameter p holds it: p's slice of it when p is sharded (no communication: every
    rank has t), else t on p's device."""
    t = t.to(p.device)
    return distribute_tensor(t, p.device_mesh, p.placements, src_data_rank=None) if isinstance(p, DTensor) else t


def load_whole(params, tensors, opt, opt_state):
    """Restore what `whole` saved: tensors[i] into params[i], and an optimizer state dict of whole tensors
    (one process's format, keyed by parameter index) into opt, sliced to each sharded parameter."""
    with torch.no_grad():
        for i, p in enumerate(params):
            p.copy_(_like(tensors[i], p))
    state = {i: {k: _like(v, params[i]) if torch.is_tensor(v) and v.dim() else v for k, v in s.items()}
             for i, s in opt_state["state"].items()}
    opt.load_state_dict({**opt_state, "state": state})
