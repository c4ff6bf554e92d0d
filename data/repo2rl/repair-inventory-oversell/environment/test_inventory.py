from inventory import Inventory


def test_add_then_count():
    inv = Inventory()
    inv.add("apple", 3)
    assert inv.count("apple") == 3


if __name__ == "__main__":
    test_add_then_count()
    print("ok")
