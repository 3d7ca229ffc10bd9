"""gunicorn settings used by `cantstop serve` (and the Dockerfile).

Threaded workers (gthread): an open server-sent-event stream holds one thread, not a whole process,
so many streams do not starve actions. Each worker builds its own eventsourcing Application after the
fork (preload_app stays off); the tables were created once by `cantstop serve` before starting.
Every value can be overridden with the usual GUNICORN_CMD_ARGS or the environment variables below.
"""

import os

bind = os.environ.get("CANTSTOP_BIND", "127.0.0.1:8000")
wsgi_app = "service.wsgi:app"
workers = int(os.environ.get("CANTSTOP_WORKERS", "2"))
worker_class = "gthread"
threads = int(os.environ.get("CANTSTOP_THREADS", "32"))
preload_app = False
timeout = 60
graceful_timeout = 10
keepalive = 5
accesslog = os.environ.get("CANTSTOP_ACCESS_LOG", "-")
errorlog = "-"
loglevel = os.environ.get("CANTSTOP_LOG_LEVEL", "info")
# Never log request headers: Authorization carries seat tokens.
access_log_format = '%(h)s "%(r)s" %(s)s %(b)s %(M)sms'
