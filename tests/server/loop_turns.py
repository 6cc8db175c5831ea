"""How many times the event loop turned while an awaitable ran (for the tests that check a long
piece of work lets other connections in between its slices: a count, not a time)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any


async def loop_turns_during(work: Awaitable[Any]) -> int:
    """Await ``work`` while another task counts its own turns of the loop; returns that count."""
    turns = 0
    done = False

    async def turner() -> None:
        nonlocal turns
        while not done:
            turns += 1
            await asyncio.sleep(0)
    t = asyncio.get_running_loop().create_task(turner())
    await asyncio.sleep(0)
    started = turns
    try:
        await work
    finally:
        done = True
        await t
    return turns - started
