import re


def evaluate(expr):
    tokens = re.findall(r"\d+(?:\.\d+)?|[-+*/()]|\S", expr)
    pos = 0

    def peek():
        return tokens[pos] if pos < len(tokens) else None

    def take():
        nonlocal pos
        if pos >= len(tokens):
            raise ValueError("unexpected end")
        pos += 1
        return tokens[pos - 1]

    def atom():
        t = take()
        if t == "-":
            return -atom()
        if t == "(":
            v = sum_()
            if take() != ")":
                raise ValueError("missing )")
            return v
        if re.fullmatch(r"\d+(?:\.\d+)?", t):
            return float(t) if "." in t else int(t)
        raise ValueError(f"unexpected {t!r}")

    def product():
        v = atom()
        while peek() in ("*", "/"):
            v = v * atom() if take() == "*" else v / atom()
        return v

    def sum_():
        v = product()
        while peek() in ("+", "-"):
            v = v + product() if take() == "+" else v - product()
        return v

    v = sum_()
    if pos != len(tokens):
        raise ValueError(f"unexpected {tokens[pos]!r}")
    return v
