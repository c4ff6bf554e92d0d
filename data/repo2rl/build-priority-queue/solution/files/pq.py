import heapq
import itertools


class PriorityQueue:
    def __init__(self):
        self._heap, self._count = [], itertools.count()

    def push(self, item, priority):
        heapq.heappush(self._heap, (priority, next(self._count), item))

    def pop(self):
        if not self._heap:
            raise IndexError("pop from an empty queue")
        return heapq.heappop(self._heap)[2]

    def peek(self):
        if not self._heap:
            raise IndexError("peek at an empty queue")
        return self._heap[0][2]

    def __len__(self):
        return len(self._heap)
