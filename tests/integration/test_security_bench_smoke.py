"""The security benches run end to end in quick mode: produce and consume over PLAINTEXT,
SSL, SASL_SSL and SASL_SSL with ACLs on one broker (security_bench.py), and the broker's
TLS layer against asyncio's and OpenSSL's own cost (tls_layer_bench.py).

Only completion and non-zero figures are asserted, never speed.
"""

from __future__ import annotations

from pathlib import Path

from .helpers import run_quick_bench


def test_quick_security_bench_reports_every_listener(tmp_path: Path) -> None:
    report, printed = run_quick_bench(
        "security_bench.py", tmp_path / "security-bench.json", timeout=240
    )
    assert report["mode"] == "quick"
    for kind in ("produce", "consume"):
        for listener in ("PLAINTEXT", "SSL", "SASL_SSL", "SASL_SSL+ACLs"):
            assert report["records_per_s"][f"{kind} {listener}"] > 0, (kind, listener)
    assert all(r > 0 for r in report["ratios_to_plaintext"].values())
    assert report["broker_wakeups_per_1000_records"]["chronik"]["produce SSL"] >= 0
    assert "openssl speed" in printed


def test_quick_tls_layer_bench_reports_each_path(tmp_path: Path) -> None:
    report, _ = run_quick_bench("tls_layer_bench.py", tmp_path / "tls-layer.json", timeout=120)
    for direction in ("read", "write"):
        figures = report["per_100_mb"][direction]
        for path in ("plaintext_ms", "asyncio_ms", "chronik_ms", "openssl_ms"):
            assert figures[path] > 0, (direction, path)
        assert figures["chronik_wakeups"] >= 0
