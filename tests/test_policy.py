"""Policies: the default, blocks in threads and tasks, and who owns CLEANFLUSH."""

import asyncio
import dataclasses
import os
import random
import subprocess
import sys
import threading

import pytest

import cleanflush
from cleanflush import _policy, _state

from .conftest import run_python

CODE_POLICY = "import cleanflush; print(cleanflush.current_policy() if cleanflush.is_installed() else 'off')"


def child_policy():
    """What a child started now (inheriting os.environ, as subprocess does) gets."""
    out = subprocess.run([sys.executable, "-c", CODE_POLICY], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_default_is_the_specified_write_then_read_everywhere():
    # the default everywhere: import, install(), CLEANFLUSH=1/on all mean write-read
    assert cleanflush.current_policy() == "write-read"
    assert os.environ["CLEANFLUSH"] == "write-read"
    for env in ({}, {"CLEANFLUSH": "1"}, {"CLEANFLUSH": "on"}):
        assert run_python(CODE_POLICY, env).stdout.strip() == "write-read", env
    child = run_python(
        "import cleanflush; cleanflush.uninstall(); cleanflush.install(); print(cleanflush.current_policy())"
    )
    assert child.stdout.strip() == "write-read", child.stderr


def test_there_are_three_policies_each_a_record():
    # pinned on purpose: a new policy is a record in _policies plus the pages that list them
    # (README, docs/policies.md, docs/environment.md, docs/cli.md); change this number with them
    from cleanflush import _policies

    assert len(cleanflush.POLICIES) == 3
    assert tuple(_policies.BY_NAME) == cleanflush.POLICIES and cleanflush.POLICIES[0] == cleanflush.DEFAULT_POLICY
    assert all(isinstance(p, _policies.Policy) and p.name == n for n, p in _policies.BY_NAME.items())


def test_unknown_policy_raises_with_valid_names():
    with pytest.raises(ValueError, match=r"'zero'.*write-read, read, write"):
        cleanflush.policy("zero")
    with pytest.raises(ValueError, match="valid policies"):
        cleanflush.install(policy="fast")


def test_names_are_read_as_in_the_environment():
    # CLEANFLUSH=" READ " is accepted; so is the same spelling in the API
    assert cleanflush.policy(" READ ").name == "read"
    cleanflush.install(policy="Write")
    assert cleanflush.current_policy() == "write"


def test_nested_blocks_restore_in_order():
    with cleanflush.policy("read") as name:
        assert name == "read"
        assert cleanflush.current_policy() == "read"
        with cleanflush.policy("write"):
            assert cleanflush.current_policy() == "write"
            assert os.environ["CLEANFLUSH"] == "write"
        assert cleanflush.current_policy() == "read"
        assert os.environ["CLEANFLUSH"] == "read"
    assert cleanflush.current_policy() == "write-read"
    assert os.environ["CLEANFLUSH"] == "write-read"


def test_blocks_left_out_of_order_leave_the_one_still_open():
    outer, inner = cleanflush.policy("read"), cleanflush.policy("write")
    outer.__enter__()
    inner.__enter__()
    outer.__exit__(None, None, None)
    assert cleanflush.current_policy() == "write"
    assert os.environ["CLEANFLUSH"] == "write"
    inner.__exit__(None, None, None)
    assert cleanflush.current_policy() == "write-read"
    assert os.environ["CLEANFLUSH"] == "write-read"


def test_block_restores_after_exception():
    with pytest.raises(KeyError), cleanflush.policy("read"):
        raise KeyError("boom")
    assert cleanflush.current_policy() == "write-read"
    assert os.environ["CLEANFLUSH"] == "write-read"


def test_threads_see_their_own_policy():
    barrier = threading.Barrier(2)
    seen = {}

    def worker(name):
        with cleanflush.policy(name):
            barrier.wait()  # both blocks are open at once
            seen[name] = cleanflush.current_policy()
            barrier.wait()

    threads = [threading.Thread(target=worker, args=(n,)) for n in ("read", "write")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {"read": "read", "write": "write"}
    assert cleanflush.current_policy() == "write-read"
    assert os.environ["CLEANFLUSH"] == "write-read"


def test_one_policy_object_shared_by_threads():
    # a module-level STOCK = cleanflush.policy("write") entered by two threads at once;
    # the thread that entered second leaves first
    stock = cleanflush.policy("write")
    both_in, second_left = threading.Barrier(2), threading.Event()
    errors, seen = [], {}

    def worker(index):
        try:
            if index == 1:
                both_in.wait()  # enter after the other
            with stock:
                if index == 0:
                    both_in.wait()
                    second_left.wait()
                seen[f"in {index}"] = cleanflush.current_policy()
            seen[f"after {index}"] = cleanflush.current_policy()
            if index == 1:
                seen["env after 1"] = os.environ["CLEANFLUSH"]
                second_left.set()
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            errors.append(exc)
            second_left.set()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert seen == {
        "in 0": "write",
        "in 1": "write",
        "after 0": "write-read",
        "after 1": "write-read",
        "env after 1": "write",
    }  # thread 0's block is still open then
    assert os.environ["CLEANFLUSH"] == "write-read"


def test_one_policy_object_shared_by_asyncio_tasks():
    shared = cleanflush.policy("read")

    async def task(started, release, delay):
        with shared:
            started.set()
            await release.wait()
            await asyncio.sleep(delay)
            inside = cleanflush.current_policy()
        return inside, cleanflush.current_policy()

    async def main():
        events = [asyncio.Event() for _ in range(3)]
        a = asyncio.create_task(task(events[0], events[2], 0))
        b = asyncio.create_task(task(events[1], events[2], 0.01))
        await events[0].wait()
        await events[1].wait()
        outside = cleanflush.current_policy()
        events[2].set()
        return outside, await a, await b

    assert asyncio.run(main()) == ("write-read", ("read", "write-read"), ("read", "write-read"))
    assert os.environ["CLEANFLUSH"] == "write-read"


def test_block_entered_in_one_thread_and_left_in_another_does_not_stick_in_the_environment():
    block = cleanflush.policy("write")
    block.__enter__()
    assert os.environ["CLEANFLUSH"] == "write"
    t = threading.Thread(target=block.__exit__, args=(None, None, None))
    t.start()
    t.join()
    assert os.environ["CLEANFLUSH"] == "write-read"
    block.__exit__(None, None, None)  # this context's own state goes too
    assert cleanflush.current_policy() == "write-read"


def test_stress_shared_objects_in_threads_and_tasks():
    shared = {name: cleanflush.policy(name) for name in cleanflush.POLICIES}
    failures = []

    def nest(depth, rng):
        name = rng.choice(cleanflush.POLICIES)
        with shared[name]:
            if cleanflush.current_policy() != name:
                failures.append((name, cleanflush.current_policy()))
            if depth:
                nest(depth - 1, rng)
            if cleanflush.current_policy() != name:
                failures.append((name, cleanflush.current_policy()))

    def thread(seed):
        rng = random.Random(seed)
        for _ in range(200):
            nest(rng.randrange(4), rng)

    async def tasks():
        async def one(seed):
            rng = random.Random(seed)
            for _ in range(50):
                name = rng.choice(cleanflush.POLICIES)
                with shared[name]:
                    await asyncio.sleep(0)
                    if cleanflush.current_policy() != name:
                        failures.append((name, cleanflush.current_policy()))

        await asyncio.gather(*(one(s) for s in range(20)))

    threads = [threading.Thread(target=thread, args=(s,)) for s in range(8)]
    threads.append(threading.Thread(target=lambda: asyncio.run(tasks())))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert _policy.open_blocks() == []
    assert os.environ["CLEANFLUSH"] == "write-read"
    assert cleanflush.current_policy() == "write-read"


def test_env_follows_newest_open_block_across_threads():
    first_open, second_done = threading.Event(), threading.Event()
    seen = []

    def older():
        with cleanflush.policy("read"):
            first_open.set()
            second_done.wait()
            # the newer block has closed: children started now get this block's policy
            seen.append(os.environ["CLEANFLUSH"])

    t = threading.Thread(target=older)
    t.start()
    first_open.wait()
    with cleanflush.policy("write"):
        assert os.environ["CLEANFLUSH"] == "write"
    second_done.set()
    t.join()
    assert seen == ["read"]
    assert os.environ["CLEANFLUSH"] == "write-read"


def test_child_process_started_in_block_gets_its_policy():
    with cleanflush.policy("read"):
        assert child_policy() == "read"
    assert child_policy() == "write-read"


def test_uninstall_inside_a_block_leaves_children_stock():
    os.environ.pop("CLEANFLUSH", None)
    cleanflush.uninstall()
    cleanflush.install()
    with cleanflush.policy("read"):
        cleanflush.uninstall()
        assert "CLEANFLUSH" not in os.environ
    assert "CLEANFLUSH" not in os.environ
    assert child_policy() == "write-read"  # unset: the child's import installs the default
    os.environ["CLEANFLUSH"] = "0"
    cleanflush.install()
    with cleanflush.policy("write"):
        cleanflush.uninstall()
        assert child_policy() == "off"
    assert os.environ["CLEANFLUSH"] == "0" and child_policy() == "off"


def test_install_inside_a_block_exports_the_block_then_the_default():
    cleanflush.uninstall()
    with cleanflush.policy("write"):
        assert "CLEANFLUSH" not in os.environ  # not installed here: a block does not turn children on
        cleanflush.install()
        assert os.environ["CLEANFLUSH"] == "write" and child_policy() == "write"
    assert os.environ["CLEANFLUSH"] == "write-read" and child_policy() == "write-read"
    cleanflush.uninstall()
    assert "CLEANFLUSH" not in os.environ and child_policy() == "write-read"  # a child's own import installs


def test_uninstall_puts_the_users_variable_back_once():
    cleanflush.uninstall()
    os.environ["CLEANFLUSH"] = "read"
    try:
        assert cleanflush.install() is True
        with cleanflush.policy("write"):
            assert os.environ["CLEANFLUSH"] == "write"
            cleanflush.uninstall()
            assert os.environ["CLEANFLUSH"] == "read"  # as the user set it before the install
            os.environ["CLEANFLUSH"] = "write-read"  # set by the user after it
            cleanflush.uninstall()  # nothing left to undo: the user's value stays
        assert os.environ["CLEANFLUSH"] == "write-read" and cleanflush.is_installed() is False
    finally:
        os.environ.pop("CLEANFLUSH")


def test_uninstall_puts_process_start_back_exactly():
    import multiprocessing.process

    cleanflush.uninstall()
    stock = vars(multiprocessing.process.BaseProcess)["start"]
    cleanflush.install()
    assert vars(multiprocessing.process.BaseProcess)["start"] is not stock  # wrapped to hand on the policy
    cleanflush.uninstall()
    assert vars(multiprocessing.process.BaseProcess)["start"] is stock
    cleanflush.install()


def test_a_target_with_no_rows_yet_has_none():

    assert _state.sites("no-such-target") == []


def test_install_under_cleanflush_0_does_nothing_and_children_stay_off():
    cleanflush.uninstall()
    os.environ["CLEANFLUSH"] = "0"
    with cleanflush.policy("write"):
        assert cleanflush.install() is False and not cleanflush.is_installed()
        assert os.environ["CLEANFLUSH"] == "0" and child_policy() == "off"
        assert cleanflush.current_policy() == "write"  # what a flush runs while nothing is installed: stock
    assert os.environ["CLEANFLUSH"] == "0"
    os.environ.pop("CLEANFLUSH")


def test_block_in_a_process_where_cleanflush_is_off_keeps_children_off():
    child = run_python(
        """
        import subprocess, sys, cleanflush
        with cleanflush.policy("read"):
            code = "import cleanflush; print(cleanflush.is_installed())"
            print(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip())
        """,
        {"CLEANFLUSH": "0"},
    )
    assert child.stdout.strip() == "False", child.stderr


def test_a_policy_that_is_not_a_string_is_a_value_error_naming_the_valid_ones():
    with pytest.raises(ValueError, match=r"unknown cleanflush policy 3; valid policies: write-read, read, write"):
        cleanflush.policy(3)


def test_each_policy_is_one_record_and_the_names_follow_from_them():
    from cleanflush import _policies

    assert tuple(_policies.BY_NAME) == cleanflush.POLICIES
    assert [p.name for p in _policies.BY_NAME.values() if p.is_stock] == [_policies.STOCK_POLICY]
    default = _policies.get(cleanflush.DEFAULT_POLICY)
    assert default.writes and default.reads  # the specification's write-then-read
    for name in cleanflush.POLICIES:
        assert _policies.get(name).name == name and _policies.get(name).summary


def test_verify_times_every_policy_that_reads_chosen_by_its_fields(monkeypatch):
    from cleanflush import _policies
    from cleanflush._verify.controls import CONTROLS
    from cleanflush._verify.measure import Options, candidates

    reading = [p.name for p in _policies.BY_NAME.values() if p.reads]
    assert candidates(Options(controls=True)) == [*reading, *CONTROLS]
    monkeypatch.setitem(_policies.BY_NAME, "read", dataclasses.replace(_policies.READ, reads=False))
    assert "read" not in candidates(Options(controls=True))  # by field, not by position or name


def test_the_flush_follows_the_policys_fields_not_its_name(monkeypatch):
    import torch

    from cleanflush import _flush, _policies

    cache = torch.full((1024,), 7, dtype=torch.int32)
    _flush.prepare(cache.device)
    monkeypatch.setitem(_policies.BY_NAME, "read", dataclasses.replace(_policies.READ, writes=True))
    with cleanflush.policy("read"):
        _flush.flush("test", write=cache.zero_, cache=cache)
    assert not cache.any()  # a "read" that writes, by its record: the write ran
    monkeypatch.setitem(_policies.BY_NAME, "read", dataclasses.replace(_policies.READ, reads=False, writes=True))
    cache.fill_(7)
    with cleanflush.policy("read"):
        _flush.flush("test", write=cache.zero_, cache=cache)
    assert cleanflush.flush_counts()[("test", "read")] == 2 and not cache.any()


def _recurse_then(depth, fn):
    return fn() if depth == 0 else _recurse_then(depth - 1, fn)


@pytest.mark.parametrize("offset", range(12))
def test_a_recursion_error_inside_nested_blocks_leaves_no_block_open(offset):
    # the limit is hit at another place inside __enter__/__exit__ for each offset
    cleanflush.install()

    def nest():
        with cleanflush.policy("write"):
            nest()

    with pytest.raises(RecursionError):
        _recurse_then(offset, nest)
    assert _policy.open_blocks() == [] and cleanflush.current_policy() == cleanflush.DEFAULT_POLICY
    assert os.environ["CLEANFLUSH"] == cleanflush.DEFAULT_POLICY
    cleanflush.install(policy="read")  # the environment follows the default again
    assert os.environ["CLEANFLUSH"] == "read"
