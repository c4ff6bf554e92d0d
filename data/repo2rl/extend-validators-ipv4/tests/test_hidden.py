import validators


def test_valid():
    assert validators.is_ipv4("192.168.0.1") and validators.is_ipv4("0.0.0.0")
    assert validators.is_ipv4("255.255.255.255")


def test_out_of_range():
    assert not validators.is_ipv4("256.1.1.1")


def test_wrong_number_of_parts():
    assert not validators.is_ipv4("1.2.3") and not validators.is_ipv4("1.2.3.4.5")


def test_leading_zeros():
    assert not validators.is_ipv4("01.2.3.4")


def test_junk():
    assert not any(validators.is_ipv4(s) for s in ["", "a.b.c.d", "1.2.3.-4", " 1.2.3.4", "1..2.3"])
