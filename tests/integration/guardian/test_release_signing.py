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
