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
