def encrypt(text, shift):
    raise NotImplementedError


def decrypt(text, shift):
    raise NotImplementedError
