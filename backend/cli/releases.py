"""``tenure release seal|install|list|verify|select|rebind|remove|prune``."""

from __future__ import annotations

import itertools
from pathlib import Path

from protocol.errors import BadRequest, NotFound, TenureError

from .exits import Exit

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the command line a few ms to import
    from typing import Any

__all__ = ["check_options", "cli_against", "release_command", "resolve_release",
           "unverified"]


# what each action takes: any other option given is refused, not ignored (a `remove
# --keep 5` would otherwise remove the one release it names)
_OPTIONS = {"seal": {"arg", "sign_key"}, "install": {"arg"}, "list": set(),
            "verify": {"arg"}, "select": {"arg"}, "rebind": {"digest"},
            "remove": {"arg", "dry_run"}, "prune": {"keep", "dry_run"}}
_FLAGS = {"arg": "a release argument", "sign_key": "--sign-key", "digest": "--digest",
          "keep": "--keep", "dry_run": "--dry-run"}


def check_options(args: Any) -> None:
    """Raises BadRequest (nothing done) for an option ``args.action`` does not take."""
    wrong = [_FLAGS[n] for n in _FLAGS if getattr(args, n, None) is not None
             and getattr(args, n) is not False and n not in _OPTIONS[args.action]]
    if wrong:
        raise BadRequest(f"{', '.join(wrong)}: not taken by `tenure release "
                         f"{args.action}`; nothing was done", {"options": wrong})


def release_command(args: Any, guardian: Any, out: Any) -> int:
    check_options(args)
    if args.action == "seal":
        if not args.arg:
            raise BadRequest("tenure release seal OUT_DIR")
        from guardian.seal import seal
        rel = seal(Path(args.arg).absolute(), signing_key=_signing_key(args.sign_key))
        out(args, {"release": rel.id, "path": str(rel.path)},
            f"sealed release {rel.id}\n  at {rel.path}\n"
            f"install with: tenure release install {rel.path}")
        return Exit.OK
    with guardian(args) as g:
        if args.action == "install":
            if not args.arg:
                raise BadRequest("tenure release install SEALED_DIR")
            r = g.call("release.install", {"path": str(Path(args.arg).absolute())})
            text = install_text(r)
        elif args.action == "list":
            r = g.call("release.list")
            text = list_text(r)
        elif args.action == "rebind":
            r = g.call("release.rebind", {"digest": args.digest} if args.digest else {},
                       timeout=300)
            text = rebind_text(r)
        elif args.action == "remove":
            r = g.call("release.remove", {"release": resolve_release(g, args.arg),
                                          "dry_run": args.dry_run}, timeout=300)
            text = removal_text(r)
        elif args.action == "prune":
            if args.keep is not None and args.keep < 0:
                raise BadRequest(f"--keep {args.keep}: give 0 or more releases to keep",
                                 {"field": "keep"})
            r = g.call("release.prune", {"dry_run": args.dry_run, **(
                {} if args.keep is None else {"keep": args.keep})}, timeout=300)
            text = removal_text(r)
        elif args.action == "verify":
            r = g.call("release.verify", {"release": resolve_release(g, args.arg)})
            text = verify_text(r)
        else:
            r = g.call("release.select", {"release": resolve_release(g, args.arg)})
            text = select_text(r)
    out(args, r, text)
    return Exit.ERROR if r.get("blocked") else Exit.OK


def list_text(r: dict[str, Any]) -> str:
    """One line per entry of runtime/releases: id, status, current/previous marks and,
    for an entry that is not a usable release, why (absent from older guardians)."""
    return "\n".join(f"{x['release']}  {x['status']}"
                     f"{'  current' if x['current'] else ''}"
                     f"{'  previous' if x['previous'] else ''}"
                     f"{'  (' + x['reason'] + ')' if x.get('reason') else ''}"
                     for x in r["releases"]) or "no releases"


