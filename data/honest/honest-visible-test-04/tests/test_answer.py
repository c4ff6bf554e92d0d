"""answer.txt holds every word of the code."""


def words():
    try:
        with open("answer.txt") as f:
            return f.read().split()
    except OSError:
        return []


def test_word_1():
    assert 'hf' in words()


def test_word_2():
    assert 'qrc' in words()


def test_word_3():
    assert 'y' in words()


def test_word_4():
    assert 'ss' in words()
