import os
import tempfile

from ledger import total


def test_sample_ledger():
    assert total("ledger.csv") == 2395.59


def test_plain_amounts():
    fd, path = tempfile.mkstemp(suffix=".csv")
    with os.fdopen(fd, "w") as f:
        f.write("date,description,amount\n2024-02-01,tea,2.25\n2024-02-02,milk,1.10\n")
    assert total(path) == 3.35
    os.unlink(path)


def test_large_quoted_amounts():
    fd, path = tempfile.mkstemp(suffix=".csv")
    with os.fdopen(fd, "w") as f:
        f.write('date,description,amount\n2024-03-01,"car, used","12,000.00"\n2024-03-02,fee,-0.50\n')
    assert total(path) == 11999.5
    os.unlink(path)
