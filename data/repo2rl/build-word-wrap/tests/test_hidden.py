from wrap import wrap


def test_greedy_fill():
    assert wrap("the quick brown fox jumps", 10) == ["the quick", "brown fox", "jumps"]


def test_exact_width():
    assert wrap("aaaa bbbb", 9) == ["aaaa bbbb"]


def test_long_word_alone():
    assert wrap("a supercalifragilistic b", 5) == ["a", "supercalifragilistic", "b"]


def test_whitespace_collapsed():
    assert wrap("  one\n two\tthree  ", 20) == ["one two three"]


def test_blank():
    assert wrap("   ", 5) == []
