from inventory import Inventory, OutOfStock


def test_oversell_raises_and_keeps_stock():
    inv = Inventory()
    inv.add("pear", 2)
    assert raises(OutOfStock, inv.remove, "pear", 5)
    assert inv.count("pear") == 2


def test_unknown_sku_raises():
    assert raises(OutOfStock, Inventory().remove, "kiwi", 1)


def test_remove_everything():
    inv = Inventory()
    inv.add("fig", 4)
    inv.remove("fig", 4)
    assert inv.count("fig") == 0


def test_non_positive_quantity_still_rejected():
    inv = Inventory()
    inv.add("plum", 1)
    assert raises(ValueError, inv.remove, "plum", 0)


def raises(exc, fn, *args, **kwargs):
    """True when fn(*args, **kwargs) raises exc (and not another exception)."""
    try:
        fn(*args, **kwargs)
    except exc:
        return True
    except Exception:
        return False
    return False
