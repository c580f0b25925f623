"""protocol.server's count of open requests: every request read and not yet answered,
those whose handler has not begun too (the owner commits a launch's row at once only
when no other request is open: owner.groupcommit)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from protocol.framing import FrameDecoder, encode_frame
from protocol.identity import new_identity
from protocol.server import Call, Method, RpcServer


def test_a_burst_read_at_once_is_open_before_its_first_handler_begins(short_home: Path):
    seen: list[int] = []
    holder: list[RpcServer] = []

    async def probe(call: Call) -> Any:
        seen.append(holder[0].open_requests)
        return {}

    async def main() -> tuple[list[int], int]:
        server = RpcServer(str(short_home / "s.sock"), new_identity(), {},
                           {"probe": Method(probe)})
        holder.append(server)
        await server.start()
        try:
            reader, writer = await asyncio.open_unix_connection(str(short_home / "s.sock"))
            writer.write(encode_frame({"t": "hello", "proto": 1, "role": "admin"}))
            writer.write(b"".join(encode_frame({"t": "req", "id": i, "m": "probe"})
                                  for i in range(3)))   # one write: read at once
            await writer.drain()
            dec, frames = FrameDecoder(), []
            while len(frames) < 4:   # the welcome, then three answers
                frames += dec.feed(await asyncio.wait_for(reader.read(65536), 5))
            assert [f.get("id") for f in frames[1:]] == [0, 1, 2]
            await asyncio.sleep(0)   # the done callbacks of the answered requests
            after = server.open_requests
            writer.write(encode_frame({"t": "req", "id": 9, "m": "probe"}))   # alone
            while len(frames) < 5:
                frames += dec.feed(await asyncio.wait_for(reader.read(65536), 5))
            writer.close()
            return seen, after
        finally:
            await server.close()

    seen, after = asyncio.run(main())
    assert seen == [3, 3, 3, 1] and after == 0
