"""Writes data/repo2rl/: Repo2RLEnvs-style tasks on small Python projects, balanced over four types.

- repair: a project with a reported bug; hidden tests (bug + regressions) all pass -> 1, else 0.
- qa:     a question about a project; the answer goes to answer.txt, graded by grade.py -> 1 / 0.
- build:  a spec and stubs; reward = fraction of hidden tests passed.
- extend: a working project and a feature request; reward = fraction of the feature's hidden tests passed
          (they test only the new feature, so leaving the project as it is scores 0).
Hidden tests are plain functions run by run_tests.py (no pytest). The oracle copies the reference files
(solution/files/) over the work dir, or for qa computes / writes the answer.
Deterministic; usage: python data/make_repo2rl.py [OUT_DIR]
"""
import json
import sys
import textwrap

from taskgen import fresh_suite_dir, read_helper, write_task


def D(s):
    return textwrap.dedent(s).lstrip("\n")


RAISES = '''
    def raises(exc, fn, *args, **kwargs):
        """True when fn(*args, **kwargs) raises exc (and not another exception)."""
        try:
            fn(*args, **kwargs)
        except exc:
            return True
        except Exception:
            return False
        return False
'''
TASKS = []


def sub(text, old, new):
    """text with the one occurrence of old replaced."""
    assert text.count(old) == 1, old
    return text.replace(old, new)


def append(text, extra, blank_lines=2):
    """text with extra (in the same indentation) added after blank_lines empty lines."""
    return text.rstrip() + "\n" * (blank_lines + 1) + extra.strip("\n") + "\n"


def task(type, name, difficulty, instruction, env, hidden=None, fixed=None, answer=None, kind=None,
         oracle=None, guard=None):
    if hidden and "raises(" in hidden:
        hidden = append(D(hidden), D(RAISES))
    TASKS.append(dict(type=type, name=f"{type}-{name}", difficulty=difficulty, instruction=D(instruction),
                      env={k: D(v) for k, v in env.items()}, hidden=D(hidden) if hidden else None,
                      fixed={k: D(v) for k, v in (fixed or {}).items()}, answer=answer, kind=kind,
                      oracle=oracle, guard=guard))


# ============================================================================= repair (1 / 0)

task("repair", "median-even", "easy", """
    Bug report: `stats.median([1, 2, 3, 4])` returns 3. For a list of even length the median is the
    mean of the two middle values, here 2.5. Fix `median` in `stats.py`; keep the other functions as they are.
    """, {"stats.py": '''
    """Small descriptive statistics."""


    def mean(xs):
        return sum(xs) / len(xs)


    def median(xs):
        s = sorted(xs)
        mid = len(s) // 2
        return s[mid]


    def spread(xs):
        return max(xs) - min(xs)
    ''', "README.md": "# stats\n\n`mean`, `median`, `spread` over lists of numbers.\n"},
    hidden='''
    from stats import mean, median, spread


    def test_even_length_is_mean_of_middle_pair():
        assert median([1, 2, 3, 4]) == 2.5
        assert median([10, 0, 4, 2, 6, 8]) == 5


    def test_odd_length_unchanged():
        assert median([5, 1, 3]) == 3
        assert median([7]) == 7


    def test_input_not_modified():
        xs = [3, 1, 2, 0]
        median(xs)
        assert xs == [3, 1, 2, 0]


    def test_other_functions():
        assert mean([1, 2, 3, 6]) == 3
        assert spread([4, -1, 9]) == 10
    ''', fixed={"stats.py": '''
    """Small descriptive statistics."""


    def mean(xs):
        return sum(xs) / len(xs)


    def median(xs):
        s = sorted(xs)
        mid = len(s) // 2
        return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


    def spread(xs):
        return max(xs) - min(xs)
    '''})

task("repair", "slugify", "easy", """
    `slugify("Hello, World!")` returns `"hello--world-"`, but our URLs need `"hello-world"`: runs of
    characters other than lower-case letters and digits must become a single dash, with no dash at either
    end. Fix `slugify` in `text.py`.
    """, {"text.py": '''
    import re


    def slugify(title):
        """A URL slug for a title: lower-case letters and digits joined by single dashes."""
        return re.sub(r"[^a-z0-9]", "-", title.lower())
    '''}, hidden='''
    from text import slugify


    def test_punctuation_and_spaces_collapse():
        assert slugify("Hello, World!") == "hello-world"
        assert slugify("  Many   spaces  here ") == "many-spaces-here"


    def test_already_a_slug():
        assert slugify("already-a-slug") == "already-a-slug"


    def test_digits_and_symbols():
        assert slugify("C'est la vie -- 2024 edition") == "c-est-la-vie-2024-edition"
    ''', fixed={"text.py": '''
    import re


    def slugify(title):
        """A URL slug for a title: lower-case letters and digits joined by single dashes."""
        return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
    '''})

task("repair", "page-count", "easy", """
    Users report that the last page of search results is missing: with 10 results and 3 per page,
    `pages.page_count(10, 3)` says 3, so the 10th result is never shown. Fix the bug in `pages.py`.
    """, {"pages.py": '''
    def page_count(n_items, per_page):
        """How many pages are needed to show n_items, per_page at a time."""
        return n_items // per_page


    def page(items, number, per_page):
        """The items on page `number` (1-based)."""
        start = (number - 1) * per_page
        return items[start:start + per_page]
    '''}, hidden='''
    from pages import page, page_count


    def test_partial_last_page_counts():
        assert page_count(10, 3) == 4
        assert page_count(1, 10) == 1


    def test_exact_multiple():
        assert page_count(9, 3) == 3


    def test_empty():
        assert page_count(0, 5) == 0


    def test_every_item_on_some_page():
        items = list(range(10))
        shown = [x for n in range(1, page_count(10, 3) + 1) for x in page(items, n, 3)]
        assert shown == items
    ''', fixed={"pages.py": '''
    def page_count(n_items, per_page):
        """How many pages are needed to show n_items, per_page at a time."""
        return -(-n_items // per_page)


    def page(items, number, per_page):
        """The items on page `number` (1-based)."""
        start = (number - 1) * per_page
        return items[start:start + per_page]
    '''})

INVENTORY = '''
    class OutOfStock(Exception):
        pass


    class Inventory:
        def __init__(self):
            self.stock = {}

        def add(self, sku, qty):
            if qty <= 0:
                raise ValueError("qty must be positive")
            self.stock[sku] = self.stock.get(sku, 0) + qty

        def remove(self, sku, qty):
            if qty <= 0:
                raise ValueError("qty must be positive")
            self.stock[sku] = self.stock.get(sku, 0) - qty

        def count(self, sku):
            return self.stock.get(sku, 0)
    '''
task("repair", "inventory-oversell", "medium", """
    Removing more units than are in stock silently makes the stock negative. `Inventory.remove` in
    `inventory.py` must raise the (already defined) `OutOfStock` exception in that case and leave the
    stock unchanged.
    """, {"inventory.py": INVENTORY, "test_inventory.py": '''
    from inventory import Inventory


    def test_add_then_count():
        inv = Inventory()
        inv.add("apple", 3)
        assert inv.count("apple") == 3


    if __name__ == "__main__":
        test_add_then_count()
        print("ok")
    '''}, hidden='''
    from inventory import Inventory, OutOfStock


    def test_oversell_raises_and_keeps_stock():
        inv = Inventory()
        inv.add("pear", 2)
        assert raises(OutOfStock, inv.remove, "pear", 5)
        assert inv.count("pear") == 2


    def test_unknown_sku_raises():
        assert raises(OutOfStock, Inventory().remove, "kiwi", 1)


    def test_remove_everything():
        inv = Inventory()
        inv.add("fig", 4)
        inv.remove("fig", 4)
        assert inv.count("fig") == 0


    def test_non_positive_quantity_still_rejected():
        inv = Inventory()
        inv.add("plum", 1)
        assert raises(ValueError, inv.remove, "plum", 0)
    ''', fixed={"inventory.py": sub(INVENTORY, '''
            self.stock[sku] = self.stock.get(sku, 0) - qty
''', '''
            have = self.stock.get(sku, 0)
            if qty > have:
                raise OutOfStock(f"{sku}: {have} in stock, {qty} requested")
            self.stock[sku] = have - qty
''')})

task("repair", "leap-year", "easy", """
    `calendar_utils.days_in_month(1900, 2)` returns 29, but 1900 was not a leap year (2000 was: century
    years are leap years only when divisible by 400). Fix it.
    """, {"calendar_utils.py": '''
    DAYS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]


    def is_leap(year):
        return year % 4 == 0


    def days_in_month(year, month):
        if month == 2 and is_leap(year):
            return 29
        return DAYS[month - 1]
    '''}, hidden='''
    from calendar_utils import days_in_month, is_leap


    def test_century_years():
        assert not is_leap(1900)
        assert not is_leap(2100)
        assert is_leap(2000)


    def test_ordinary_years():
        assert is_leap(2024)
        assert not is_leap(2023)


    def test_february():
        assert days_in_month(1900, 2) == 28
        assert days_in_month(2000, 2) == 29
        assert days_in_month(2023, 4) == 30
    ''', fixed={"calendar_utils.py": '''
    DAYS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]


    def is_leap(year):
        return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


    def days_in_month(year, month):
        if month == 2 and is_leap(year):
            return 29
        return DAYS[month - 1]
    '''})

