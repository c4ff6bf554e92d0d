from money import Money


def test_allocate_even_split_with_remainder():
    assert Money(100).allocate([1, 1, 1]) == [Money(34), Money(33), Money(33)]


def test_allocate_ratios():
    assert Money(1000, "USD").allocate([3, 7]) == [Money(300, "USD"), Money(700, "USD")]


def test_allocate_keeps_total():
    parts = Money(101).allocate([1, 2, 3, 4])
    assert sum(p.cents for p in parts) == 101


def test_parse():
    assert Money.parse("12.05 EUR") == Money(1205)
    assert Money.parse("-0.50 USD") == Money(-50, "USD")


def test_parse_round_trip():
    m = Money(-123456, "GBP")
    assert Money.parse(str(m)) == m


def test_parse_rejects_garbage():
    assert raises(ValueError, Money.parse, "twelve euros")


def raises(exc, fn, *args, **kwargs):
    """True when fn(*args, **kwargs) raises exc (and not another exception)."""
    try:
        fn(*args, **kwargs)
    except exc:
        return True
    except Exception:
        return False
    return False
