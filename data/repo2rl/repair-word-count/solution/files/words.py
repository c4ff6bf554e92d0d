import string
from collections import Counter


def count_words(text):
    words = (w.strip(string.punctuation) for w in text.lower().split())
    return Counter(w for w in words if w)


def top_words(text, n):
    """The n most common words with their counts, most common first (ties: first seen first)."""
    return count_words(text).most_common(n)
