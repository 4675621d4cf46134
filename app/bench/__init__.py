"""``agentconsole bench``: every policy side by side on one workload, in virtual time."""
