"""Child processes for the tests.

Every child is started from an explicit multiprocessing context (fork,
forkserver or spawn), is daemonic, talks to the test over a pipe, and is never
waited on without a timeout.  A worker is a module-level function (so that
spawn and forkserver can pickle it) called as fn(conn, *args): it may send and
receive messages on conn while it runs; what it returns is sent back last, and
an exception it raises is sent back as its traceback, so that the test fails
with the child's own message.

run_python() runs a fresh interpreter (sys.executable) on a piece of code, for
what must start from an empty interpreter (import orders) or may hang when the
module is wrong (the GIL test): a hang there is a timeout, not a stuck suite.
"""
import multiprocessing
import os
import signal
import subprocess
import sys
import traceback

import pdshm

TIMEOUT = 30.0
METHODS = ("fork", "forkserver", "spawn")
TESTS_DIR = os.path.dirname(os.path.abspath(__file__))


def _bootstrap(conn, fn, args):
    try:
        result = fn(conn, *args)
    except BaseException:
        conn.send(("error", traceback.format_exc()))
    else:
        conn.send(("done", result))
    finally:
        conn.close()


class Child:
    """One child process running fn(conn, *args), and our end of its pipe."""

    def __init__(self, method, fn, *args):
        ctx = multiprocessing.get_context(method)
        self.conn, theirs = ctx.Pipe()
        self.proc = ctx.Process(target=_bootstrap, args=(theirs, fn, args), daemon=True)
        self.proc.start()
        theirs.close()

    @property
    def pid(self):
        return self.proc.pid

    def recv(self, timeout=TIMEOUT):
        """The child's next message; its traceback as an AssertionError if it failed."""
        if not self.conn.poll(timeout):
            raise AssertionError(f"child {self.pid} sent nothing within {timeout} s")
        try:
            msg = self.conn.recv()
        except EOFError:
            self.proc.join(TIMEOUT)
            raise AssertionError(f"child {self.pid} died (exit code {self.proc.exitcode})")
        if isinstance(msg, tuple) and len(msg) == 2 and msg[0] == "error":
            raise AssertionError(f"child {self.pid} failed:\n{msg[1]}")
        return msg

    def expect(self, what, timeout=TIMEOUT):
        msg = self.recv(timeout)
        assert msg == what, f"child {self.pid} sent {msg!r}, expected {what!r}"

    def send(self, msg):
        self.conn.send(msg)

    def result(self, timeout=TIMEOUT):
        """Waits for the worker to return; its return value."""
        msg = self.recv(timeout)
        assert isinstance(msg, tuple) and msg[0] == "done", f"child {self.pid} sent {msg!r}"
        self.join(timeout)
        assert self.proc.exitcode == 0, f"child {self.pid} exited with {self.proc.exitcode}"
        return msg[1]

    def join(self, timeout=TIMEOUT):
        self.proc.join(timeout)
        if self.proc.is_alive():
            self.kill()
            raise AssertionError(f"child {self.pid} did not exit within {timeout} s")

    def kill(self):
        """SIGKILL, and waits until it is gone."""
        if self.proc.is_alive():
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.join(TIMEOUT)
        assert not self.proc.is_alive(), f"child {self.pid} survived SIGKILL"


def child_env():
    """The environment of a fresh interpreter that imports this pdshm and these helpers."""
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(pdshm.__file__)))
    paths = [pkg_root, TESTS_DIR] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def run_python(code, timeout=60.0):
    """Runs code in a fresh sys.executable; its stdout.  Fails on a non-zero exit or a hang."""
    try:
        done = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"fresh interpreter still running after {timeout} s:\n"
                             f"stdout: {e.stdout}\nstderr: {e.stderr}") from None
    assert done.returncode == 0, (f"fresh interpreter exited with {done.returncode}:\n"
                                  f"stdout: {done.stdout}\nstderr: {done.stderr}")
    return done.stdout
