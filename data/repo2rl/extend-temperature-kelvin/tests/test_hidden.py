from temps import convert


def test_c_to_k():
    assert abs(convert(0, "C", "K") - 273.15) < 1e-9


def test_k_to_f():
    assert abs(convert(373.15, "K", "F") - 212) < 1e-9


def test_k_to_k():
    assert convert(10, "K", "K") == 10


def test_below_absolute_zero_kelvin():
    assert abs(convert(1, "K", "C") + 272.15) < 1e-9
    assert raises(ValueError, convert, -1, "K", "C")


def test_below_absolute_zero_celsius_and_fahrenheit():
    assert raises(ValueError, convert, -300, "C", "F")
    assert raises(ValueError, convert, -500, "F", "C")


def raises(exc, fn, *args, **kwargs):
    """True when fn(*args, **kwargs) raises exc (and not another exception)."""
    try:
        fn(*args, **kwargs)
    except exc:
        return True
    except Exception:
        return False
    return False
