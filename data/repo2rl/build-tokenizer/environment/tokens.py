def tokenize(expr):
    raise NotImplementedError
