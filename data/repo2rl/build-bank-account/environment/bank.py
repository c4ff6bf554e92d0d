class InsufficientFunds(Exception):
    pass


class Account:
    def __init__(self, owner, balance=0):
        raise NotImplementedError

    def deposit(self, amount):
        raise NotImplementedError

    def withdraw(self, amount):
        raise NotImplementedError


def transfer(src, dst, amount):
    raise NotImplementedError
