"""The one list of tenure's stable error codes.

A code is written to SQLite receipts and sent over sockets; its value never changes once
released. Each code has a one-line meaning and says whether retrying the same request
later can succeed without anyone changing anything (``retryable``). docs/errors.md is
generated from this table and a test keeps the two equal.
"""

from __future__ import annotations

from enum import StrEnum

from .values import Value


class Code(StrEnum):
    # framing and envelope
    BAD_FRAME = "BAD_FRAME"
    BAD_REQUEST = "BAD_REQUEST"
    UNKNOWN_METHOD = "UNKNOWN_METHOD"
    UNSUPPORTED_PROTOCOL = "UNSUPPORTED_PROTOCOL"
    CAPABILITY_MISSING = "CAPABILITY_MISSING"
    UNAUTHORIZED = "UNAUTHORIZED"
    FRAME_TIMEOUT = "FRAME_TIMEOUT"
    # availability
    SHUTTING_DOWN = "SHUTTING_DOWN"
    ALREADY_RUNNING = "ALREADY_RUNNING"
    TOO_MANY_CONNECTIONS = "TOO_MANY_CONNECTIONS"
    INTERNAL = "INTERNAL"
    # client-side transport
    CONNECT_FAILED = "CONNECT_FAILED"
    TRANSPORT_LOST = "TRANSPORT_LOST"
    TIMEOUT = "TIMEOUT"
    CLIENT_CLOSED = "CLIENT_CLOSED"
    # identity
    OWNER_CHANGED = "OWNER_CHANGED"
    IDENTITY_MISMATCH = "IDENTITY_MISMATCH"
    # paths and sockets
    UNSAFE_PATH = "UNSAFE_PATH"
    PATH_TOO_LONG = "PATH_TOO_LONG"
    HOME_LOST = "HOME_LOST"
    # state and fencing
    NOT_FOUND = "NOT_FOUND"
    CONFLICT = "CONFLICT"
    STALE_EPOCH = "STALE_EPOCH"
    NO_GRANT = "NO_GRANT"
    BAD_SIGNATURE = "BAD_SIGNATURE"
    STACK_FENCED = "STACK_FENCED"
    OPERATION_IN_PROGRESS = "OPERATION_IN_PROGRESS"
    STALE_PLAN = "STALE_PLAN"
    STATE_CORRUPT = "STATE_CORRUPT"
    INTERPRETER_CHANGED = "INTERPRETER_CHANGED"
    SCHEMA_INCOMPATIBLE = "SCHEMA_INCOMPATIBLE"
    STORAGE_FAILED = "STORAGE_FAILED"
    JOB_QUEUE_FULL = "JOB_QUEUE_FULL"
    # processes
    LAUNCH_FAILED = "LAUNCH_FAILED"
    PRIVILEGE_REQUIRED = "PRIVILEGE_REQUIRED"
    LIMIT_UNENFORCEABLE = "LIMIT_UNENFORCEABLE"
    SOCKET_UNAVAILABLE = "SOCKET_UNAVAILABLE"
    STOP_TIMEOUT = "STOP_TIMEOUT"
    RECONCILE_REQUIRED = "RECONCILE_REQUIRED"
    PROCESSES_ALIVE = "PROCESSES_ALIVE"
    MAINTENANCE_INCOMPLETE = "MAINTENANCE_INCOMPLETE"
    OWNER_UPGRADE_REVERTED = "OWNER_UPGRADE_REVERTED"
    # configuration and workflow
    CONFIG_INVALID = "CONFIG_INVALID"
    BACKEND_UNAVAILABLE = "BACKEND_UNAVAILABLE"
    OWNER_UNAVAILABLE = "OWNER_UNAVAILABLE"
    # guardian and handoff
    BACKEND_PREFLIGHT_FAILED = "BACKEND_PREFLIGHT_FAILED"
    BACKEND_PREFLIGHT_TIMEOUT = "BACKEND_PREFLIGHT_TIMEOUT"
    BACKEND_START_TIMEOUT = "BACKEND_START_TIMEOUT"
    HANDOFF_FAILED = "HANDOFF_FAILED"
    GUARDIAN_FAULT = "GUARDIAN_FAULT"
    RECOVERY_BLOCKED = "RECOVERY_BLOCKED"
    UNCERTAIN = "UNCERTAIN"
    GUARDIAN_UPGRADE_FAILED = "GUARDIAN_UPGRADE_FAILED"
    # OS service supervision
    SERVICE_ACTIVE = "SERVICE_ACTIVE"
    SERVICE_ERROR = "SERVICE_ERROR"


