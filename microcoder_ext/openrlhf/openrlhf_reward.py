"""Path-loadable OpenRLHF reward file shipped inside the wheel:
``--reward.remote_url $(python -c "import microcoder_ext.openrlhf.openrlhf_reward as m; print(m.__file__)")``."""
from microcoder_ext.openrlhf.reward import reward_func  # noqa: F401
