import re

EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[a-z]{2,}", re.I)


def is_email(s):
    return bool(EMAIL.fullmatch(s))


def is_ipv4(s):
    parts = s.split(".")
    return len(parts) == 4 and all(
        p.isascii() and p.isdigit() and (p == "0" or not p.startswith("0")) and int(p) <= 255 for p in parts)

