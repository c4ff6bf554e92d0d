"""The one way out of an agent's network namespace: run inside the sandbox, in front of the harness.

    python3 -I relay.py SOCKET PORT -- HARNESS ARGV...    (-I: a task's PYTHON* variables do not reach it)

A no-network task's agent has a loopback of its own (sandbox.py, network=False): nothing on the host's can be reached.
The rollout's proxy comes in as a Unix socket (SOCKET); this relay listens on the sandbox's 127.0.0.1:PORT (the proxy's
port on the host, so the harness's base URL and the guard's idea of the proxy stay as they are), copies each connection
to the socket both ways, runs the harness as its child (stdio and environment passed through) and exits with its code.

Stdlib only, no project import: the sandbox shows this one file. Left out: anything but TCP on 127.0.0.1:PORT.
"""
import asyncio
import sys


async def pipe(reader, writer):
    """Copy one direction of a connection until EOF, then half-close."""
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()          # a half-close is passed on, not turned into a full close
    except (ConnectionError, OSError):
        pass


async def _main(sock, port, argv):
    async def handle(reader, writer):
        try:
            up_reader, up_writer = await asyncio.open_unix_connection(sock)
        except OSError:
            writer.close()
            return
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        for w in (writer, up_writer):
            w.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    proc = await asyncio.create_subprocess_exec(*argv)
    code = await proc.wait()
    server.close()
    return 128 - code if code < 0 else code         # killed by a signal: as a shell says it (SIGKILL: 137)


def main(args):
    if len(args) < 4 or args[2] != "--" or not args[1].isdigit():
        sys.exit("usage: relay.py SOCKET PORT -- COMMAND ...")
    sys.exit(asyncio.run(_main(args[0], int(args[1]), args[3:])))


if __name__ == "__main__":
    main(sys.argv[1:])