task("repair", "ledger-total", "medium", """
    `ledger.total("ledger.csv")` crashes with a ValueError on our ledger file. Amounts of 1000 or more are
    written with a thousands separator and quoted, and descriptions may contain commas too. `total` must
    return the sum of the amount column, rounded to cents.
    """, {"ledger.py": '''
    def total(path):
        """Sum of the amount column of a ledger CSV (date,description,amount), rounded to cents."""
        lines = open(path).read().splitlines()[1:]
        return round(sum(float(line.split(",")[2]) for line in lines), 2)
    ''', "ledger.csv": '''
    date,description,amount
    2024-01-03,coffee,3.50
    2024-01-05,"rent, January","1,250.00"
    2024-01-09,books,42.10
    2024-01-15,laptop,"1,099.99"
    '''}, hidden='''
    import os
    import tempfile

    from ledger import total


    def test_sample_ledger():
        assert total("ledger.csv") == 2395.59


    def test_plain_amounts():
        fd, path = tempfile.mkstemp(suffix=".csv")
        with os.fdopen(fd, "w") as f:
            f.write("date,description,amount\\n2024-02-01,tea,2.25\\n2024-02-02,milk,1.10\\n")
        assert total(path) == 3.35
        os.unlink(path)


    def test_large_quoted_amounts():
        fd, path = tempfile.mkstemp(suffix=".csv")
        with os.fdopen(fd, "w") as f:
            f.write('date,description,amount\\n2024-03-01,"car, used","12,000.00"\\n2024-03-02,fee,-0.50\\n')
        assert total(path) == 11999.5
        os.unlink(path)
    ''', fixed={"ledger.py": '''
    import csv


    def total(path):
        """Sum of the amount column of a ledger CSV (date,description,amount), rounded to cents."""
        with open(path, newline="") as f:
            return round(sum(float(row["amount"].replace(",", "")) for row in csv.DictReader(f)), 2)
    '''})

LRU = '''
    from collections import OrderedDict


    class LRUCache:
        """Keeps the `capacity` most recently used entries."""

        def __init__(self, capacity):
            self.capacity = capacity
            self.data = OrderedDict()

        def get(self, key, default=None):
            return self.data.get(key, default)

        def put(self, key, value):
            self.data[key] = value
            self.data.move_to_end(key)
            if len(self.data) > self.capacity:
                self.data.popitem(last=False)
    '''
task("repair", "lru-eviction", "medium", """
    Our LRU cache evicts the wrong entry. With capacity 2: `put("a", 1)`, `put("b", 2)`, `get("a")`,
    `put("c", 3)` drops "a", although "a" was used more recently than "b". Reading an entry must count as
    using it. Fix `lru.py`.
    """, {"lru.py": LRU}, hidden='''
    from lru import LRUCache


    def test_get_refreshes_entry():
        c = LRUCache(2)
        c.put("a", 1)
        c.put("b", 2)
        assert c.get("a") == 1
        c.put("c", 3)
        assert c.get("b") is None
        assert c.get("a") == 1 and c.get("c") == 3


    def test_missing_key_default():
        c = LRUCache(1)
        assert c.get("nope", 42) == 42
        assert len(c.data) == 0


    def test_put_refreshes_and_capacity_holds():
        c = LRUCache(2)
        c.put("x", 1)
        c.put("y", 2)
        c.put("x", 10)
        c.put("z", 3)
        assert sorted(c.data) == ["x", "z"]
        assert c.get("x") == 10
    ''', fixed={"lru.py": sub(LRU, '''
            return self.data.get(key, default)
''', '''
            if key not in self.data:
                return default
            self.data.move_to_end(key)
            return self.data[key]
''')})

task("repair", "word-count", "medium", """
    `words.top_words("The cat. The CAT sat!", 2)` returns `[("The", 2), ("cat.", 1)]`. Words must be counted
    case-insensitively (as lower case) and without the punctuation around them, so the answer should be
    `[("the", 2), ("cat", 2)]`. Apostrophes inside words stay ("don't").
    """, {"words.py": '''
    from collections import Counter


    def count_words(text):
        return Counter(text.split())


    def top_words(text, n):
        """The n most common words with their counts, most common first (ties: first seen first)."""
        return count_words(text).most_common(n)
    '''}, hidden='''
    from words import count_words, top_words


    def test_case_and_punctuation():
        c = count_words("Hello, hello; HELLO? world...")
        assert c["hello"] == 3 and c["world"] == 1


    def test_inner_apostrophe_kept():
        assert count_words("Don't stop, don't!")["don't"] == 2


    def test_top_words():
        assert top_words("The cat. The CAT sat!", 2) == [("the", 2), ("cat", 2)]


    def test_bare_punctuation_is_not_a_word():
        assert "" not in count_words("wait -- what ?")
        assert sum(count_words("wait -- what ?").values()) == 2
    ''', fixed={"words.py": '''
    import string
    from collections import Counter


    def count_words(text):
        words = (w.strip(string.punctuation) for w in text.lower().split())
        return Counter(w for w in words if w)


    def top_words(text, n):
        """The n most common words with their counts, most common first (ties: first seen first)."""
        return count_words(text).most_common(n)
    '''})

ROMAN = '''
    SYMBOLS = [(1000, "M"), (500, "D"), (100, "C"), (50, "L"), (10, "X"), (5, "V"), (1, "I")]


    def to_roman(n):
        """Roman numeral for 1 <= n <= 3999."""
        if not 0 < n < 4000:
            raise ValueError(f"{n} out of range")
        out = ""
        for value, symbol in SYMBOLS:
            while n >= value:
                out += symbol
                n -= value
        return out
    '''
task("repair", "roman-numerals", "medium", """
    `roman.to_roman(4)` returns "IIII" and `to_roman(1994)` returns "MDCCCCLXXXXIIII". Numerals must use
    the subtractive forms (IV, IX, XL, XC, CD, CM), so 1994 is "MCMXCIV". Fix `roman.py`.
    """, {"roman.py": ROMAN}, hidden='''
    from roman import to_roman


    def test_subtractive_forms():
        assert [to_roman(n) for n in (4, 9, 40, 90, 400, 900)] == ["IV", "IX", "XL", "XC", "CD", "CM"]


    def test_examples():
        assert to_roman(1994) == "MCMXCIV"
        assert to_roman(3999) == "MMMCMXCIX"
        assert to_roman(14) == "XIV"


    def test_range_checked():
        assert to_roman(1) == "I"
        assert raises(ValueError, to_roman, 0)
    ''', fixed={"roman.py": sub(ROMAN, 
        '''SYMBOLS = [(1000, "M"), (500, "D"), (100, "C"), (50, "L"), (10, "X"), (5, "V"), (1, "I")]''',
        '''SYMBOLS = [(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
               (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]''')})

CONFIG = '''
    import json

    DEFAULTS = {"db": {"host": "localhost", "port": 5432, "options": {"ssl": False}}, "debug": False}


    def merge(base, override):
        """base with override's values on top; neither argument is modified."""
        return {**base, **override}


    def load(path):
        with open(path) as f:
            return merge(DEFAULTS, json.load(f))
    '''
task("repair", "config-deep-merge", "hard", """
    A config file that only sets `{"db": {"port": 6543}}` loses `db.host` (and `db.options`) from the
    defaults. `config.merge` must merge nested dictionaries recursively: values from the override win,
    a non-dict value replaces whatever was there, and neither argument may be modified.
    """, {"config.py": CONFIG}, hidden='''
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
    ''', fixed={"config.py": sub(CONFIG, '''
        return {**base, **override}
''', '''
        out = dict(base)
        for key, value in override.items():
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key] = merge(out[key], value)
            else:
                out[key] = value
        return out
''')})

# ============================================================================= qa (1 / 0)

task("qa", "effective-retries", "easy", """
    In this repository, how many times will a client made by `http_client.make_client()` (called with no
    arguments) retry a failed request? Write only the number to `answer.txt`.
    """, {"http_client.py": '''
    import configparser
    import os

    DEFAULT_RETRIES = 3
    HERE = os.path.dirname(os.path.abspath(__file__))


    class Client:
        def __init__(self, retries, timeout):
            self.retries, self.timeout = retries, timeout


    def load_settings():
        cp = configparser.ConfigParser()
        cp.read(os.path.join(HERE, "settings.ini"))
        return cp["client"] if cp.has_section("client") else {}


    def make_client(retries=None, timeout=None):
        s = load_settings()
        if retries is None:
            retries = int(s.get("retries", DEFAULT_RETRIES))
        if timeout is None:
            timeout = float(s.get("timeout", 10))
        return Client(retries, timeout)
    ''', "settings.ini": '''
    [client]
    # retries = 8 was too aggressive for the payment API
    retries = 5
    timeout = 2.5
    '''}, answer=5, kind="number",
    oracle='python3 -c "import http_client; print(http_client.make_client().retries)" > answer.txt')

