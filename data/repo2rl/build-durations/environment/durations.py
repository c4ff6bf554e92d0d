def parse(text):
    raise NotImplementedError


def format(seconds):
    raise NotImplementedError
