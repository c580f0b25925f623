"""tenure's exception tree. Every class has one stable code from :mod:`protocol.codes`.

::

    TenureError
    ├── ProtocolError
    │   ├── BadFrame                BAD_FRAME
    │   ├── BadRequest              BAD_REQUEST
    │   ├── UnknownMethod           UNKNOWN_METHOD
    │   ├── UnsupportedProtocol     UNSUPPORTED_PROTOCOL
    │   ├── CapabilityMissing       CAPABILITY_MISSING
    │   └── FrameTimeout            FRAME_TIMEOUT
    ├── Unauthorized                UNAUTHORIZED
    ├── Unavailable
    │   ├── ShuttingDown            SHUTTING_DOWN
    │   ├── AlreadyRunning          ALREADY_RUNNING
    │   ├── TooManyConnections      TOO_MANY_CONNECTIONS
    │   ├── BackendUnavailable      BACKEND_UNAVAILABLE
    │   ├── OwnerUnavailable        OWNER_UNAVAILABLE
    │   └── Internal                INTERNAL
    ├── TransportError
    │   ├── ConnectFailed           CONNECT_FAILED     it broke before anything was sent
    │   ├── ClientClosed            CLIENT_CLOSED      we closed it
    │   └── OutcomeUnknown                             a request was sent, no answer came
    │       ├── TransportLost       TRANSPORT_LOST     it broke
    │       └── RequestTimedOut     TIMEOUT            we gave up and closed it
    ├── IdentityError
    │   ├── OwnerChanged            OWNER_CHANGED
    │   └── IdentityMismatch        IDENTITY_MISMATCH
    ├── PathError
    │   ├── UnsafePath              UNSAFE_PATH
    │   ├── PathTooLong             PATH_TOO_LONG
    │   └── HomeLost                HOME_LOST
    ├── StateError
    │   ├── NotFound                NOT_FOUND
    │   ├── Conflict                CONFLICT
    │   ├── StaleEpoch              STALE_EPOCH
    │   ├── NoGrant                 NO_GRANT
    │   ├── BadSignature            BAD_SIGNATURE
    │   ├── StackFenced             STACK_FENCED
    │   ├── OperationInProgress     OPERATION_IN_PROGRESS
    │   ├── StalePlan               STALE_PLAN
    │   ├── StateCorrupt            STATE_CORRUPT
    │   │   └── InterpreterChanged  INTERPRETER_CHANGED
    │   ├── SchemaIncompatible      SCHEMA_INCOMPATIBLE
    │   ├── StorageFailed           STORAGE_FAILED
    │   └── JobQueueFull            JOB_QUEUE_FULL
    ├── ProcessError
    │   ├── LaunchFailed            LAUNCH_FAILED
    │   │   ├── PrivilegeRequired   PRIVILEGE_REQUIRED
    │   │   ├── LimitUnenforceable  LIMIT_UNENFORCEABLE
    │   │   └── SocketUnavailable   SOCKET_UNAVAILABLE
    │   ├── StopTimeout             STOP_TIMEOUT
    │   ├── ReconcileRequired       RECONCILE_REQUIRED
    │   ├── ProcessesAlive          PROCESSES_ALIVE
    │   ├── MaintenanceIncomplete   MAINTENANCE_INCOMPLETE
    │   └── OwnerUpgradeReverted    OWNER_UPGRADE_REVERTED
    ├── ConfigInvalid               CONFIG_INVALID
    ├── GuardianError
    │   ├── PreflightFailed         BACKEND_PREFLIGHT_FAILED
    │   ├── PreflightTimeout        BACKEND_PREFLIGHT_TIMEOUT
    │   ├── BackendStartTimeout     BACKEND_START_TIMEOUT
    │   ├── HandoffFailed           HANDOFF_FAILED
    │   ├── GuardianFault           GUARDIAN_FAULT
    │   ├── RecoveryBlocked         RECOVERY_BLOCKED
    │   ├── Uncertain               UNCERTAIN
    │   └── GuardianUpgradeFailed   GUARDIAN_UPGRADE_FAILED
    ├── ServiceError                SERVICE_ERROR
    │   └── ServiceActive           SERVICE_ACTIVE
    └── RemoteError                 any code this build does not know (a newer server)

A server turns a raised ``TenureError`` into ``{code, msg, data}``; a client turns such an
answer back into the class registered for the code (:func:`error_from_wire`).
``retryable`` says whether the same request can succeed later without anyone changing
anything.
"""

