"""The shape of the code (design.md, issue 17): flat files of at most 600 lines, each with a header docstring,
imports that only go one way, the recipe's numbers passed down instead of repeated as defaults, every flag
documented with its default."""
import argparse
import ast
import inspect
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FILES = sorted(ROOT.glob("*.py"))
MODULES = {f.stem for f in FILES}


def test_every_top_level_file_is_short_and_says_what_it_does():
    for f in FILES:
        tree = ast.parse(f.read_text())
        assert ast.get_docstring(tree), f"{f.name}: no header docstring"
        assert len(f.read_text().splitlines()) <= 600, f"{f.name}: over 600 lines"


def test_module_level_imports_form_no_cycle():
    graph = {}
    for f in FILES:
        deps = set()
        for node in ast.parse(f.read_text()).body:          # module level only: a function's import is lazy
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            deps |= {n.split(".")[0] for n in names} & MODULES
        graph[f.stem] = deps - {f.stem}
    state = {}

    def visit(m, path):
        if state.get(m) == "done":
            return
        assert state.get(m) != "open", f"import cycle: {' -> '.join(path + [m])}"
        state[m] = "open"
        for d in sorted(graph[m]):
            visit(d, path + [m])
        state[m] = "done"
    for m in sorted(graph):
        visit(m, [])
    assert "grpo" not in graph["rollout"]           # the producer makes no algorithm decision
    assert not graph["model"] & {"checkpoint", "tiny", "engine", "serve"}     # arrows point at model.py
    assert not graph["mini"]                        # runs alone in its sandbox: stdlib only


def test_the_recipe_numbers_are_arguments_not_defaults():
    import grpo
    import harnesses
    import lora
    import rollout
    numbers = {grpo.shaped_reward: ("bonus", "scale"), grpo.drop_stale: ("max_staleness",),
               grpo.pack: ("micro_batches",),
               grpo.grpo_loss: ("objective", "tis_cap", "eps_low", "eps_high", "ratio_cap", "beta"),
               rollout.run_rollout: ("max_tokens", "context"),
               rollout.RolloutPool.__init__: ("max_sessions", "group_size", "max_tokens", "context"),
               lora.add_lora: ("rank", "alpha")}
    numbers.update({type(h).prepare: ("max_tokens", "context") for h in harnesses.HARNESSES.values()})
    for fn, names in numbers.items():
        params = inspect.signature(fn).parameters
        for n in names:
            assert params[n].default in (inspect.Parameter.empty, None), \
                f"{fn.__qualname__}({n}={params[n].default!r}): a recipe number as a hidden default"


def _parser(main, argv):
    """The ArgumentParser a CLI builds (captured at parse time)."""
    got = []

    def capture(self, args=None, namespace=None):
        got.append(self)
        raise SystemExit(0)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(argparse.ArgumentParser, "parse_args", capture)
        with pytest.raises(SystemExit):
            main(argv)
    return got[0]


@pytest.mark.parametrize("cli", ["train", "eval"])
def test_every_flag_has_help_and_says_its_default(cli):
    import eval as E
    import train as TR
    ap = _parser(TR.parse_args if cli == "train" else E.main, [])
    for a in ap._actions:
        if a.option_strings and a.dest != "help":
            assert a.help, f"{cli}.py {a.option_strings[0]}: no help text"
            if a.default not in (None, False) or a.dest in {**TR.SHARED, **TR.RECIPES["tiny"]}:
                assert "default" in a.help, f"{cli}.py {a.option_strings[0]}: help does not say its default"
    if cli == "train":      # every number of the table has a flag
        flags = {a.dest for a in ap._actions}
        assert set(TR.SHARED) | set(TR.RECIPES["LFM3-1.7B"]) <= flags
