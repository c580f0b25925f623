"""Ed25519 keys and signatures, computed by the OpenSSL libcrypto that hashlib already maps.

Why not the ``cryptography`` package: its Rust extension keeps ~8.5 MiB resident in
every process that imports it — the owner (which verifies grants) and the guardian
(which signs them) — and it was half the bytes of a sealed release, which every daemon
start hashes. libcrypto (OpenSSL 1.1.1 or later) is loaded in each tenure process anyway
by hashlib, and it implements Ed25519 (RFC 8032) in full; this module is a thin binding
of seven of its functions through ctypes. Nothing cryptographic is computed here.

Keys are 32 raw bytes: the private key is the RFC 8032 seed, the public key the encoded
point. :meth:`PrivateKey.to_pem` / :meth:`PrivateKey.from_pem` read and write the PKCS#8
form of RFC 8410 that ``openssl genpkey -algorithm ed25519`` writes. A private key's
``repr`` never shows it.
"""

from __future__ import annotations

import base64
import binascii
import ctypes
import os
from typing import Any

from .errors import Internal
from .procfs import mapped_files

__all__ = ["KEY_SIZE", "SIGNATURE_SIZE", "PrivateKey", "PublicKey"]

KEY_SIZE = 32
SIGNATURE_SIZE = 64
_EVP_PKEY_ED25519 = 1087  # NID_ED25519 in every OpenSSL since 1.1.1
_MIN_OPENSSL = 0x10101000  # 1.1.1: the first with raw Ed25519 keys and one-shot sign
# RFC 8410 section 7: SEQUENCE { INTEGER 0, SEQUENCE { OID 1.3.101.112 },
# OCTET STRING { OCTET STRING (32 bytes) } } — PKCS#8 version 1 without attributes.
_PKCS8_PREFIX = bytes.fromhex("302e020100300506032b657004220420")
_PEM_BEGIN, _PEM_END = b"-----BEGIN PRIVATE KEY-----", b"-----END PRIVATE KEY-----"

_lib: Any = None


def _library_path() -> str:
    """The libcrypto this interpreter's hashlib mapped (one copy in the process), else
    the soname OpenSSL 3 installs (also when the mapped file was replaced on disk since,
    by a package upgrade: the loader then finds the mapped copy by that soname, and in a
    process whose hashlib does without OpenSSL)."""
    try:
        import _hashlib  # noqa: F401  (maps libcrypto)
    except ImportError:  # a process that hashes without OpenSSL (protocol.startup)
        return "libcrypto.so.3"
    for path in mapped_files() or ():
        if os.path.basename(path).startswith("libcrypto.so") and \
                not path.endswith(" (deleted)"):
            return path
    return "libcrypto.so.3"


def _declare(lib: Any) -> Any:
    vp, sz = ctypes.c_void_p, ctypes.c_size_t
    table: dict[str, tuple[Any, list[Any]]] = {
        "OpenSSL_version_num": (ctypes.c_ulong, []),
        "EVP_PKEY_new_raw_private_key": (vp, [ctypes.c_int, vp, ctypes.c_char_p, sz]),
        "EVP_PKEY_new_raw_public_key": (vp, [ctypes.c_int, vp, ctypes.c_char_p, sz]),
        "EVP_PKEY_get_raw_public_key": (ctypes.c_int, [vp, ctypes.c_char_p,
                                                       ctypes.POINTER(sz)]),
        "EVP_PKEY_free": (None, [vp]),
        "EVP_MD_CTX_new": (vp, []),
        "EVP_MD_CTX_free": (None, [vp]),
        "EVP_DigestSignInit": (ctypes.c_int, [vp, vp, vp, vp, vp]),
        "EVP_DigestSign": (ctypes.c_int, [vp, ctypes.c_char_p, ctypes.POINTER(sz),
                                          ctypes.c_char_p, sz]),
        "EVP_DigestVerifyInit": (ctypes.c_int, [vp, vp, vp, vp, vp]),
        "EVP_DigestVerify": (ctypes.c_int, [vp, ctypes.c_char_p, sz, ctypes.c_char_p, sz]),
        "ERR_clear_error": (None, []),
    }
    for name, (restype, argtypes) in table.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    return lib


def _crypto() -> Any:
    """The bound libcrypto, loaded on first use. Raises Internal when there is none with
    Ed25519 (OpenSSL older than 1.1.1, or a Python built without OpenSSL)."""
    global _lib
    if _lib is None:
        try:
            lib = _declare(ctypes.CDLL(_library_path()))
        except (OSError, AttributeError, ImportError) as e:
            raise Internal(f"Ed25519 needs OpenSSL's libcrypto 1.1.1 or later: {e}") from None
        if lib.OpenSSL_version_num() < _MIN_OPENSSL:
            raise Internal("Ed25519 needs OpenSSL's libcrypto 1.1.1 or later",
                           {"version": hex(lib.OpenSSL_version_num())})
        _lib = lib
    return _lib


def _pkey(private: bool, raw: bytes) -> int:
    lib = _crypto()
    make = lib.EVP_PKEY_new_raw_private_key if private else lib.EVP_PKEY_new_raw_public_key
    pkey: int | None = make(_EVP_PKEY_ED25519, None, raw, len(raw))
    if not pkey:
        lib.ERR_clear_error()
        raise ValueError("libcrypto refused the Ed25519 key")
    return pkey


