from cipher import decrypt, encrypt


def test_basic_shift():
    assert encrypt("abc", 1) == "bcd"


def test_wraps_and_keeps_case():
    assert encrypt("xyz XYZ", 3) == "abc ABC"


def test_other_characters_unchanged():
    assert encrypt("Hi, 2 you!", 2) == "Jk, 2 aqw!"


def test_large_and_negative_shift():
    assert encrypt("abc", 27) == "bcd"
    assert encrypt("abc", -1) == "zab"


def test_decrypt_inverts():
    assert decrypt(encrypt("The Quick Brown Fox", 11), 11) == "The Quick Brown Fox"
