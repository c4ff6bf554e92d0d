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
