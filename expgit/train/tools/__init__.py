"""Tool environments for multi-turn rollouts: the Protocol, a registry, the airline example."""
