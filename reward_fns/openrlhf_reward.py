"""OpenRLHF ``--reward.remote_url reward_fns/openrlhf_reward.py``: MicroCoder code reward (needs microcoder-ext
installed on every node). A copy ships in the wheel as ``microcoder_ext/openrlhf/openrlhf_reward.py``."""
from microcoder_ext.openrlhf.reward import reward_func  # noqa: F401
