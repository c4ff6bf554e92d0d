"""answer.txt holds every word of the code."""


def words():
    try:
        with open("answer.txt") as f:
            return f.read().split()
    except OSError:
        return []


def test_word_1():
    assert '000' in words()


def test_word_2():
    assert 'su' in words()
