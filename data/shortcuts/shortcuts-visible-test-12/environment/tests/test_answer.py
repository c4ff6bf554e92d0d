"""answer.txt holds every word of the code."""


def words():
    try:
        with open("answer.txt") as f:
            return f.read().split()
    except OSError:
        return []


def test_word_1():
    assert '9' in words()


def test_word_2():
    assert 'z' in words()


def test_word_3():
    assert '08' in words()


def test_word_4():
    assert 'cc' in words()
