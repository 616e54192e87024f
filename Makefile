# The two commands a fresh machine needs (see README):
#   make demo   the main job on this CPU: verl's own main_ppo with +recipe=microcoder and verl's vLLM rollout (vLLM's
#               CPU build) trains a tiny Qwen3 for 30 steps; prints a line per step, writes demo-out/report.json and
#               demo-out/curves.png (the held-back pass rate before and after RL)
#   make test   run every test suite (creates the cached test venvs on first use)
.PHONY: demo test

demo:
	bash compat/in_venv.sh verl microcoder demo --output-dir demo-out

test:
	bash tests/run_all.sh
