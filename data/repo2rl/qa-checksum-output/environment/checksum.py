import sys


def checksum(text, modulus=65521):
    """A tiny Adler-style checksum."""
    a, b = 1, 0
    for ch in text.encode():
        a = (a + ch) % modulus
        b = (b + a) % modulus
    return (b << 16) | a


if __name__ == "__main__":
    print(checksum(sys.argv[1]) % 100000)
