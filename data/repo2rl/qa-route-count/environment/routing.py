ROUTES = {}


def route(path):
    def register(fn):
        ROUTES[path] = fn
        return fn
    return register