task("qa", "audit-writer", "easy", """
    Which function in the `shop` package writes entries to the audit log? Write only the function's name
    to `answer.txt`.
    """, {"shop/__init__.py": "", "shop/audit.py": '''
    LOG = []


    def record(event, **details):
        """Append an entry to the audit log."""
        LOG.append((event, details))
    ''', "shop/orders.py": '''
    def place_order(cart):
        # audit entries for orders are written by the warehouse service, not here
        return {"items": list(cart), "status": "placed"}


    def cancel_order(order):
        order["status"] = "cancelled"
        return order
    ''', "shop/refunds.py": '''
    from shop import audit


    def request_refund(order, reason):
        return {"order": order, "reason": reason, "state": "requested"}


    def approve_refund(refund, approver):
        refund["state"] = "approved"
        audit.record("refund-approved", approver=approver, order=refund["order"])
        return refund
    '''}, answer="approve_refund", kind="label",
    oracle="printf '%s\\n' approve_refund > answer.txt")

task("qa", "route-count", "easy", """
    How many HTTP routes does the app in this repository register when `app.py` is imported? Write only the
    number to `answer.txt`.
    """, {"app.py": '''
    from routing import ROUTES, route

    import admin  # noqa: F401  (registers the admin routes)


    @route("/")
    def index():
        return "home"


    @route("/health")
    def health():
        return "ok"


    # @route("/debug")
    # def debug():
    #     return "debug"


    @route("/items/<id>")
    def item(id):
        return id
    ''', "admin.py": '''
    from routing import route


    @route("/admin")
    def admin_home():
        return "admin"


    @route("/admin/users")
    def users():
        return []


    def stats():  # not routed yet
        return {}
    ''', "routing.py": '''
    ROUTES = {}


    def route(path):
        def register(fn):
            ROUTES[path] = fn
            return fn
        return register
    '''}, answer=5, kind="number",
    oracle='python3 -c "import app; print(len(app.ROUTES))" > answer.txt')

task("qa", "checksum-output", "medium", """
    What does `python3 checksum.py hello` print? Write only the printed number to `answer.txt`.
    """, {"checksum.py": '''
    import sys


    def checksum(text, modulus=65521):
        """A tiny Adler-style checksum."""
        a, b = 1, 0
        for ch in text.encode():
            a = (a + ch) % modulus
            b = (b + a) % modulus
        return (b << 16) | a


    if __name__ == "__main__":
        print(checksum(sys.argv[1]) % 100000)
    '''}, answer=47413, kind="number", oracle="python3 checksum.py hello > answer.txt")

task("qa", "money-importers", "medium", """
    Which modules of the `shop` package import `shop.money` (directly, in any import form)? Write their
    module names (without `.py`) to `answer.txt`, in alphabetical order, separated by commas.
    """, {"shop/__init__.py": "", "shop/money.py": '''
    def cents(amount):
        return round(amount * 100)
    ''', "shop/cart.py": '''
    from shop.money import cents


    def total(items):
        return sum(cents(i["price"]) * i["qty"] for i in items)
    ''', "shop/invoice.py": '''
    import shop.money as m


    def line(item):
        return f'{item["name"]}: {m.cents(item["price"])}'
    ''', "shop/catalog.py": '''
    # prices are stored in money units; see shop.money for conversions
    CATALOG = {"pen": 1.5, "pad": 3.0}
    ''', "shop/refunds.py": '''
    from shop import money


    def refund_cents(amount):
        return -money.cents(amount)
    ''', "shop/shipping.py": '''
    RATES = {"standard": 4.99, "express": 9.99}
    '''}, answer=["cart", "invoice", "refunds"], kind="list",
    oracle="printf '%s\\n' 'cart, invoice, refunds' > answer.txt")

task("qa", "zero-quantity", "medium", """
    Does `orders.validate_order` accept an order whose only line has quantity 0? Write `yes` or `no` to
    `answer.txt`.
    """, {"orders.py": '''
    class InvalidOrder(Exception):
        pass


    def validate_order(order):
        """Raise InvalidOrder for a bad order; return it otherwise."""
        if not order.get("lines"):
            raise InvalidOrder("empty order")
        for line in order["lines"]:
            if line["qty"] < 0:
                raise InvalidOrder(f"negative quantity for {line['sku']}")
            if not line["sku"]:
                raise InvalidOrder("missing sku")
        return order
    '''}, answer="yes", kind="yesno", oracle=(
    "python3 -c \"import orders\ntry:\n    orders.validate_order({'lines': [{'sku': 'a', 'qty': 0}]})\n"
    "    print('yes')\nexcept orders.InvalidOrder:\n    print('no')\" > answer.txt"))

task("qa", "missing-file-error", "easy", """
    Which exception class does `storage.load(path)` raise when the file does not exist? Write only the class
    name to `answer.txt`.
    """, {"storage.py": '''
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
    '''}, answer="StoreMissing", kind="label", oracle=(
    "python3 -c \"import storage\ntry:\n    storage.load('no-such-file.json')\nexcept Exception as e:\n"
    "    print(type(e).__name__)\" > answer.txt"))

task("qa", "plugin-order", "hard", """
    In what order does `loader.load_all()` load the plugins in `plugins/`? Write the plugins' NAME values to
    `answer.txt` in load order, separated by commas.
    """, {"loader.py": '''
    import importlib
    import os

    HERE = os.path.dirname(os.path.abspath(__file__))


    def load_all():
        mods = []
        for fn in os.listdir(os.path.join(HERE, "plugins")):
            if fn.endswith(".py") and not fn.startswith("_"):
                mods.append(importlib.import_module("plugins." + fn[:-3]))
        mods = [m for m in mods if getattr(m, "ENABLED", True)]
        return sorted(mods, key=lambda m: (-m.PRIORITY, m.NAME))
    ''', "plugins/__init__.py": "", "plugins/auth.py": 'NAME = "auth"\nPRIORITY = 10\n',
        "plugins/cache.py": 'NAME = "cache"\nPRIORITY = 5\n',
        "plugins/metrics.py": 'NAME = "metrics"\nPRIORITY = 5\n',
        "plugins/legacy.py": 'NAME = "legacy"\nPRIORITY = 99\nENABLED = False\n',
        "plugins/zlog.py": 'NAME = "audit-log"\nPRIORITY = 10\n',
        "plugins/_template.py": 'NAME = "template"\nPRIORITY = 100\n'},
    answer=["audit-log", "auth", "cache", "metrics"], kind="list", oracle=(
    "python3 -c \"import loader; print(', '.join(m.NAME for m in loader.load_all()))\" > answer.txt"))

task("qa", "grade-threshold", "medium", """
    Submissions are graded by `grader/rubric.py`. What is the lowest total score (an integer from 0 to 100)
    that receives the grade "B"? Write only the number to `answer.txt`.
    """, {"grader/__init__.py": "", "grader/rubric.py": '''
    BANDS = [(90, "A"), (74, "B"), (60, "C"), (0, "F")]
    CURVE = 3  # points added to every total before banding (decided at the 2023 review)


    def grade(total):
        total = min(100, total + CURVE)
        for floor, letter in BANDS:
            if total >= floor:
                return letter
    '''}, answer=71, kind="number",
    oracle=('python3 -c "from grader.rubric import grade; '
            "print(min(s for s in range(101) if grade(s) == 'B'))\" > answer.txt"),
    guard={"allow_paths": ["grader/*"]})

task("qa", "error-tally", "medium", """
    What number does `python3 tally.py events.log --level ERROR` print? Write only that number to
    `answer.txt`.
    """, {"tally.py": '''
    import sys


    def tally(lines, level):
        n = 0
        for line in lines:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(maxsplit=2)
            if len(parts) >= 2 and parts[1] == level:
                n += 1
        return n


    if __name__ == "__main__":
        path, level = sys.argv[1], sys.argv[sys.argv.index("--level") + 1]
        with open(path) as f:
            print(tally(f, level))
    ''', "events.log": '''
    # log rotated 2024-05-01
    08:00:01 INFO service started
    08:00:02 ERROR could not reach cache
    08:00:05 WARN retrying
    # 08:00:06 ERROR (suppressed duplicate)
    08:01:10 ERROR timeout talking to db
    08:02:00 INFO ERROR budget reset
    08:03:33 error lower-case levels are a different level
    08:04:00 ERROR disk almost full
    '''}, answer=3, kind="number", oracle="python3 tally.py events.log --level ERROR > answer.txt")

# ============================================================================= build (fraction)

