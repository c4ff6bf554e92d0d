import logs

LINES = ["08:00:00 INFO up", "", "08:30:00 ERROR a", "09:00:00 WARN w", "09:00:00 ERROR b",
         "10:00:00 ERROR c d e"]


def test_summary():
    assert logs.summary(LINES) == {"INFO": 1, "ERROR": 3, "WARN": 1}


def test_summary_of_file():
    with open("sample.log") as f:
        assert logs.summary(f) == {"INFO": 1, "ERROR": 2, "WARN": 1}


def test_errors_since_inclusive():
    assert logs.errors_since(LINES, "09:00:00") == ["b", "c d e"]


def test_errors_since_all():
    assert logs.errors_since(LINES, "00:00:00") == ["a", "b", "c d e"]


def test_errors_since_none():
    assert logs.errors_since(LINES, "23:59:59") == []
