"""The remote benchmark protocol: its models, the clients of an environment service, and
the SDK that makes any Python environment one."""
