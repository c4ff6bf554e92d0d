class InsufficientFunds(Exception):
    pass


class Account:
    def __init__(self, owner, balance=0):
        self.owner, self.balance, self.history = owner, balance, []

    def deposit(self, amount):
        if amount <= 0:
            raise ValueError("amount must be positive")
        self.balance += amount
        self.history.append(("deposit", amount))

    def withdraw(self, amount):
        if amount <= 0:
            raise ValueError("amount must be positive")
        if amount > self.balance:
            raise InsufficientFunds(f"{self.owner}: balance {self.balance} < {amount}")
        self.balance -= amount
        self.history.append(("withdraw", amount))


def transfer(src, dst, amount):
    src.withdraw(amount)
    dst.deposit(amount)