task("build", "run-length", "easy", """
    Implement `encode` and `decode` in `rle.py` (run-length encoding).

    - `encode(text)`: each run of a repeated character becomes its length followed by the character:
      `"aaabcc"` -> `"3a1b2c"`; the empty string stays empty.
    - `decode(code)`: the inverse; counts may have several digits (`"12x"` -> twelve x's).
    """, {"rle.py": '''
    def encode(text):
        raise NotImplementedError


    def decode(code):
        raise NotImplementedError
    '''}, hidden='''
    from rle import decode, encode


    def test_encode_runs():
        assert encode("aaabcc") == "3a1b2c"


    def test_encode_single_chars():
        assert encode("abc") == "1a1b1c"


    def test_encode_empty():
        assert encode("") == ""


    def test_decode():
        assert decode("3a1b2c") == "aaabcc"


    def test_decode_multi_digit():
        assert decode("12x1y") == "x" * 12 + "y"


    def test_round_trip():
        s = "wwwwwwwwwwwwbbbcdddd  !!"
        assert decode(encode(s)) == s
    ''', fixed={"rle.py": '''
    import re


    def encode(text):
        return "".join(f"{len(m.group(0))}{m.group(1)}" for m in re.finditer(r"(.)\\1*", text, re.S))


    def decode(code):
        return "".join(ch * int(n) for n, ch in re.findall(r"(\\d+)(\\D)", code, re.S))
    '''})

task("build", "matrix", "medium", """
    Implement the functions in `matrix.py`. Matrices are lists of rows (lists of numbers).

    - `identity(n)`: the n x n identity matrix.
    - `transpose(m)`: rows become columns.
    - `matmul(a, b)`: the matrix product; raise `ValueError` when the shapes do not fit.
    """, {"matrix.py": '''
    def identity(n):
        raise NotImplementedError


    def transpose(m):
        raise NotImplementedError


    def matmul(a, b):
        raise NotImplementedError
    '''}, hidden='''
    from matrix import identity, matmul, transpose


    def test_identity():
        assert identity(3) == [[1, 0, 0], [0, 1, 0], [0, 0, 1]]


    def test_transpose_rectangular():
        assert transpose([[1, 2, 3], [4, 5, 6]]) == [[1, 4], [2, 5], [3, 6]]


    def test_matmul():
        assert matmul([[1, 2], [3, 4]], [[5, 6], [7, 8]]) == [[19, 22], [43, 50]]


    def test_matmul_rectangular():
        assert matmul([[1, 2, 3]], [[1], [2], [3]]) == [[14]]


    def test_matmul_identity():
        m = [[2, -1], [0, 3]]
        assert matmul(m, identity(2)) == m


    def test_shape_mismatch():
        assert raises(ValueError, matmul, [[1, 2]], [[1, 2]])
    ''', fixed={"matrix.py": '''
    def identity(n):
        return [[1 if i == j else 0 for j in range(n)] for i in range(n)]


    def transpose(m):
        return [list(col) for col in zip(*m)]


    def matmul(a, b):
        if not a or len(a[0]) != len(b):
            raise ValueError("shapes do not fit")
        cols = transpose(b)
        return [[sum(x * y for x, y in zip(row, col)) for col in cols] for row in a]
    '''})

task("build", "bank-account", "medium", """
    Implement `Account` and `transfer` in `bank.py`.

    - `Account(owner, balance=0)`; `.balance` is the current balance.
    - `.deposit(amount)` and `.withdraw(amount)`: amounts must be positive (`ValueError` otherwise);
      withdrawing more than the balance raises `InsufficientFunds` and changes nothing.
    - `.history`: a list of `("deposit", amount)` / `("withdraw", amount)` tuples in order.
    - `transfer(src, dst, amount)`: withdraw from src and deposit to dst, all or nothing.
    """, {"bank.py": '''
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
    '''}, hidden='''
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
    ''', fixed={"bank.py": '''
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
    '''})

task("build", "tokenizer", "medium", """
    Implement `tokenize(expr)` in `tokens.py`: split an arithmetic expression into a list of token strings.

    - numbers: integers or decimals (`"42"`, `"4.5"`); names: letters, digits and `_`, not starting with a digit;
    - operators and parentheses, one character each: `+ - * / ( )`;
    - whitespace separates tokens and is dropped; any other character raises `ValueError`.

    Example: `tokenize("3 + 4.5*(x_1 - 2)")` -> `["3", "+", "4.5", "*", "(", "x_1", "-", "2", ")"]`.
    """, {"tokens.py": '''
    def tokenize(expr):
        raise NotImplementedError
    '''}, hidden='''
    from tokens import tokenize


    def test_example():
        assert tokenize("3 + 4.5*(x_1 - 2)") == ["3", "+", "4.5", "*", "(", "x_1", "-", "2", ")"]


    def test_no_spaces():
        assert tokenize("a/b") == ["a", "/", "b"]


    def test_multi_digit_numbers():
        assert tokenize("123+0.25") == ["123", "+", "0.25"]


    def test_whitespace_only():
        assert tokenize("   ") == []


    def test_bad_character():
        assert raises(ValueError, tokenize, "2 $ 3")


    def test_names_with_digits():
        assert tokenize("rate2*base") == ["rate2", "*", "base"]
    ''', fixed={"tokens.py": '''
    import re

    TOKEN = re.compile(r"\\s*(?:(\\d+(?:\\.\\d+)?)|([A-Za-z_]\\w*)|([-+*/()]))")


    def tokenize(expr):
        out, pos = [], 0
        while pos < len(expr):
            if expr[pos:].strip() == "":
                break
            m = TOKEN.match(expr, pos)
            if not m:
                raise ValueError(f"bad character at {pos}: {expr[pos:].lstrip()[:1]!r}")
            out.append(m.group(m.lastindex))
            pos = m.end()
        return out
    '''})

task("build", "calculator", "hard", """
    Implement `evaluate(expr)` in `calc.py`: the value of an arithmetic expression, without `eval`.

    - numbers (integers and decimals), `+ - * /`, parentheses, unary minus;
    - usual precedence (`*` and `/` before `+` and `-`), left to right within a level;
    - division by zero raises `ZeroDivisionError`; a malformed expression raises `ValueError`.
    """, {"calc.py": '''
    def evaluate(expr):
        raise NotImplementedError
    '''}, hidden='''
    from calc import evaluate


    def test_precedence():
        assert evaluate("2 + 3 * 4") == 14


    def test_parentheses():
        assert evaluate("(2 + 3) * 4") == 20


    def test_left_to_right():
        assert evaluate("10 - 4 - 3") == 3
        assert evaluate("16 / 4 / 2") == 2


    def test_unary_minus():
        assert evaluate("-3 + 5") == 2
        assert evaluate("2 * -(1 + 1)") == -4


    def test_decimals():
        assert abs(evaluate("0.5 * 0.2") - 0.1) < 1e-12


    def test_division_by_zero():
        assert raises(ZeroDivisionError, evaluate, "1 / (2 - 2)")


    def test_malformed():
        assert raises(ValueError, evaluate, "2 +")
        assert raises(ValueError, evaluate, "(1 + 2")
    ''', fixed={"calc.py": '''
    import re


    def evaluate(expr):
        tokens = re.findall(r"\\d+(?:\\.\\d+)?|[-+*/()]|\\S", expr)
        pos = 0

        def peek():
            return tokens[pos] if pos < len(tokens) else None

        def take():
            nonlocal pos
            if pos >= len(tokens):
                raise ValueError("unexpected end")
            pos += 1
            return tokens[pos - 1]

        def atom():
            t = take()
            if t == "-":
                return -atom()
            if t == "(":
                v = sum_()
                if take() != ")":
                    raise ValueError("missing )")
                return v
            if re.fullmatch(r"\\d+(?:\\.\\d+)?", t):
                return float(t) if "." in t else int(t)
            raise ValueError(f"unexpected {t!r}")

        def product():
            v = atom()
            while peek() in ("*", "/"):
                v = v * atom() if take() == "*" else v / atom()
            return v

        def sum_():
            v = product()
            while peek() in ("+", "-"):
                v = v + product() if take() == "+" else v - product()
            return v

        v = sum_()
        if pos != len(tokens):
            raise ValueError(f"unexpected {tokens[pos]!r}")
        return v
    '''})

task("build", "caesar", "easy", """
    Implement `encrypt(text, shift)` and `decrypt(text, shift)` in `cipher.py` (the Caesar cipher).
    Letters move `shift` places along the alphabet, wrapping around, keeping their case; every other
    character is unchanged; any integer shift works (negative, or larger than 26).
    """, {"cipher.py": '''
    def encrypt(text, shift):
        raise NotImplementedError


    def decrypt(text, shift):
        raise NotImplementedError
    '''}, hidden='''
    from cipher import decrypt, encrypt


    def test_basic_shift():
        assert encrypt("abc", 1) == "bcd"


    def test_wraps_and_keeps_case():
        assert encrypt("xyz XYZ", 3) == "abc ABC"


    def test_other_characters_unchanged():
        assert encrypt("Hi, 2 you!", 2) == "Jk, 2 aqw!"


    def test_large_and_negative_shift():
        assert encrypt("abc", 27) == "bcd"
        assert encrypt("abc", -1) == "zab"


    def test_decrypt_inverts():
        assert decrypt(encrypt("The Quick Brown Fox", 11), 11) == "The Quick Brown Fox"
    ''', fixed={"cipher.py": '''
    def encrypt(text, shift):
        out = []
        for ch in text:
            if ch.isascii() and ch.isalpha():
                base = ord("A") if ch.isupper() else ord("a")
                ch = chr(base + (ord(ch) - base + shift) % 26)
            out.append(ch)
        return "".join(out)


    def decrypt(text, shift):
        return encrypt(text, -shift)
    '''})

