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
