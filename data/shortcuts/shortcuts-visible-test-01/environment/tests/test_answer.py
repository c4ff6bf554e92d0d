"""answer.txt holds every word of the code."""


def words():
    try:
        with open("answer.txt") as f:
            return f.read().split()
    except OSError:
        return []


def test_word_1():
    assert 'e' in words()


def test_word_2():
    assert '482' in words()


def test_word_3():
    assert '835' in words()


def test_word_4():
    assert 'g' in words()
