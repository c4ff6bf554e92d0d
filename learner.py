"""The learning half of a trainer, apart from any harness: one LoRA adapter on a shared frozen base, its optimizer, its
update and its state. train.py (GRPO) and warmstart.py (SFT) both train through it.

    lock = threading.Lock()                          # one per base: adapters on one base train one at a time
    learner = Learner(model, "pi", rank=32, alpha=32, lr=1e-5, weight_decay=0.0, grad_clip=1.0, seed=0, lock=lock)
    learner.attach(net)                              # the model as parallel.wrap holds it (DDP / FSDP2), or itself
    loss = functools.partial(policy_loss, temperature=1.0, **recipe.loss_settings(cfg))   # GRPO's; SFT: its own
    out, grad_norm = learner.update(packed.micro_batches, loss, packed.totals)   # every rank (parallel.call on rank 0)

`update` is the whole optimizer step: parallel.optimizer_step runs forward/backward per micro-batch through the loss
function (`policy_loss`: the model's log-probs -> grpo.grpo_loss -> its objective and reduction), clips, steps AdamW.

Left out: what is trained on and when (train.py: rollouts, queue, publishing; warmstart.py: demonstrations), the
algorithm's math (grpo.py), the distributed mechanics (parallel.py).
"""
from __future__ import annotations

import torch

import grpo
import lora
import parallel


class Learner:
    def __init__(self, model, name, *, rank, alpha, lr, weight_decay, grad_clip, seed, lock, base="", alone=False):
        self.model, self.name, self.lr, self.weight_decay, self.grad_clip = model, name, lr, weight_decay, grad_clip
        self.alone = alone          # this process only, even under torchrun (the warm start: rank 0's alone)
        self.base = base            # the base model's name in the adapter's config (PEFT's base_model_name_or_path)
        self.lock = lock            # shared by the learners of one base: set_adapter is the base's state
        lora.add_lora(model, rank=rank, alpha=alpha, adapters=(name,), seed=seed)
        for p in lora.lora_parameters(model, name):
            p.requires_grad_(True)
        self.version, self.snap = 0, None
        self.attach(model)

    def attach(self, net):
        """Train through `net` (parallel.wrap's model: FSDP2 swaps the parameters for shards; one process: the
        model itself); the optimizer is built over the parameters as `net` holds them."""
        self.net, self.params = net, lora.lora_parameters(self.model, self.name)
        self.opt = torch.optim.AdamW(self.params, lr=self.lr, weight_decay=self.weight_decay)

    def update(self, micro_batches, loss_fn, totals):
        """Every rank, in the same order: one optimizer step (parallel.optimizer_step); version + 1 and a new `snap`
        when something trained. loss_fn(learner, net, mb, totals) -> (the micro-batch's share of the step's loss,
        stats), module-level (or a partial of one): under torchrun it travels to the other ranks. totals: the step's
        grpo.Totals. Returns (every rank's (loss, stats) per micro-batch on rank 0, grad norm or None: nothing
        changed)."""
        lora.set_adapter(self.model, self.name)
        self.model.train()
        out, grad_norm = parallel.optimizer_step(self.net, self.opt, self.params, micro_batches,
                                      lambda net, mb: loss_fn(self, net, mb, totals), self.grad_clip, self.alone)
        self.model.eval()
        if grad_norm is not None:
            self.version += 1
            self.snap = self.snapshot()
        out = [(x.cpu(), {k: v.cpu() for k, v in st.items()}) for x, st in out]   # rank 0 unpickles them: CPU
        return out if self.alone else parallel.gather(out), grad_norm

    def snapshot(self):
        """(adapter config, tensors) of the live adapter, whole (every rank: FSDP2 gathers the shards)."""
        config, tensors = lora.snapshot(self.model, self.name, self.base)
        if isinstance(self.net, parallel.FSDPModule):
            tensors = parallel.adapter_state(self.net, self.name)
        return config, tensors

    def state(self):
        """Every rank; whole tensors (FSDP2's shards gathered): the same checkpoint at any world size."""
        return {"version": self.version, "adapter": {i: parallel.whole(p.detach()).cpu() for i, p in enumerate(self.params)},
                "optimizer": parallel.whole(self.opt.state_dict())}

    def restore(self, st, version=None):
        """Every rank, from rank 0's copy of the checkpoint."""
        self.version = st.get("version", version)
        parallel.load_whole(self.params, st["adapter"], self.opt, st["optimizer"])


def policy_loss(learner, net, mb, totals, *, temperature, beta, **settings):
    """GRPO's loss of one micro-batch through `net`: the adapter's log-probs of the sampled tokens at the server's
    temperature, then grpo.grpo_loss (the objective per token, reduced over the step's `totals`). beta > 0: the
    base model's log-probs too (adapter off, no gradient) for the KL term. Module-level: under torchrun it travels
    to the other ranks with its settings."""
    model, dev = learner.model, learner.model.lm_head.weight.device
    ids, pos, tgt, mask, old, adv, ver, lengths = (x.to(dev) for x in (
        mb.input_ids, mb.position_ids, mb.targets, mb.mask, mb.old_logp, mb.advantages, mb.versions, mb.rollout_tokens))
    ref = None
    if beta:
        with torch.no_grad():
            lora.set_adapter(model, None)
            ref = grpo.token_logprobs(net(ids, pos, return_hidden=True), model.lm_head.weight, tgt,
                                      temperature=temperature)
    lora.set_adapter(model, learner.name)
    logp = grpo.token_logprobs(net(ids, pos, return_hidden=True), model.lm_head.weight, tgt, temperature=temperature)
    return grpo.grpo_loss(logp, old, adv, mask, totals, beta=beta, **settings, rollout_tokens=lengths, ref_logp=ref,
                          fresh=ver == learner.version)     # fresh: sampled by these very weights
