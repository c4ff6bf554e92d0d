from rle import decode, encode


def test_encode_runs():
    assert encode("aaabcc") == "3a1b2c"


def test_encode_single_chars():
    assert encode("abc") == "1a1b1c"


def test_encode_empty():
    assert encode("") == ""


def test_decode():
    assert decode("3a1b2c") == "aaabcc"


def test_decode_multi_digit():
    assert decode("12x1y") == "x" * 12 + "y"


def test_round_trip():
    s = "wwwwwwwwwwwwbbbcdddd  !!"
    assert decode(encode(s)) == s