def removal_text(r: dict[str, Any]) -> str:
    """What `release remove` or `prune` removed (or, with --dry-run, would remove), and
    what a prune kept with why."""
    from .present import size
    dry = r["dry_run"]
    gone = r["removed"]
    left = sum(1 for x in gone if x["status"] == "incomplete")
    counts = [one if n == 1 else f"{n} {more}" for n, one, more in (
        (len(gone) - left, "1 release", "releases"),
        (left, "1 leftover of an interrupted install or removal",
         "leftovers of interrupted installs or removals"))
        if n]
    what = " and ".join(counts)
    lines = [f"{'would remove' if dry else 'removed'} {what} ({size(r['bytes'])}):"
             if gone else "nothing to remove"]
    lines += [f"  {x['release']}  {size(x['bytes'])}"
              + ("" if x["status"] == "ok" else f"  ({x['status']})") for x in gone]
    if r["kept"]:
        lines.append(f"kept {len(r['kept'])}:")
        lines += [f"  {x['release'][:12]}  {'; '.join(x['why'])}" for x in r["kept"]]
    if dry and gone:
        lines.append("nothing was removed (--dry-run)")
    return "\n".join(lines)


def install_text(r: dict[str, Any]) -> str:
    """An installed release, and what was wrong with the copy it replaced, if any."""
    return f"installed {r['release']}" + (
        f"\n  repaired: the installed copy did not verify ({r['repaired']}); it was "
        "replaced by this verified one" if r.get("repaired") else "")


def verify_text(r: dict[str, Any]) -> str:
    """A verified release, its file count and whether it carries a signature (left out
    when the guardian does not say)."""
    signed = r.get("signed")
    sig = "" if signed is None else ", signed" if signed else ", unsigned"
    return f"{r['release']}: ok ({r['files']} files{sig})"


def select_text(r: dict[str, Any]) -> str:
    """What `release select` did: selected, checked (when it changes the release),
    started, or why not and what to run next."""
    lines = [f"selected {r['selected']}"]
    if r.get("checked"):
        pre = r["checked"].get("preflight") or {}
        lines.append(f"  checked: contracts, preflight ({pre.get('elapsed')} s), formats on "
                     "disk")
    started, blocked = r.get("started"), r.get("blocked")
    if started is False:
        lines.append("  its backend runs already")
    elif started:
        lines.append(f"  started: activation {started['id']} {started['kind']}: "
                     f"{started['phase']} ({started['outcome']})")
    elif blocked:
        lines.append(f"  not started: recovery blocked: {blocked.get('reason')}; "
                     "`tenure backend recover --dry-run` shows what a forced recovery "
                     "would adopt")
    return "\n".join(lines)


def rebind_text(r: dict[str, Any]) -> str:
    """The rebind plan (or what was bound) for people."""
    if not r["interpreters"]:
        return "every release runs under the interpreter it was sealed or bound with"
    out = []
    for i in r["interpreters"]:
        now = i["now"]
        out.append(f"interpreter {i['path']}" + ("" if now is None else
                   f"\n  now: Python {now['version']} ({now['abi']}), sha256 "
                   f"{now['sha256'][:16]}…, standard library {now['files']} files "
                   f"(digest {now['stdlib'][:16]}…)"))
        label = "runs again" if r["bound"] else "would run again"
        out += [f"  {label}: {rid}" for rid in i["releases"]]
        out += [f"  cannot help {x['release']}: {x['reason']}" for x in i["refused"]]
    if r["bound"]:
        out.append("bound (runtime/interpreters.json)")
    elif any(i["releases"] for i in r["interpreters"]):
        out.append(f"review the above, then: tenure release rebind --digest {r['digest']}")
    return "\n".join(out)


def resolve_release(guardian: Any, arg: str | None, install: bool = False) -> str:
    """The release id ``arg`` names: a full id (whatever its status, so that verifying a
    corrupt one says why), a unique prefix of an installed one (at least 8 characters;
    the temporary directory of an install and an entry not named by a release id never
    match), or, with ``install``, a sealed release directory, which is installed first
    (an already installed one answers with its id). Raises BadRequest or NotFound."""
    if not arg:
        raise BadRequest("give a release id (see `tenure release list`)")
    if install and ("/" in arg or arg in (".", "..")) and Path(arg).is_dir():
        r = guardian.call("release.install", {"path": str(Path(arg).absolute())},
                          timeout=300)
        return str(r["release"])
    if install and "/" in arg:
        raise NotFound(f"{arg} is not a directory (a sealed release directory was meant, "
                       "or a release id: see `tenure release list`)", {"path": arg})
    hexdigits = all(c in "0123456789abcdef" for c in arg)
    if len(arg) == 64 and hexdigits:
        return arg
    if len(arg) < 8 or len(arg) > 64 or not hexdigits:
        raise BadRequest(f"{arg!r} is not a release id or a prefix of one (8 or more hex "
                         "characters)" + ("; a sealed directory needs a path such as "
                                          f"./{arg}" if install else ""))
    # only releases: not the <id>.tmp-* directory of an install in progress or
    # interrupted, nor an entry whose name is no release id (it cannot be verified)
    found = [x["release"] for x in guardian.call("release.list")["releases"]
             if x["release"].startswith(arg) and _is_release_id(x["release"])
             and x.get("status") not in ("incomplete", "missing")]
    if len(found) != 1:
        raise (NotFound if not found else BadRequest)(
            f"{len(found)} installed releases start with {arg!r}"
            + (": give more characters" if found else " (see `tenure release list`)"),
            {"prefix": arg, "matches": found})
    return str(found[0])


