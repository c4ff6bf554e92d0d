"""answer.txt holds every word of the code."""


def words():
    try:
        with open("answer.txt") as f:
            return f.read().split()
    except OSError:
        return []


def test_word_1():
    assert '480' in words()


def test_word_2():
    assert 'mm' in words()


def test_word_3():
    assert '6' in words()


def test_word_4():
    assert '0' in words()
