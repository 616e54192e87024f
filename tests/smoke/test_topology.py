"""``microcoder_ext.smoke.topology``: the size a ``--topology`` smoke runs at (the arithmetic; the plans that apply
it: tests/verl/test_cpu_backend.py, the runs: tests/verl/test_smoke_e2e.py)."""

from __future__ import annotations

import pytest

from microcoder_ext.smoke.topology import MAX_RANKS, Declared, TopologyError, fit, keeps_structure, scaled_token_limit


def declared(nnodes=1, gpn=8, prompts=64, mini=32, **groups) -> Declared:
    return Declared(nnodes=nnodes, gpus_per_node=gpn, prompts=prompts, mini=mini, groups=groups)


def test_a_launch_within_the_limit_runs_as_declared():
    for d in (declared(), declared(gpn=16, tp=2), declared(nnodes=2, gpn=4, tp=2), declared(gpn=1, prompts=3, mini=3)):
        assert fit(d) is d


def test_nodes_shrink_first_and_a_multi_node_launch_keeps_two():
    got = fit(declared(nnodes=4, gpn=8, prompts=256, mini=128, tp=2))
    assert (got.nnodes, got.gpus_per_node, got.prompts, got.mini) == (2, 8, 128, 64)
    assert got.world <= MAX_RANKS
    # 8 nodes of 8 with a TP group of 16 (spans two nodes): two nodes still hold one group
    got = fit(declared(nnodes=8, gpn=8, prompts=512, mini=256, tp=16))
    assert (got.nnodes, got.gpus_per_node) == (2, 8) and got.prompts == 128


def test_gpus_per_node_shrink_keeping_the_groups_that_divide_a_node():
    got = fit(declared(gpn=32, prompts=64, mini=32, tp=4, sp=8))
    assert (got.nnodes, got.gpus_per_node, got.prompts, got.mini) == (1, 16, 32, 16)
    # 24 GPUs per node with TP 3: 12 keeps it (16 does not divide 24, 8 drops the TP group)
    got = fit(declared(gpn=24, prompts=48, mini=24, tp=3))
    assert (got.gpus_per_node, got.prompts, got.mini) == (12, 24, 12)


def test_per_rank_shares_are_kept_or_the_size_is_refused():
    # 36 prompts over 32 ranks: halving the world must halve the prompts (18) and the mini-batch (9): both whole
    assert fit(declared(gpn=32, prompts=36, mini=18)).prompts == 18
    # 20 prompts per step in mini-batches of 10 over 32 ranks: halving gives mini-batches of 5 (fine), quartering 2.5
    assert fit(declared(gpn=32, prompts=20, mini=10)).mini == 5
    with pytest.raises(TopologyError, match="prompts per step \\(7\\)"):
        fit(declared(gpn=32, prompts=7, mini=7))


def test_keeps_structure_names_each_relation():
    d = declared(nnodes=2, gpn=8, prompts=64, mini=32, tp=8)
    assert keeps_structure(d, 2, 8)
    assert not keeps_structure(d, 1, 8)  # a multi-node launch keeps more than one node
    assert not keeps_structure(d, 2, 4)  # TP 8 divided a node of 8, not one of 4
    assert not keeps_structure(d, 2, 3)  # 6 ranks do not divide 16


def test_token_limits_hold_as_many_longest_sequences_as_declared():
    # the recipes: 12288 tokens per rank at 2048 + 4096 -> 2 sequences; at 2048 + 32: 4160 tokens
    assert scaled_token_limit(12288, 2048 + 4096, 2048 + 32) == 2 * 2080
    assert scaled_token_limit(36864, 2048 + 16384, 2048 + 32) == 2 * 2080
    assert scaled_token_limit(4096, 6144, 80) == 80  # less than one declared sequence: still one
