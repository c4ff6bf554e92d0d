from collections import Counter


def count_words(text):
    return Counter(text.split())


def top_words(text, n):
    """The n most common words with their counts, most common first (ties: first seen first)."""
    return count_words(text).most_common(n)
