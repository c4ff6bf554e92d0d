from text import slugify


def test_punctuation_and_spaces_collapse():
    assert slugify("Hello, World!") == "hello-world"
    assert slugify("  Many   spaces  here ") == "many-spaces-here"


def test_already_a_slug():
    assert slugify("already-a-slug") == "already-a-slug"


def test_digits_and_symbols():
    assert slugify("C'est la vie -- 2024 edition") == "c-est-la-vie-2024-edition"
