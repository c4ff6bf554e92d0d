"""train_step in seconds: the tiny model, canned groups of turns, no harness, no server. A fork that changes the step
(an estimator, a loss, a reduction, a metric) checks it here first: `python -m pytest tests/test_step.py`."""
import asyncio
import json
import threading

import pytest
import torch

import checkpoint
import grpo
import lora
import recipe
import tiny
import train
from learner import Learner
from pool import Group
from rollout import Rollout, Turn


class CannedPool:
    """A rollout pool's side of the step: finished groups, handed out in order (None when none is left)."""
    running, limit, cpu_bound = 0, 8, False

    def __init__(self, groups):
        self.groups = list(groups)

    async def next_group(self, stop, timeout):
        return self.groups.pop(0) if self.groups else None


def group(model, task, rewards, prompt, seed, version=0):
    """A finished group: one rollout per reward, each two turns (the second extends the first's history), tokens
    sampled at random from the tiny vocabulary with the base model's own logprobs as the server's."""
    g = torch.Generator().manual_seed(seed)
    rollouts = []
    for i, reward in enumerate(rewards):
        a, b = (torch.randint(4, 600, (n,), generator=g).tolist() for n in (6, 5))
        second = prompt + a + [7, 8]
        turns = [Turn(prompt, a, sampled(model, prompt, a), version),
                 Turn(second, b, sampled(model, second, b), version)]
        rollouts.append(Rollout(task=task, harness="mini", index=i, turns=turns, start_version=version,
                                tool_calls=1, score=reward, reward=reward))
    return Group(task, rollouts)


def sampled(model, prompt, completion):
    """The base model's logprob of each completion token after the prompt (the adapter off)."""
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        lora.set_adapter(model, None)
        h = model(ids[:, :-1], torch.arange(ids.shape[1] - 1)[None], return_hidden=True)
        lp = grpo.token_logprobs(h, model.lm_head.weight, ids[:, 1:])
    return lp[0, len(prompt) - 1:].tolist()


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return checkpoint.load_model(tiny.write_tiny_checkpoint(tmp_path_factory.mktemp("tiny")))


TRAINERS = iter(range(1000))       # each test's adapter has a name of its own on the module's model


def trainer(model, run_dir, **over):
    """A trainer as train.py's run() builds one, with no server: its versions are only written."""
    cfg = {**recipe.SHARED, **{k: v for k, v in recipe.RECIPES["tiny"].items() if k in recipe.SHARED}, "model": "tiny",
           "sessions": 16, "group_size": 4, "token_budget": 4096, "micro_batches": 2, "save_every": 100, **over}
    spec = f"mini:{next(TRAINERS)}"
    learner = Learner(model, train.trainer_name(spec), rank=cfg["rank"], alpha=cfg["alpha"], lr=0.05, weight_decay=0.0,
                      grad_clip=1.0, seed=0, lock=threading.Lock(), base="tiny")
    learner.snap = learner.snapshot()
    return train.Trainer(spec, learner, cfg, run_dir, ["t"], client=None)


def logp_of(tr, rollout):
    """The adapter's summed log-probability of a rollout's sampled tokens (its one packed sequence)."""
    seq, = grpo.build_sequences(rollout.turns, 0.0)
    mb = grpo.pack([seq], 4096, 1).micro_batches[0]
    m = tr.learner.model
    with torch.no_grad():
        lora.set_adapter(m, tr.learner.name)
        lp = grpo.token_logprobs(m(mb.input_ids, mb.position_ids, return_hidden=True), m.lm_head.weight, mb.targets)
    return (lp * mb.mask).sum().item()


def test_one_step_on_canned_groups_moves_each_rollout_the_way_its_advantage_says(model, tmp_path, capsys):
    tr = trainer(model, tmp_path)
    prompt = list(range(10, 50))
    groups = [group(model, "a", [1.0, 0.0, 0.0, 1.0], prompt, 1), group(model, "b", [0.5, 0.5, 0.5, 0.5], prompt, 2),
              group(model, "c", [0.0, 1.0, 0.0, 0.0], prompt, 3), group(model, "d", [1.0, 0.0, 1.0, 0.0], prompt, 4)]
    good, bad = groups[2].rollouts[1], groups[2].rollouts[0]
    before = logp_of(tr, good), logp_of(tr, bad)
    pool = CannedPool(groups)
    assert asyncio.run(train.train_step(tr, pool, asyncio.Event(), [tr])) is True
    after = logp_of(tr, good), logp_of(tr, bad)
    assert after[0] - before[0] > 0.1 + after[1] - before[1]    # advantage > 0 pushed up against < 0
    line, = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert line["step"] == 1 and line["version"] == 1 and tr.version == 1 and tr.served == 1
    assert line["groups"] == 4 and line["rollouts"] == 16 and line["no_signal"] == 1     # "b": all equal
    assert line["reward"] == pytest.approx(sum(r.reward for g in groups for r in g.rollouts) / 16)
    assert line["loss_tokens"] == 12 * 11 and line["waiting"] == 0      # 3 groups x 4 rollouts x (6 + 5) trained
    assert line["grad_norm"] > 0 and line["fresh_tokens"] == 12 * 11     # sampled by version 0, trained as it
    assert (tmp_path / "adapters" / f"{tr.name}-v1" / "adapter_model.safetensors").exists()
    assert f"[{tr.name}] step    1 | reward " in capsys.readouterr().out


def test_groups_without_signal_are_waited_through_then_the_step_trains_on_nothing(model, tmp_path):
    tr = trainer(model, tmp_path)
    share = tr.cfg["sessions"] // tr.cfg["group_size"]                   # 4 groups a step
    flat = [group(model, f"t{i}", [1.0] * 4, list(range(10, 50)), i) for i in range(20)]
    pool = CannedPool(flat)
    assert asyncio.run(train.train_step(tr, pool, asyncio.Event(), [tr])) is True
    line = json.loads((tmp_path / "metrics.jsonl").read_text())
    assert line["groups"] == 4 * share and line["no_signal"] == 4 * share and len(pool.groups) == 20 - 4 * share
    assert tr.version == 0 and line["loss_tokens"] == 0 and line["grad_norm"] is None
    assert asyncio.run(train.train_step(tr, CannedPool([]), asyncio.Event(), [tr])) is False     # stopping


@pytest.mark.parametrize("reduce", sorted(grpo.REDUCTIONS))
def test_every_registered_reduction_trains_through_the_step(model, tmp_path, reduce):
    tr = trainer(model, tmp_path, reduce=reduce)
    prompt = list(range(10, 50))
    pool = CannedPool([group(model, g, [1.0, 0.0, 0.0, 0.0], prompt, i) for i, g in enumerate("abcd")])
    assert asyncio.run(train.train_step(tr, pool, asyncio.Event(), [tr])) is True
    line = json.loads((tmp_path / "metrics.jsonl").read_text())
    assert tr.version == 1 and line["loss"] is not None and line["grad_norm"] > 0
