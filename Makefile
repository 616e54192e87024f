# The two commands a fresh machine needs (see README):
#   make demo   the CPU quickstart (MicroCoder-GRPO through TRL on a tiny local model, writes quickstart-out/), then
#               compose verl's real main_ppo config with +recipe=microcoder and print the effective settings
#   make test   run every test suite (creates the cached test venvs on first use)
.PHONY: demo test

demo:
	bash compat/in_venv.sh trl python -m microcoder_ext.trl.quickstart --output-dir quickstart-out
	bash compat/in_venv.sh verl microcoder recipe show microcoder

test:
	bash tests/run_all.sh
