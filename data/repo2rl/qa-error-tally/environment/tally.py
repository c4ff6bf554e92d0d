import sys


def tally(lines, level):
    n = 0
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(maxsplit=2)
        if len(parts) >= 2 and parts[1] == level:
            n += 1
    return n


if __name__ == "__main__":
    path, level = sys.argv[1], sys.argv[sys.argv.index("--level") + 1]
    with open(path) as f:
        print(tally(f, level))
