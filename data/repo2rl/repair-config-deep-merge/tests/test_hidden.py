import json
import os
import tempfile

import config


def test_nested_keys_survive():
    got = config.merge({"db": {"host": "h", "port": 1}}, {"db": {"port": 2}})
    assert got == {"db": {"host": "h", "port": 2}}


def test_three_levels():
    got = config.merge({"a": {"b": {"c": 1, "d": 2}}}, {"a": {"b": {"d": 3}}})
    assert got == {"a": {"b": {"c": 1, "d": 3}}}


def test_arguments_not_modified():
    base, over = {"a": {"b": 1}}, {"a": {"c": 2}}
    config.merge(base, over)
    assert base == {"a": {"b": 1}} and over == {"a": {"c": 2}}


def test_scalar_replaces_dict():
    assert config.merge({"a": {"b": 1}}, {"a": 5}) == {"a": 5}


def test_load_from_file():
    fd, path = tempfile.mkstemp(suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump({"db": {"port": 6543}}, f)
    got = config.load(path)
    os.unlink(path)
    assert got["db"] == {"host": "localhost", "port": 6543, "options": {"ssl": False}}
    assert config.DEFAULTS["db"]["port"] == 5432
