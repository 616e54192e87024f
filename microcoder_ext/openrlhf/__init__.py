"""OpenRLHF 0.11.x adapter (reward function for ``--reward.remote_url``)."""
