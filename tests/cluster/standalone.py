"""A real Spark standalone cluster on this machine: master and workers as separate JVMs.

Started with ``spark-class`` from the installed pyspark package, on 127.0.0.1,
small workers. Used by the cluster tests and by ``bench/bench_production.py``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path


class ClusterError(RuntimeError):
    """The cluster could not start; the message carries the JVMs' log tails."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def cluster_env(work: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        SPARK_HOME=str(spark_home()),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOG_DIR=str(work / "logs"),
        SPARK_WORKER_DIR=str(work / "worker"),
        PYSPARK_PYTHON=sys.executable,
        SPARK_NO_DAEMONIZE="1",
    )
    return env


@dataclass
class StandaloneCluster:
    """``start()`` a master and ``workers`` workers; ``stop()`` kills exactly those JVMs."""

    work: Path
    workers: int = 1
    worker_cores: int = 1
    worker_memory: str = "1g"
    start_timeout_s: float = 120.0
    port: int = field(default_factory=free_port)
    ui_port: int = field(default_factory=free_port)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _spawn(self, name: str, args: list[str]) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        log = open(self.work / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        cmd = [str(spark_home() / "bin" / "spark-class"), *args]
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=cluster_env(self.work)
        )
        self.procs.append(proc)

    def start(self) -> StandaloneCluster:
        master = "org.apache.spark.deploy.master.Master"
        self._spawn("master", [master, "--host", "127.0.0.1", "--port", str(self.port),
                               "--webui-port", str(self.ui_port)])  # fmt: skip
        for i in range(self.workers):
            self._spawn(
                f"worker{i}",
                ["org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1",
                 "--cores", str(self.worker_cores), "--memory", self.worker_memory,
                 "--webui-port", str(free_port()), "--work-dir", str(self.work / f"w{i}")],
            )  # fmt: skip
        self._wait_for_workers()
        return self

    def alive_workers(self) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as r:
                state = json.load(r)
        except (OSError, ValueError):
            return 0
        return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")

    def _wait_for_workers(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.alive_workers() >= self.workers:
                return
            dead = [p for p in self.procs if p.poll() is not None]
            if dead:
                break
            time.sleep(1.0)
        self.stop()
        raise ClusterError(
            f"standalone cluster did not start ({self.workers} worker(s) on {self.url} within "
            f"{self.start_timeout_s:.0f} s):\n{self.log_tails()}"
        )

    def log_tails(self, lines: int = 15) -> str:
        out = []
        for log in sorted(self.work.glob("*.log")):
            tail = log.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {log.name}\n" + "\n".join(tail))
        return "\n".join(out)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        self.procs.clear()
