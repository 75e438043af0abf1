#!/usr/bin/env python3
"""A cuttable TCP proxy on loopback, for cutting one NATS route.

usage: tcpproxy.py LISTEN_PORT TARGET_PORT

Forwards 127.0.0.1:LISTEN_PORT to 127.0.0.1:TARGET_PORT, any number of connections.
SIGHUP stalls: connections stay open but nothing is forwarded (new ones are accepted
and stall too). SIGUSR1 cuts: every forwarded connection is closed and the listening
socket is closed, so new connections are refused. SIGUSR2 heals either: it forwards
(and listens) again. SIGTERM stops it. Each event is logged to stdout.
"""
import asyncio
import signal
import sys
import time


def log(msg):
    print(f"{time.strftime('%H:%M:%S')} proxy {msg}", flush=True)


class Proxy:
    def __init__(self, listen, target):
        self.listen, self.target = listen, target
        self.server = None
        self.conns = set()  # writers of both directions
        self.flowing = asyncio.Event()
        self.flowing.set()

    async def pipe(self, reader, writer):
        try:
            while True:
                await self.flowing.wait()
                data = await reader.read(65536)
                if not data:
                    break
                await self.flowing.wait()  # data read before a stall is held back too
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def handle(self, creader, cwriter):
        peer = cwriter.get_extra_info("peername")
        try:
            treader, twriter = await asyncio.open_connection("127.0.0.1", self.target)
        except OSError as e:
            log(f"connect to {self.target} failed: {e}")
            cwriter.close()
            return
        up = twriter.get_extra_info("sockname")
        log(f"connection from :{peer[1]} forwarded to :{self.target} from :{up[1]}")
        self.conns |= {cwriter, twriter}
        await asyncio.gather(self.pipe(creader, twriter), self.pipe(treader, cwriter))
        self.conns -= {cwriter, twriter}

    async def start(self):
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", self.listen, reuse_address=True)
        log(f"listening on :{self.listen} -> :{self.target}")

    async def cut(self):
        if self.server:
            self.server.close()
            self.server = None
        n = len(self.conns) // 2
        for w in list(self.conns):
            w.transport.abort()
        self.conns.clear()
        log(f"cut: {n} connections closed, :{self.listen} refuses connections")

    async def stall(self):
        self.flowing.clear()
        log(f"stall: {len(self.conns) // 2} connections held open, nothing forwarded")

    async def heal(self):
        self.flowing.set()
        if not self.server:
            await self.start()
        log("healed")


async def main():
    p = Proxy(int(sys.argv[1]), int(sys.argv[2]))
    await p.start()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGHUP, lambda: asyncio.ensure_future(p.stall()))
    loop.add_signal_handler(signal.SIGUSR1, lambda: asyncio.ensure_future(p.cut()))
    loop.add_signal_handler(signal.SIGUSR2, lambda: asyncio.ensure_future(p.heal()))
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    await stop.wait()
    await p.cut()


if __name__ == "__main__":
    asyncio.run(main())
