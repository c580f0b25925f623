"""Line helper run by the peers venv: JSON requests on stdin -> circus replies on stdout.

Request ``{"list": [names]}`` answers ``{name: [pids]}``; any other object is sent to
circusd verbatim (``{"command": ..., "properties": ...}``) and its reply printed.
Usage: python _circus_client.py ENDPOINT
"""

import json
import sys

from circus.client import CircusClient


def main() -> None:
    client = CircusClient(endpoint=sys.argv[1], timeout=5)
    for line in sys.stdin:
        req = json.loads(line)
        try:
            if "list" in req:
                out = {}
                for name in req["list"]:
                    res = client.call({"command": "list", "properties": {"name": name}})
                    out[name] = res.get("pids", []) if res.get("status") == "ok" else []
            else:
                out = client.call(req)
        except Exception as exc:  # report every failure to the driver
            out = {"error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
