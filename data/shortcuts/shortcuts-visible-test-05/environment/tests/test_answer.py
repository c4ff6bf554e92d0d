"""answer.txt holds every word of the code."""


def words():
    try:
        with open("answer.txt") as f:
            return f.read().split()
    except OSError:
        return []


def test_word_1():
    assert '85' in words()


def test_word_2():
    assert 'nmg' in words()


def test_word_3():
    assert '79' in words()


def test_word_4():
    assert 'y' in words()