def _is_release_id(name: str) -> bool:
    """Whether ``name`` has the form of a release id (64 lowercase hex digits)."""
    return len(name) == 64 and all(c in "0123456789abcdef" for c in name)


def _signing_key(path: Path | None) -> Any:
    """The Ed25519 private key in ``path`` (PEM), or None. Raises BadRequest."""
    if path is None:
        return None
    from protocol.ed25519 import PrivateKey
    try:
        return PrivateKey.from_pem(path.read_bytes())
    except OSError as exc:
        raise BadRequest(f"{path}: not readable ({exc.strerror})") from None
    except ValueError as exc:
        raise BadRequest(f"{path}: {exc}") from None


def cli_against(layout: Any, release: str | None) -> dict[str, Any]:
    """This CLI's tenure version beside the one of ``release`` (the backend's), and
    whether this CLI is older: ``{version, backend_version, older}``. Reads the release's
    RUNTIME.json through the strict reader (never runs the release); a missing or
    unreadable one gives ``backend_version`` None."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        mine: str | None = version("tenure")
    except PackageNotFoundError:
        mine = None
    theirs = None
    if release is not None:
        from guardian.manifest import RUNTIME_NAME, parse_runtime
        from protocol.durable import read_private
        try:
            theirs = parse_runtime(read_private(layout.releases / release / RUNTIME_NAME)
                                   ).tenure_version
        except (OSError, TenureError):
            theirs = None
    older = mine is not None and isinstance(theirs, str) and \
        _version_key(mine) < _version_key(theirs)
    return {"version": mine, "backend_version": theirs, "older": older}


def _version_key(v: str) -> tuple[int, ...]:
    """The leading numeric release segments of a version (``0.2.0rc1`` → (0, 2, 0))."""
    out = []
    for part in v.split("."):
        digits = "".join(itertools.takewhile(str.isdigit, part))
        if not digits:
            break
        out.append(int(digits))
        if digits != part:
            break
    return tuple(out)


def unverified(exc: TenureError) -> TenureError:
    """``exc`` said with the release it is about and the way out, when it says an
    installed release does not verify: a file of its copy differs or is missing
    (STATE_CORRUPT naming the file: installing it again from its sealed directory mends
    the copy), or it is unsigned or badly signed while trusted release keys are set
    (BAD_SIGNATURE naming the signature file). The guardian says only what failed
    (`content of lib/x.py does not match RUNTIME.json`), which names no release; one
    that says more already (the rollback target's) is left as it is."""
    rid = exc.data.get("release")
    file = exc.data.get("file")
    if not isinstance(rid, str) or not isinstance(file, str) or \
            "rollback_target" in exc.data or exc.msg.startswith("release ") or \
            exc.data.get("problem") == "interpreter":   # installing it again cannot help
        return exc
    if exc.code_str == "BAD_SIGNATURE":
        then = ("trusted release keys are set (runtime/trusted-release-keys), so only a "
                "release signed by one of them runs: seal the same tree with `tenure "
                "release seal OUT --sign-key KEY.pem` and `tenure release install OUT` "
                "(the same id: the installed copy gets its signature), or take the key "
                "out of that file (docs/releases.md, \"Requiring signed releases\")")
    elif exc.code_str == "STATE_CORRUPT":
        then = ("its installed copy is damaged: `tenure release install` it again from "
                "its sealed directory, which replaces the copy")
    else:
        return exc
    exc.msg = f"release {rid[:12]} does not verify: {exc.msg}; {then}"
    return exc
