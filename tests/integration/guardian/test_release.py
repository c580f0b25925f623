"""Sealed releases on real files with the real interpreter: seal, install, verify, run."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import guardian.release as release_mod
import guardian.treefiles as treefiles
from backend.testing import force_rmtree
from guardian.manifest import RUNTIME_NAME, SIGNATURE_NAME, Runtime, canonical_json, release_id
from guardian.release import (
    Release,
    ReleaseStatus,
    command,
    install,
    list_releases,
    verify,
)
from guardian.seal import DEFAULT_PACKAGES, seal
from protocol.ed25519 import PrivateKey
from protocol.errors import BadSignature, Conflict, StateCorrupt, UnsafePath

# A module sealed into the release beside tenure's packages; it reports where everything
# it imported came from, so the test can prove the release runs from its own lib/.
CHECK_MODULE = '''
import json, sys
import msgpack, psutil, pyroute2, protocol, protocol.errors, protocol.ed25519
key = protocol.ed25519.PrivateKey.generate()
mods = [msgpack, psutil, pyroute2, protocol, protocol.ed25519]
print(json.dumps({
    "signed": key.public_key().verify(key.sign(b"m"), b"m"),
    "cryptography": "cryptography" in sys.modules,
    "files": {m.__name__: m.__file__ for m in mods},
    "packed": list(msgpack.unpackb(msgpack.packb([1, "x"]))),
    "pid_ok": psutil.Process().pid > 0,
    "isolated": sys.flags.isolated, "no_site": sys.flags.no_site,
    "argv": sys.argv[1:], "path0": sys.path[0],
}))
'''


@dataclass
class Sealed:
    release: Release  # sealed (signed) at OUT
    installed: Release  # installed copy under releases/
    key: PrivateKey
    root: Path


@pytest.fixture(scope="module")
def sealed() -> Iterator[Sealed]:
    root = Path(tempfile.mkdtemp(prefix="tnrel"))
    try:
        src = root / "src"
        src.mkdir()
        (src / "relcheck.py").write_text(CHECK_MODULE)
        key = PrivateKey.generate()
        with pytest.MonkeyPatch.context() as mp:
            mp.syspath_prepend(str(src))
            rel = seal(root / "out", packages=(*DEFAULT_PACKAGES, "relcheck"), signing_key=key)
        installed = install(rel.path, root / "releases", trusted_keys=[key.public_key()])
        yield Sealed(rel, installed, key, root)
    finally:
        force_rmtree(root)


@pytest.fixture
def scratch() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="tnrel"))
    try:
        yield path
    finally:
        force_rmtree(path)


def _writable_copy(release: Release, parent: Path, name: str | None = None) -> Path:
    """A copy with writable directories whose files are hard links (fast: no 27 MB copy).

    Never write into a file of the copy in place: replace it (:func:`_replace`).
    """
    dst = parent / (name or release.id)
    for here, _dirs, files in os.walk(release.path):
        rel = os.path.relpath(here, release.path)
        os.mkdir(dst / rel, 0o755)
        for f in files:
            os.link(os.path.join(here, f), dst / rel / f)
    return dst


def _replace(path: Path, data: bytes) -> None:
    path.unlink()
    path.write_bytes(data)


# --- seal / install / verify ---------------------------------------------------------------


def test_seal_install_verify_round_trip(sealed: Sealed) -> None:
    rel, inst = sealed.release, sealed.installed
    assert inst.id == rel.id == release_id((rel.path / RUNTIME_NAME).read_bytes())
    assert inst.path == sealed.root / "releases" / rel.id
    assert verify(inst.path) == inst
    assert verify(rel.path, rel.id).runtime == rel.runtime
    rt = rel.runtime
    assert rt.interpreter.path == os.path.realpath(rt.interpreter.path)
    assert not os.path.islink(rt.interpreter.path)
    assert set(rt.contracts) == {"stackControl", "logJournal", "notify", "observations"}
    names = {f.split("/")[1] for f in rt.files}
    assert {"protocol", "guardian", "msgpack", "psutil", "pyroute2", "relcheck.py"} <= names
    # Ed25519 comes from the interpreter's libcrypto: cryptography is a test dependency only
    assert not names & {"cryptography", "cffi", "pycparser"}
    assert "lib/protocol/__pycache__/errors.cpython-311.pyc" in rt.files
    assert not any(f.startswith("lib/tests/") or "/../" in f for f in rt.files)


def test_installed_tree_is_read_only_and_leaves_no_temp(sealed: Sealed) -> None:
    inst = sealed.installed
    assert sorted(os.listdir(inst.path.parent)) == [inst.id]
    assert stat.S_IMODE(os.stat(inst.path).st_mode) == 0o555
    assert stat.S_IMODE(os.stat(inst.lib / "protocol").st_mode) == 0o555
    assert stat.S_IMODE(os.stat(inst.path / RUNTIME_NAME).st_mode) == 0o444
    assert stat.S_IMODE(os.stat(inst.lib / "protocol" / "errors.py").st_mode) == 0o444


def test_two_seals_of_the_same_tree_have_the_same_id(scratch: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = scratch / "src" / "fakepkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("VALUE = 1\n")
    (pkg / "tests").mkdir()
    (pkg / "tests" / "test_x.py").write_text("")
    monkeypatch.syspath_prepend(str(scratch / "src"))
    # distribution=cryptography: its closure (cffi, pycparser) is small, so this stays fast
    a = seal(scratch / "a", packages=("fakepkg",), distribution="cryptography")
    b = seal(scratch / "b", packages=("fakepkg",), distribution="cryptography")
    assert a.id == b.id
    runtime_a = (scratch / "a" / RUNTIME_NAME).read_bytes()
    assert runtime_a == (scratch / "b" / RUNTIME_NAME).read_bytes()
    assert "lib/fakepkg/__init__.py" in a.runtime.files
    assert "lib/cffi/api.py" in a.runtime.files and "lib/pycparser/c_parser.py" in a.runtime.files
    assert not any("tests" in f for f in a.runtime.files if f.startswith("lib/fakepkg"))
    (pkg / "__init__.py").write_text("VALUE = 2\n")
    c = seal(scratch / "c", packages=("fakepkg",), distribution="cryptography")
    assert c.id != a.id


def test_seal_refuses_an_existing_output(scratch: Path) -> None:
    (scratch / "out").mkdir()
    with pytest.raises(Conflict):
        seal(scratch / "out")
    assert os.listdir(scratch) == ["out"]


def test_install_twice_is_idempotent(sealed: Sealed) -> None:
    again = install(sealed.release.path, sealed.root / "releases")
    assert again == sealed.installed
    assert os.listdir(sealed.root / "releases") == [sealed.release.id]


def test_a_damaged_copy_of_the_same_release_is_repaired(sealed: Sealed, scratch: Path
                                                         ) -> None:
    """Was CONFLICT ("exists and is not this release"), and a damaged current release
    could then not be mended while its backend ran: its copy may not be removed, and
    the upgrade's rollback check refused every upgrade. The id is the hash of the
    release's content, so the verified source is that release: it replaces the copy in
    one step, and nothing else is left."""
    releases = scratch / "releases"
    releases.mkdir()
    bad = _writable_copy(sealed.installed, releases)
    _replace(bad / "lib" / "protocol" / "errors.py", b"# replaced\n")
    (bad / "lib" / "extra.py").write_text("")
    before = os.stat(bad).st_ino
    fixed = install(sealed.release.path, releases)
    assert fixed.repaired is not None and "lib/" in fixed.repaired, fixed.repaired
    assert fixed.path == bad and os.stat(bad).st_ino != before
    verify(bad)
    assert os.listdir(releases) == [sealed.release.id]
    assert stat.S_IMODE(os.stat(bad).st_mode) == 0o555
    again = install(sealed.release.path, releases)
    assert again.repaired is None   # intact now: returned as it is


def test_a_symlink_or_file_at_the_release_path_is_still_a_conflict(sealed: Sealed,
                                                                   scratch: Path) -> None:
    releases = scratch / "releases"
    releases.mkdir()
    elsewhere = _writable_copy(sealed.installed, scratch, name="elsewhere")
    (releases / sealed.release.id).symlink_to(elsewhere)
    with pytest.raises(Conflict):
        install(sealed.release.path, releases)
    assert (releases / sealed.release.id).is_symlink()
    (releases / sealed.release.id).unlink()
    (releases / sealed.release.id).write_text("")
    with pytest.raises(Conflict):
        install(sealed.release.path, releases)
    assert sorted(os.listdir(releases)) == [sealed.release.id]


def test_a_tree_hashed_before_is_not_hashed_again_until_a_file_changes(
        sealed: Sealed, scratch: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = _writable_copy(sealed.installed, scratch)
    target = d / "lib" / "protocol" / "errors.py"
    original = target.read_bytes()
    _replace(target, original)          # a file of its own (not a link) to write into
    hashed: list[str] = []
    real = release_mod.sha256_stat

    def counting(path: Path | str, rel: str) -> tuple[str, os.stat_result]:
        if rel in sealed.installed.runtime.files:   # not the interpreter's hash
            hashed.append(rel)
        return real(path, rel)

    monkeypatch.setattr(release_mod, "sha256_stat", counting)
    seen: dict[str, bytes] = {}
    verify(d, sealed.installed.id, seen=seen)
    assert len(hashed) == len(sealed.installed.runtime.files) and str(d) in seen
    hashed.clear()
    assert verify(d, sealed.installed.id, seen=seen).id == sealed.installed.id
    assert hashed == []                 # the very files hashed before
    # the same size, the old mtime put back: only the ctime tells, and it does
    st = os.stat(target)
    target.write_bytes(bytes([original[0] ^ 1]) + original[1:])
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(StateCorrupt) as ei:
        verify(d, sealed.installed.id, seen=seen)
    assert ei.value.data["file"] == "lib/protocol/errors.py"
    target.write_bytes(original)        # put right: hashed in full once more, then not
    hashed.clear()
    verify(d, sealed.installed.id, seen=seen)
    assert len(hashed) == len(sealed.installed.runtime.files)
    hashed.clear()
    _replace(d / "lib" / "protocol" / "codes.py", (d / "lib" / "protocol" / "codes.py"
                                                     ).read_bytes() + b"# more\n")
    with pytest.raises(StateCorrupt):   # a new file under the old name: another inode
        verify(d, sealed.installed.id, seen=seen)
    assert hashed                        # it was hashed, not taken from the memo


# --- tampering -----------------------------------------------------------------------------


def test_flipped_byte_in_an_installed_file_is_named(sealed: Sealed) -> None:
    path = sealed.installed.lib / "protocol" / "errors.py"
    original = path.read_bytes()
    os.chmod(path, 0o644)
    try:
        path.write_bytes(bytes([original[0] ^ 1]) + original[1:])
        with pytest.raises(StateCorrupt) as ei:
            verify(sealed.installed.path)
        assert ei.value.data["file"] == "lib/protocol/errors.py"
        assert "lib/protocol/errors.py" in str(ei.value)
    finally:
        path.write_bytes(original)
        os.chmod(path, 0o444)
    verify(sealed.installed.path)


@pytest.mark.parametrize(("action", "named"), [
    ("add_file", "lib/evil.py"),
    ("add_top", "NOTES.txt"),
    ("add_dir", "lib/evilpkg"),
    ("remove", "lib/msgpack/__init__.py"),
    ("rewrite_runtime", RUNTIME_NAME),
])
def test_changes_to_the_tree_are_refused(sealed: Sealed, scratch: Path, action: str,
                                         named: str) -> None:
    d = _writable_copy(sealed.installed, scratch)
    if action == "add_file":
        (d / "lib" / "evil.py").write_text("")
    elif action == "add_top":
        (d / "NOTES.txt").write_text("")
    elif action == "add_dir":
        (d / "lib" / "evilpkg").mkdir()
    elif action == "remove":
        (d / "lib" / "msgpack" / "__init__.py").unlink()
    else:
        _replace(d / RUNTIME_NAME, json.dumps(sealed.release.runtime.to_json()).encode())
    with pytest.raises(StateCorrupt) as ei:
        verify(d)
    assert ei.value.data["file"] == named


@pytest.mark.parametrize("kind", ["replace_with_symlink", "extra_symlink", "fifo"])
def test_symlinks_and_special_files_are_refused(sealed: Sealed, scratch: Path,
                                                kind: str) -> None:
    d = _writable_copy(sealed.installed, scratch)
    target = d / "lib" / "protocol" / "codes.py"
    if kind == "replace_with_symlink":
        shutil.copy(target, scratch / "same.py")
        target.unlink()
        target.symlink_to(scratch / "same.py")
    elif kind == "extra_symlink":
        (d / "lib" / "link").symlink_to("/etc")
    else:
        os.mkfifo(d / "lib" / "pipe")
    with pytest.raises(UnsafePath):
        verify(d)
    with pytest.raises(UnsafePath):
        install(d, scratch / "releases")


def test_symlinked_release_dir_is_refused(sealed: Sealed, scratch: Path) -> None:
    (scratch / sealed.installed.id).symlink_to(sealed.installed.path)
    with pytest.raises(UnsafePath):
        verify(scratch / sealed.installed.id)


def test_wrong_directory_name_or_expected_id_is_refused(sealed: Sealed, scratch: Path) -> None:
    d = _writable_copy(sealed.installed, scratch, name="f" * 64)
    with pytest.raises(StateCorrupt):
        verify(d)
    with pytest.raises(StateCorrupt):
        verify(sealed.installed.path, "e" * 64)


def test_changed_interpreter_is_refused(sealed: Sealed, scratch: Path) -> None:
    rt = sealed.release.runtime
    other = Runtime(rt.tenure_version, rt.source_commit,
                    type(rt.interpreter)(rt.interpreter.path, rt.interpreter.version, "0" * 64),
                    rt.files, rt.contracts)
    data = canonical_json(other.to_json())
    d = _writable_copy(sealed.installed, scratch, name=release_id(data))
    _replace(d / RUNTIME_NAME, data)
    (d / SIGNATURE_NAME).unlink()
    with pytest.raises(StateCorrupt) as ei:
        verify(d)
    assert ei.value.data["problem"] == "interpreter"


def test_tampered_source_is_not_installed(sealed: Sealed, scratch: Path) -> None:
    d = _writable_copy(sealed.release, scratch, name="src")
    target = d / "lib" / "psutil" / "__init__.py"
    _replace(target, target.read_bytes() + b"\n")
    with pytest.raises(StateCorrupt) as ei:
        install(d, scratch / "releases")
    assert ei.value.data["file"] == "lib/psutil/__init__.py"
    assert not (scratch / "releases").exists()


# --- signatures ----------------------------------------------------------------------------


def test_signed_release_installs_with_the_trusted_key(sealed: Sealed) -> None:
    # the module fixture installed it with trusted_keys=[the right key]
    good = sealed.key.public_key()
    assert sealed.installed.signed
    verify(sealed.installed.path, trusted_keys=[good])
    wrong = PrivateKey.generate().public_key()
    again = install(sealed.release.path, sealed.root / "releases", trusted_keys=[wrong, good])
    assert again == sealed.installed


def test_wrong_key_or_missing_signature_is_refused(sealed: Sealed, scratch: Path) -> None:
    wrong = PrivateKey.generate().public_key()
    with pytest.raises(BadSignature):
        install(sealed.release.path, scratch / "r", trusted_keys=[wrong])
    with pytest.raises(BadSignature):
        verify(sealed.installed.path, trusted_keys=[wrong])
    unsigned = _writable_copy(sealed.release, scratch, name="unsigned")
    (unsigned / SIGNATURE_NAME).unlink()
    with pytest.raises(BadSignature):
        install(unsigned, scratch / "r", trusted_keys=[sealed.key.public_key()])
    (unsigned / SIGNATURE_NAME).write_bytes(b"not base64!\n")
    with pytest.raises(BadSignature):
        install(unsigned, scratch / "r", trusted_keys=[sealed.key.public_key()])
    assert not (scratch / "r").exists()


def test_durable_flush_falls_back_to_fsync_without_syncfs(
    scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (scratch / "d").mkdir()
    (scratch / "d" / "f").write_bytes(b"x")
    monkeypatch.setattr(treefiles, "_SYNCFS", None)
    treefiles.make_durable(scratch)
    monkeypatch.undo()
    treefiles.make_durable(scratch)


# --- listing and running -------------------------------------------------------------------


def test_list_releases_marks_bad_entries(sealed: Sealed, scratch: Path) -> None:
    good = _writable_copy(sealed.installed, scratch)
    (scratch / ("0" * 64)).mkdir()
    (scratch / ("1" * 64 + ".tmp-abc")).mkdir()
    (scratch / "junk").write_text("")
    bad = _writable_copy(sealed.installed, scratch, name="2" * 64)
    _replace(bad / RUNTIME_NAME, b"{}")
    got = {s.name: s for s in list_releases(scratch)}
    assert got[good.name].status is ReleaseStatus.OK
    assert got[good.name].tenure_version == sealed.release.tenure_version
    assert got[good.name].file_count == len(sealed.release.runtime.files)
    assert got["0" * 64].status is ReleaseStatus.CORRUPT and got["0" * 64].reason
    assert got["2" * 64].status is ReleaseStatus.CORRUPT
    assert got["junk"].status is ReleaseStatus.CORRUPT
    assert got["1" * 64 + ".tmp-abc"].status is ReleaseStatus.INCOMPLETE


def test_release_runs_isolated_from_its_own_lib(sealed: Sealed, scratch: Path) -> None:
    rel = verify(sealed.installed.path)
    argv = command(rel, "--flag", "x y", module="relcheck")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=scratch,
                          env={"PYTHONPATH": "/nonexistent", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    for name, file in out["files"].items():
        assert file.startswith(str(rel.lib) + "/"), (name, file)
    assert out["packed"] == [1, "x"] and out["pid_ok"]
    assert out["signed"] and not out["cryptography"]
    assert out["isolated"] == 1 and out["no_site"] == 1
    assert out["argv"] == ["--flag", "x y"]
    assert out["path0"] == str(rel.lib)
    assert os.listdir(scratch) == []  # nothing written where it ran


def test_an_unsigned_copy_of_a_signed_release_gets_its_signature(sealed: Sealed,
                                                                 scratch: Path) -> None:
    """Sealing is reproducible: signing the tree a release was sealed from unsigned gives
    the same id. Installing it over the unsigned copy (trusted keys configured since) was
    CONFLICT; the copy now gets the signature, and nothing else of it changes. A copy
    that differs in a file is damaged: replaced whole by the verified, signed one."""
    releases = scratch / "releases"
    releases.mkdir()
    copy = _writable_copy(sealed.installed, releases)
    (copy / SIGNATURE_NAME).unlink()
    treefiles.make_readonly(copy)
    keys = [sealed.key.public_key()]
    with pytest.raises(BadSignature):
        verify(copy, trusted_keys=keys)
    again = install(sealed.release.path, releases, trusted_keys=keys)
    assert again.signed and again.path == copy
    verify(copy, trusted_keys=keys)
    assert sorted(os.listdir(copy)) == sorted(os.listdir(sealed.installed.path))
    assert stat.S_IMODE(os.stat(copy).st_mode) == 0o555

    (scratch / "other").mkdir()
    damaged = _writable_copy(sealed.installed, scratch / "other", name=sealed.release.id)
    (damaged / SIGNATURE_NAME).unlink()
    _replace(damaged / "lib" / "protocol" / "errors.py", b"# replaced\n")
    fixed = install(sealed.release.path, scratch / "other", trusted_keys=keys)
    assert fixed.repaired is not None and fixed.signed   # a damaged copy: replaced whole
    verify(damaged, trusted_keys=keys)


def test_a_crash_while_a_signature_is_attached_leaves_the_release_verifying(
        sealed: Sealed, scratch: Path) -> None:
    """The signature was written to a temporary file inside the release: killed before
    the rename, the release held a file its RUNTIME.json does not list, and every verify
    of it (the selected release's, at recovery) failed STATE_CORRUPT "unexpected file".
    The temporary file is now beside the release, listed as incomplete (a prune removes
    it), and signing again works."""
    releases = scratch / "releases"
    releases.mkdir()
    copy = _writable_copy(sealed.installed, releases)
    (copy / SIGNATURE_NAME).unlink()
    treefiles.make_readonly(copy)
    keys = [sealed.key.public_key()]
    pid = os.fork()
    if pid == 0:   # pragma: no cover - the child, killed between write and rename
        def killed(src: object, dst: object, *a: object, **kw: object) -> None:
            os._exit(9)
        os.rename = killed   # type: ignore[assignment]
        try:
            install(sealed.release.path, releases, trusted_keys=keys)
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 9   # it did die at the rename
    verify(copy)   # every file listed, nothing else: the release still runs
    left = [s for s in list_releases(releases) if s.name != copy.name]
    assert [(s.name.startswith(f".{copy.name}.sig.tmp-"), s.status) for s in left] == [
        (True, ReleaseStatus.INCOMPLETE)]
    again = install(sealed.release.path, releases, trusted_keys=keys)
    assert again.signed and again.path == copy
    verify(copy, trusted_keys=keys)
    assert stat.S_IMODE(os.stat(copy).st_mode) == 0o555
    treefiles.remove_tree(left[0].path)   # what a prune does with an incomplete entry
    assert os.listdir(releases) == [copy.name]
