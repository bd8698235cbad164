"""What the broker's TLS layer costs the broker, without a Kafka client's own costs: the
server's CPU to read 1 MiB request frames and to write 1.5 MiB Fetch-like responses over
loopback, plaintext against TLS, in one run.

    python bench/tls_layer_bench.py            # a few seconds per round, 3 rounds
    python bench/tls_layer_bench.py --quick    # smoke run

Three servers, the same asyncio event loop code as chronik's connection layer:
``plaintext`` (a StreamReader; a response handed to the transport in one writelines),
``asyncio`` (asyncio's SSL transport used as it comes: the body read from a StreamReader
in pieces and joined, a response handed over whole) and ``chronik`` (the broker's TLS
path: ``broker/tls_stream.py`` decrypts a body straight into its buffer, a response goes
in record-aligned pieces, ``connection.tls_pieces``). The client is another process
(Python's ssl module, blocking sockets) that sends or drains the frames. Each figure is
the median, over the rounds, of the server's CPU (user and system, from getrusage) per
100 MB, and of how often it slept and was woken per 100 MB (voluntary context switches);
beside it the time `openssl speed` gives for encrypting or decrypting 100 MB with the
cipher the handshake chose: the floor for any TLS server. Prints tables and writes JSON
to bench/results/.
"""

from __future__ import annotations

import asyncio
import resource
import socket
import ssl
import statistics
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from brokers import REPO  # noqa: E402

sys.path.insert(0, str(REPO / "src"))

from security_bench import make_certificates, openssl_speed  # noqa: E402
from transactions_bench import run_arguments, write_report  # noqa: E402

from chronik.broker.connection import tls_pieces  # noqa: E402
from chronik.broker.tls_stream import TLSStreamProtocol, TLSStreamReader  # noqa: E402

MODES = ("plaintext", "asyncio", "chronik")
REQUEST = 2**20
# A Fetch response: per partition a small header and 256 KiB of record batches.
PARTITIONS = 6
RESPONSE_PARTS = [part for _ in range(PARTITIONS) for part in (b"h" * 40, b"r" * (2**18 - 40))]
RESPONSE = sum(map(len, RESPONSE_PARTS))
MB = 100 * 10**6

CLIENT = r"""
import socket, ssl, struct, sys
port, ca, direction, frames, size, tls = sys.argv[1:7]
frames, size = int(frames), int(size)
sock = socket.create_connection(("127.0.0.1", int(port)))
if tls == "1":
    sock = ssl.create_default_context(cafile=ca).wrap_socket(sock, server_hostname="127.0.0.1")
if direction == "read":
    frame = struct.pack(">i", size) + b"x" * size
    for _ in range(frames):
        sock.sendall(frame)
    sock.recv(1)
else:
    buffer, left = bytearray(2**20), frames * (size + 4)
    while left > 0:
        n = sock.recv_into(buffer)
        if not n:
            break
        left -= n
    sock.sendall(b"k")
sock.close()
"""


