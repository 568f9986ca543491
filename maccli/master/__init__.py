"""`mac start|stop|restart|status master`, `mac backup|restore metrics`: the master's
services and what goes with them, as maccli.agent is for the agent.

One concern a module, each importing only those below it (pyproject.toml's contracts):

| module | what |
|---|---|
| commands | the four commands and what `mac start master` prints |
| backup | `mac backup|restore metrics`: the scale-out store's own tools |
| compose | the master's Compose file, written from the specs |
| access | the admin user, the master's CA, the lines that join an agent |
| specs | the master's services as specs, one description for both runtimes |
| scaleout | scale-out mode's engines (MAC_SCRAPE_SHARDS) and their Compose file |
| layout | where the services run: this host's loopback or the master's Compose network |
| preflight | the master's settings as mac reads them, checked before anything starts |
"""