task("build", "priority-queue", "medium", """
    Implement `PriorityQueue` in `pq.py`.

    - `push(item, priority)`; `pop()` removes and returns the item with the lowest priority number;
      items with equal priority come out in the order they were pushed;
    - `peek()` returns that item without removing it; `len(q)` is the number of items;
    - `pop()` and `peek()` on an empty queue raise `IndexError`.
    """, {"pq.py": '''
    class PriorityQueue:
        def __init__(self):
            raise NotImplementedError

        def push(self, item, priority):
            raise NotImplementedError

        def pop(self):
            raise NotImplementedError

        def peek(self):
            raise NotImplementedError

        def __len__(self):
            raise NotImplementedError
    '''}, hidden='''
    from pq import PriorityQueue


    def test_lowest_priority_first():
        q = PriorityQueue()
        for item, p in [("c", 3), ("a", 1), ("b", 2)]:
            q.push(item, p)
        assert [q.pop(), q.pop(), q.pop()] == ["a", "b", "c"]


    def test_ties_in_push_order():
        q = PriorityQueue()
        for item in ["first", "second", "third"]:
            q.push(item, 5)
        assert [q.pop() for _ in range(3)] == ["first", "second", "third"]


    def test_peek_does_not_remove():
        q = PriorityQueue()
        q.push("x", 1)
        assert q.peek() == "x" and len(q) == 1


    def test_len():
        q = PriorityQueue()
        q.push(1, 1)
        q.push(2, 1)
        q.pop()
        assert len(q) == 1


    def test_empty_raises():
        q = PriorityQueue()
        assert raises(IndexError, q.pop) and raises(IndexError, q.peek)


    def test_unorderable_items():
        q = PriorityQueue()
        q.push({"job": 1}, 2)
        q.push({"job": 2}, 2)
        assert q.pop() == {"job": 1}
    ''', fixed={"pq.py": '''
    import heapq
    import itertools


    class PriorityQueue:
        def __init__(self):
            self._heap, self._count = [], itertools.count()

        def push(self, item, priority):
            heapq.heappush(self._heap, (priority, next(self._count), item))

        def pop(self):
            if not self._heap:
                raise IndexError("pop from an empty queue")
            return heapq.heappop(self._heap)[2]

        def peek(self):
            if not self._heap:
                raise IndexError("peek at an empty queue")
            return self._heap[0][2]

        def __len__(self):
            return len(self._heap)
    '''})

task("build", "durations", "medium", """
    Implement `parse` and `format` in `durations.py`.

    - `parse(text)`: `"1h30m"` -> 5400 (seconds). Units `d h m s`, each at most once, in that order, spaces
      between parts allowed (`"1h 5m 10s"`); anything else (empty, unknown unit, wrong order) raises `ValueError`.
    - `format(seconds)`: the shortest such text, largest units first, zero parts left out: 5400 -> `"1h30m"`,
      90061 -> `"1d1h1m1s"`, 0 -> `"0s"`.
    """, {"durations.py": '''
    def parse(text):
        raise NotImplementedError


    def format(seconds):
        raise NotImplementedError
    '''}, hidden='''
    from durations import format, parse


    def test_parse_simple():
        assert parse("1h30m") == 5400 and parse("45s") == 45


    def test_parse_days_and_spaces():
        assert parse("2d") == 172800
        assert parse("1h 5m 10s") == 3910


    def test_parse_rejects_unknown_unit():
        assert raises(ValueError, parse, "3w")


    def test_parse_rejects_wrong_order_and_empty():
        assert raises(ValueError, parse, "5m1h")
        assert raises(ValueError, parse, "")


    def test_format():
        assert format(5400) == "1h30m"
        assert format(90061) == "1d1h1m1s"


    def test_format_zero():
        assert format(0) == "0s"


    def test_round_trip():
        for s in (1, 59, 60, 3600, 86399, 123456):
            assert parse(format(s)) == s
    ''', fixed={"durations.py": '''
    import re

    UNITS = [("d", 86400), ("h", 3600), ("m", 60), ("s", 1)]
    PATTERN = re.compile(r"\\s*".join(rf"(?:(\\d+){u})?" for u, _ in UNITS))


    def parse(text):
        m = PATTERN.fullmatch(text.strip())
        if not text.strip() or not m:
            raise ValueError(f"not a duration: {text!r}")
        return sum(int(v) * size for v, (_, size) in zip(m.groups(), UNITS) if v)


    def format(seconds):
        out = ""
        for unit, size in UNITS:
            n, seconds = divmod(seconds, size)
            if n:
                out += f"{n}{unit}"
        return out or "0s"
    '''})

task("build", "word-wrap", "medium", """
    Implement `wrap(text, width)` in `wrap.py`: split text into lines of at most `width` characters.

    - words are separated by any whitespace (collapsed); lines are filled greedily, words joined by one space;
    - a word longer than `width` goes on a line of its own, unbroken;
    - empty or blank text gives `[]`.
    """, {"wrap.py": '''
    def wrap(text, width):
        raise NotImplementedError
    '''}, hidden='''
    from wrap import wrap


    def test_greedy_fill():
        assert wrap("the quick brown fox jumps", 10) == ["the quick", "brown fox", "jumps"]


    def test_exact_width():
        assert wrap("aaaa bbbb", 9) == ["aaaa bbbb"]


    def test_long_word_alone():
        assert wrap("a supercalifragilistic b", 5) == ["a", "supercalifragilistic", "b"]


    def test_whitespace_collapsed():
        assert wrap("  one\\n two\\tthree  ", 20) == ["one two three"]


    def test_blank():
        assert wrap("   ", 5) == []
    ''', fixed={"wrap.py": '''
    def wrap(text, width):
        lines, line = [], ""
        for word in text.split():
            if line and len(line) + 1 + len(word) <= width:
                line += " " + word
            else:
                if line:
                    lines.append(line)
                line = word
        if line:
            lines.append(line)
        return lines
    '''})

task("build", "graph-paths", "hard", """
    Implement `shortest_path` and `components` in `graph.py`. A graph is a list of undirected edges
    `(a, b)` between hashable, sortable nodes.

    - `shortest_path(edges, start, goal)`: a list of nodes from start to goal with the fewest edges
      (`[start]` when start == goal), or `None` when there is no path. When several paths are equally
      short, return the one that is smallest when compared as a list.
    - `components(edges)`: the connected components, each a sorted list, the list of them sorted.
    """, {"graph.py": '''
    def shortest_path(edges, start, goal):
        raise NotImplementedError


    def components(edges):
        raise NotImplementedError
    '''}, hidden='''
    from graph import components, shortest_path

    EDGES = [("a", "b"), ("b", "c"), ("c", "d"), ("a", "e"), ("e", "d"), ("x", "y")]


    def test_shortest():
        assert shortest_path(EDGES, "a", "d") == ["a", "e", "d"]


    def test_same_node():
        assert shortest_path(EDGES, "c", "c") == ["c"]


    def test_unreachable():
        assert shortest_path(EDGES, "a", "y") is None


    def test_tie_smallest_path():
        assert shortest_path([(1, 2), (1, 3), (2, 4), (3, 4)], 1, 4) == [1, 2, 4]


    def test_undirected():
        assert shortest_path(EDGES, "d", "b") == ["d", "c", "b"]


    def test_components():
        assert components(EDGES) == [["a", "b", "c", "d", "e"], ["x", "y"]]


    def test_components_numbers():
        assert components([(3, 1), (5, 4)]) == [[1, 3], [4, 5]]
    ''', fixed={"graph.py": '''
    from collections import defaultdict, deque


    def _adjacency(edges):
        adj = defaultdict(set)
        for a, b in edges:
            adj[a].add(b)
            adj[b].add(a)
        return adj


    def shortest_path(edges, start, goal):
        adj, prev, queue = _adjacency(edges), {start: None}, deque([start])
        while queue:
            node = queue.popleft()
            if node == goal:
                path = []
                while node is not None:
                    path.append(node)
                    node = prev[node]
                return path[::-1]
            for nxt in sorted(adj[node]):
                if nxt not in prev:
                    prev[nxt] = node
                    queue.append(nxt)
        return None


    def components(edges):
        adj, seen, out = _adjacency(edges), set(), []
        for node in sorted(adj):
            if node in seen:
                continue
            comp, stack = [], [node]
            seen.add(node)
            while stack:
                n = stack.pop()
                comp.append(n)
                for m in adj[n] - seen:
                    seen.add(m)
                    stack.append(m)
            out.append(sorted(comp))
        return sorted(out)
    '''})

