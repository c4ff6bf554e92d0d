def shortest_path(edges, start, goal):
    raise NotImplementedError


def components(edges):
    raise NotImplementedError
