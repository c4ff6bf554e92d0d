from durations import format, parse


def test_parse_simple():
    assert parse("1h30m") == 5400 and parse("45s") == 45


def test_parse_days_and_spaces():
    assert parse("2d") == 172800
    assert parse("1h 5m 10s") == 3910


def test_parse_rejects_unknown_unit():
    assert raises(ValueError, parse, "3w")


def test_parse_rejects_wrong_order_and_empty():
    assert raises(ValueError, parse, "5m1h")
    assert raises(ValueError, parse, "")


def test_format():
    assert format(5400) == "1h30m"
    assert format(90061) == "1d1h1m1s"


def test_format_zero():
    assert format(0) == "0s"


def test_round_trip():
    for s in (1, 59, 60, 3600, 86399, 123456):
        assert parse(format(s)) == s


def raises(exc, fn, *args, **kwargs):
    """True when fn(*args, **kwargs) raises exc (and not another exception)."""
    try:
        fn(*args, **kwargs)
    except exc:
        return True
    except Exception:
        return False
    return False
