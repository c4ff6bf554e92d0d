def evaluate(expr):
    raise NotImplementedError
