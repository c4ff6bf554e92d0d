LOG = []


def record(event, **details):
    """Append an entry to the audit log."""
    LOG.append((event, details))