class CodeInfo(Value):
    __slots__ = ("meaning", "retryable")

    def __init__(self, meaning: str, retryable: bool) -> None:
        self.meaning = meaning
        self.retryable = retryable


CODES: dict[Code, CodeInfo] = {
    Code.BAD_FRAME: CodeInfo(
        "A frame had length zero, exceeded the maximum size or the items a server "
        "decodes, or was not one msgpack map; "
        "the connection is closed.", False),
    Code.BAD_REQUEST: CodeInfo(
        "The message or its parameters are missing a required field, have a field of the "
        "wrong type or an out-of-range value. Nothing was changed.", False),
    Code.UNKNOWN_METHOD: CodeInfo("The server has no method of that name.", False),
    Code.UNSUPPORTED_PROTOCOL: CodeInfo(
        "The client's protocol version is not the server's; the connection is closed.", False),
    Code.CAPABILITY_MISSING: CodeInfo(
        "The server does not offer a capability the client requires at the exact version "
        "it requires; refused before any method ran.", False),
    Code.UNAUTHORIZED: CodeInfo(
        "The peer's credentials do not allow this connection or this method.", False),
    Code.FRAME_TIMEOUT: CodeInfo(
        "A frame was begun but not completed within the server's frame timeout (10 s by "
        "default); nothing of it was executed and the connection is closed.", True),
    Code.SHUTTING_DOWN: CodeInfo(
        "The server is draining: it finishes admitted requests and refuses new ones. Retry "
        "against the next server.", True),
    Code.ALREADY_RUNNING: CodeInfo(
        "Another live server already answers on this socket; it was left alone.", False),
    Code.TOO_MANY_CONNECTIONS: CodeInfo(
        "The server already holds as many connections as it admits for this role (or "
        "connections still in their handshake); data names the role and the limit. The "
        "connection is closed before any method ran; retry once others have closed. Also "
        "sent to an idle connection closed to make room for a new one (retry: the next "
        "call connects again).", True),
    Code.INTERNAL: CodeInfo(
        "The server failed in an unexpected way; the message says where. The outcome of "
        "a mutating request is unknown. The `tenure` command says the same of a defect "
        "of its own (`tenure CMD failed unexpectedly: …`; `TENURE_DEBUG=1` shows its "
        "traceback).", False),
    Code.CONNECT_FAILED: CodeInfo(
        "The client could not connect or complete the handshake; no request was sent.", True),
    Code.TRANSPORT_LOST: CodeInfo(
        "The connection broke after the request was sent: its outcome is unknown and it is "
        "never replayed automatically. The next call reconnects.", False),
    Code.TIMEOUT: CodeInfo(
        "No answer came within the deadline; the client closed the connection and the "
        "request's outcome is unknown.", False),
    Code.CLIENT_CLOSED: CodeInfo("The client was closed by its own user.", False),
    Code.OWNER_CHANGED: CodeInfo(
        "The server is a different instance than the one this client pinned; nothing is "
        "adopted silently.", False),
    Code.IDENTITY_MISMATCH: CodeInfo(
        "The identity a server claims does not match the process behind the socket, or a "
        "recorded identity does not match the live process.", False),
    Code.UNSAFE_PATH: CodeInfo(
        "A state path is a symlink, has the wrong owner, type or mode; tenure refuses to "
        "use it.", False),
    Code.PATH_TOO_LONG: CodeInfo(
        "A Unix socket path exceeds 100 bytes; choose a shorter TENURE_HOME.", False),
    Code.HOME_LOST: CodeInfo(
        "The daemon's home directory was deleted, moved away or replaced while it ran: "
        "its state and sockets are gone and nobody can reach it. It ends without writing "
        "anything by path (the owner stops its applications first); see the recover "
        "runbook.", False),
    Code.NOT_FOUND: CodeInfo("The named object does not exist.", False),
    Code.CONFLICT: CodeInfo(
        "A compare-and-set precondition failed: the object changed since it was read.", False),
    Code.STALE_EPOCH: CodeInfo(
        "The request carries an epoch other than the current one; data.current names it. "
        "A fenced-off controller may read but never change anything.", False),
    Code.NO_GRANT: CodeInfo(
        "No grant has been fenced yet, so no controller may change anything.", True),
    Code.BAD_SIGNATURE: CodeInfo(
        "A grant or release signature does not verify against the pinned key.", False),
    Code.STACK_FENCED: CodeInfo(
        "The stack's durable intent is stopped; a launch must name the current intent "
        "revision.", False),
    Code.OPERATION_IN_PROGRESS: CodeInfo(
        "Another operation owns this object; wait for it or abandon it by id.", True),
    Code.STALE_PLAN: CodeInfo(
        "The plan's config or live-state revision moved since it was made; plan again.",
        False),
    Code.STATE_CORRUPT: CodeInfo(
        "A durable record or file is unreadable or has an unknown shape or version; it was "
        "not replaced.", False),
    Code.INTERPRETER_CHANGED: CodeInfo(
        "The Python interpreter a release runs under is not the one it was sealed or last "
        "bound with (an update replaced it). Nothing ran. If it is an update of the same "
        "Python version, review and bind it with `tenure release rebind`; a new minor "
        "version needs a release sealed under it.", False),
    Code.SCHEMA_INCOMPATIBLE: CodeInfo(
        "The candidate release cannot read the durable state on disk (backend.db, a part "
        "of it, or the checkpoint the running generation writes), or would change a "
        "format in place. It was refused before anything was drained; data names the "
        "format, what is on disk and what the candidate reads.", False),
    Code.STORAGE_FAILED: CodeInfo(
        "A durable write failed (disk full, I/O error). What already happened is reported "
        "from memory and marked uncertain (a launch that started keeps running and is "
        "watched); fix the storage, then check the state.", False),
    Code.JOB_QUEUE_FULL: CodeInfo(
        "A job template already has its `max_pending` records open (admitted, starting "
        "or running); the submission was refused and nothing was recorded. data holds "
        "the template, the cap and how many are open. Room frees as records end.", True),
    Code.LAUNCH_FAILED: CodeInfo(
        "The process could not be started (program missing, not executable, bad cwd).",
        False),
    Code.PRIVILEGE_REQUIRED: CodeInfo(
        "The launch names a user, group or supplementary groups other than the owner's, "
        "and the owner does not run as root, so it cannot switch to them. Nothing was "
        "started; run the owner as root (system scope) or drop the identity.", False),
    Code.LIMIT_UNENFORCEABLE: CodeInfo(
        "The launch sets a cgroup limit (memory_max, cpu_quota, pids_max) but the owner "
        "has no delegated cgroup with that controller, or the kernel refused the value. "
        "Nothing was started.", False),
    Code.SOCKET_UNAVAILABLE: CodeInfo(
        "A listening socket the launch declares could not be created: the address is in "
        "use by another process, the port needs privileges, or the unix socket's path is "
        "unsafe or taken. Nothing was started; data holds the socket and the reason. "
        "Retrying helps once whatever holds the address lets go of it.", True),
    Code.STOP_TIMEOUT: CodeInfo(
        "A process or its group was still alive after the stop policy's last step.", True),
    Code.RECONCILE_REQUIRED: CodeInfo(
        "The previous owner died without a clean receipt on this boot; run the reconcile "
        "command before starting again.", False),
    Code.PROCESSES_ALIVE: CodeInfo(
        "Reconciliation found recorded processes still alive; they must be gone first.",
        False),
    Code.MAINTENANCE_INCOMPLETE: CodeInfo(
        "An owner maintenance window stopped before it was done; data names the last "
        "step completed and the failure. execution/maintenance.json keeps the plan: fix "
        "the cause, then `tenure owner upgrade --continue`.", False),
    Code.OWNER_UPGRADE_REVERTED: CodeInfo(
        "The owner of the release an owner maintenance window installed could not start: "
        "the window went back to the release the owner ran before, started it and the "
        "same instances again and verified them. data.log is where the failed owner's "
        "own output is; fix the release, then plan a new window.", False),
    Code.CONFIG_INVALID: CodeInfo(
        "The configuration file is not valid; the message names the file, the key and the "
        "line where it can. Nothing in the running system changed.", False),
    Code.BACKEND_UNAVAILABLE: CodeInfo(
        "No backend generation answers right now (starting, handing over, or down); the "
        "guardian's diagnostics say why.", True),
    Code.OWNER_UNAVAILABLE: CodeInfo(
        "The backend has had no word from the owner for 5 s or more (stopped, hung or "
        "gone), or a log read failed on the way to it, so a command that needs the owner "
        "now (start, stop, restart, logs, plan, apply, stack start and stop) was "
        "refused and nothing was done; the message says what /proc shows of the owner's "
        "pid. `tenure status` still answers, with "
        "the last state seen; `tenure logs -f` waits for the owner and goes on.", True),
    Code.BACKEND_PREFLIGHT_FAILED: CodeInfo(
        "The candidate release's preflight exited non-zero; data holds its exit status, "
        "elapsed time and the end of its stderr. The incumbent keeps serving.", False),
    Code.BACKEND_PREFLIGHT_TIMEOUT: CodeInfo(
        "The candidate release's preflight did not finish within its deadline and was "
        "killed. The incumbent keeps serving.", False),
    Code.BACKEND_START_TIMEOUT: CodeInfo(
        "A backend generation did not report READY within its deadline and was killed; "
        "the activation ended as its phase requires (the receipt says how).", True),
    Code.HANDOFF_FAILED: CodeInfo(
        "A backend handoff failed at the phase named in data; the receipt says whether "
        "the incumbent resumed or the previous release was restored.", False),
    Code.GUARDIAN_FAULT: CodeInfo(
        "Something unexpected (an OS error, a malformed record, a bug) interrupted an "
        "activation; the guardian ended it as its phase requires and logged the traceback. "
        "data.exception names the error.", False),
    Code.RECOVERY_BLOCKED: CodeInfo(
        "The backend died and the owner's live inventory does not match the last recovery "
        "certificate; automatic recovery waits for `tenure backend recover`.", False),
    Code.UNCERTAIN: CodeInfo(
        "A handoff could not prove the owner identity or the inventory; automatic recovery "
        "stopped and the operator must reconcile. Nothing was killed.", False),
    Code.GUARDIAN_UPGRADE_FAILED: CodeInfo(
        "The guardian could not move to the release asked for: its guardian code failed "
        "the preflight, could not be executed, or did not become ready (and the guardian "
        "went back to the release it ran before). Applications were not touched; data "
        "says which step failed.", False),
    Code.SERVICE_ACTIVE: CodeInfo(
        "A unit is active, has a queued job, or an unmanaged owner or backend runs; tenure "
        "refuses to install over it rather than stopping anything.", False),
    Code.SERVICE_ERROR: CodeInfo(
        "The init system (systemctl or launchctl) reported an error; data holds its "
        "output.", False),
}


def render_markdown() -> str:
    """docs/errors.md, generated from :data:`CODES` (``python -m protocol.codes``)."""
    out = [
        "# Error codes",
        "",
        "Every error tenure reports, over a socket, in a receipt or from the CLI, carries one",
        "of these codes. Codes are stable: a released code never changes meaning or spelling.",
        "On the wire an error is `{code, msg, data}` (see protocol.md); `msg` is for people,",
        "`data` is a small map for programs. *Retryable* means the same request may succeed",
        "later without anyone changing anything; otherwise something must change first.",
        "",
        "This file is generated from `protocol/codes.py` by `python -m protocol.codes`.",
        "",
    ]
    for code, info in CODES.items():
        out += [f"### `{code.value}`", "", info.meaning, "",
                f"Retryable: {'yes' if info.retryable else 'no'}.", ""]
    return "\n".join(out)


if __name__ == "__main__":
    print(render_markdown(), end="")
