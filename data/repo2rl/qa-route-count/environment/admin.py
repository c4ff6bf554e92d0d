from routing import route


@route("/admin")
def admin_home():
    return "admin"


@route("/admin/users")
def users():
    return []


def stats():  # not routed yet
    return {}