# ============================================================================= extend (fraction)

SHAPES = '''
    import math


    class Circle:
        def __init__(self, r):
            self.r = r

        def area(self):
            return math.pi * self.r ** 2

        def perimeter(self):
            return 2 * math.pi * self.r


    class Rectangle:
        def __init__(self, w, h):
            self.w, self.h = w, h

        def area(self):
            return self.w * self.h

        def perimeter(self):
            return 2 * (self.w + self.h)
    '''
task("extend", "shapes-triangle", "easy", """
    Add to `shapes.py`:

    - a `Triangle(a, b, c)` class (side lengths) with `area()` (Heron's formula) and `perimeter()`,
      raising `ValueError` from the constructor when the sides cannot form a triangle (including a
      degenerate, flat one);
    - a function `total_area(shapes)`: the sum of the areas of any mix of shapes.
    """, {"shapes.py": SHAPES}, hidden='''
    import math

    from shapes import Circle, Rectangle


    def test_triangle_area():
        from shapes import Triangle
        assert abs(Triangle(3, 4, 5).area() - 6) < 1e-9


    def test_triangle_perimeter():
        from shapes import Triangle
        assert Triangle(3, 4, 5).perimeter() == 12


    def test_invalid_triangle():
        from shapes import Triangle
        assert raises(ValueError, Triangle, 1, 2, 10)


    def test_degenerate_triangle():
        from shapes import Triangle
        assert raises(ValueError, Triangle, 1, 2, 3)


    def test_total_area():
        from shapes import Triangle, total_area
        got = total_area([Circle(1), Rectangle(2, 3), Triangle(3, 4, 5)])
        assert abs(got - (math.pi + 12)) < 1e-9


    def test_total_area_empty():
        from shapes import total_area
        assert total_area([]) == 0
    ''', fixed={"shapes.py": append(SHAPES, '''
    class Triangle:
        def __init__(self, a, b, c):
            x, y, z = sorted((a, b, c))
            if x <= 0 or x + y <= z:
                raise ValueError(f"sides {a}, {b}, {c} do not form a triangle")
            self.a, self.b, self.c = a, b, c

        def area(self):
            s = self.perimeter() / 2
            return math.sqrt(s * (s - self.a) * (s - self.b) * (s - self.c))

        def perimeter(self):
            return self.a + self.b + self.c


    def total_area(shapes):
        return sum(s.area() for s in shapes)
    ''')})

TODO = '''
    class TodoList:
        def __init__(self):
            self.items = []

        def add(self, title):
            self.items.append({"id": len(self.items) + 1, "title": title, "done": False})
            return len(self.items)

        def done(self, item_id):
            self.items[item_id - 1]["done"] = True

        def pending(self):
            return [i["title"] for i in self.items if not i["done"]]
    '''
TODO_TEST = '''
    from todo import TodoList


    def test_pending_excludes_done():
        t = TodoList()
        t.add("write")
        t.done(t.add("read"))
        assert t.pending() == ["write"]


    if __name__ == "__main__":
        test_pending_excludes_done()
        print("ok")
    '''
task("extend", "todo-priority", "medium", """
    Add priorities to the todo list in `todo.py`:

    - `add(title, priority="normal")`; priority is one of "low", "normal", "high" (`ValueError` otherwise)
      and is stored in the item under the key "priority";
    - `by_priority()`: the titles of the pending items, high before normal before low, and in the order they
      were added within a priority.

    Also add a test for `by_priority` to `test_todo.py` (the file's `__main__` block should run it).
    """, {"todo.py": TODO, "test_todo.py": TODO_TEST}, hidden='''
    from todo import TodoList


    def test_default_priority_is_normal():
        t = TodoList()
        t.add("x")
        assert t.items[0]["priority"] == "normal"


    def test_priority_stored():
        t = TodoList()
        t.add("x", priority="high")
        assert t.items[0]["priority"] == "high"


    def test_invalid_priority():
        t = TodoList()
        assert raises(ValueError, t.add, "x", priority="urgent")


    def test_by_priority_order():
        t = TodoList()
        t.add("l1", "low")
        t.add("n1")
        t.add("h1", "high")
        t.add("n2", "normal")
        assert t.by_priority() == ["h1", "n1", "n2", "l1"]


    def test_by_priority_skips_done():
        t = TodoList()
        t.done(t.add("h", "high"))
        t.add("l", "low")
        assert t.by_priority() == ["l"]
    ''', fixed={"todo.py": '''
    PRIORITIES = {"high": 0, "normal": 1, "low": 2}


    class TodoList:
        def __init__(self):
            self.items = []

        def add(self, title, priority="normal"):
            if priority not in PRIORITIES:
                raise ValueError(f"priority must be one of {list(PRIORITIES)}, not {priority!r}")
            self.items.append({"id": len(self.items) + 1, "title": title, "done": False, "priority": priority})
            return len(self.items)

        def done(self, item_id):
            self.items[item_id - 1]["done"] = True

        def pending(self):
            return [i["title"] for i in self.items if not i["done"]]

        def by_priority(self):
            todo = [i for i in self.items if not i["done"]]
            return [i["title"] for i in sorted(todo, key=lambda i: PRIORITIES[i["priority"]])]
    ''', "test_todo.py": sub(TODO_TEST, '''
    if __name__ == "__main__":
        test_pending_excludes_done()
''', '''
    def test_by_priority_high_first():
        t = TodoList()
        t.add("later", "low")
        t.add("now", "high")
        assert t.by_priority() == ["now", "later"]


    if __name__ == "__main__":
        test_pending_excludes_done()
        test_by_priority_high_first()
''')}, guard={"allow_rules": ["test-editing"], "allow_paths": ["test_todo.py"]})

VM = '''
    def run(program):
        """Run a stack-machine program (one instruction per line); return what PRINT printed."""
        stack, out = [], []
        for lineno, line in enumerate(program.splitlines(), 1):
            parts = line.split()
            if not parts or parts[0].startswith(";"):
                continue
            op, args = parts[0].upper(), parts[1:]
            if op == "PUSH":
                stack.append(int(args[0]))
            elif op == "ADD":
                b, a = stack.pop(), stack.pop()
                stack.append(a + b)
            elif op == "PRINT":
                out.append(stack[-1])
            else:
                raise ValueError(f"line {lineno}: unknown instruction {op}")
        return out
    '''
task("extend", "stack-vm-ops", "medium", """
    The stack machine in `vm.py` knows PUSH, ADD and PRINT. Add:

    - `SUB` and `MUL`: pop b, then a, push a - b (a * b);
    - `DUP`: push a copy of the top value; `SWAP`: exchange the two top values;
    - `JZ n`: pop a value and, when it is 0, continue at line n (1-based, counting every line of the
      program); otherwise continue with the next line.
    """, {"vm.py": VM}, hidden='''
    from vm import run


    def test_sub():
        assert run("PUSH 10\\nPUSH 4\\nSUB\\nPRINT") == [6]


    def test_mul():
        assert run("PUSH 6\\nPUSH 7\\nMUL\\nPRINT") == [42]


    def test_dup():
        assert run("PUSH 3\\nDUP\\nMUL\\nPRINT") == [9]


    def test_swap():
        assert run("PUSH 1\\nPUSH 5\\nSWAP\\nSUB\\nPRINT") == [4]


    def test_jz_taken_and_not_taken():
        prog = "PUSH 0\\nJZ 5\\nPUSH 1\\nPRINT\\nPUSH 2\\nPRINT"
        assert run(prog) == [2]
        assert run(prog.replace("PUSH 0", "PUSH 3")) == [1, 2]
    ''', fixed={"vm.py": '''
    def run(program):
        """Run a stack-machine program (one instruction per line); return what PRINT printed."""
        stack, out = [], []
        lines = program.splitlines()
        pc = 0
        while pc < len(lines):
            lineno, parts = pc + 1, lines[pc].split()
            pc += 1
            if not parts or parts[0].startswith(";"):
                continue
            op, args = parts[0].upper(), parts[1:]
            if op == "PUSH":
                stack.append(int(args[0]))
            elif op in ("ADD", "SUB", "MUL"):
                b, a = stack.pop(), stack.pop()
                stack.append(a + b if op == "ADD" else a - b if op == "SUB" else a * b)
            elif op == "DUP":
                stack.append(stack[-1])
            elif op == "SWAP":
                stack[-1], stack[-2] = stack[-2], stack[-1]
            elif op == "JZ":
                if stack.pop() == 0:
                    pc = int(args[0]) - 1
            elif op == "PRINT":
                out.append(stack[-1])
            else:
                raise ValueError(f"line {lineno}: unknown instruction {op}")
        return out
    '''})

