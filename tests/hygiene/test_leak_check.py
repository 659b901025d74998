"""The suite's leak check (tests/conftest.py) fails a test that leaves a thread or a process behind.

Each case runs pytest in a subprocess on a small test file beside a copy of the real conftest, and reads
the verdict from its output: a leaky test errors at teardown naming the leak; a tidy one passes.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"


def _run_pytest(tmp_path: Path, source: str) -> subprocess.CompletedProcess[str]:
    shutil.copy(CONFTEST, tmp_path / "conftest.py")
    (tmp_path / "test_case.py").write_text(textwrap.dedent(source))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _outcome(result: subprocess.CompletedProcess[str]) -> str:
    """The last line's counts, without warnings and timing: "2 passed, 1 error"."""
    counts = result.stdout.strip().splitlines()[-1].split(" in ")[0].split(", ")
    return ", ".join(c for c in counts if "warning" not in c)


def test_a_thread_left_running_fails_the_test_naming_the_thread_and_where_it_started(tmp_path: Path) -> None:
    result = _run_pytest(
        tmp_path,
        """
        import threading
        STOP = threading.Event()

        def test_leaks_a_thread():
            threading.Thread(target=STOP.wait, name="forgotten-worker", daemon=True).start()

        def test_afterwards():
            STOP.set()
        """,
    )
    assert result.returncode == 1, result.stdout
    assert _outcome(result) == "2 passed, 1 error"
    assert "ERROR at teardown of test_leaks_a_thread" in result.stdout
    named = "thread 'forgotten-worker' (daemon=True) started by test test_case.py::test_leaks_a_thread"
    assert named in result.stdout
    assert "test_case.py:6 in test_leaks_a_thread" in result.stdout


def test_a_stopped_child_fails_the_test_and_is_killed_and_reaped(tmp_path: Path) -> None:
    result = _run_pytest(
        tmp_path,
        """
        import os, signal, subprocess, sys

        def test_stops_a_child_and_forgets_it():
            sleeper = "import time; time.sleep(600)  # leak-check-sleeper"
            proc = subprocess.Popen([sys.executable, "-c", sleeper])
            os.kill(proc.pid, signal.SIGSTOP)
            while open(f"/proc/{proc.pid}/stat").read().rsplit(")", 1)[1].split()[0] != "T":
                pass

        def test_nothing_is_left_for_the_next_test():
            out = subprocess.run(["pgrep", "-f", "leak-check-sleeper"], capture_output=True, text=True)
            assert out.stdout.strip() == ""
        """,
    )
    assert "ERROR at teardown of test_stops_a_child_and_forgets_it" in result.stdout, result.stdout
    assert "state T STOPPED (send SIGCONT, kill, wait)" in result.stdout
    assert "leak-check-sleeper" in result.stdout
    assert _outcome(result) == "2 passed, 1 error"


def test_a_daemonised_grandchild_and_an_unreaped_child_are_both_leaks(tmp_path: Path) -> None:
    result = _run_pytest(
        tmp_path,
        """
        import subprocess, sys, time

        def test_daemonises_a_grandchild():
            # The child starts a grandchild in a new session and exits: an orphan pytest must still find.
            subprocess.run([sys.executable, "-c",
                "import subprocess, sys; subprocess.Popen([sys.executable, '-c', "
                "'import time; time.sleep(600)  # orphan-sleeper'], start_new_session=True)"], check=True)

        def test_never_waits_for_its_child():
            proc = subprocess.Popen(["true"])
            time.sleep(0.5)
            _keep.append(proc)

        _keep = []
        """,
    )
    assert "ERROR at teardown of test_daemonises_a_grandchild" in result.stdout, result.stdout
    assert "orphan-sleeper" in result.stdout
    assert "ERROR at teardown of test_never_waits_for_its_child" in result.stdout
    assert "zombie (never waited for)" in result.stdout


def test_a_module_fixture_is_checked_when_it_is_torn_down_not_after_each_test(tmp_path: Path) -> None:
    result = _run_pytest(
        tmp_path,
        """
        import threading
        import pytest

        @pytest.fixture(scope="module")
        def server():
            # It ends by itself, long after the check gave up on it (the subprocess still exits).
            wait = threading.Event().wait
            thread = threading.Thread(target=wait, args=(20,), name="module-server", daemon=True)
            thread.start()
            yield thread
            # Teardown forgets to stop and join it: the last test in the module reports the leak.

        def test_one(server):
            assert server.is_alive()

        def test_two(server):
            assert server.is_alive()
        """,
    )
    assert _outcome(result) == "2 passed, 1 error", result.stdout
    assert "ERROR at teardown of test_two" in result.stdout
    assert "thread 'module-server' (daemon=True) started by fixture 'server' (module scope)" in result.stdout
    assert "ERROR at teardown of test_one" not in result.stdout


@pytest.mark.parametrize("shuts_down", [True, False])
def test_pool_workers_a_module_servers_thread_starts_during_a_test_are_the_servers(
    tmp_path: Path, shuts_down: bool
) -> None:
    result = _run_pytest(
        tmp_path,
        """
        import concurrent.futures, threading
        import pytest

        FORGOTTEN = []

        @pytest.fixture(scope="module")
        def server():
            pool = concurrent.futures.ThreadPoolExecutor(4, "server-worker")
            requests, stop = [], threading.Event()

            def loop():  # the server's own thread hands work to its pool, lazily
                while not stop.wait(0.01):
                    while requests:
                        pool.submit(requests.pop().set)

            thread = threading.Thread(target=loop, name="server-loop")
            thread.start()
            yield requests
            stop.set()
            thread.join()
            if SHUTS_DOWN:
                pool.shutdown(wait=True)
            else:  # kept, and never shut down: its idle workers wait for work forever
                FORGOTTEN.append(pool)

        def test_one(server):
            done = threading.Event()
            server.append(done)
            assert done.wait(30)

        def test_two(server):
            test_one(server)
        """.replace("SHUTS_DOWN", str(shuts_down)),
    )
    if shuts_down:  # the workers started while the tests ran, but they are the server's: no error
        assert _outcome(result) == "2 passed", result.stdout
    else:  # the server's teardown left its workers: reported there, against the fixture
        assert _outcome(result) == "2 passed, 1 error", result.stdout
        assert "ERROR at teardown of test_two" in result.stdout
        assert (
            "thread 'server-worker_0' (daemon=False) started by fixture 'server' (module scope)"
            in result.stdout
        )


@pytest.mark.parametrize("scope", ["function", "module", "session"])
def test_a_tidy_fixture_and_test_pass(tmp_path: Path, scope: str) -> None:
    result = _run_pytest(
        tmp_path,
        f"""
        import subprocess, sys, threading
        import pytest

        @pytest.fixture(scope="{scope}")
        def worker():
            stop = threading.Event()
            thread = threading.Thread(target=stop.wait, name="tidy-worker")
            thread.start()
            proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
            yield thread
            stop.set()
            thread.join()
            proc.kill()
            proc.wait()

        def test_one(worker):
            assert worker.is_alive()

        def test_two(worker):
            done = threading.Event()
            threading.Thread(target=done.set).start()
            done.wait()
        """,
    )
    assert result.returncode == 0, result.stdout
    assert _outcome(result) == "2 passed"
