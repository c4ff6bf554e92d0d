def identity(n):
    raise NotImplementedError


def transpose(m):
    raise NotImplementedError


def matmul(a, b):
    raise NotImplementedError