from __future__ import annotations

from .codes import CODES, Code

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the command line a few ms to import
    from typing import Any, ClassVar

_BY_CODE: dict[str, type[TenureError]] = {}


class TenureError(Exception):
    """Base of every tenure error. ``code`` is stable; ``data`` is a small msgpack-able map."""

    code: ClassVar[Code | None] = None

    def __init__(self, msg: str = "", data: dict[str, Any] | None = None) -> None:
        super().__init__(msg)
        self.msg = msg
        self.data: dict[str, Any] = dict(data or {})

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        code = cls.__dict__.get("code")
        if code is not None:
            if code in _BY_CODE:
                raise TypeError(f"code {code} already belongs to {_BY_CODE[code].__name__}")
            _BY_CODE[code] = cls

    @property
    def code_str(self) -> str:
        return str(self.code) if self.code is not None else Code.INTERNAL.value

    @property
    def retryable(self) -> bool:
        return CODES[self.code].retryable if self.code is not None else False

    def to_wire(self) -> dict[str, Any]:
        return {"code": self.code_str, "msg": self.msg, "data": self.data}

    def __str__(self) -> str:
        return f"{self.code_str}: {self.msg}" if self.msg else self.code_str


class ProtocolError(TenureError):
    pass


class BadFrame(ProtocolError):
    code = Code.BAD_FRAME


class BadRequest(ProtocolError):
    code = Code.BAD_REQUEST


class UnknownMethod(ProtocolError):
    code = Code.UNKNOWN_METHOD


class UnsupportedProtocol(ProtocolError):
    code = Code.UNSUPPORTED_PROTOCOL


class CapabilityMissing(ProtocolError):
    code = Code.CAPABILITY_MISSING


class FrameTimeout(ProtocolError):
    code = Code.FRAME_TIMEOUT


class Unauthorized(TenureError):
    code = Code.UNAUTHORIZED


class Unavailable(TenureError):
    pass


class ShuttingDown(Unavailable):
    code = Code.SHUTTING_DOWN


class AlreadyRunning(Unavailable):
    code = Code.ALREADY_RUNNING


class TooManyConnections(Unavailable):
    code = Code.TOO_MANY_CONNECTIONS


class Internal(Unavailable):
    code = Code.INTERNAL


class TransportError(TenureError):
    pass


class ConnectFailed(TransportError):
    code = Code.CONNECT_FAILED


class ClientClosed(TransportError):
    code = Code.CLIENT_CLOSED


class OutcomeUnknown(TransportError):
    """A request was sent and no answer came. ``request_id`` names it; it is never replayed."""

    def __init__(self, msg: str = "", data: dict[str, Any] | None = None,
                 request_id: int | None = None) -> None:
        d = dict(data or {})
        if request_id is not None:
            d["request_id"] = request_id
        super().__init__(msg, d)
        self.request_id = request_id


class TransportLost(OutcomeUnknown):
    code = Code.TRANSPORT_LOST


class RequestTimedOut(OutcomeUnknown):
    code = Code.TIMEOUT


class IdentityError(TenureError):
    pass


class OwnerChanged(IdentityError):
    code = Code.OWNER_CHANGED


class IdentityMismatch(IdentityError):
    code = Code.IDENTITY_MISMATCH


class PathError(TenureError):
    pass


class UnsafePath(PathError):
    code = Code.UNSAFE_PATH


class PathTooLong(PathError):
    code = Code.PATH_TOO_LONG


class HomeLost(PathError):
    code = Code.HOME_LOST


class StateError(TenureError):
    pass


class NotFound(StateError):
    code = Code.NOT_FOUND


class Conflict(StateError):
    code = Code.CONFLICT


class StaleEpoch(StateError):
    code = Code.STALE_EPOCH


class NoGrant(StateError):
    code = Code.NO_GRANT


class BadSignature(StateError):
    code = Code.BAD_SIGNATURE


