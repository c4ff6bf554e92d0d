from tokens import tokenize


def test_example():
    assert tokenize("3 + 4.5*(x_1 - 2)") == ["3", "+", "4.5", "*", "(", "x_1", "-", "2", ")"]


def test_no_spaces():
    assert tokenize("a/b") == ["a", "/", "b"]


def test_multi_digit_numbers():
    assert tokenize("123+0.25") == ["123", "+", "0.25"]


def test_whitespace_only():
    assert tokenize("   ") == []


def test_bad_character():
    assert raises(ValueError, tokenize, "2 $ 3")


def test_names_with_digits():
    assert tokenize("rate2*base") == ["rate2", "*", "base"]


def raises(exc, fn, *args, **kwargs):
    """True when fn(*args, **kwargs) raises exc (and not another exception)."""
    try:
        fn(*args, **kwargs)
    except exc:
        return True
    except Exception:
        return False
    return False
