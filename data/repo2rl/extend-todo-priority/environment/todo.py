class TodoList:
    def __init__(self):
        self.items = []

    def add(self, title):
        self.items.append({"id": len(self.items) + 1, "title": title, "done": False})
        return len(self.items)

    def done(self, item_id):
        self.items[item_id - 1]["done"] = True

    def pending(self):
        return [i["title"] for i in self.items if not i["done"]]
