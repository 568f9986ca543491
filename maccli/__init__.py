"""The `mac` command: configuration, agent and master lifecycle, runtimes and `mac doctor`.

The agent side (env, start/stop/status agent, doctor) never imports Django settings:
it runs on nodes that have no master installed.
"""
