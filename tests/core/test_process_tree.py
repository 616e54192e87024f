"""``microcoder_ext.process_tree``: descendants, memory and CPU time read from /proc, and the peak sampler, checked on
real child processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from host_load import hang_guard

from microcoder_ext import process_tree

#: a child that holds ~64 MB (touched, so resident) and starts a grandchild, then waits for stdin to close
HOLDER = r"""
import subprocess, sys
block = bytearray(64 * 2**20)
for i in range(0, len(block), 4096):
    block[i] = 1
grandchild = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
print(grandchild.pid, flush=True)
sys.stdin.read()
grandchild.stdin.close()
grandchild.wait()
"""


def test_descendants_memory_and_command_lines_of_a_real_tree():
    marker = f"process-tree-test-{os.getpid()}-{time.monotonic_ns()}"
    child = subprocess.Popen([sys.executable, "-c", HOLDER, marker], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    try:
        grandchild = int(child.stdout.readline())
        assert set(process_tree.descendants(os.getpid())) >= {child.pid, grandchild}
        assert process_tree.descendants(child.pid) == [grandchild]
        assert process_tree.tree(child.pid)[0] == child.pid
        assert process_tree.rss_bytes(child.pid) > 64 * 2**20
        assert 60 * 2**20 < process_tree.pss_bytes(child.pid) <= process_tree.rss_bytes(child.pid)
        assert marker in process_tree.command_line(child.pid)
        assert process_tree.processes_naming(marker) == [child.pid]  # not the grandchild: its command line differs
        assert process_tree.cpu_seconds(os.getpid()) > 0
    finally:
        child.stdin.close()
        child.wait(timeout=hang_guard(5))
    # a process that is gone reads as nothing, never an error
    assert process_tree.rss_bytes(child.pid) == process_tree.pss_bytes(child.pid) == 0
    assert process_tree.command_line(child.pid) == "" and process_tree.descendants(child.pid) == []
    assert process_tree.processes_naming(marker) == []


def test_peak_sampler_keeps_the_largest_sample_and_its_details():
    values = iter([(3, "a"), (9, "b"), (5, "c")] + [(1, "z")] * 10_000)
    sampler = process_tree.PeakSampler(lambda: next(values), interval_s=0.001)
    deadline = time.monotonic() + hang_guard(1)
    while sampler.peak is None or sampler.peak[0] < 9:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert sampler.stop() == (9, "b")
    assert sampler.stop() == (9, "b")  # stopping again returns the same peak


def test_peak_sampler_paused_samples_nothing_and_take_starts_over():
    calls = []
    sampler = process_tree.PeakSampler(lambda: calls.append(1) or len(calls), interval_s=0.001, paused=True)
    time.sleep(0.05)
    assert sampler.take() is None and calls == []
    sampler.paused = False
    assert sampler.take() >= 1  # take samples once more when not paused
    first = len(calls)
    assert sampler.take() > first  # a new peak, not the old one
    assert sampler.stop() is not None
