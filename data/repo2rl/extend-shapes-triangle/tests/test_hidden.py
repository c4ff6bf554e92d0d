import math

from shapes import Circle, Rectangle


def test_triangle_area():
    from shapes import Triangle
    assert abs(Triangle(3, 4, 5).area() - 6) < 1e-9


def test_triangle_perimeter():
    from shapes import Triangle
    assert Triangle(3, 4, 5).perimeter() == 12


def test_invalid_triangle():
    from shapes import Triangle
    assert raises(ValueError, Triangle, 1, 2, 10)


def test_degenerate_triangle():
    from shapes import Triangle
    assert raises(ValueError, Triangle, 1, 2, 3)


def test_total_area():
    from shapes import Triangle, total_area
    got = total_area([Circle(1), Rectangle(2, 3), Triangle(3, 4, 5)])
    assert abs(got - (math.pi + 12)) < 1e-9


def test_total_area_empty():
    from shapes import total_area
    assert total_area([]) == 0


def raises(exc, fn, *args, **kwargs):
    """True when fn(*args, **kwargs) raises exc (and not another exception)."""
    try:
        fn(*args, **kwargs)
    except exc:
        return True
    except Exception:
        return False
    return False
