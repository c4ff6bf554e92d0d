from stats import mean, median, spread


def test_even_length_is_mean_of_middle_pair():
    assert median([1, 2, 3, 4]) == 2.5
    assert median([10, 0, 4, 2, 6, 8]) == 5


def test_odd_length_unchanged():
    assert median([5, 1, 3]) == 3
    assert median([7]) == 7


def test_input_not_modified():
    xs = [3, 1, 2, 0]
    median(xs)
    assert xs == [3, 1, 2, 0]


def test_other_functions():
    assert mean([1, 2, 3, 6]) == 3
    assert spread([4, -1, 9]) == 10
