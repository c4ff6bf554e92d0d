PRIORITIES = {"high": 0, "normal": 1, "low": 2}


class TodoList:
    def __init__(self):
        self.items = []

    def add(self, title, priority="normal"):
        if priority not in PRIORITIES:
            raise ValueError(f"priority must be one of {list(PRIORITIES)}, not {priority!r}")
        self.items.append({"id": len(self.items) + 1, "title": title, "done": False, "priority": priority})
        return len(self.items)

    def done(self, item_id):
        self.items[item_id - 1]["done"] = True

    def pending(self):
        return [i["title"] for i in self.items if not i["done"]]

    def by_priority(self):
        todo = [i for i in self.items if not i["done"]]
        return [i["title"] for i in sorted(todo, key=lambda i: PRIORITIES[i["priority"]])]
