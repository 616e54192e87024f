"""Cost of the conditional truncation mask vs verl's own GRPO advantage computation, same batch, same run.

    python bench/mask_overhead.py                       # 1024 responses x 8192 tokens (issue default)
    python bench/mask_overhead.py --batch 256 --max-len 4096 --repeats 20

Workload: groups of ``--group`` responses, lengths uniform in [1, max_len] with ``--trunc-frac`` of them
exactly at the budget (a third of those ending in a 128-token loop), random verdicts. Timings are the
median of ``--repeats`` runs after one warm-up, on CPU. Reported:

* ``verl_grpo``: ``verl.trainer.ppo.core_algos.compute_grpo_outcome_advantage`` on (batch, max_len) tensors;
* ``mask_block`` / ``mask_periodic``: :func:`microcoder_ext.core.masking.conditional_truncation_mask` on a
  padded (batch, max_len) id tensor, plus zeroing the masked rows' advantages in place;
* ``trainer_path``: what ``microcoder_sync`` runs per step after TransferQueue I/O:
  :func:`microcoder_ext.verl.advantage_mask.compute_row_mask` from jagged per-row id tensors (incl. padding them).

Goal (issue 2): the mask costs less than verl's GRPO advantage computation (ratio < 1).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import numpy as np
import torch


def _median_ms(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def make_batch(batch: int, max_len: int, group: int, trunc_frac: float, m: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, max_len, (batch,), generator=g)
    truncated = torch.rand(batch, generator=g) < trunc_frac
    lengths[truncated] = max_len
    responses = torch.randint(0, 150_000, (batch, max_len), generator=g)
    loops = truncated & (torch.rand(batch, generator=g) < 1 / 3)
    responses[loops, max_len - m :] = responses[loops, max_len - 2 * m : max_len - m]
    positions = torch.arange(max_len).unsqueeze(0)
    response_mask = (positions < lengths.unsqueeze(1)).float()
    token_level_rewards = torch.zeros(batch, max_len)
    token_level_rewards[torch.arange(batch), lengths - 1] = (torch.rand(batch, generator=g) < 0.5).float()
    index = np.array([f"p{i // group}" for i in range(batch)], dtype=object)
    from microcoder_ext.core.verdicts import ALL

    rng = np.random.default_rng(seed)
    verdicts = [ALL[i] for i in rng.integers(0, len(ALL), batch)]
    return responses, lengths, response_mask, token_level_rewards, index, verdicts


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=1024, help="responses per step (default 1024)")
    p.add_argument("--max-len", type=int, default=8192, help="response budget in tokens (default 8192)")
    p.add_argument("--group", type=int, default=8, help="GRPO group size (default 8)")
    p.add_argument("--trunc-frac", type=float, default=0.3, help="fraction of responses at the budget")
    p.add_argument("--m", type=int, default=128, help="repeat window in tokens (default 128)")
    p.add_argument("--repeats", type=int, default=10, help="timed runs per measurement (median reported)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = p.parse_args(argv)

    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    from microcoder_ext.core.config import MaskConfig
    from microcoder_ext.core.masking import conditional_truncation_mask
    from microcoder_ext.verl.advantage_mask import compute_row_mask

    responses, lengths, response_mask, tlr, index, verdicts = make_batch(
        args.batch, args.max_len, args.group, args.trunc_frac, args.m
    )
    adv, _ = compute_grpo_outcome_advantage(tlr, response_mask, index)

    def grpo():
        compute_grpo_outcome_advantage(tlr, response_mask, index)

    def mask(check):
        def run():
            g = torch.Generator().manual_seed(0)
            drop = conditional_truncation_mask(
                responses, lengths, args.max_len, verdicts, rho=0.2, m=args.m, repeat_check=check, generator=g
            )
            adv[drop] = 0.0  # in place, as a trainer would (only masked rows are touched)

        return run

    rows = [responses[i, : lengths[i]] for i in range(args.batch)]
    keys = [f"p{i // args.group}_{i % args.group}_0" for i in range(args.batch)]
    infos = [{"verdict": v} for v in verdicts]
    scores = [0.0] * args.batch
    cfg = MaskConfig(rho=0.2, m=args.m)

    def trainer_path():
        compute_row_mask(keys, [False] * args.batch, rows, infos, scores, args.max_len, cfg, cfg.generator(1))

    results = {
        "verl_grpo_ms": _median_ms(grpo, args.repeats),
        "mask_block_ms": _median_ms(mask("block"), args.repeats),
        "mask_periodic_ms": _median_ms(mask("periodic"), args.repeats),
        "trainer_path_ms": _median_ms(trainer_path, args.repeats),
    }
    base = results["verl_grpo_ms"]
    for name in ("mask_block", "mask_periodic", "trainer_path"):
        results[f"{name}_ratio"] = results[f"{name}_ms"] / base
    meta = {
        "batch": args.batch,
        "max_len": args.max_len,
        "group": args.group,
        "trunc_frac": args.trunc_frac,
        "m": args.m,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpu": platform.processor() or platform.machine(),
    }
    if args.json:
        print(json.dumps({**meta, **results}))
    else:
        print(f"mask overhead: {args.batch} responses x {args.max_len} tokens, group {args.group}, "
              f"{args.trunc_frac:.0%} truncated, m={args.m}, torch {torch.__version__} ({meta['threads']} threads)")
        print(f"{'measurement':<16}{'median ms':>12}{'vs verl GRPO':>14}")
        print(f"{'verl_grpo':<16}{base:>12.2f}{1.0:>13.2f}x")
        for name in ("mask_block", "mask_periodic", "trainer_path"):
            print(f"{name:<16}{results[name + '_ms']:>12.2f}{results[name + '_ratio']:>13.2f}x")
        ok = results["mask_block_ratio"] < 1.0
        print(f"goal (paper mask, block check, cheaper than verl GRPO): {'met' if ok else 'NOT met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
