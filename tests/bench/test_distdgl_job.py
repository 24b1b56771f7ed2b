"""The DistDGL launcher's housekeeping that needs no DGL."""
import os
from pathlib import Path

from bench_modules import load


def test_reap_deletes_shm_folders_of_dead_runs_only():
    job = load("distdgl_job")
    dead = Path("/dev/shm/gr999999999-m0")  # above any pid_max: no such process
    live = Path(f"/dev/shm/gr{os.getpid()}-m0")
    for d in (dead, live):
        d.mkdir(exist_ok=True)
        (d / "partition").write_bytes(b"x")
    try:
        assert job.reap_stale_shm() == [str(dead)]
        assert not dead.exists() and (live / "partition").exists()
    finally:
        for d in (dead, live):
            if d.exists():
                (d / "partition").unlink()
                d.rmdir()
