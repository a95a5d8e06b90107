"""The torch.distributed backend "pdshm" (pdshm.distributed), in jobs of 2
and 3 processes started as torchrun starts them (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT in the environment): every collective, dtype and
op against what each rank computes locally from every rank's seeded input,
the results' bits equal on every rank, async ops, subgroups, DDP equal to
full-batch training in one process; a SIGKILLed rank raises in every
survivor; the job's segment is never left in /dev/shm."""
import glob
import json
import os
import shutil
import socket
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed")

from procutil import TESTS_DIR, child_env  # noqa: E402

JOB_TIMEOUT = 240.0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_job(scenario, n, extra_env=None, port=None):
    """Starts n ranks of dist_workers.py SCENARIO; [(returncode, stdout, stderr)] by rank."""
    port = port or free_port()
    procs = []
    for rank in range(n):
        env = child_env()
        env.update(RANK=str(rank), WORLD_SIZE=str(n), LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   PDSHM_TORCH_SEGMENT_SIZE="16M", OMP_NUM_THREADS="1")
        env.update(extra_env or {})
        procs.append(subprocess.Popen([sys.executable, os.path.join(TESTS_DIR, "dist_workers.py"),
                                       scenario], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    out = []
    try:
        for p in procs:
            stdout, stderr = p.communicate(timeout=JOB_TIMEOUT)
            out.append((p.returncode, stdout, stderr))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return out


def reports(rc_out_err):
    rc, out, err = rc_out_err
    assert rc == 0, f"rank exited with {rc}:\n{out}\n{err}"
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def last_reports(results):
    """Each rank's last report; when some failed, every failed rank's output."""
    failed = [f"rank {r} exited with {rc}:\n{err[-3000:]}"
              for r, (rc, _, err) in enumerate(results) if rc != 0]
    assert not failed, "\n".join(failed)
    return [reports(res)[-1] for res in results]


@pytest.mark.parametrize("n,init", [(2, "tcp"), (3, "env")])
def test_collectives_dtypes_ops_async_subgroups_ddp(n, init):
    ranks = last_reports(run_job("collectives", n, {"PDSHM_TEST_INIT": init}))
    assert [r["rank"] for r in ranks] == list(range(n))
    assert all(len(r["digests"]) >= 60 for r in ranks)
    for case in set().union(*(r["digests"] for r in ranks)):  # subgroups: their members'
        bits = {r["digests"][case] for r in ranks if case in r["digests"]}
        assert len(bits) == 1, f"{case}: the results' bits differ between ranks"
    assert not os.path.exists(f"/dev/shm/pdshm.{ranks[0]['segment']}")


def test_simulated_hosts_reduce_through_a_segment_each_and_gloo():
    n = 4
    ranks = last_reports(run_job("hosts", n, {"LOCAL_WORLD_SIZE": "2"}))
    assert len({r["segment"] for r in ranks}) == 2  # one per host
    for case in set().union(*(r["digests"] for r in ranks)):
        bits = {r["digests"][case] for r in ranks if case in r["digests"]}
        assert len(bits) == 1, f"{case}: the results' bits differ between ranks"
    for r in ranks:
        assert not os.path.exists(f"/dev/shm/pdshm.{r['segment']}")


def test_killed_rank_raises_in_every_survivor():
    n = 3
    results = run_job("kill", n)
    rc, out, err = results[n - 1]
    assert rc == -9, f"the victim exited with {rc}:\n{err}"
    segment = json.loads(out.splitlines()[0])["segment"]
    for res in results[:n - 1]:
        r = reports(res)[-1]
        # DDP's backward: C++ in between keeps the message, not the class
        assert r["runtime"] and "PeerDiedError" in r["message"], r
        assert r["next_runtime"] and r["next_peerdied"], r
        assert r["step"] == 3, r
        print(f"rank {r['rank']}: {r['type']} {r['latency_ms']:.1f} ms after the SIGKILL")
    assert not os.path.exists(f"/dev/shm/pdshm.{segment}")


def test_killed_rank_raises_peer_died_in_the_pending_all_reduce():
    results = run_job("kill_plain", 2)
    assert results[1][0] == -9, f"the victim exited with {results[1][0]}:\n{results[1][2]}"
    r = reports(results[0])[-1]
    assert r["runtime"] and r["peerdied"] and r["step"] == 3, r
    print(f"rank 0: PeerDiedError {r['latency_ms']:.1f} ms after the SIGKILL")
    assert not os.path.exists(f"/dev/shm/pdshm.{r['segment']}")


def test_killed_rank_fails_every_pending_async_work():
    results = run_job("kill_async", 2)
    assert results[1][0] == -9, f"the victim exited with {results[1][0]}:\n{results[1][2]}"
    r = reports(results[0])[-1]
    assert r["errors"] == [[True, True]] * 3, r  # each wait() raised a PeerDiedError
    assert r["completed"] == [True] * 3, r
    assert r["future"] is not None and "PeerDiedError" in r["future"], r
    assert not os.path.exists(f"/dev/shm/pdshm.{r['segment']}")


def test_rank_that_exits_normally_is_peer_died_for_the_others():
    r = last_reports(run_job("exit", 3))
    for survivor in r[:2]:
        assert len(survivor["errors"]) == 2, survivor
        for runtime, peerdied, message in survivor["errors"]:
            assert runtime and peerdied and "left the process group" in message, survivor
        assert survivor["waited"] < 30, survivor  # not the group's 60 s timeout


def test_stopped_rank_times_out_with_the_groups_timeout():
    results = run_job("stop", 2)
    assert results[1][0] == -9, f"the stopped rank exited with {results[1][0]}:\n{results[1][2]}"
    r = reports(results[0])[-1]
    assert r["runtime"] and r["timeout"], r
    assert 9 < r["waited"] < 120, r  # the group's timeout is 10 s; generous above
    assert not os.path.exists(f"/dev/shm/pdshm.{r['segment']}")


def test_creator_killed_during_init_leaves_no_segment():
    from datetime import timedelta
    import torch.distributed as dist
    port = free_port()
    store = dist.TCPStore("127.0.0.1", port, 1, True, timedelta(seconds=60), wait_for_workers=False)
    results = run_job("creator_dies", 3, port=port)
    assert results[0][0] == -9, f"rank 0 exited with {results[0][0]}: {results[0][2]}"
    for res in results[1:]:
        assert "error" in reports(res)[-1]
    name = store.get("0/pdshm/h0/segment").decode()
    assert name.startswith("torch-")
    assert not os.path.exists(f"/dev/shm/pdshm.{name}")


def test_torchrun_starts_ranks_that_train_with_ddp(tmp_path):
    torchrun = shutil.which("torchrun")
    if torchrun is None:
        pytest.skip("no torchrun")
    # Debian's torch 1.13 under Python 3.11 cannot parse --redirects 0 or
    # --tee 0 (the defaults): Std.from_str("0") is None there; 1 and 2 parse.
    env = child_env()
    env.update(PDSHM_TORCH_SEGMENT_SIZE="16M")
    for var in ("RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)
    done = subprocess.run([torchrun, "--standalone", "--nproc_per_node=2", "--redirects", "1",
                           "--tee", "2", "--log_dir", str(tmp_path),
                           os.path.join(TESTS_DIR, "dist_workers.py"), "torchrun"],
                          env=env, capture_output=True, text=True, timeout=JOB_TIMEOUT)
    assert done.returncode == 0, f"torchrun exited with {done.returncode}:\n{done.stderr[-3000:]}"
    logs = sorted(glob.glob(str(tmp_path / "*" / "attempt_0" / "*" / "stdout.log")))
    ranks = sorted(reports((0, open(log).read(), ""))[-1]["rank"] for log in logs)
    assert ranks == [0, 1]