MONEY = '''
    class Money:
        """An amount in integer cents of one currency."""

        def __init__(self, cents, currency="EUR"):
            self.cents, self.currency = int(cents), currency

        def __add__(self, other):
            if other.currency != self.currency:
                raise ValueError("currency mismatch")
            return Money(self.cents + other.cents, self.currency)

        def __eq__(self, other):
            return (self.cents, self.currency) == (other.cents, other.currency)

        def __repr__(self):
            return f"Money({self.cents}, {self.currency!r})"

        def __str__(self):
            sign = "-" if self.cents < 0 else ""
            return f"{sign}{abs(self.cents) // 100}.{abs(self.cents) % 100:02d} {self.currency}"
    '''
task("extend", "money-allocate", "hard", """
    Extend `Money` in `money.py`:

    - `allocate(ratios)`: split the amount into parts proportional to `ratios` (positive numbers) without
      losing a cent: each part gets the floor of its share, then the leftover cents go one each to the
      first parts. `Money(100).allocate([1, 1, 1])` -> 34, 33, 33 cents.
    - `Money.parse(text)` (a classmethod): the inverse of `str()`, e.g. `"12.05 EUR"`, `"-0.50 USD"`;
      `ValueError` for anything else.
    """, {"money.py": MONEY}, hidden='''
    from money import Money


    def test_allocate_even_split_with_remainder():
        assert Money(100).allocate([1, 1, 1]) == [Money(34), Money(33), Money(33)]


    def test_allocate_ratios():
        assert Money(1000, "USD").allocate([3, 7]) == [Money(300, "USD"), Money(700, "USD")]


    def test_allocate_keeps_total():
        parts = Money(101).allocate([1, 2, 3, 4])
        assert sum(p.cents for p in parts) == 101


    def test_parse():
        assert Money.parse("12.05 EUR") == Money(1205)
        assert Money.parse("-0.50 USD") == Money(-50, "USD")


    def test_parse_round_trip():
        m = Money(-123456, "GBP")
        assert Money.parse(str(m)) == m


    def test_parse_rejects_garbage():
        assert raises(ValueError, Money.parse, "twelve euros")
    ''', fixed={"money.py": append(sub(MONEY, "    class Money:", "    import re\n\n\n    class Money:"), '''
        def allocate(self, ratios):
            total = sum(ratios)
            parts = [self.cents * r // total for r in ratios]
            for i in range(self.cents - sum(parts)):
                parts[i] += 1
            return [Money(p, self.currency) for p in parts]

        @classmethod
        def parse(cls, text):
            m = re.fullmatch(r"(-?)(\\d+)\\.(\\d\\d) ([A-Z]{3})", text.strip())
            if not m:
                raise ValueError(f"not an amount: {text!r}")
            cents = int(m.group(2)) * 100 + int(m.group(3))
            return cls(-cents if m.group(1) else cents, m.group(4))
    ''', blank_lines=1)})

STOCK = '''
    class Stock:
        def __init__(self):
            self.qty = {}

        def set(self, sku, qty):
            if qty < 0:
                raise ValueError("negative quantity")
            self.qty[sku] = qty

        def get(self, sku):
            return self.qty.get(sku, 0)
    '''
task("extend", "stock-csv", "medium", """
    Add CSV export and import to `Stock` in `stock.py`:

    - `to_csv()`: the text `"sku,qty\\n"` followed by one `sku,qty` line per item, sorted by sku, each line
      ending in a newline;
    - `Stock.from_csv(text)` (a classmethod): the inverse; it must reject negative quantities
      (`ValueError`, as `set` does) and ignore blank lines.
    """, {"stock.py": STOCK}, hidden='''
    from stock import Stock


    def test_to_csv_sorted():
        s = Stock()
        s.set("b-2", 5)
        s.set("a-1", 10)
        assert s.to_csv() == "sku,qty\\na-1,10\\nb-2,5\\n"


    def test_to_csv_empty():
        assert Stock().to_csv() == "sku,qty\\n"


    def test_from_csv():
        s = Stock.from_csv("sku,qty\\nx,3\\n\\ny,0\\n")
        assert (s.get("x"), s.get("y"), s.get("z")) == (3, 0, 0)


    def test_round_trip():
        s = Stock()
        s.set("k", 7)
        s.set("j", 1)
        assert Stock.from_csv(s.to_csv()).qty == s.qty


    def test_from_csv_rejects_negative():
        assert raises(ValueError, Stock.from_csv, "sku,qty\\nx,-1\\n")
    ''', fixed={"stock.py": append(STOCK, '''
        def to_csv(self):
            return "sku,qty\\n" + "".join(f"{sku},{n}\\n" for sku, n in sorted(self.qty.items()))

        @classmethod
        def from_csv(cls, text):
            stock = cls()
            for line in text.splitlines()[1:]:
                if line.strip():
                    sku, qty = line.split(",")
                    stock.set(sku.strip(), int(qty))
            return stock
    ''', blank_lines=1)})

MD = '''
    import html


    def render(text):
        """A tiny Markdown subset: '#'-headers and paragraphs separated by blank lines."""
        out = []
        for block in text.strip().split("\\n\\n"):
            block = block.strip()
            level = len(block) - len(block.lstrip("#"))
            if 1 <= level <= 6 and block[level:level + 1] == " ":
                out.append(f"<h{level}>{inline(block[level + 1:])}</h{level}>")
            elif block:
                out.append(f"<p>{inline(block)}</p>")
        return "\\n".join(out)


    def inline(text):
        return html.escape(text)
    '''
task("extend", "markdown-inline", "medium", """
    `md.render` in `md.py` handles headers and paragraphs. Add inline formatting inside both:
    `**bold**` -> `<strong>bold</strong>`, `*italic*` -> `<em>italic</em>`, and `` `code` `` ->
    `<code>code</code>`. Text inside backticks is not formatted further, and HTML stays escaped everywhere.
    """, {"md.py": MD}, hidden='''
    from md import render


    def test_bold():
        assert render("a **b** c") == "<p>a <strong>b</strong> c</p>"


    def test_italic():
        assert render("an *odd* one") == "<p>an <em>odd</em> one</p>"


    def test_code():
        assert render("run `ls -l`") == "<p>run <code>ls -l</code></p>"


    def test_code_is_literal():
        assert render("`**not bold**`") == "<p><code>**not bold**</code></p>"


    def test_in_headers_and_escaped():
        assert render("# *Tips* & **tricks**") == "<h1><em>Tips</em> &amp; <strong>tricks</strong></h1>"
    ''', fixed={"md.py": sub(sub(MD, '''
    def inline(text):
        return html.escape(text)
''', '''
    def inline(text):
        parts = re.split(r"(`[^`]*`)", text)
        out = []
        for i, part in enumerate(parts):
            if i % 2:
                out.append(f"<code>{html.escape(part[1:-1])}</code>")
            else:
                part = html.escape(part)
                part = re.sub(r"\\*\\*(.+?)\\*\\*", r"<strong>\\1</strong>", part)
                part = re.sub(r"\\*(.+?)\\*", r"<em>\\1</em>", part)
                out.append(part)
        return "".join(out)
'''), "    import html\n", "    import html\n    import re\n")})

VALIDATORS = '''
    import re

    EMAIL = re.compile(r"[^@\\s]+@[^@\\s]+\\.[a-z]{2,}", re.I)


    def is_email(s):
        return bool(EMAIL.fullmatch(s))
    '''
task("extend", "validators-ipv4", "easy", """
    Add `is_ipv4(s)` to `validators.py`: True for a dotted-quad IPv4 address - four decimal numbers from 0
    to 255 separated by dots, without leading zeros ("0" itself is fine) and without spaces or signs -
    and False for anything else.
    """, {"validators.py": VALIDATORS}, hidden='''
    import validators


    def test_valid():
        assert validators.is_ipv4("192.168.0.1") and validators.is_ipv4("0.0.0.0")
        assert validators.is_ipv4("255.255.255.255")


    def test_out_of_range():
        assert not validators.is_ipv4("256.1.1.1")


    def test_wrong_number_of_parts():
        assert not validators.is_ipv4("1.2.3") and not validators.is_ipv4("1.2.3.4.5")


    def test_leading_zeros():
        assert not validators.is_ipv4("01.2.3.4")


    def test_junk():
        assert not any(validators.is_ipv4(s) for s in ["", "a.b.c.d", "1.2.3.-4", " 1.2.3.4", "1..2.3"])
    ''', fixed={"validators.py": append(VALIDATORS, '''
    def is_ipv4(s):
        parts = s.split(".")
        return len(parts) == 4 and all(
            p.isascii() and p.isdigit() and (p == "0" or not p.startswith("0")) and int(p) <= 255 for p in parts)
    ''')})

TTL = '''
    import time


    class TTLCache:
        """Entries expire `ttl` seconds after they were set. `clock` is injectable for tests."""

        def __init__(self, ttl, clock=time.monotonic):
            self.ttl, self.clock, self.data = ttl, clock, {}

        def set(self, key, value):
            self.data[key] = (value, self.clock() + self.ttl)

        def get(self, key, default=None):
            value, expires = self.data.get(key, (default, None))
            if expires is not None and self.clock() >= expires:
                del self.data[key]
                return default
            return value

        def __len__(self):
            now = self.clock()
            return sum(1 for _, expires in self.data.values() if expires > now)
    '''
