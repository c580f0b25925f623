"""Install the peer supervisors into private prefixes under bench/.peers/.

- bench/.peers/py    a venv with supervisor, circus, psutil and matplotlib (PyPI)
- bench/.peers/node  pm2 from the npm registry (`npm install --prefix ... pm2@VERSION`)

Idempotent: a prefix whose recorded versions match the pins is left alone. Needs node
and npm on PATH (`./dev peers` installs them from apt), and exits before installing
anything without them. Writes bench/.peers/versions.json.
Usage: python bench/peers/install.py [--force]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent
PEERS = BENCH / ".peers"
PY_PREFIX = PEERS / "py"
NODE_PREFIX = PEERS / "node"
VERSIONS_FILE = PEERS / "versions.json"

PY_PINS = {"supervisor": "4.3.0", "circus": "0.19.0", "psutil": "7.2.2", "matplotlib": "3.10.7"}
NPM_PINS = {"pm2": "7.0.4"}


def peer_python() -> Path:
    return PY_PREFIX / "bin" / "python"


def pm2_bin() -> Path:
    return NODE_PREFIX / "node_modules" / ".bin" / "pm2"


def headless_env() -> dict[str, str]:
    """Environment for npm/pm2: no update notifier, no funding/audit chatter, no pm2.io agent.

    pm2 7.0.4 has no update check of its own (grep of lib/ for the registry finds none);
    the only thing that phones home is the pm2.io agent, which PM2_NO_INTERACTION skips.
    """
    env = dict(os.environ)
    env.update({
        "NO_UPDATE_NOTIFIER": "1",
        "NPM_CONFIG_UPDATE_NOTIFIER": "false",
        "NPM_CONFIG_FUND": "false",
        "NPM_CONFIG_AUDIT": "false",
        "PM2_NO_INTERACTION": "true",  # never launch the pm2.io (Keymetrics) agent
    })
    return env


def _run(argv: list[str], timeout: float = 600) -> str:
    shown = " ".join(argv)
    print("+", shown if len(shown) < 160 else shown[:157] + "...", flush=True)
    out = subprocess.run(argv, check=True, capture_output=True, text=True,
                         timeout=timeout, env=headless_env())
    return out.stdout


def installed_py_versions() -> dict[str, str]:
    if not peer_python().exists():
        return {}
    code = ("import json, importlib.metadata as m\n"
            f"names = {sorted(PY_PINS)!r}\nout = {{}}\n"
            "for n in names:\n"
            "    try: out[n] = m.version(n)\n"
            "    except m.PackageNotFoundError: pass\n"
            "print(json.dumps(out))")
    try:
        got: dict[str, str] = json.loads(_run([str(peer_python()), "-c", code], timeout=60))
        return got
    except (subprocess.SubprocessError, ValueError):
        return {}


def installed_npm_versions() -> dict[str, str]:
    out = {}
    for name in NPM_PINS:
        pkg = NODE_PREFIX / "node_modules" / name / "package.json"
        if pkg.exists():
            out[name] = json.loads(pkg.read_text())["version"]
    return out


def install_py(force: bool) -> dict[str, str]:
    if not force and installed_py_versions() == PY_PINS:
        print("peers venv up to date:", PY_PREFIX)
        return PY_PINS
    if not peer_python().exists():
        _run([sys.executable, "-m", "venv", str(PY_PREFIX)])
    pins = [f"{k}=={v}" for k, v in PY_PINS.items()]
    _run([str(peer_python()), "-m", "pip", "install", "-q", "--disable-pip-version-check", *pins])
    got = installed_py_versions()
    if got != PY_PINS:
        raise SystemExit(f"peer venv versions {got} != pins {PY_PINS}")
    return got


def install_npm(force: bool) -> dict[str, str]:
    if not force and installed_npm_versions() == NPM_PINS:
        print("pm2 prefix up to date:", NODE_PREFIX)
        return NPM_PINS
    NODE_PREFIX.mkdir(parents=True, exist_ok=True)
    pins = [f"{k}@{v}" for k, v in NPM_PINS.items()]
    _run(["npm", "install", "--no-fund", "--no-audit", "--prefix", str(NODE_PREFIX), *pins])
    got = installed_npm_versions()
    if got != NPM_PINS:
        raise SystemExit(f"npm versions {got} != pins {NPM_PINS}")
    return got


# what each benchmark adapter needs installed; tenure is the checkout itself
PEER_PREFIXES = {"supervisord": install_py, "circus": install_py, "pm2": install_npm}
# pm2 and its query helper run on node; npm installs pm2
NODE_TOOLS = ("node", "npm")


def missing_tools() -> str | None:
    """What to install for pm2 when node or npm is not on PATH, else None."""
    missing = [t for t in NODE_TOOLS if shutil.which(t) is None]
    if not missing:
        return None
    return (f"{' and '.join(missing)} not on PATH: pm2 needs Node.js and npm "
            "(Debian: apt-get install nodejs npm; ./dev bench installs them)")


def ensure_peer(name: str) -> None:
    """Install what the adapter ``name`` needs, if it is not installed yet.

    Raises OSError (e.g. no npm or node), SubprocessError (pip or npm failed) or
    SystemExit (installed versions differ from the pins).
    """
    installer = PEER_PREFIXES.get(name)
    if installer is None:
        return
    if name == "pm2" and (missing := missing_tools()):
        raise FileNotFoundError(missing)
    installer(False)


def tool_versions() -> dict[str, str]:
    node = subprocess.run(["node", "--version"], capture_output=True, text=True, timeout=30)
    npm = subprocess.run(["npm", "--version"], capture_output=True, text=True, timeout=30,
                         env=headless_env())
    return {"node": node.stdout.strip(), "npm": npm.stdout.strip()}


def ensure(force: bool = False) -> dict[str, object]:
    """Install (if needed) and return the recorded versions.

    Exits first, installing nothing, when node or npm is missing: every peer is needed.
    """
    if missing := missing_tools():
        raise SystemExit(f"cannot install the benchmark peers: {missing}")
    record: dict[str, object] = {
        "python": install_py(force),
        "npm": install_npm(force),
        "tools": tool_versions(),
        "commands": {
            "python": f"{peer_python()} -m pip install "
                      + " ".join(f"{k}=={v}" for k, v in PY_PINS.items()),
            "npm": f"npm install --prefix {NODE_PREFIX} "
                   + " ".join(f"{k}@{v}" for k, v in NPM_PINS.items()),
        },
    }
    VERSIONS_FILE.write_text(json.dumps(record, indent=2) + "\n")
    return record


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--force", action="store_true", help="reinstall even when up to date")
    args = ap.parse_args()
    print(json.dumps(ensure(args.force)))


if __name__ == "__main__":
    main()
