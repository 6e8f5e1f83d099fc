"""Issue 32: the audit's Dask LocalCluster listens on the loopback interface only (its
scheduler talks in process; the dashboard and the workers' HTTP servers bind 127.0.0.1)."""

from __future__ import annotations

import ipaddress

import onnx
import pytest
from zoo_helpers import conv_bn

import onnx_lab
from onnx_lab.zoo._engine import local_cluster

distributed = pytest.importorskip("distributed")
psutil = pytest.importorskip("psutil")


def _listening() -> set[tuple[str, int]]:
    return {(c.laddr.ip, c.laddr.port) for c in psutil.Process().net_connections("inet")
            if c.status == psutil.CONN_LISTEN}


def test_the_local_cluster_listens_on_loopback_only():
    before = _listening()
    with local_cluster(2) as cluster:
        opened = _listening() - before
        assert cluster.scheduler_address.startswith("inproc://")
        assert opened, "the cluster's HTTP servers listen somewhere"
        wide = [a for a in opened if not ipaddress.ip_address(a[0]).is_loopback]
        assert not wide, f"listening beyond loopback: {wide}"
    assert not (_listening() - before)


def test_the_default_local_cluster_would_listen_everywhere():
    """Why local_cluster passes addresses: distributed's defaults bind every interface
    (``dashboard_address=None`` included)."""
    before = _listening()
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None):
        opened = _listening() - before
    assert any(not ipaddress.ip_address(ip).is_loopback for ip, _ in opened)


@pytest.mark.slow  # a local dask cluster and an audit in child processes
def test_an_audit_on_the_dask_engine_still_works(tmp_path):
    onnx.save(conv_bn(0), tmp_path / "a.onnx")
    res = onnx_lab.audit(tmp_path / "a.onnx", None, engine="dask", workers=1, budget_s=0.2,
                         timeout_s=120)
    assert res.table.status.tolist() == ["ok"]
