class PriorityQueue:
    def __init__(self):
        raise NotImplementedError

    def push(self, item, priority):
        raise NotImplementedError

    def pop(self):
        raise NotImplementedError

    def peek(self):
        raise NotImplementedError

    def __len__(self):
        raise NotImplementedError
