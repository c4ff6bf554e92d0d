"""Writing Harbor-layout task directories, shared by the make_*.py generators in this folder.

Every generator is deterministic: same code -> same bytes (tests/test_tasks.py regenerates each suite into
a temp dir and compares it with the committed files byte for byte).
"""
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ORG, SCHEMA = "harness-rl", "1.4"       # task.toml as Harbor 0.25 writes it: [task] name = "org/name", schema 1.4


def _toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(v)


def task_toml(tables):
    """{table: {key: value}} -> TOML text (plain values only; tables in the order given)."""
    out = []
    for name, kv in tables.items():
        if kv:
            out.append(f"[{name}]")
            out += [f"{k} = {_toml_value(v)}" for k, v in kv.items()]
            out.append("")
    return "\n".join(out)


def write_task(root, name, *, source, type, difficulty, instruction, environment, tests, solution,
               agent_timeout=300, verifier_timeout=30, guard=None, tags=()):
    """One task directory root/name. environment/tests/solution: {relative path: text or bytes}."""
    d = Path(root) / name
    d.mkdir(parents=True)
    tables = {"task": {"name": f"{ORG}/{name}"},       # Harbor's package name: org/name
              "metadata": {"source": source, "type": type, "difficulty": difficulty, "tags": list(tags)},
              "agent": {"timeout_sec": agent_timeout},
              "verifier": {"timeout_sec": verifier_timeout},
              "environment": {"network_mode": "no-network"},
              "guard": guard or {}}
    (d / "task.toml").write_text(f'schema_version = "{SCHEMA}"\n\n' + task_toml(tables))
    (d / "instruction.md").write_text(instruction.strip() + "\n")
    (d / "environment").mkdir()
    for sub, files in (("environment", environment), ("tests", tests), ("solution", solution)):
        for rel, content in files.items():
            p = d / sub / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(content if isinstance(content, bytes) else content.encode())
            if rel.endswith(".sh"):
                p.chmod(0o755)
    return d


def fresh_suite_dir(argv, default):
    """The output dir from the command line (default: the committed suite), emptied first. Refuses to
    empty a directory that holds anything but task directories."""
    out = Path(argv[1]) if len(argv) > 1 else HERE / default
    if out.exists():
        stray = [p.name for p in out.iterdir() if not (p / "task.toml").exists()]
        if stray:
            sys.exit(f"{out}: not a generated suite (holds {stray[:3]}); refusing to empty it")
        shutil.rmtree(out)
    out.mkdir(parents=True)
    return out


def read_helper(name):
    """A shared verifier helper (grade.py, run_tests.py): copied into each task's tests/ so every task
    is self-contained."""
    return (HERE / name).read_text()