def _with_ctx(private: bool, raw: bytes, use: Any) -> Any:
    """``use(lib, ctx)`` on a digest context initialised for ``raw``'s key; both freed."""
    lib = _crypto()
    pkey = _pkey(private, raw)
    ctx = lib.EVP_MD_CTX_new()
    try:
        if not ctx:
            raise MemoryError("EVP_MD_CTX_new")
        init = lib.EVP_DigestSignInit if private else lib.EVP_DigestVerifyInit
        if init(ctx, None, None, None, pkey) != 1:
            lib.ERR_clear_error()
            raise ValueError("libcrypto could not initialise Ed25519")
        return use(lib, ctx)
    finally:
        lib.EVP_MD_CTX_free(ctx)
        lib.EVP_PKEY_free(pkey)


def _filled(lib: Any, size: int, what: str, fill: Any) -> bytes:
    """The ``size`` bytes ``fill(buffer, byref(length))`` writes; it must answer 1 and
    set the length to exactly ``size``. Raises Internal otherwise."""
    out, length = ctypes.create_string_buffer(size), ctypes.c_size_t(size)
    if fill(out, ctypes.byref(length)) != 1 or length.value != size:
        lib.ERR_clear_error()
        raise Internal(f"libcrypto failed to {what}")
    return out.raw


def _check_size(raw: bytes, what: str) -> bytes:
    if not isinstance(raw, bytes) or len(raw) != KEY_SIZE:
        raise ValueError(f"an Ed25519 {what} key is {KEY_SIZE} bytes")
    return raw


class PublicKey:
    """An Ed25519 public key (32 raw bytes)."""

    __slots__ = ("raw",)

    def __init__(self, raw: bytes) -> None:
        """Raises ValueError for anything but 32 bytes."""
        self.raw = _check_size(raw, "public")

    def verify(self, signature: bytes, data: bytes) -> bool:
        """Whether ``signature`` is this key's over ``data``; a malformed signature or a
        key that is no point of the curve is simply False."""
        if len(signature) != SIGNATURE_SIZE:
            return False

        def check(lib: Any, ctx: int) -> bool:
            ok = lib.EVP_DigestVerify(ctx, signature, len(signature), data, len(data))
            if ok != 1:
                lib.ERR_clear_error()
            return bool(ok == 1)
        try:
            return bool(_with_ctx(False, self.raw, check))
        except ValueError:
            return False

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PublicKey) and other.raw == self.raw

    def __hash__(self) -> int:
        return hash(self.raw)

    def __repr__(self) -> str:
        return f"PublicKey({base64.b64encode(self.raw).decode()})"


class PrivateKey:
    """An Ed25519 private key (the 32-byte seed). Its repr never shows the seed."""

    __slots__ = ("_seed",)

    def __init__(self, seed: bytes) -> None:
        """Raises ValueError for anything but 32 bytes."""
        self._seed = _check_size(seed, "private")

    @classmethod
    def generate(cls) -> PrivateKey:
        """A new key from the kernel's random source (any 32 bytes are a valid seed)."""
        return cls(os.urandom(KEY_SIZE))

    def sign(self, data: bytes) -> bytes:
        """The 64-byte signature of ``data`` (deterministic, RFC 8032)."""
        sig: bytes = _with_ctx(True, self._seed, lambda lib, ctx: _filled(
            lib, SIGNATURE_SIZE, "sign",
            lambda out, size: lib.EVP_DigestSign(ctx, out, size, data, len(data))))
        return sig

    def public_key(self) -> PublicKey:
        lib = _crypto()
        pkey = _pkey(True, self._seed)
        try:
            return PublicKey(_filled(lib, KEY_SIZE, "derive the public key",
                                     lambda out, size: lib.EVP_PKEY_get_raw_public_key(
                                         pkey, out, size)))
        finally:
            lib.EVP_PKEY_free(pkey)

    def to_pem(self) -> bytes:
        """PKCS#8 (RFC 8410) PEM, unencrypted: keep the file private."""
        body = base64.b64encode(_PKCS8_PREFIX + self._seed)
        return _PEM_BEGIN + b"\n" + body + b"\n" + _PEM_END + b"\n"

    @classmethod
    def from_pem(cls, data: bytes) -> PrivateKey:
        """Parse :meth:`to_pem` output, or what ``openssl genpkey -algorithm ed25519``
        writes. Raises ValueError for anything else: another algorithm, an encrypted
        key, extra attributes, trailing bytes."""
        text = data.strip()
        if not (text.startswith(_PEM_BEGIN) and text.endswith(_PEM_END)):
            raise ValueError("not an unencrypted PKCS#8 PEM private key")
        body = b"".join(text[len(_PEM_BEGIN):-len(_PEM_END)].split())
        try:
            der = base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("the PEM body is not base64") from None
        if len(der) != len(_PKCS8_PREFIX) + KEY_SIZE or not der.startswith(_PKCS8_PREFIX):
            raise ValueError("not an Ed25519 private key (PKCS#8, RFC 8410)")
        return cls(der[len(_PKCS8_PREFIX):])

    def __repr__(self) -> str:
        return "PrivateKey(<hidden>)"
