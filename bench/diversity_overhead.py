"""Cost of the per-step diversity metrics (temperature controller) vs the conditional truncation mask, same run.

    python bench/diversity_overhead.py                        # 1024 responses x 16384 tokens (issue default)
    python bench/diversity_overhead.py --batch 256 --max-len 4096 --repeats 9 --json

Workload: ``--batch`` responses in groups of ``--group``, random token ids from a ``--vocab`` vocabulary
(Qwen3: 151,936), lengths uniform in [1, max_len] with ``--trunc-frac`` of them exactly at the budget. Two
contents:

* ``random``: every token independent (almost no n-gram shared inside a group: cheapest pairwise work);
* ``templated``: each response copies its group's template and replaces each token with probability
  ``--mutate`` (default 0.1: ~66 % of a response's 4-grams are the template's; with the varied lengths the
  group-pooled distinct-4 is ~0.44 and the pairwise distance ~0.83), so the pairwise intersections have real
  work, as with sampled solutions to one prompt.

Timings are the median of ``--repeats`` runs after one warm-up, on CPU (the controller runs on the trainer's
driver process). Reported:

* ``diversity``: :func:`microcoder_ext.core.diversity.diversity_metrics` (distinct-n, group-pooled, pairwise)
  on the padded ``(batch, max_len)`` id tensor with per-row lengths;
* ``diversity_ragged``: the same from a list of per-row tensors (what a trainer holds after a TransferQueue fetch);
* ``controller``: :meth:`TemperatureController.update` (auto mode): the metrics plus the decision;
* ``mask``: :func:`microcoder_ext.core.masking.conditional_truncation_mask` on the same padded tensor, called
  as in ``bench/mask_overhead.py`` (block check, rho 0.2, m 128, seeded generator, advantages zeroed in place).

Step budget (``--step-seconds``, default 300 s): 1024 x 16K tokens is the paper's largest setting (DS-8B, train
16K, batch 64 x 16 rollouts, 8 H100s assumed). The step cannot be shorter than the decode of its longest
response: 16,384 sequential tokens at an optimistic 100-150 tokens/s per sequence in a large vLLM batch is
110-165 s; the old-log-prob + actor update over ~8.4M tokens of an 8B model is 6 x 8e9 x 8.4e6 ≈ 4e17 FLOP,
about 130 s on 8 H100s at 50 % MFU (989 TFLOP/s bf16 each). So ~300 s is a conservative step time; the
percentage for a pessimistic 120 s is printed too. Goal: diversity under 1 % of the step.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mask_overhead import _median_ms  # noqa: E402  (one timing helper for both overhead benches)

WORKLOADS = ("random", "templated")


def make_batch(batch: int, max_len: int, group: int, vocab: int, trunc_frac: float, content: str, mutate: float,
               seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, max_len + 1, (batch,), generator=g)
    lengths[torch.rand(batch, generator=g) < trunc_frac] = max_len
    if content == "random":
        responses = torch.randint(0, vocab, (batch, max_len), generator=g)
    else:
        groups = (batch + group - 1) // group
        template = torch.randint(0, vocab, (groups, max_len), generator=g)
        responses = template.repeat_interleave(group, dim=0)[:batch].clone()
        flip = torch.rand(batch, max_len, generator=g) < mutate
        responses[flip] = torch.randint(0, vocab, (int(flip.sum()),), generator=g)
    index = np.array([f"p{i // group}" for i in range(batch)], dtype=object)
    from microcoder_ext.core.verdicts import ALL

    rng = np.random.default_rng(seed)
    verdicts = [ALL[i] for i in rng.integers(0, len(ALL), batch)]
    return responses, lengths, index, verdicts


def measure(args, content: str) -> dict:
    from microcoder_ext.core.diversity import diversity_metrics
    from microcoder_ext.core.masking import conditional_truncation_mask
    from microcoder_ext.core.temperature import TemperatureController

    responses, lengths, index, verdicts = make_batch(
        args.batch, args.max_len, args.group, args.vocab, args.trunc_frac, content, args.mutate
    )
    adv = torch.randn(args.batch, args.max_len)
    rows = [responses[i, : lengths[i]] for i in range(args.batch)]
    ctl = TemperatureController({"mode": "auto", "value": 1.2, "n": args.n})
    step = iter(range(1, 1 << 30))

    def mask():
        g = torch.Generator().manual_seed(0)
        drop = conditional_truncation_mask(responses, lengths, args.max_len, verdicts, rho=0.2, m=128, generator=g)
        adv[drop] = 0.0

    res = diversity_metrics(responses, index, lengths=lengths, n=args.n)
    out = {
        "diversity_ms": _median_ms(
            lambda: diversity_metrics(responses, index, lengths=lengths, n=args.n), args.repeats
        ),
        "diversity_ragged_ms": _median_ms(lambda: diversity_metrics(rows, index, n=args.n), args.repeats),
        "controller_ms": _median_ms(lambda: ctl.update(next(step), responses, index, lengths=lengths), args.repeats),
        "mask_ms": _median_ms(mask, args.repeats),
        "tokens": int(lengths.sum()),
        "metrics": {k.rsplit("/", 1)[1]: round(v, 4) for k, v in res.metrics().items()},
    }
    out["ratio_to_mask"] = out["diversity_ms"] / out["mask_ms"]
    out["step_percent"] = 100 * out["diversity_ms"] / (args.step_seconds * 1e3)
    out["step_percent_120s"] = 100 * out["diversity_ms"] / 120e3
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog="Timings are CPU medians; see the module "
                                "docstring for the workload and the step-time assumption.")
    p.add_argument("--batch", type=int, default=1024, help="responses per step (default 1024 = 64 prompts x 16)")
    p.add_argument("--max-len", type=int, default=16384, help="response budget in tokens (default 16384)")
    p.add_argument("--group", type=int, default=16, help="responses per prompt (default 16)")
    p.add_argument("--vocab", type=int, default=151_936, help="vocabulary size (default 151936, Qwen3)")
    p.add_argument("--trunc-frac", type=float, default=0.3, help="fraction of responses at the budget (default 0.3)")
    p.add_argument("--mutate", type=float, default=0.1, help="templated: per-token replacement probability (0.1)")
    p.add_argument("--n", type=int, default=4, help="n-gram order (default 4)")
    p.add_argument("--workloads", default=",".join(WORKLOADS), help=f"comma list of {WORKLOADS} (default both)")
    p.add_argument("--repeats", type=int, default=5, help="timed runs per measurement, median reported (default 5)")
    p.add_argument("--step-seconds", type=float, default=300.0,
                   help="assumed GRPO step time in seconds for the percentage (default 300, see docstring)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = p.parse_args(argv)
    workloads = [w for w in args.workloads.split(",") if w]
    bad = sorted(set(workloads) - set(WORKLOADS))
    if bad:
        p.error(f"unknown workload(s) {bad}; choose from {WORKLOADS}")

    results = {w: measure(args, w) for w in workloads}
    meta = {
        "batch": args.batch, "max_len": args.max_len, "group": args.group, "vocab": args.vocab, "n": args.n,
        "trunc_frac": args.trunc_frac, "mutate": args.mutate, "repeats": args.repeats,
        "step_seconds": args.step_seconds, "torch": torch.__version__, "numpy": np.__version__,
        "threads": torch.get_num_threads(), "cpu": platform.processor() or platform.machine(),
    }
    if args.json:
        print(json.dumps({**meta, "results": results}))
        return 0
    print(f"diversity overhead: {args.batch} responses x {args.max_len} tokens, groups of {args.group}, "
          f"vocab {args.vocab}, n={args.n}, numpy {np.__version__}, torch {torch.__version__} "
          f"({meta['threads']} threads)")
    print(f"{'workload':<10}{'tokens':>11}{'diversity':>11}{'ragged':>9}{'controller':>12}{'mask':>9}"
          f"{'vs mask':>9}{f'of {args.step_seconds:g}s':>10}{'of 120s':>9}")
    for w, r in results.items():
        print(f"{w:<10}{r['tokens']:>11,}{r['diversity_ms']:>9.0f}ms{r['diversity_ragged_ms']:>7.0f}ms"
              f"{r['controller_ms']:>10.0f}ms{r['mask_ms']:>7.1f}ms{r['ratio_to_mask']:>8.2f}x"
              f"{r['step_percent']:>9.2f}%{r['step_percent_120s']:>8.2f}%")
    for w, r in results.items():
        print(f"  {w} metrics: " + ", ".join(f"{k}={v}" for k, v in r["metrics"].items()))
    worst = max(r["step_percent"] for r in results.values())
    print(f"goal (diversity < 1% of an assumed {args.step_seconds:g} s step): {'met' if worst < 1 else 'NOT met'} "
          f"(worst {worst:.2f}%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
