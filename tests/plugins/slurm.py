"""A real single-node Slurm cluster on 127.0.0.1 for the tests (one per pytest worker that asks).

``slurm_cluster`` (session) starts munged, slurmctld and slurmd from Debian's ``slurm-wlm`` and
``munge`` with a generated slurm.conf (forensics.localslurm: proctrack/linuxproc, task/none, one
partition of this machine) and always stops them. ``slurm_env`` (function) points Slurm's
commands at it (``SLURM_CONF``).

Without the binaries or without root the fixtures FAIL with the reason, never skip: CI installs
``slurm-wlm munge`` and runs as root (.ci/run).
"""

from __future__ import annotations

import pytest

from forensics.localslurm import LocalSlurm, SlurmUnavailable, local_slurm


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory) -> LocalSlurm:
    try:
        cluster = local_slurm(tmp_path_factory.mktemp("slurm"))
    except SlurmUnavailable as exc:
        pytest.fail(f"the Slurm tests need a local Slurm cluster: {exc}")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def slurm_env(slurm_cluster, monkeypatch) -> LocalSlurm:
    for key, value in slurm_cluster.env.items():
        monkeypatch.setenv(key, value)
    yield slurm_cluster