async def serve(
    mode: str, direction: str, frames: int, ca: Path, keystore: Path
) -> tuple[float, int, str]:
    """The server's CPU seconds to read or write ``frames`` frames on one connection, how
    often it slept and was woken meanwhile (voluntary context switches), and the TLS suite
    of the connection ("" for plaintext)."""
    context = None
    if mode != "plaintext":
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(keystore)
    loop = asyncio.get_running_loop()
    listening = socket.create_server(("127.0.0.1", 0))
    listening.setblocking(False)
    size = REQUEST if direction == "read" else RESPONSE
    client = subprocess.Popen([
        sys.executable, "-c", CLIENT, str(listening.getsockname()[1]), str(ca), direction,
        str(frames), str(size), "0" if context is None else "1",
    ])
    try:
        conn, _ = await loop.sock_accept(listening)
        reader: asyncio.StreamReader
        if mode == "chronik":
            reader = TLSStreamReader(limit=2**20)
            protocol = TLSStreamProtocol(reader)
        else:
            reader = asyncio.StreamReader(limit=2**20)
            protocol = asyncio.StreamReaderProtocol(reader)
        transport, _ = await loop.connect_accepted_socket(lambda: protocol, sock=conn, ssl=context)
        writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        tls = transport.get_extra_info("ssl_object")
        suite = tls.cipher()[0] if tls is not None else ""
        before = resource.getrusage(resource.RUSAGE_SELF)
        if direction == "read":
            for _ in range(frames):
                (length,) = struct.unpack(">i", await reader.readexactly(4))
                if isinstance(reader, TLSStreamReader):
                    await reader.read_body(length, lambda: None)
                else:
                    chunks, left = [], length
                    while left:
                        chunk = await reader.read(min(left, 2**20))
                        chunks.append(chunk)
                        left -= len(chunk)
                    b"".join(chunks)
            writer.write(b"k")
            await writer.drain()
        else:
            for _ in range(frames):
                out = [struct.pack(">i", RESPONSE), *RESPONSE_PARTS]
                if mode == "chronik":
                    for piece in tls_pieces(out):
                        writer.write(piece)
                        await writer.drain()
                else:
                    writer.writelines(out)
                    await writer.drain()
            await reader.readexactly(1)
        after = resource.getrusage(resource.RUSAGE_SELF)
        writer.close()
        seconds = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        return seconds, after.ru_nvcsw - before.ru_nvcsw, suite
    finally:
        client.wait(30)
        listening.close()


def main() -> int:
    # --records: frames per measurement.
    args, _, _ = run_arguments(__doc__, 20)
    frames = args.records or (20 if args.quick else 300)
    rounds = args.runs or (1 if args.quick else 3)
    cpu: dict[str, list[float]] = {}
    woken: dict[str, list[float]] = {}
    suite = ""
    with tempfile.TemporaryDirectory(prefix="chronik-tls-layer-bench-") as tmp:
        ca, keystore = make_certificates(Path(tmp))
        for run in range(rounds):
            for mode in MODES if run % 2 == 0 else MODES[::-1]:
                for direction in ("read", "write"):
                    seconds, wakeups, used = asyncio.run(
                        serve(mode, direction, frames, ca, keystore)
                    )
                    suite = used or suite
                    size = REQUEST if direction == "read" else RESPONSE
                    cpu.setdefault(f"{direction} {mode}", []).append(seconds * MB / (frames * size))
                    woken.setdefault(f"{direction} {mode}", []).append(
                        wakeups * MB / (frames * size)
                    )
    evp, encrypt_rate, decrypt_rate = openssl_speed(suite)
    crypto = {"read": MB / decrypt_rate, "write": MB / encrypt_rate}
    figures = {k: statistics.median(v) for k, v in cpu.items()}
    wakeups = {k: statistics.median(v) for k, v in woken.items()}
    print(f"server CPU ms per 100 MB, median of {rounds}; {suite}, openssl speed -evp {evp}")
    print(f"{'':10}{'plaintext':>11}{'asyncio':>10}{'chronik':>10}{'OpenSSL':>10}"
          f"{'TLS adds: asyncio':>19}{'chronik':>9}")
    report: dict[str, dict[str, float]] = {}
    for direction in ("read", "write"):
        plain, base, ours = (figures[f"{direction} {m}"] for m in MODES)
        report[direction] = {"plaintext_ms": plain * 1000, "asyncio_ms": base * 1000,
                             "chronik_ms": ours * 1000, "openssl_ms": crypto[direction] * 1000}
        print(f"{direction:10}{plain * 1000:>11.0f}{base * 1000:>10.0f}{ours * 1000:>10.0f}"
              f"{crypto[direction] * 1000:>10.0f}{(base - plain) * 1000:>19.0f}"
              f"{(ours - plain) * 1000:>9.0f}")
    print(f"server wake-ups per 100 MB, median of {rounds}")
    for direction in ("read", "write"):
        print(f"{direction:10}" + "".join(f"{wakeups[f'{direction} {m}']:>11.0f}" for m in MODES))
        for mode in MODES:
            report[direction][f"{mode}_wakeups"] = wakeups[f"{direction} {mode}"]
    write_report(args, "tls-layer", frames=frames, rounds=rounds, suite=suite,
                 openssl_speed_evp=evp, per_100_mb=report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
