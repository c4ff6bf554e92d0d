def parse_line(line):
    """'12:00:01 ERROR disk full' -> {"time": "12:00:01", "level": "ERROR", "message": "disk full"}"""
    time, level, message = line.strip().split(" ", 2)
    return {"time": time, "level": level, "message": message}


def _entries(lines):
    return [parse_line(line) for line in lines if line.strip()]


def summary(lines):
    counts = {}
    for e in _entries(lines):
        counts[e["level"]] = counts.get(e["level"], 0) + 1
    return counts


def errors_since(lines, time):
    return [e["message"] for e in _entries(lines) if e["level"] == "ERROR" and e["time"] >= time]

