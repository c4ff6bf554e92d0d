import re


def slugify(title):
    """A URL slug for a title: lower-case letters and digits joined by single dashes."""
    return re.sub(r"[^a-z0-9]", "-", title.lower())