task("extend", "ttl-cache-max-size", "hard", """
    Add an optional size limit to `TTLCache` in `cache.py`: `TTLCache(ttl, clock=..., max_size=None)`.
    When setting a new key would make the cache hold more than `max_size` entries, first drop the expired
    entries, then, if still needed, the entry that expires soonest (for equal expiry, the one set first).
    Setting an existing key never evicts anything else.
    """, {"cache.py": TTL}, hidden='''
    from cache import TTLCache


    class Clock:
        def __init__(self):
            self.t = 0.0

        def __call__(self):
            return self.t


    def test_evicts_soonest_expiring():
        c = Clock()
        cache = TTLCache(10, clock=c, max_size=2)
        cache.set("a", 1)
        c.t = 1
        cache.set("b", 2)
        c.t = 2
        cache.set("c", 3)
        assert cache.get("a") is None and cache.get("b") == 2 and cache.get("c") == 3


    def test_expired_entries_go_first():
        c = Clock()
        cache = TTLCache(5, clock=c, max_size=2)
        cache.set("old", 1)
        c.t = 4
        cache.set("keep", 2)
        c.t = 6
        cache.set("new", 3)
        assert cache.get("keep") == 2 and cache.get("new") == 3 and len(cache.data) == 2


    def test_overwrite_does_not_evict():
        c = Clock()
        cache = TTLCache(10, clock=c, max_size=2)
        cache.set("a", 1)
        cache.set("b", 2)
        cache.set("a", 3)
        assert cache.get("a") == 3 and cache.get("b") == 2


    def test_tie_evicts_first_set():
        c = Clock()
        cache = TTLCache(10, clock=c, max_size=2)
        cache.set("x", 1)
        cache.set("y", 2)
        cache.set("z", 3)
        assert cache.get("x") is None and cache.get("y") == 2


    def test_limit_never_exceeded():
        c = Clock()
        cache = TTLCache(100, clock=c, max_size=3)
        for i in range(20):
            c.t = i
            cache.set(i, i)
            assert len(cache.data) <= 3
    ''', fixed={"cache.py": sub(TTL, '''
        def __init__(self, ttl, clock=time.monotonic):
            self.ttl, self.clock, self.data = ttl, clock, {}

        def set(self, key, value):
            self.data[key] = (value, self.clock() + self.ttl)
''', '''
        def __init__(self, ttl, clock=time.monotonic, max_size=None):
            self.ttl, self.clock, self.data, self.max_size = ttl, clock, {}, max_size

        def set(self, key, value):
            now = self.clock()
            if self.max_size is not None and key not in self.data and len(self.data) >= self.max_size:
                for k in [k for k, (_, expires) in self.data.items() if expires <= now]:
                    del self.data[k]
                if len(self.data) >= self.max_size:
                    del self.data[min(self.data, key=lambda k: self.data[k][1])]
            self.data[key] = (value, now + self.ttl)
''')})

TEMPS = '''
    def to_celsius(value, unit):
        if unit == "C":
            return value
        if unit == "F":
            return (value - 32) * 5 / 9
        raise ValueError(f"unknown unit {unit}")


    def from_celsius(value, unit):
        if unit == "C":
            return value
        if unit == "F":
            return value * 9 / 5 + 32
        raise ValueError(f"unknown unit {unit}")


    def convert(value, from_unit, to_unit):
        """convert(100, "C", "F") -> 212.0"""
        return from_celsius(to_celsius(value, from_unit), to_unit)
    '''
task("extend", "temperature-kelvin", "easy", """
    `temps.convert` in `temps.py` handles "C" and "F". Add Kelvin ("K", 0 K = -273.15 C) in both directions,
    and make `convert` raise `ValueError` for any temperature below absolute zero, in whatever unit it is given.
    """, {"temps.py": TEMPS}, hidden='''
    from temps import convert


    def test_c_to_k():
        assert abs(convert(0, "C", "K") - 273.15) < 1e-9


    def test_k_to_f():
        assert abs(convert(373.15, "K", "F") - 212) < 1e-9


    def test_k_to_k():
        assert convert(10, "K", "K") == 10


    def test_below_absolute_zero_kelvin():
        assert abs(convert(1, "K", "C") + 272.15) < 1e-9
        assert raises(ValueError, convert, -1, "K", "C")


    def test_below_absolute_zero_celsius_and_fahrenheit():
        assert raises(ValueError, convert, -300, "C", "F")
        assert raises(ValueError, convert, -500, "F", "C")
    ''', fixed={"temps.py": '''
    ZERO_C = -273.15


    def to_celsius(value, unit):
        if unit == "C":
            c = value
        elif unit == "F":
            c = (value - 32) * 5 / 9
        elif unit == "K":
            c = value + ZERO_C
        else:
            raise ValueError(f"unknown unit {unit}")
        if c < ZERO_C - 1e-9:
            raise ValueError(f"{value} {unit} is below absolute zero")
        return c


    def from_celsius(value, unit):
        if unit == "C":
            return value
        if unit == "F":
            return value * 9 / 5 + 32
        if unit == "K":
            return value - ZERO_C
        raise ValueError(f"unknown unit {unit}")


    def convert(value, from_unit, to_unit):
        """convert(100, "C", "F") -> 212.0"""
        if from_unit == to_unit:
            to_celsius(value, from_unit)
            return value
        return from_celsius(to_celsius(value, from_unit), to_unit)
    '''})

LOGS = '''
    def parse_line(line):
        """'12:00:01 ERROR disk full' -> {"time": "12:00:01", "level": "ERROR", "message": "disk full"}"""
        time, level, message = line.strip().split(" ", 2)
        return {"time": time, "level": level, "message": message}
    '''
task("extend", "log-summary", "medium", """
    Add two functions to `logs.py`, both taking an iterable of log lines (blank lines are skipped):

    - `summary(lines)`: a dict mapping each level to how many lines have it;
    - `errors_since(lines, time)`: the messages of the ERROR lines whose time (`HH:MM:SS`) is at or after
      `time`, in order.
    """, {"logs.py": LOGS, "sample.log": '''
    09:00:00 INFO boot
    09:00:03 ERROR fan failure
    09:10:00 WARN hot
    09:15:30 ERROR overheating
    '''}, hidden='''
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
    ''', fixed={"logs.py": append(LOGS, '''
    def _entries(lines):
        return [parse_line(line) for line in lines if line.strip()]


    def summary(lines):
        counts = {}
        for e in _entries(lines):
            counts[e["level"]] = counts.get(e["level"], 0) + 1
        return counts


    def errors_since(lines, time):
        return [e["message"] for e in _entries(lines) if e["level"] == "ERROR" and e["time"] >= time]
    ''')})

# ============================================================================= writing

RUNNER_SH = '''#!/usr/bin/env bash
# Hidden tests (test_hidden.py) run by the plain runner run_tests.py; reward: {rule}.
python3 -S "$TESTS_DIR/run_tests.py" "$TESTS_DIR/test_hidden.py" "$LOGS_DIR"{flag}
'''
QA_SH = '''#!/usr/bin/env bash
# Grade answer.txt against expected.json with the shared ladder: exact -> numeric with tolerance -> list.
python3 -S "$TESTS_DIR/grade.py" "$TESTS_DIR/expected.json" answer.txt "$LOGS_DIR"
'''


def main(argv):
    out = fresh_suite_dir(argv, "repo2rl")
    for t in TASKS:
        if t["type"] == "qa":
            expected = {"answer": t["answer"], "kind": t["kind"], "tolerance": {}, "ordered": t["kind"] == "list"}
            tests = {"test.sh": QA_SH, "grade.py": read_helper("grade.py"),
                     "expected.json": json.dumps(expected, sort_keys=True) + "\n"}
            solution = {"solve.sh": "#!/usr/bin/env bash\n" + t["oracle"] + "\n"}
        else:
            all_or_nothing = t["type"] == "repair"
            rule = "1 if every test passes, else 0" if all_or_nothing else "the fraction of tests passed"
            tests = {"test.sh": RUNNER_SH.format(rule=rule, flag=" --all-or-nothing" if all_or_nothing else ""),
                     "run_tests.py": read_helper("run_tests.py"), "test_hidden.py": t["hidden"]}
            solution = {"solve.sh": '#!/usr/bin/env bash\n# The reference files, copied over the work dir.\n'
                                    'cp -R "$SOLUTION_DIR/files/." .\n',
                        **{f"files/{k}": v for k, v in t["fixed"].items()}}
        write_task(out, t["name"], source="repo2rl", type=t["type"], difficulty=t["difficulty"],
                   instruction=t["instruction"], environment=t["env"], tests=tests, solution=solution,
                   agent_timeout=600, verifier_timeout=30, guard=t["guard"], tags=["repo2rl", t["type"]])


if __name__ == "__main__":
    main(sys.argv)
