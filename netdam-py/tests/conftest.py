"""Fixtures of the netdam module's tests: a namespace testbed of 3 hosts
(``netdam-lab testbed up``), each serving NetDAM (``netdam serve`` in its
namespace), torn down after the tests, also when they fail; and functions run
inside a host's network namespace (``nsenter --net``: Python 3.11 has no
os.setns), their results and exceptions brought back with pickle.

Needs root, the release build of netdam and netdam-lab ($NETDAM_BIN,
$NETDAM_LAB_BIN, set by ``cargo xtask test``) and the netdam module
installed in this Python (``cargo xtask test`` does both).
"""

import os
import pathlib
import pickle
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
NETDAM = pathlib.Path(os.environ.get("NETDAM_BIN", ROOT / "target/release/netdam"))
NETDAM_LAB = pathlib.Path(os.environ.get("NETDAM_LAB_BIN", NETDAM.with_name("netdam-lab")))
TESTS = pathlib.Path(__file__).resolve().parent

NODES = 3
RKEY = 0x1234
MEM_SIZE = "16MiB"
# The whole memory is region RKEY, with READ, WRITE, ATOMIC and MSG.
REGION = f"{RKEY:#x}:0:{MEM_SIZE}:rwam"
MTU = 1500
# NetDAM's operators as numpy computes them: the expected results.
NUMPY_OPS = {
    "sum": np.add,
    "min": np.minimum,
    "max": np.maximum,
    "band": np.bitwise_and,
    "bor": np.bitwise_or,
    "bxor": np.bitwise_xor,
}

# Runs (function, args) from stdin in this namespace; pickles ("ok", result)
# or ("raised", exception, traceback) to the real stdout (the function's
# prints go to stderr).
RUNNER = r"""
import pickle, sys, traceback
out = sys.stdout.buffer
sys.stdout = sys.stderr
fn, args = pickle.load(sys.stdin.buffer)
try:
    result = ("ok", fn(*args))
except BaseException as e:
    result = ("raised", e, traceback.format_exc())
try:
    data = pickle.dumps(result)
except Exception:
    data = pickle.dumps(("raised", RuntimeError(result[-1] if result[0] == "raised" else "unpicklable result"), ""))
out.write(data)
out.flush()
"""


@dataclass
class Host:
    index: int
    netns: str
    ip: str
    pin_dir: str


class Running:
    """A function running in a host's namespace; ``result()`` waits for it."""

    def __init__(self, host, fn, args):
        self.host = host
        self.proc = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{host.netns}", sys.executable, "-c", RUNNER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(TESTS)},
        )
        self.name = f"{fn.__name__} in {host.netns}"
        # The runner reads all of it before it starts; `result` reads the rest.
        self.proc.stdin.write(pickle.dumps((fn, args)))
        self.proc.stdin.close()
        self.proc.stdin = None

    def result(self, timeout=180):
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
            raise AssertionError(f"{self.name} did not finish within {timeout} s:\n{err.decode(errors='replace')}")
        if not out:
            raise AssertionError(
                f"{self.name} exited with {self.proc.returncode} and no result:\n{err.decode(errors='replace')}"
            )
        kind, *rest = pickle.loads(out)
        if kind == "ok":
            return rest[0]
        exc, tb = rest
        exc.add_note(f"raised {self.name}:\n{tb}")
        raise exc


class Testbed:
    def __init__(self, prefix, hosts):
        self.prefix = prefix
        self.hosts = hosts

    def start(self, i, fn, *args):
        """Starts ``fn(*args)`` in host ``i``'s network namespace (``fn`` a
        module-level function of a test module)."""
        return Running(self.hosts[i], fn, args)

    def run(self, i, fn, *args, timeout=180):
        """``fn(*args)`` in host ``i``'s namespace: its result, or its exception raised here."""
        return self.start(i, fn, *args).result(timeout)


def _check(args, **kw):
    out = subprocess.run(args, capture_output=True, text=True, **kw)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, args))} failed ({out.returncode}):\n{out.stdout}{out.stderr}")
    return out.stdout


class Served:
    """``netdam serve`` in a host, ready once it logged that it serves;
    ``peers`` (the group's members) may send it CHAIN hops."""

    def __init__(self, host, peers):
        env = {k: v for k, v in os.environ.items() if k != "RUST_LOG"}
        args = ["nsenter", f"--net=/run/netns/{host.netns}", str(NETDAM), "serve", "--iface", "eth0"]
        args += ["--pin-dir", host.pin_dir, "--mem-size", MEM_SIZE, "--region", REGION, "--mode", "native"]
        for p in peers:
            args += ["--peer", p]
        self.proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env
        )
        self.log = []
        ready = threading.Event()

        def read():
            for line in self.proc.stderr:
                self.log.append(line)
                if "serving NetDAM on" in line:
                    ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(30):
            self.stop()
            raise RuntimeError(f"netdam serve in {host.netns} did not start:\n{''.join(self.log)}")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="session")
def testbed():
    """3 hosts, 198.18.0.1 to .3, each serving 16 MiB of NetDAM memory as
    region RKEY with the others as peers (the ring's CHAIN hops need them);
    removed after the session, whatever happened."""
    if os.geteuid() != 0:
        pytest.fail("these tests make network namespaces and load XDP programs: run them as root (cargo xtask test)")
    for binary in (NETDAM, NETDAM_LAB):
        if not binary.exists():
            pytest.fail(f"{binary} is missing: build it with `cargo xtask build` (or run `cargo xtask test`)")
    prefix = f"py{os.getpid() % 100000}a"
    pins = pathlib.Path(f"/sys/fs/bpf/netdam-pytest-{prefix}")
    hosts = [
        Host(i, f"{prefix}{i}", f"198.18.0.{i + 1}", str(pins / f"{prefix}{i}")) for i in range(NODES)
    ]
    served = []
    try:
        _check([NETDAM_LAB, "testbed", "up", "--nodes", str(NODES), "--prefix", prefix, "--mtu", str(MTU)])
        for h in hosts:
            served.append(Served(h, [p.ip for p in hosts]))
        yield Testbed(prefix, hosts)
    finally:
        for s in served:
            s.stop()
        for h in hosts:
            if pathlib.Path(h.pin_dir).exists():
                subprocess.run([NETDAM, "unpin", "--pin-dir", h.pin_dir], capture_output=True)
        shutil.rmtree(pins, ignore_errors=True)
        _check([NETDAM_LAB, "testbed", "down", "--prefix", prefix])


@pytest.fixture
def empty_pin_dir(tmp_path):
    """A directory where no node pinned anything."""
    return str(tmp_path)
