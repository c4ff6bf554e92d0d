"""Hidden-test runner, copied into the tests/ of every repo task (plain Python, no pytest needed).

usage: python3 run_tests.py TEST_FILE LOGS_DIR [--all-or-nothing]
  -> LOGS_DIR/reward.json {"reward": r, "passed": k, "total": n}
r = k / n (build, extend) or 1 if k == n else 0 (repair, --all-or-nothing).

The test functions (`def test_*()` at the top level of TEST_FILE, counted from the source, so a crash
cannot shrink n) run in a child interpreter (no site hooks: -S) with the work dir (cwd) last on sys.path,
after the standard library - a module planted there under a standard name is not what the tests import -
each under a 10 s alarm. The child reports each pass on a private pipe; a test it never reports (crash, os._exit, hang)
failed. Few imports on purpose: a verifier runs several times per task check.
"""
import os
import re
import signal
import subprocess
import sys

PER_TEST_S, TOTAL_S = 10, 25


class Timeout(Exception):
    pass


def child(test_file, fd):
    sys.path[:] = sys.path[1:] + [os.getcwd()]     # the tests dir out, the work dir after the stdlib
    os.set_inheritable(int(fd), False)          # processes the tested code starts don't get the pipe
    out = os.fdopen(int(fd), "w", buffering=1)
    scope = {"__name__": "hidden_tests", "__file__": test_file}
    try:
        with open(test_file) as f:
            exec(compile(f.read(), test_file, "exec"), scope)
    except BaseException as e:
        print(f"could not load the tests ({type(e).__name__}: {e}): every test fails")
        return

    def alarm(*_):
        raise Timeout(f"over {PER_TEST_S}s")
    signal.signal(signal.SIGALRM, alarm)
    tests = sorted((f for n, f in scope.items() if n.startswith("test_") and callable(f)),
                   key=lambda f: f.__code__.co_firstlineno)
    for f in tests:
        signal.alarm(PER_TEST_S)
        try:
            f()
            signal.alarm(0)
            out.write(f"PASS {f.__name__}\n")
            print(f"PASS {f.__name__}")
        except BaseException as e:
            signal.alarm(0)
            tb = e.__traceback__
            while tb.tb_next:
                tb = tb.tb_next
            where = f"{os.path.basename(tb.tb_frame.f_code.co_filename)}:{tb.tb_lineno}"
            print(f"FAIL {f.__name__} ({where}): {type(e).__name__}: {e}"[:500])
        sys.stdout.flush()


def main(test_file, logs_dir, *flags):
    with open(test_file) as f:
        names = re.findall(r"^def (test_\w+)\(", f.read(), re.M)
    r, w = os.pipe()
    p = subprocess.Popen([sys.executable, "-S", __file__, "--child", test_file, str(w)], pass_fds=(w,),
                         stdin=subprocess.DEVNULL)
    os.close(w)
    with os.fdopen(r) as reports:
        signal.signal(signal.SIGALRM, lambda *_: p.kill())
        signal.alarm(TOTAL_S)
        lines = reports.read().splitlines()
        p.wait()
        signal.alarm(0)
    passed = {line[5:] for line in lines if line.startswith("PASS ")} & set(names)
    k, n = len(passed), len(names)
    reward = (1.0 if k == n else 0.0) if "--all-or-nothing" in flags else k / max(n, 1)
    with open(os.path.join(logs_dir, "reward.json"), "w") as f:
        f.write(f'{{"reward": {reward}, "passed": {k}, "total": {n}}}\n')
    print(f"{k}/{n} hidden tests passed -> reward {reward:g}")


if __name__ == "__main__":
    if sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
    else:
        main(*sys.argv[1:])
