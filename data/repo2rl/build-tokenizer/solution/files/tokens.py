import re

TOKEN = re.compile(r"\s*(?:(\d+(?:\.\d+)?)|([A-Za-z_]\w*)|([-+*/()]))")


def tokenize(expr):
    out, pos = [], 0
    while pos < len(expr):
        if expr[pos:].strip() == "":
            break
        m = TOKEN.match(expr, pos)
        if not m:
            raise ValueError(f"bad character at {pos}: {expr[pos:].lstrip()[:1]!r}")
        out.append(m.group(m.lastindex))
        pos = m.end()
    return out
