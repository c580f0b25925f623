"""backend.cli.releases.unverified: a release that does not verify, said with its id and
the way out; left as it is where installing it again cannot help."""

from __future__ import annotations

from backend.cli.releases import unverified
from protocol.errors import BadSignature, NotFound, StateCorrupt

RID = "ab" * 32


def test_a_damaged_copy_is_named_and_told_to_be_installed_again() -> None:
    exc = unverified(StateCorrupt("content of lib/x.py does not match RUNTIME.json",
                                  {"file": "lib/x.py", "release": RID}))
    assert exc.msg == (f"release {RID[:12]} does not verify: content of lib/x.py does not "
                       "match RUNTIME.json; its installed copy is damaged: `tenure release "
                       "install` it again from its sealed directory, which replaces the copy")


def test_an_unsigned_one_is_told_how_to_sign_it() -> None:
    exc = unverified(BadSignature("…: release is not signed",
                                  {"file": "RUNTIME.json.sig", "release": RID}))
    assert exc.msg.startswith(f"release {RID[:12]} does not verify: …: release is not "
                              "signed; trusted release keys are set")


def test_what_installing_again_cannot_mend_is_left_as_it_is() -> None:
    said = "interpreter /usr/bin/python3.11 is unusable: [Errno 2] No such file"
    for exc in (StateCorrupt(said, {"file": "/usr/bin/python3.11", "problem": "interpreter",
                                    "release": RID}),
                StateCorrupt("trusted-release-keys: not a key", {"release": RID}),
                StateCorrupt("release x, the one to roll back to …", {
                    "file": "lib/x.py", "release": RID, "rollback_target": RID}),
                NotFound("release is not installed", {"file": "x", "release": RID})):
        before = exc.msg
        assert unverified(exc).msg == before