class StackFenced(StateError):
    code = Code.STACK_FENCED


class OperationInProgress(StateError):
    code = Code.OPERATION_IN_PROGRESS


class StalePlan(StateError):
    code = Code.STALE_PLAN


class StateCorrupt(StateError):
    code = Code.STATE_CORRUPT


class InterpreterChanged(StateCorrupt):
    code = Code.INTERPRETER_CHANGED


class SchemaIncompatible(StateError):
    code = Code.SCHEMA_INCOMPATIBLE


class StorageFailed(StateError):
    code = Code.STORAGE_FAILED


class JobQueueFull(StateError):
    code = Code.JOB_QUEUE_FULL


class ProcessError(TenureError):
    pass


class LaunchFailed(ProcessError):
    code = Code.LAUNCH_FAILED


class PrivilegeRequired(LaunchFailed):
    code = Code.PRIVILEGE_REQUIRED


class LimitUnenforceable(LaunchFailed):
    code = Code.LIMIT_UNENFORCEABLE


class SocketUnavailable(LaunchFailed):
    code = Code.SOCKET_UNAVAILABLE


class StopTimeout(ProcessError):
    code = Code.STOP_TIMEOUT


class ReconcileRequired(ProcessError):
    code = Code.RECONCILE_REQUIRED


class ProcessesAlive(ProcessError):
    code = Code.PROCESSES_ALIVE


class MaintenanceIncomplete(ProcessError):
    code = Code.MAINTENANCE_INCOMPLETE


class OwnerUpgradeReverted(ProcessError):
    code = Code.OWNER_UPGRADE_REVERTED


class ConfigInvalid(TenureError):
    code = Code.CONFIG_INVALID


class BackendUnavailable(Unavailable):
    code = Code.BACKEND_UNAVAILABLE


class OwnerUnavailable(Unavailable):
    code = Code.OWNER_UNAVAILABLE


class GuardianError(TenureError):
    pass


class PreflightFailed(GuardianError):
    code = Code.BACKEND_PREFLIGHT_FAILED


class PreflightTimeout(GuardianError):
    code = Code.BACKEND_PREFLIGHT_TIMEOUT


class BackendStartTimeout(GuardianError):
    code = Code.BACKEND_START_TIMEOUT


class HandoffFailed(GuardianError):
    code = Code.HANDOFF_FAILED


class GuardianFault(GuardianError):
    """An unexpected exception turned into a coded ending at a guardian boundary."""

    code = Code.GUARDIAN_FAULT

    @classmethod
    def wrap(cls, exc: BaseException) -> TenureError:
        """``exc`` itself when it is a TenureError, else a GuardianFault naming it."""
        if isinstance(exc, TenureError):
            return exc
        return cls(f"unexpected {type(exc).__name__}: {exc}",
                   {"exception": type(exc).__name__})


class RecoveryBlocked(GuardianError):
    code = Code.RECOVERY_BLOCKED


class Uncertain(GuardianError):
    code = Code.UNCERTAIN


class GuardianUpgradeFailed(GuardianError):
    code = Code.GUARDIAN_UPGRADE_FAILED


class ServiceError(TenureError):
    code = Code.SERVICE_ERROR


class ServiceActive(ServiceError):
    code = Code.SERVICE_ACTIVE


class RemoteError(TenureError):
    """An error answer whose code this build does not know; ``remote_code`` keeps it."""

    def __init__(self, remote_code: str, msg: str = "",
                 data: dict[str, Any] | None = None) -> None:
        super().__init__(msg, data)
        self.remote_code = remote_code

    @property
    def code_str(self) -> str:
        return self.remote_code


def error_class(code: Code) -> type[TenureError]:
    """The class registered for ``code``."""
    return _BY_CODE[code]


def error_from_wire(code: str, msg: str, data: dict[str, Any]) -> TenureError:
    """Rebuild the exception for an ``err`` answer; unknown codes give :class:`RemoteError`."""
    cls = _BY_CODE.get(code)
    if cls is None:
        return RemoteError(code, msg, data)
    if issubclass(cls, OutcomeUnknown):
        return cls(msg, data, request_id=data.get("request_id"))
    return cls(msg, data)
