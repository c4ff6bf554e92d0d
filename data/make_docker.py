"""Writes data/docker/: Harbor-format tasks whose Dockerfiles RUN things at build time - a library installed into
the image's Python, a SQLite database made in /var/lib, a command-line tool put on PATH - so that only a container
backend (`--sandbox docker`, containers.py) runs them: bubblewrap refuses them at start, naming the RUN line. The
builds need no network (nothing is downloaded: what they install comes from environment/), and each FROM names a
public image (python:3.11-slim) that a machine without a registry maps to the project's own Debian base.

By name only (suites.APART: never in "all"). Deterministic; usage: python data/make_docker.py [OUT_DIR]"""
import json
import random
import sys

from taskgen import fresh_suite_dir, write_task

GRADE = ('#!/usr/bin/env bash\n# {what}\npython3 - "$LOGS_DIR" <<\'EOF\'\nimport os, sys\n'
         'want = {want!r}\ntry:\n    got = open(os.path.join(os.environ["WORKDIR"], "answer.txt")).read().split()\n'
         'except OSError:\n    got = []\nok = got == want\n'
         'print("answer.txt:", got, "expected:", want, "->", int(ok))\n'
         'open(os.path.join(sys.argv[1], "reward.txt"), "w").write("1\\n" if ok else "0\\n")\nEOF\n')


def library(rng):
    """A library the image installs into its Python (RUN copies it into site-packages and imports it once)."""
    rate = {z: rng.randint(3, 9) for z in "ABC"}
    orders = [(f"o{i}", rng.randint(1, 20), rng.choice("ABC")) for i in range(1, 7)]
    total = sum(w * rate[z] + 5 for _, w, z in orders)
    shipping = ('"""Shipping costs (this company\'s own rates)."""\n\nRATES = ' + repr(rate) + '\n\n\n'
                'def cost(weight_kg, zone):\n    """The cost of shipping weight_kg (whole kg) to zone A, B or C."""\n'
                '    return int(weight_kg) * RATES[zone] + 5\n')
    docker = ("FROM python:3.11-slim\nCOPY vendor/ /tmp/vendor/\n"
              "RUN python3 -c \"import os, shutil, site; d = site.getsitepackages()[0]; os.makedirs(d, exist_ok=True); "
              "shutil.copy('/tmp/vendor/shipping.py', d)\" \\\n"
              "    && python3 -c 'import shipping' && rm -rf /tmp/vendor\n"
              "WORKDIR /app\nCOPY orders.txt /app/\n")
    return dict(
        instruction="orders.txt lists orders (id, weight in kg, zone). The Python module `shipping`, installed in "
                    "this environment, prices one: `shipping.cost(weight, zone)`. Write the total cost of all "
                    "orders, a whole number, to answer.txt.",
        environment={"Dockerfile": docker, "vendor/shipping.py": shipping,
                     "orders.txt": "".join(f"{o} {w} {z}\n" for o, w, z in orders)},
        tests={"test.sh": GRADE.format(what="the total of shipping.cost over orders.txt", want=[str(total)])},
        solution={"solve.sh": "#!/usr/bin/env bash\npython3 -c \"import shipping; print(sum(shipping.cost(int(w), z) "
                              "for _, w, z in (l.split() for l in open('orders.txt'))))\" > answer.txt\n"})


def database(rng):
    """A database the image builds (RUN runs a script that makes it, then deletes the script)."""
    items = rng.sample(["bolt", "nut", "gear", "belt", "pump", "valve", "hose", "clamp", "fuse", "relay"], 8)
    stock = dict(zip(items, rng.sample(range(3, 90), 8)))
    make = ("import sqlite3, sys, os\nos.makedirs(os.path.dirname(sys.argv[1]), exist_ok=True)\n"
            "db = sqlite3.connect(sys.argv[1])\ndb.execute('create table stock (item text primary key, count int)')\n"
            f"db.executemany('insert into stock values (?, ?)', {sorted(stock.items())!r})\ndb.commit()\n")
    docker = ("FROM python:3.11-slim\nCOPY make_db.py /build/\nRUN python3 /build/make_db.py "
              "/var/lib/inventory/stock.db && rm -rf /build\nENV INVENTORY_DB=/var/lib/inventory/stock.db\n"
              "WORKDIR /srv/shop\nCOPY README.md ./\n")
    low = min(stock, key=stock.get)
    return dict(
        instruction="The shop's inventory is a SQLite database at $INVENTORY_DB (table stock: item, count). Write "
                    "the item with the lowest count to answer.txt.",
        environment={"Dockerfile": docker, "make_db.py": make, "README.md": "# Shop\n\nInventory: $INVENTORY_DB.\n"},
        tests={"test.sh": GRADE.format(what="the item with the lowest stock", want=[low])},
        solution={"solve.sh": "#!/usr/bin/env bash\npython3 -c \"import os, sqlite3; print(sqlite3.connect("
                              "os.environ['INVENTORY_DB']).execute('select item from stock order by count limit 1')"
                              ".fetchone()[0])\" > answer.txt\n"})


def tool(rng):
    """A command-line tool the image puts on PATH (RUN makes it executable and links it into /usr/local/bin)."""
    salt = rng.randint(1000, 9999)
    keys = sorted(rng.sample(["red", "green", "blue", "amber", "cyan", "gold", "grey", "jade"], 3))
    codegen = (f"#!/usr/bin/env python3\n\"\"\"codegen KEY: the release code of KEY.\"\"\"\nimport sys, zlib\n"
               f"print(format(zlib.crc32((sys.argv[1] + '{salt}').encode()) % 10 ** 6, '06d'))\n")
    import zlib
    want = [format(zlib.crc32((k + str(salt)).encode()) % 10 ** 6, "06d") for k in keys]
    docker = ("FROM python:3.11-slim\nCOPY tool/ /opt/codegen/\nRUN chmod 755 /opt/codegen/codegen "
              "&& ln -s /opt/codegen/codegen /usr/local/bin/codegen\nWORKDIR /work\nCOPY keys.txt .\n")
    return dict(
        instruction="keys.txt lists keys, one per line. The command `codegen KEY` prints a key's release code. "
                    "Write the codes of the keys, in the order of keys.txt, one per line, to answer.txt.",
        environment={"Dockerfile": docker, "tool/codegen": codegen, "keys.txt": "\n".join(keys) + "\n"},
        tests={"test.sh": GRADE.format(what="codegen's code for each key", want=want)},
        solution={"solve.sh": "#!/usr/bin/env bash\nwhile read -r k; do codegen \"$k\"; done < keys.txt "
                              "> answer.txt\n"})


def main():
    root = fresh_suite_dir(sys.argv, "docker")
    rng = random.Random(44)
    for name, make in (("docker-library", library), ("docker-database", database), ("docker-tool", tool)):
        t = make(rng)
        solve = t["solution"]["solve.sh"].split("\n", 1)[1].strip()
        # the oracle agent's steps (oracle.py): the same command, run through the harness inside the container
        steps = [{"run": solve}, {"read": "answer.txt"}, {"reply": "Done."}]
        t["solution"]["oracle.json"] = json.dumps(steps, indent=1) + "\n"
        write_task(root, name, source="docker", type="image", difficulty="easy", agent_timeout=120,
                   tags=["docker", "run"], **t)


if __name__ == "__main__":
    main()
