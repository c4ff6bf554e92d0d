from vm import run


def test_sub():
    assert run("PUSH 10\nPUSH 4\nSUB\nPRINT") == [6]


def test_mul():
    assert run("PUSH 6\nPUSH 7\nMUL\nPRINT") == [42]


def test_dup():
    assert run("PUSH 3\nDUP\nMUL\nPRINT") == [9]


def test_swap():
    assert run("PUSH 1\nPUSH 5\nSWAP\nSUB\nPRINT") == [4]


def test_jz_taken_and_not_taken():
    prog = "PUSH 0\nJZ 5\nPUSH 1\nPRINT\nPUSH 2\nPRINT"
    assert run(prog) == [2]
    assert run(prog.replace("PUSH 0", "PUSH 3")) == [1, 2]
