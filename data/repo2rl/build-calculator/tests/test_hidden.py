from calc import evaluate


def test_precedence():
    assert evaluate("2 + 3 * 4") == 14


def test_parentheses():
    assert evaluate("(2 + 3) * 4") == 20


def test_left_to_right():
    assert evaluate("10 - 4 - 3") == 3
    assert evaluate("16 / 4 / 2") == 2


def test_unary_minus():
    assert evaluate("-3 + 5") == 2
    assert evaluate("2 * -(1 + 1)") == -4


def test_decimals():
    assert abs(evaluate("0.5 * 0.2") - 0.1) < 1e-12


def test_division_by_zero():
    assert raises(ZeroDivisionError, evaluate, "1 / (2 - 2)")


def test_malformed():
    assert raises(ValueError, evaluate, "2 +")
    assert raises(ValueError, evaluate, "(1 + 2")


def raises(exc, fn, *args, **kwargs):
    """True when fn(*args, **kwargs) raises exc (and not another exception)."""
    try:
        fn(*args, **kwargs)
    except exc:
        return True
    except Exception:
        return False
    return False
