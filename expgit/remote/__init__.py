"""The remote benchmark protocol: clients, service SDK, example environment."""
