"""``python -m backend --home DIR --activation ID`` runs one backend generation (started
by the guardian); ``python -m backend --preflight`` checks that this release can run here.

Exit statuses: 0 retired cleanly (or preflight passed), 1 failed before READY, 2 usage,
3 closing did not finish (it took longer than CLOSE_LIMIT, or a signal came meanwhile),
6 the home was deleted or replaced while it served (protocol.homewatch).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from protocol import daemonlog
from protocol.errors import TenureError
from protocol.startup import daemon_arguments, import_asyncio_without_tls, use_builtin_hashes

if TYPE_CHECKING:
    import asyncio

CLOSE_LIMIT = 5.0       # the guardian asks for SIGTERM 10 s after its retire request
EXIT_CLOSE_STUCK = 3
EXIT_HOME_LOST = 6
EXIT_FENCED = 7   # fenced off while serving: a newer generation holds the owner
EXIT_LOOP_FAILED = 8   # a loop of the generation failed (Generation.failed): recover anew
EXIT_ORPHANED = 9   # the guardian that started it was gone before it was ready
ORPHAN_POLL_S = 0.5

log = logging.getLogger("tenure.backend")


def report() -> dict[str, Any]:
    """Import everything a generation needs; what this release offers."""
    t0 = time.perf_counter()
    # serve()'s own imports too: a standby imports here, and anything left to serve()
    # is imported inside the handoff's pause (the home watch: ~0.9 ms)
    from protocol import homewatch, tasks  # noqa: F401

    from . import api, generation, operations, supervisor  # noqa: F401
    from .generation import CONTRACTS
    from .schemas import SCHEMAS
    return {"ok": True, "contracts": CONTRACTS, "schemas": SCHEMAS,
            "python": sys.version.split()[0],
            "import_s": round(time.perf_counter() - t0, 3)}


def preflight() -> int:
    print(json.dumps(report()))
    return 0


async def serve(home: Path, activation: str) -> int:
    from protocol.homewatch import HomeMark, watch
    from protocol.tasks import background

    from .generation import Generation
    from .probe_exec import allow_adopting
    mark = HomeMark.take(home)
    allow_adopting()   # what an exec probe leaves running after setsid comes back here
    gen = Generation(home, activation)
    answered = _orphan_watch()
    try:
        await gen.start()
    except TenureError as exc:
        log.error("generation %s cannot start: %s", activation, exc)
        print(json.dumps({"ready": False, **exc.to_wire()}), flush=True)
        answered.set()
        await close_bounded(gen.close())
        return 1
    print(json.dumps({"ready": True, "pid": gen.identity.pid, "epoch": gen.epoch}), flush=True)
    gen.admit()
    answered.set()   # from now on it outlives its guardian, which the next one adopts
    watcher = background(watch(mark, _home_lost), "home watch", log)
    try:
        await gen.run_until_retired()
    finally:
        watcher.cancel()
        await close_bounded(gen.close())
    if gen.stood_down:
        return EXIT_FENCED
    return EXIT_LOOP_FAILED if gen.failed else 0


def _home_lost(loss: TenureError) -> NoReturn:
    """Our home was deleted or replaced (logged by the watch): exit now. Closing would
    write the checkpoint by path, into a directory that now belongs to someone else; a
    generation holds no application, and its guardian (if it still runs) ends too."""
    del loss
    logging.shutdown()
    sys.stdout.flush()
    os._exit(EXIT_HOME_LOST)


async def close_bounded(closing: Any, limit: float = CLOSE_LIMIT) -> None:
    """Await ``closing`` (the generation's close) for at most ``limit`` seconds.

    A retired generation is fenced and its state is on disk: nothing it still holds is
    worth a longer handoff pause. A close that does not end is a defect (a task that
    outlived its cancellation); it must not cost the guardian's SIGTERM and SIGKILL
    waits. So the tasks still running are named in the log, and the process exits at
    once with EXIT_CLOSE_STUCK. A SIGTERM or SIGINT while closing does the same."""
    import asyncio

    from protocol.sighandler import add_signal_handler
    loop = asyncio.get_running_loop()
    signalled = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        add_signal_handler(loop, sig, signalled.set)
    task = asyncio.ensure_future(closing)
    waiter = asyncio.ensure_future(signalled.wait())
    done, _ = await asyncio.wait({task, waiter}, timeout=limit,
                                 return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        waiter.cancel()
        await asyncio.wait({waiter})
        task.result()  # a close that failed says so
        return
    why = "a signal came" if waiter in done else f"it took over {limit:g} s"
    me = asyncio.current_task()
    running = sorted(_where(t) for t in asyncio.all_tasks()
                     if t is not me and t is not waiter and not t.done())
    log.error("closing did not finish (%s); exiting now with these tasks running: %s",
              why, "; ".join(running) or "none")
    logging.shutdown()
    sys.stdout.flush()
    os._exit(EXIT_CLOSE_STUCK)


def _where(task: asyncio.Task[Any]) -> str:
    """A task as its coroutine and the line it waits at (no values: they may hold
    app environments)."""
    coro = task.get_coro()
    name = getattr(coro, "__qualname__", type(coro).__name__)
    frames = task.get_stack()
    if not frames:
        return name
    f = frames[-1]
    return f"{name} at {os.path.basename(f.f_code.co_filename)}:{f.f_lineno}"


def _orphan_watch() -> threading.Event:
    """Until the returned event is set (the generation answered ready or not), end the
    process when its parent, the guardian that started it and waits for that answer, is
    gone: nobody hears the answer, and the next guardian finishes the activation with a
    generation of its own, while one that hangs before ready would run on forever. A
    thread: a start hung in a blocking call still ends."""
    parent = os.getppid()
    answered = threading.Event()

    def watch() -> None:
        while not answered.wait(ORPHAN_POLL_S):
            if os.getppid() != parent:
                log.error("the guardian that started this generation (pid %d) is gone "
                          "before it was ready; exiting", parent)
                logging.shutdown()
                os._exit(EXIT_ORPHANED)
    threading.Thread(target=watch, name="orphan watch", daemon=True).start()
    return answered


def main(argv: list[str] | None = None) -> int:
    use_builtin_hashes()           # first: before anything imports hashlib with OpenSSL
    import_asyncio_without_tls()   # and asyncio with ssl
    import asyncio
    ap = daemon_arguments("python -m backend")
    ap.add_argument("--home", type=Path)
    ap.add_argument("--activation")
    ap.add_argument("--preflight", action="store_true")
    ap.add_argument("--standby", action="store_true",
                    help="import everything, then read the activation id from stdin")
    ap.add_argument("--log-level", default="INFO")
    args = ap.parse_args(argv)
    daemonlog.setup("backend", args.log_level)
    if args.preflight:
        return preflight()
    if args.home is not None and args.standby:
        home = args.home.absolute()
        activation = standby(home)
        if activation is None:
            return 1
        exit_served(asyncio.run(serve(home, activation)))
    if args.home is None or not args.activation:
        ap.error("--home and --activation are required (the guardian passes them)")
    exit_served(asyncio.run(serve(args.home.absolute(), args.activation)))


def exit_served(code: int) -> NoReturn:
    """End a generation that has served and closed: its state is on disk, its databases
    and sockets are closed, its event loop is gone. What is left is the interpreter's
    finalization, which frees every module and object one by one: ~18 ms for a backend,
    inside the handoff pause (the guardian waits for the incumbent's exit before the
    candidate serves). So flush what is buffered and exit at once."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def standby(home: Path) -> str | None:
    """Be ready to run before being asked: imports done, the applied config parsed,
    nothing held, nothing changed. Returns the activation id; None when the guardian
    went away or changed its mind."""
    # the preflight's report: a standby has imported what a preflight imports, so a
    # handoff that started one needs no preflight process of its own
    print(json.dumps({"standby": True, "report": report()}), flush=True)
    prepare(home)   # while the guardian drains and fences the incumbent
    line = sys.stdin.readline()
    try:
        activation = json.loads(line)["activation"]
    except (ValueError, KeyError, TypeError):
        return None  # the guardian went away or changed its mind
    return activation if isinstance(activation, str) and activation else None


def prepare(home: Path) -> bool:
    """Parse the config backend.db holds now (read only: see store.saved_config) into
    config.parse_recent, where the generation finds it if it is still the applied one
    when it starts. Returns whether it did. Never raises: a standby that cannot parse
    it ahead parses it at start, as a cold start does."""
    from protocol.layout import Layout

    from .config import parse_recent
    from .store import saved_config
    try:
        saved = saved_config(Layout(home).backend_db)
        if saved is None:
            return False
        config = parse_recent(*saved)
    except Exception as exc:  # the boundary: anything here only costs the start its parse
        log.info("standby: the config was not parsed ahead (%s); it is parsed at start",
                 getattr(exc, "code_str", type(exc).__name__))
        return False
    log.info("standby: config %s parsed ahead", config.revision[:12])
    return True


if __name__ == "__main__":
    sys.exit(main())
