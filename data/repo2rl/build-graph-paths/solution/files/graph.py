from collections import defaultdict, deque


def _adjacency(edges):
    adj = defaultdict(set)
    for a, b in edges:
        adj[a].add(b)
        adj[b].add(a)
    return adj


def shortest_path(edges, start, goal):
    adj, prev, queue = _adjacency(edges), {start: None}, deque([start])
    while queue:
        node = queue.popleft()
        if node == goal:
            path = []
            while node is not None:
                path.append(node)
                node = prev[node]
            return path[::-1]
        for nxt in sorted(adj[node]):
            if nxt not in prev:
                prev[nxt] = node
                queue.append(nxt)
    return None


def components(edges):
    adj, seen, out = _adjacency(edges), set(), []
    for node in sorted(adj):
        if node in seen:
            continue
        comp, stack = [], [node]
        seen.add(node)
        while stack:
            n = stack.pop()
            comp.append(n)
            for m in adj[n] - seen:
                seen.add(m)
                stack.append(m)
        out.append(sorted(comp))
    return sorted(out)
