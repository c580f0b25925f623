"""The code list, the exception tree and docs/errors.md agree one-to-one."""

from __future__ import annotations

import re
from pathlib import Path

import protocol
from protocol.codes import CODES, Code, render_markdown
from protocol.errors import OutcomeUnknown, TenureError, error_class, error_from_wire

DOCS = Path(__file__).resolve().parents[3] / "docs" / "errors.md"


def test_every_code_has_a_meaning_and_exactly_one_class():
    assert set(CODES) == set(Code)
    for code in Code:
        cls = error_class(code)
        assert cls.code is code
        assert CODES[code].meaning


def test_codes_are_upper_snake_and_equal_their_names():
    for code in Code:
        assert re.fullmatch(r"[A-Z][A-Z0-9_]*", code.value)
        assert code.name == code.value


def test_wire_round_trip_for_every_code():
    for code in Code:
        exc = error_class(code)("m", {"k": 1})
        back = error_from_wire(*exc.to_wire().values())
        assert type(back) is type(exc) and back.data["k"] == 1
        if isinstance(exc, OutcomeUnknown):
            assert back.request_id is None


def test_docs_list_every_code():
    text = DOCS.read_text()
    assert text == render_markdown(), "run: python -m protocol.codes > docs/errors.md"
    documented = set(re.findall(r"^### `([A-Z_]+)`", text, re.M))
    assert documented == {c.value for c in Code}


PINNED = ["CODES", "DEFAULT_MAX_FRAME", "PROTO", "AsyncClient", "Call", "Client", "Code",
          "CodeInfo", "Connection", "ErrorBody", "Event", "Field", "FrameDecoder", "Hello",
          "Identity", "Method", "PeerCred", "Request", "Response", "RpcServer", "Schema",
          "TenureError", "Welcome", "bind_unix", "boot_id", "check_private_dir",
          "decode_message", "encode_frame", "ensure_private_dir", "error_from_wire",
          "new_identity", "start_ticks"]


def test_public_surface_is_pinned():
    assert protocol.__all__ == PINNED
    for name in protocol.__all__:
        assert hasattr(protocol, name), name
    assert issubclass(protocol.TenureError, Exception)
    assert TenureError is protocol.TenureError
