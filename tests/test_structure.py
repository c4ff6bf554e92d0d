"""The shape of the code: flat files of at most 600 lines, each with a header docstring, imports that only go one way
(no circle, no import of an entry point, inside a function too), the recipe's numbers passed down instead of repeated
as defaults, every flag documented with its default."""
import argparse
import ast
import inspect
from pathlib import Path

import pytest
import recipe  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FILES = sorted(ROOT.glob("*.py"))
MODULES = {f.stem for f in FILES}


def test_every_top_level_file_is_short_and_says_what_it_does():
    for f in FILES:
        tree = ast.parse(f.read_text())
        assert ast.get_docstring(tree), f"{f.name}: no header docstring"
        assert len(f.read_text().splitlines()) <= 600, f"{f.name}: over 600 lines"


ENTRY_POINTS = {"train", "eval", "serve", "sft", "dashboard"}      # programs: nothing imports them


def import_graph(files=FILES):
    """module -> the modules of ours it imports, at any depth: a function's import is an arrow too."""
    graph = {}
    for f in files:
        deps = set()
        for node in ast.walk(ast.parse(f.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
            deps |= {n.split(".")[0] for n in names} & MODULES
        graph[f.stem] = deps - {f.stem}
    return graph


def cycles_and_upward_arrows(graph):
    found = [f"{m} imports the entry point {d}" for m in sorted(graph) for d in sorted(graph[m] & ENTRY_POINTS)]
    state = {}

    def visit(m, path):
        if state.get(m) == "done":
            return
        if state.get(m) == "open":
            found.append("import cycle: " + " -> ".join(path[path.index(m):] + [m]))
            return
        state[m] = "open"
        for d in sorted(graph[m]):
            visit(d, path + [m])
        state[m] = "done"
    for m in sorted(graph):
        visit(m, [])
    return found


def test_imports_point_one_way_at_every_depth(tmp_path):
    graph = import_graph()
    assert ENTRY_POINTS <= set(graph)
    assert cycles_and_upward_arrows(graph) == []
    assert "grpo" not in graph["rollout"]           # the producer makes no algorithm decision
    assert "grpo" not in graph["proxy"]             # nor does the guard proxy it talks through
    assert not graph["model"]  - {"kvcache"}        # arrows point at model.py
    assert not graph["mini"]                        # runs alone in its sandbox: stdlib only
    # the check can fail: an import inside a function that closes a circle, and one of an entry point
    (tmp_path / "grpo.py").write_text("def f():\n    import rollout\n")
    (tmp_path / "rollout.py").write_text("import grpo\n")
    (tmp_path / "lora.py").write_text("def g():\n    from train import SHARED\n")
    bad = import_graph(sorted(tmp_path.glob("*.py")))
    assert cycles_and_upward_arrows({**{m: set() for m in MODULES}, **bad}) == [
        "lora imports the entry point train", "import cycle: grpo -> rollout -> grpo"]


def test_the_recipe_numbers_are_arguments_not_defaults():
    import grpo
    import harnesses
    import lora
    import pool
    import rollout
    numbers = {grpo.shaped_reward: ("bonus", "scale", "blocked_reward"), grpo.drop_stale: ("max_staleness",),
               grpo.pack: ("micro_batches",),
               grpo.grpo_loss: ("objective", "beta"),
               rollout.run_rollout: ("max_tokens", "context"),
               pool.RolloutPool.__init__: ("max_sessions", "group_size", "max_tokens", "context"),
               lora.add_lora: ("rank", "alpha")}
    numbers.update({type(h).prepare: ("max_tokens", "context") for h in harnesses.HARNESSES.values()})
    numbers.update({o.fn: o.knobs for o in (*grpo.OBJECTIVES.values(), *grpo.REDUCTIONS.values())})   # tis_cap, ...
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
    import eval
    import train
    ap = _parser(train.parse_args if cli == "train" else eval.main, [])
    for a in ap._actions:
        if a.option_strings and a.dest != "help":
            assert a.help, f"{cli}.py {a.option_strings[0]}: no help text"
            if a.default not in (None, False) or a.dest in {**recipe.SHARED, **recipe.RECIPES["tiny"]}:
                assert "default" in a.help, f"{cli}.py {a.option_strings[0]}: help does not say its default"
    if cli == "train":      # every number of the table has a flag
        flags = {a.dest for a in ap._actions}
        assert set(recipe.SHARED) | set(recipe.RECIPES["LFM3-1.7B"]) <= flags


def test_the_docs_column_list_is_the_metrics_table():
    """docs/main-job.md lists what `python metrics.py` prints: a metric added as a row shows there once regenerated."""
    import metrics
    doc = (ROOT / "docs" / "main-job.md").read_text()
    listed = doc.split("<!-- metrics.py: begin -->\n")[1].split("\n<!-- metrics.py: end -->")[0]
    assert listed == metrics.columns(), "docs/main-job.md: run `python metrics.py --docs`"
