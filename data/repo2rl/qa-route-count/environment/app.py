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
