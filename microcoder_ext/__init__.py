"""microcoder-ext: MicroCoder-GRPO for verl, OpenRLHF and TRL.

Layout (data flows one way, lowest layer first: core and the single modules (compat, internals, jsonl, tiny,
evidence, process_tree) <- reward, data, bundled, eval, sampling <- smoke <- verl, openrlhf, trl adapters <- demo,
configs <- cli; a module imports only its own layer and those below, no import cycle,
``tests/core/test_import_structure.py``):
  microcoder_ext.core      framework-free algorithms (verdicts, truncation mask, temperature, config, doctor rules)
  microcoder_ext.evidence  what the processes of a smoke run saw (JSON lines; standard library only)
  microcoder_ext.process_tree  this machine's processes from /proc: descendants, memory, CPU time, a peak sampler
  microcoder_ext.reward    code-execution reward (verl ``compute_score``) and its process sandbox
  microcoder_ext.data      training / evaluation data (sources, filters, difficulty, writers)
  microcoder_ext.eval      pass@k tables and training curves as the paper reports them
  microcoder_ext.sampling  prompt files and samplers of the temperature probe
  microcoder_ext.bundled   the bundled problems and the demo's warm-start demonstrations
  microcoder_ext.smoke     framework-free pieces of ``microcoder smoke`` (tiny model, data, report)
  microcoder_ext.verl      verl 0.9.x adapter (plugin, trainer, recipes and their checks)
  microcoder_ext.openrlhf  OpenRLHF 0.11.x adapter (launcher ``python -m microcoder_ext.openrlhf.train``, trainer)
  microcoder_ext.trl       TRL 1.15-1.16 adapter (trainer, reward, ``microcoder train``'s settings and data)
  microcoder_ext.demo      ``microcoder demo`` (verl's ``main_ppo`` training a tiny model on the CPU, its report)
  microcoder_ext.configs   Hydra recipe group ``recipe`` (``+recipe=microcoder``)
  microcoder_ext.cli       the ``microcoder`` command, one module per subcommand (nothing else imports it)
"""

__version__ = "0.1.0"
