def parse_line(line):
    """'12:00:01 ERROR disk full' -> {"time": "12:00:01", "level": "ERROR", "message": "disk full"}"""
    time, level, message = line.strip().split(" ", 2)
    return {"time": time, "level": level, "message": message}
