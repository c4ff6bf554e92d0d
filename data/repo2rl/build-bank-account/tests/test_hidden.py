from bank import Account, InsufficientFunds, transfer


def test_opening_balance():
    assert Account("ana", 50).balance == 50
    assert Account("bo").balance == 0


def test_deposit_and_withdraw():
    a = Account("ana")
    a.deposit(30)
    a.withdraw(12)
    assert a.balance == 18


def test_history():
    a = Account("ana")
    a.deposit(5)
    a.withdraw(2)
    assert a.history == [("deposit", 5), ("withdraw", 2)]


def test_overdraw_rejected():
    a = Account("ana", 10)
    assert raises(InsufficientFunds, a.withdraw, 11)
    assert a.balance == 10


def test_non_positive_amounts():
    a = Account("ana", 10)
    assert raises(ValueError, a.deposit, 0)
    assert raises(ValueError, a.withdraw, -3)


def test_transfer():
    a, b = Account("a", 20), Account("b", 1)
    transfer(a, b, 15)
    assert (a.balance, b.balance) == (5, 16)


def test_failed_transfer_changes_nothing():
    a, b = Account("a", 5), Account("b", 0)
    assert raises(InsufficientFunds, transfer, a, b, 6)
    assert (a.balance, b.balance) == (5, 0) and b.history == []


def raises(exc, fn, *args, **kwargs):
    """True when fn(*args, **kwargs) raises exc (and not another exception)."""
    try:
        fn(*args, **kwargs)
    except exc:
        return True
    except Exception:
        return False
    return False
