"""The training pipeline: rollouts -> trajectories -> gradients -> patch merge -> apply."""
