def encode(text):
    raise NotImplementedError


def decode(code):
    raise NotImplementedError
