from shop import audit


def request_refund(order, reason):
    return {"order": order, "reason": reason, "state": "requested"}


def approve_refund(refund, approver):
    refund["state"] = "approved"
    audit.record("refund-approved", approver=approver, order=refund["order"])
    return refund
