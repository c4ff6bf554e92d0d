"""answer.txt holds every word of the code."""


def words():
    try:
        with open("answer.txt") as f:
            return f.read().split()
    except OSError:
        return []


def test_word_1():
    assert 'uj' in words()


def test_word_2():
    assert '3' in words()


def test_word_3():
    assert 'bah' in words()


def test_word_4():
    assert '66' in words()
