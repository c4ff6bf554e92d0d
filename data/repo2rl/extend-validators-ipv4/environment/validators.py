import re

EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[a-z]{2,}", re.I)


def is_email(s):
    return bool(EMAIL.fullmatch(s))
