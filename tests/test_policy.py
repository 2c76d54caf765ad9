import asyncio
import os
import threading

import pytest

import cleanflush

from .conftest import run_python


def test_default_policy():
    assert cleanflush.DEFAULT_POLICY == "read"  # measured choice: benchmarks/results/h200/README.md
    assert cleanflush.current_policy() == "read"


def test_unknown_policy_raises_with_valid_names():
    with pytest.raises(ValueError, match=r"'zero'.*write-read, read, write"):
        cleanflush.policy("zero")


def test_nested_blocks_restore_in_order():
    with cleanflush.policy("write-read") as name:
        assert name == "write-read"
        assert cleanflush.current_policy() == "write-read"
        with cleanflush.policy("write"):
            assert cleanflush.current_policy() == "write"
            assert os.environ["CLEANFLUSH"] == "write"
        assert cleanflush.current_policy() == "write-read"
        assert os.environ["CLEANFLUSH"] == "write-read"
    assert cleanflush.current_policy() == "read"
    assert os.environ["CLEANFLUSH"] == "read"


def test_block_restores_after_exception():
    with pytest.raises(KeyError):
        with cleanflush.policy("write-read"):
            raise KeyError("boom")
    assert cleanflush.current_policy() == "read"


def test_threads_see_their_own_policy():
    barrier = threading.Barrier(2)
    seen = {}

    def worker(name):
        with cleanflush.policy(name):
            barrier.wait()  # both blocks are open at once
            seen[name] = cleanflush.current_policy()
            barrier.wait()

    threads = [threading.Thread(target=worker, args=(n,)) for n in ("write-read", "write")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {"write-read": "write-read", "write": "write"}
    assert cleanflush.current_policy() == "read"
    assert os.environ["CLEANFLUSH"] == "read"


def test_asyncio_tasks_see_their_own_policy():
    async def task(name, started, release):
        with cleanflush.policy(name):
            started.set()
            await release.wait()
            return cleanflush.current_policy()

    async def main():
        events = [asyncio.Event() for _ in range(3)]
        a = asyncio.create_task(task("write-read", events[0], events[2]))
        b = asyncio.create_task(task("write", events[1], events[2]))
        await events[0].wait()
        await events[1].wait()
        outside = cleanflush.current_policy()
        events[2].set()
        return outside, await a, await b

    assert asyncio.run(main()) == ("read", "write-read", "write")


def test_env_follows_newest_open_block_across_threads():
    first_open, second_done = threading.Event(), threading.Event()

    def older():
        with cleanflush.policy("write-read"):
            first_open.set()
            second_done.wait()
            # the newer block has closed: children started now get this block's policy
            assert os.environ["CLEANFLUSH"] == "write-read"

    t = threading.Thread(target=older)
    t.start()
    first_open.wait()
    with cleanflush.policy("write"):
        assert os.environ["CLEANFLUSH"] == "write"
    second_done.set()
    t.join()
    assert os.environ["CLEANFLUSH"] == "read"


def test_child_process_started_in_block_reports_the_policy():
    code = "import cleanflush; print(cleanflush.current_policy())"
    env = {"CLEANFLUSH": None}
    os.environ.pop("CLEANFLUSH", None)
    with cleanflush.policy("write-read"):
        import subprocess
        import sys

        # inherit os.environ as a user's subprocess call would
        child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert child.stdout.strip() == "write-read", child.stderr
    assert run_python(code, env).stdout.strip() == "read"
