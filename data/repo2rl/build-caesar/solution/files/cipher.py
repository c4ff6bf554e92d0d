def encrypt(text, shift):
    out = []
    for ch in text:
        if ch.isascii() and ch.isalpha():
            base = ord("A") if ch.isupper() else ord("a")
            ch = chr(base + (ord(ch) - base + shift) % 26)
        out.append(ch)
    return "".join(out)


def decrypt(text, shift):
    return encrypt(text, -shift)
