"""A real Prometheus server scrapes a real tenure and answers a query about it: the
scrape config of docs/metrics.md works as written (honor_labels keeps tenure's
``instance`` label) and the rule file there loads."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_metrics_scrape import free_port, scrape

DOCS = Path(__file__).resolve().parents[3] / "docs" / "metrics.md"
CONFIG = """
[metrics]
listen = "127.0.0.1:{port}"

[stacks.p.apps.idle]
command = ["sleep", "1000"]
"""


def _yaml_blocks() -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", DOCS.read_text(), re.S)


def _prometheus() -> str:
    binary = shutil.which("prometheus")
    if binary is None:
        reason = "the prometheus binary (Debian package prometheus) is not installed"
        assert os.environ.get("TENURE_BENCH_PEERS") != "required", reason
        print(f"skipped: {reason}")
        pytest.skip(reason)
    return binary


def _query(port: int, expr: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as r:
        body = json.loads(r.read())
    assert body["status"] == "success", body
    return list(body["data"]["result"])


def test_prometheus_scrapes_tenure_and_answers_a_query(cluster: Any, tmp_path: Path
                                                       ) -> None:
    binary = _prometheus()
    port, prom_port = free_port(), free_port()
    cluster.up(CONFIG.format(port=port))
    cluster.wait_ready(1)
    scrape(port)  # the listener is bound
    scrape_cfg, rules = _yaml_blocks()
    (tmp_path / "rules.yml").write_text(rules)
    cfg = (scrape_cfg.replace("15s", "1s").replace("127.0.0.1:9464", f"127.0.0.1:{port}")
           + "rule_files: [rules.yml]\n")
    (tmp_path / "prometheus.yml").write_text(cfg)
    log = (tmp_path / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [binary, f"--config.file={tmp_path / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{prom_port}"], stdout=log, stderr=log)
    try:
        deadline, got = time.monotonic() + 60, []
        while not got:
            assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "no sample through Prometheus in 60 s"
            time.sleep(0.5)
            try:
                got = _query(prom_port, 'tenure_app_up{stack="p",app="idle"}')
            except OSError:
                continue  # not listening yet
        assert got[0]["metric"]["instance"] == "0"  # tenure's label, kept
        assert got[0]["metric"]["job"] == "tenure" and got[0]["value"][1] == "1"
        assert _query(prom_port, "up")[0]["value"][1] == "1"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()
