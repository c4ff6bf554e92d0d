"""Writes data/files/: questions whose answer exists only in a small file of the work dir - a config value, the
number of log lines at a level, the name with the highest score, the sum of a column, a person's city - so an
agent must read (or compute from) the file: the suite of the CPU recipe on a real pretrained model with a warm
start (SmolLM2-135M-Instruct). The question names the file and never the answer. Five kinds x 13 instances, so the
held-out split (15 % by name hash, >= 8 tasks) holds instances of kinds the training tasks also cover. Graded by
files_grade.py from answer.txt or the final reply. Deterministic; usage: python data/make_files.py [OUT_DIR]"""
import random
import sys

from taskgen import fresh_suite_dir, read_helper, write_task

N = 13
HOW = ("Reply with only the answer, or write it into answer.txt (your reply is graded when answer.txt does not "
       "exist). Partial answers earn partial credit.")
KEYS = {"port": lambda r: str(r.randint(1024, 9999)), "workers": lambda r: str(r.randint(2, 64)),
        "timeout": lambda r: str(r.randint(5, 300)), "retries": lambda r: str(r.randint(1, 9)),
        "mode": lambda r: r.choice(["fast", "safe", "debug", "batch", "eco"]),
        "region": lambda r: r.choice(["north", "south", "east", "west", "central"]),
        "user": lambda r: r.choice(["admin", "guest", "deploy", "ops", "backup"]),
        "level": lambda r: r.choice(["low", "medium", "high"]), "cache": lambda r: str(r.randint(16, 512))}
NAMES = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy", "mallory", "oscar",
         "peggy", "trent", "victor", "wendy"]
CITIES = ["paris", "berlin", "madrid", "rome", "vienna", "oslo", "lisbon", "prague", "dublin", "warsaw", "athens"]
ITEMS = ["apples", "pears", "plums", "nuts", "eggs", "bread", "milk", "rice", "tea", "soap"]
EVENTS = ["request served", "cache miss", "user login", "job started", "job finished", "disk check",
          "slow query", "retry scheduled", "config reloaded", "connection closed"]


def config(r):
    keys = r.sample(sorted(KEYS), r.randint(4, 7))
    values = {k: KEYS[k](r) for k in keys}
    f, key = r.choice(["config.ini", "settings.conf", "app.cfg"]), r.choice(keys)
    text = "".join(f"{k} = {v}\n" for k, v in values.items())
    return f, text, f"What is the value of `{key}` in {f}?", values[key]


def log_count(r):
    f, level = r.choice(["app.log", "server.log", "jobs.log"]), r.choice(["ERROR", "WARN", "INFO"])
    lines = [(r.choice(["INFO", "INFO", "WARN", "ERROR"]), r.choice(EVENTS)) for _ in range(r.randint(6, 12))]
    if not any(lv == level for lv, _ in lines):
        lines[r.randrange(len(lines))] = (level, r.choice(EVENTS))
    text = "".join(f"2024-05-{r.randint(1, 28):02d} {r.randint(0, 23):02d}:{r.randint(0, 59):02d} {lv} {ev}\n"
                   for lv, ev in lines)
    return f, text, f"How many lines of {f} have the level {level}?", str(sum(lv == level for lv, _ in lines))


def top_score(r):
    f, names = r.choice(["scores.csv", "results.csv", "ranking.csv"]), r.sample(NAMES, r.randint(4, 7))
    scores = r.sample(range(10, 100), len(names))
    text = "name,score\n" + "".join(f"{n},{s}\n" for n, s in zip(names, scores))
    return f, text, f"Which name in {f} has the highest score?", names[scores.index(max(scores))]


def column_sum(r):
    f, items = r.choice(["orders.csv", "stock.csv", "basket.csv"]), r.sample(ITEMS, r.randint(3, 5))
    qty = [r.randint(1, 20) for _ in items]
    text = "item,qty\n" + "".join(f"{i},{q}\n" for i, q in zip(items, qty))
    return f, text, f"What is the sum of the qty column in {f}?", str(sum(qty))


def city(r):
    f, names = r.choice(["people.csv", "staff.csv", "members.csv"]), r.sample(NAMES, r.randint(4, 7))
    cities = [r.choice(CITIES) for _ in names]
    text = "name,city\n" + "".join(f"{n},{c}\n" for n, c in zip(names, cities))
    who = r.randrange(len(names))
    return f, text, f"In which city does {names[who]} live, according to {f}?", cities[who]


KINDS = {"config": config, "count": log_count, "top": top_score, "sum": column_sum, "city": city}


def main(argv):
    out, rng = fresh_suite_dir(argv, "files"), random.Random(0)
    for i in range(1, N + 1):
        for kind, make in KINDS.items():
            f, text, question, answer = make(rng)
            write_task(
                # 300 s: on a 2-core CPU one engine thread serves 16 sessions while the trainer uses the other
                out, f"files-{kind}-{i:02d}", source="files", type=kind, difficulty="easy", agent_timeout=300,
                verifier_timeout=10, instruction=f"{question}\n\n{HOW}", environment={f: text},
                tests={"test.sh": f'#!/usr/bin/env bash\n# Partial credit: see files_grade.py.\n'
                                  f'python3 -S "$TESTS_DIR/files_grade.py" "{answer}" "$LOGS_DIR"\n',
                       "files_grade.py": read_helper("files_grade.py")},
                solution={"solve.sh": f"#!/usr/bin/env bash\nprintf '%s\\n' '{answer}' > answer.txt\n"},
                tags=["files", "partial-credit"])


if __name__ == "__main__":
    main(sys.argv)
