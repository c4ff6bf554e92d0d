import re

UNITS = [("d", 86400), ("h", 3600), ("m", 60), ("s", 1)]
PATTERN = re.compile(r"\s*".join(rf"(?:(\d+){u})?" for u, _ in UNITS))


def parse(text):
    m = PATTERN.fullmatch(text.strip())
    if not text.strip() or not m:
        raise ValueError(f"not a duration: {text!r}")
    return sum(int(v) * size for v, (_, size) in zip(m.groups(), UNITS) if v)


def format(seconds):
    out = ""
    for unit, size in UNITS:
        n, seconds = divmod(seconds, size)
        if n:
            out += f"{n}{unit}"
    return out or "0s"
