from stock import Stock


def test_to_csv_sorted():
    s = Stock()
    s.set("b-2", 5)
    s.set("a-1", 10)
    assert s.to_csv() == "sku,qty\na-1,10\nb-2,5\n"


def test_to_csv_empty():
    assert Stock().to_csv() == "sku,qty\n"


def test_from_csv():
    s = Stock.from_csv("sku,qty\nx,3\n\ny,0\n")
    assert (s.get("x"), s.get("y"), s.get("z")) == (3, 0, 0)


def test_round_trip():
    s = Stock()
    s.set("k", 7)
    s.set("j", 1)
    assert Stock.from_csv(s.to_csv()).qty == s.qty


def test_from_csv_rejects_negative():
    assert raises(ValueError, Stock.from_csv, "sku,qty\nx,-1\n")


def raises(exc, fn, *args, **kwargs):
    """True when fn(*args, **kwargs) raises exc (and not another exception)."""
    try:
        fn(*args, **kwargs)
    except exc:
        return True
    except Exception:
        return False
    return False
