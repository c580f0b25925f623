"""protocol.ed25519 against RFC 8032's test vectors and against an independent
implementation (the cryptography package, a test dependency only)."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ec import SECP256R1, generate_private_key
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import (
    BestAvailableEncryption,
    Encoding,
    NoEncryption,
    PrivateFormat,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.ed25519 import PrivateKey, PublicKey

# RFC 8032, section 7.1: TEST 1 (empty message) and TEST 2 (one byte)
VECTORS = [
    ("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
     "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a", "",
     "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bac"
     "c61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"),
    ("4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
     "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c", "72",
     "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e"
     "458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00"),
]


def _theirs(key: PrivateKey) -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(
        base64.b64decode(b"".join(key.to_pem().splitlines()[1:-1]))[-32:])


@pytest.mark.parametrize(("seed", "public", "msg", "sig"), VECTORS)
def test_rfc8032_vectors(seed: str, public: str, msg: str, sig: str) -> None:
    key = PrivateKey(bytes.fromhex(seed))
    assert key.public_key() == PublicKey(bytes.fromhex(public))
    assert key.sign(bytes.fromhex(msg)).hex() == sig
    assert key.public_key().verify(bytes.fromhex(sig), bytes.fromhex(msg))


@settings(max_examples=40, deadline=None)
@given(st.binary(max_size=2048))
def test_signatures_agree_with_another_implementation(data: bytes) -> None:
    ours = PrivateKey.generate()
    theirs = _theirs(ours)
    raw_public = theirs.public_key().public_bytes_raw()
    assert ours.public_key().raw == raw_public
    assert ours.sign(data) == theirs.sign(data)  # deterministic: same bytes
    theirs.public_key().verify(ours.sign(data), data)
    assert PublicKey(raw_public).verify(theirs.sign(data), data)


def test_any_change_fails_verification() -> None:
    key = PrivateKey.generate()
    sig = key.sign(b"grant")
    pub = key.public_key()
    assert pub.verify(sig, b"grant")
    assert not pub.verify(sig, b"grunt")
    assert not pub.verify(bytes([sig[0] ^ 1]) + sig[1:], b"grant")
    assert not pub.verify(sig[:-1], b"grant") and not pub.verify(sig + b"\0", b"grant")
    assert not pub.verify(b"", b"grant")
    assert not PrivateKey.generate().public_key().verify(sig, b"grant")
    # 32 bytes that decode to no point of the curve: False, not an exception
    not_a_point = bytes.fromhex("02" + "00" * 30 + "80")
    assert not PublicKey(not_a_point).verify(sig, b"grant")
    with pytest.raises(InvalidSignature):
        Ed25519PublicKey.from_public_bytes(pub.raw).verify(sig, b"grunt")


@pytest.mark.parametrize("size", [0, 31, 33, 64])
def test_keys_are_32_bytes(size: int) -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        PrivateKey(b"k" * size)
    with pytest.raises(ValueError, match="32 bytes"):
        PublicKey(b"k" * size)


def test_pem_round_trips_with_another_implementation() -> None:
    ours = PrivateKey.generate()
    theirs_pem = _theirs(ours).private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    assert ours.to_pem() == theirs_pem
    other = Ed25519PrivateKey.generate()
    loaded = PrivateKey.from_pem(other.private_bytes(Encoding.PEM, PrivateFormat.PKCS8,
                                                     NoEncryption()))
    assert loaded.sign(b"x") == other.sign(b"x")


@pytest.mark.skipif(shutil.which("openssl") is None,
                    reason="needs the openssl command (.ci/run installs it)")
def test_pem_from_openssl_genpkey_loads() -> None:
    pem = subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519"], check=True,
                         capture_output=True, timeout=30).stdout
    key = PrivateKey.from_pem(pem)
    assert key.public_key().verify(key.sign(b"m"), b"m")


def _not_ours() -> list[bytes]:
    ec = generate_private_key(SECP256R1())
    ed = Ed25519PrivateKey.generate()
    good = ed.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    return [
        b"", b"not a key",
        ec.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()),
        ed.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, BestAvailableEncryption(b"pw")),
        ed.private_bytes(Encoding.PEM, PrivateFormat.OpenSSH, NoEncryption()),
        good.replace(b"\n-----END", b"AAAA\n-----END"),  # trailing bytes
        good.replace(b"MC4CAQ", b"MC4CA*"),  # not base64
    ]


@pytest.mark.parametrize("pem", _not_ours())
def test_anything_but_an_ed25519_pkcs8_pem_is_refused(pem: bytes) -> None:
    with pytest.raises(ValueError):
        PrivateKey.from_pem(pem)


def test_a_private_key_never_prints() -> None:
    key = PrivateKey(bytes(range(32)))
    assert "hidden" in repr(key) and "AAECAw" not in repr(key) and "00010203" not in repr(key)
    assert not hasattr(key, "__dict__")


def _python(code: str) -> str:
    """What ``code`` prints, run in a fresh interpreter (what it imported stays there)."""
    return subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                          text=True, timeout=60).stdout.strip()


def test_the_daemons_never_import_cryptography() -> None:
    """The grant paths of the owner and the guardian and the release check load no
    cryptography (its Rust extension was ~8.5 MiB resident in each of them)."""
    code = ("import sys, owner.service, owner.grants, guardian.coordinator, guardian.keys, "
            "guardian.trust, guardian.seal, protocol.grant\n"
            "from protocol.ed25519 import PrivateKey\n"
            "k = PrivateKey.generate(); assert k.public_key().verify(k.sign(b'm'), b'm')\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('cryptography', 'cffi', '_cffi_backend')))")
    assert _python(code) == "[]"


def test_libcrypto_is_the_one_hashlib_mapped(monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:
    from protocol import ed25519
    assert os.path.basename(ed25519._library_path()).startswith("libcrypto.so")
    # a mapping whose file a package upgrade replaced: found again by its soname
    (tmp_path / "self").mkdir()
    (tmp_path / "self" / "maps").write_text(
        "7f00-7f10 r-xp 00000000 fd:01 42  /usr/lib/libcrypto.so.3 (deleted)\n")
    monkeypatch.setattr("protocol.procfs.PROC", str(tmp_path))
    assert ed25519._library_path() == "libcrypto.so.3"


def test_a_process_hashing_without_openssl_still_signs() -> None:
    """The backend marks _hashlib absent (protocol.startup): Ed25519 then loads libcrypto
    by its soname."""
    code = ("from protocol.startup import use_builtin_hashes\nuse_builtin_hashes()\n"
            "from protocol.ed25519 import PrivateKey\n"
            "k = PrivateKey.generate(); assert k.public_key().verify(k.sign(b'm'), b'm')\n"
            "print('ok')")
    assert _python(code) == "ok"


def test_no_usable_libcrypto_is_a_coded_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from protocol import ed25519
    from protocol.errors import Internal
    monkeypatch.setattr(ed25519, "_lib", None)
    monkeypatch.setattr(ed25519, "_library_path", lambda: "/nonexistent/libcrypto.so.3")
    with pytest.raises(Internal, match=r"libcrypto 1\.1\.1 or later") as e:
        PrivateKey.generate().sign(b"grant")
    assert e.value.code_str == "INTERNAL"
    with pytest.raises(Internal):
        PrivateKey.generate().public_key()
