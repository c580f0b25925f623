"""Trusted release keys: with runtime/trusted-release-keys present the guardian installs
only releases signed by one of them (through the real CLI and guardian)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
)

from protocol.ed25519 import PublicKey
from protocol.grant import public_key_text


def _pinned(key: Ed25519PrivateKey) -> str:
    """The trusted-keys line of a key made by another Ed25519 implementation."""
    return public_key_text(PublicKey(key.public_key().public_bytes_raw()))


def test_only_signed_releases_install_once_keys_are_trusted(cluster, sealed_release):
    # the key and its PEM come from the cryptography package: what tenure signs with the
    # key it reads must verify under the public key another implementation derived
    cluster.up()
    key = Ed25519PrivateKey.generate()
    pem = cluster.home / "release-key.pem"
    pem.write_bytes(key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()))
    os.chmod(pem, 0o600)
    keys = cluster.layout.runtime / "trusted-release-keys"
    keys.write_text("# release signers\n" + _pinned(key) + "\n")
    os.chmod(keys, 0o600)

    unsigned = cluster.cli("release", "install", str(sealed_release))
    assert unsigned.code == 1 and unsigned.out["error"]["code"] == "BAD_SIGNATURE"

    with tempfile.TemporaryDirectory(prefix="tsig", dir="/tmp") as tmp:
        out = Path(tmp) / "signed"
        sealed = cluster.cli("release", "seal", str(out), "--sign-key", str(pem), check=True)
        installed = cluster.cli("release", "install", str(out), check=True).out
    assert installed["release"] == sealed.out["release"]
    assert cluster.cli("release", "verify", installed["release"], check=True).out["ok"]

    other = Ed25519PrivateKey.generate()
    keys.write_text(_pinned(other) + "\n")
    refused = cluster.cli("release", "verify", installed["release"])
    assert refused.code == 1 and refused.out["error"]["code"] == "BAD_SIGNATURE"


def test_a_sign_key_that_is_no_ed25519_key_is_refused_and_seals_nothing(short_home):
    bad = short_home / "key.pem"
    bad.write_text("-----BEGIN PRIVATE KEY-----\nnot base64\n-----END PRIVATE KEY-----\n")
    out = short_home / "sealed"
    for key, says in ((bad, "not base64"), (short_home / "missing.pem", "not readable")):
        r = subprocess.run([sys.executable, "-m", "backend.cli.main", "--home",
                            str(short_home), "--json", "release", "seal", str(out),
                            "--sign-key", str(key)], capture_output=True, text=True,
                           timeout=120)
        err = json.loads(r.stdout)["error"]
        assert r.returncode == 2 and err["code"] == "BAD_REQUEST", r
        assert says in err["msg"] and str(key) in err["msg"]
        assert not out.exists()


def _current(cluster) -> str:
    listed = cluster.cli("release", "list", check=True).out["releases"]
    return next(r["release"] for r in listed if r["current"])


def test_a_release_that_does_not_verify_is_named_with_its_way_out(cluster):
    """`release verify` said only `STATE_CORRUPT: content of lib/x.py does not match
    RUNTIME.json` (no release, nothing to do), and an unsigned one `release is not
    signed` once keys were trusted."""
    cluster.up()
    rid = _current(cluster)
    keys = cluster.layout.runtime / "trusted-release-keys"
    keys.write_text(_pinned(Ed25519PrivateKey.generate()) + "\n")
    os.chmod(keys, 0o600)
    unsigned = cluster.cli("release", "verify", rid)
    err = unsigned.out["error"]
    assert unsigned.code == 1 and err["code"] == "BAD_SIGNATURE", unsigned
    assert err["msg"].startswith(f"release {rid[:12]} does not verify: "), err
    assert "--sign-key KEY.pem" in err["msg"] and "trusted-release-keys" in err["msg"]
    keys.unlink()

    victim = cluster.layout.releases / rid / "lib" / "backend" / "explain.py"
    mode, text = victim.stat().st_mode, victim.read_bytes()
    os.chmod(victim, 0o644)
    victim.write_bytes(text + b"# edited\n")
    try:
        damaged = cluster.cli("release", "verify", rid)
        err = damaged.out["error"]
        assert damaged.code == 1 and err["code"] == "STATE_CORRUPT", damaged
        assert err["msg"] == (f"release {rid[:12]} does not verify: content of "
                              "lib/backend/explain.py does not match RUNTIME.json; its "
                              "installed copy is damaged: `tenure release install` it "
                              "again from its sealed directory, which replaces the copy")
    finally:
        victim.write_bytes(text)
        os.chmod(victim, mode & 0o7777)
