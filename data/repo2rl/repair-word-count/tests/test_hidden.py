from words import count_words, top_words


def test_case_and_punctuation():
    c = count_words("Hello, hello; HELLO? world...")
    assert c["hello"] == 3 and c["world"] == 1


def test_inner_apostrophe_kept():
    assert count_words("Don't stop, don't!")["don't"] == 2


def test_top_words():
    assert top_words("The cat. The CAT sat!", 2) == [("the", 2), ("cat", 2)]


def test_bare_punctuation_is_not_a_word():
    assert "" not in count_words("wait -- what ?")
    assert sum(count_words("wait -- what ?").values()) == 2
