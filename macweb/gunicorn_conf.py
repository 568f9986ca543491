"""The one gunicorn configuration of the API server, in every runtime.

`gunicorn -c python:macweb.gunicorn_conf macweb.asgi:application --bind ... --workers N`
is how both the process runtime (`mac start master`) and the Compose master start
mac-api-server; the command line only adds the address and the worker count.

The server is stock: gunicorn's arbiter with uvicorn's own worker class. It listens
only where the proxy reaches it (127.0.0.1 under the process runtime, MAC's own
Compose network under Docker), and the proxy in front (nginx, macweb/nginxconf.py) is
what bounds slow clients, header and body sizes and connections (docs/security.md).

Client addresses: the proxy resolves the client's address (MAC_TRUSTED_PROXIES)
and sends it as the only X-Forwarded-For entry. uvicorn believes that header only
from gunicorn's `forwarded_allow_ips`: gunicorn's default (127.0.0.1 and ::1, where
the proxy connects from under the process runtime), or FORWARDED_ALLOW_IPS from the
environment (the Compose file sets it). So the access log and the application both
see the real client, and a client that reaches the proxy cannot choose its address.
"""

from __future__ import annotations

# --- gunicorn's own settings (the command line may still override them).
worker_class = "uvicorn_worker.UvicornWorker"
# Seconds a silent worker may take before the arbiter restarts it, and a stopping one
# may take to finish its requests.
timeout = 30
graceful_timeout = 30
# The proxy keeps idle connections to the API server for reuse and drops them after
# 60 s (macweb/nginxconf.py); the server keeps them longer, so that it never closes one
# just as the proxy sends a request on it (a POST would then fail with 502).
keepalive = 75
# gunicorn 27's control socket (one per user, shared by every gunicorn of that user):
# MAC does not use it, and several masters or test servers on one host would share it.
control_socket_disable = True


# --- gunicorn's hooks.
def post_worker_init(worker) -> None:
    """Each worker's access log hides password-reset tokens and port 0 (macweb.accesslog)."""
    from macweb.accesslog import filter_access_logs

    filter_access_logs()
