"""The host-wide chunk-step slots (workers.cpu_slots): at most ``slots`` holders at once,
across threads (each acquisition its own file description) and processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from workers.cpu_slots import chunk_slot, slot_count


def test_a_step_waits_for_a_slot_only_when_every_slot_is_held(tmp_path: Path) -> None:
    db = str(tmp_path / "index.db")
    entered = threading.Event()

    def second() -> None:
        with chunk_slot(db, slots=1):
            entered.set()

    with chunk_slot(db, slots=2), chunk_slot(db, slots=2):
        pass  # Two slots: the second holder never waits for the first.
    with chunk_slot(db, slots=1):
        waiter = threading.Thread(target=second)
        waiter.start()
        # Held by this thread: the other cannot enter (a wrong lock lets it in at once).
        assert not entered.wait(0.5)
    assert entered.wait(60)
    waiter.join(60)
    assert sorted(p.name for p in (tmp_path / "index.db.slots").iterdir()) == [
        "slot-0",
        "slot-1",
    ]


def test_slots_follow_the_cores_this_process_may_use() -> None:
    assert slot_count() == len(os.sched_getaffinity(0))


def test_a_folder_that_cannot_be_made_runs_the_step_without_a_slot(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    ran = False
    with chunk_slot(str(blocker / "index.db"), slots=1):
        ran = True
    assert ran


def test_a_slot_held_by_a_process_killed_by_sigkill_is_free_again(tmp_path: Path) -> None:
    db = str(tmp_path / "index.db")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from workers.cpu_slots import chunk_slot\n"
            f"with chunk_slot({db!r}, slots=1):\n"
            "    print('held', flush=True)\n"
            "    time.sleep(3600)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        holder.send_signal(signal.SIGKILL)
        holder.wait(60)
        entered = threading.Event()

        def take() -> None:
            with chunk_slot(db, slots=1):
                entered.set()

        threading.Thread(target=take, daemon=True).start()
        assert entered.wait(60), "the killed process's slot is still held"
    finally:
        holder.kill()
        holder.wait(60)
