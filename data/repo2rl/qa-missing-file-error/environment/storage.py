import json


class StorageError(Exception):
    pass


class StoreMissing(StorageError):
    pass


class StoreCorrupt(StorageError):
    pass


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError as e:
        raise StoreMissing(path) from e
    except json.JSONDecodeError as e:
        raise StoreCorrupt(path) from e
