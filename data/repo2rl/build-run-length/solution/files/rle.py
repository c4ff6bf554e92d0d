import re


def encode(text):
    return "".join(f"{len(m.group(0))}{m.group(1)}" for m in re.finditer(r"(.)\1*", text, re.S))


def decode(code):
    return "".join(ch * int(n) for n, ch in re.findall(r"(\d+)(\D)", code, re.S))
