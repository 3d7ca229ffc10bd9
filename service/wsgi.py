"""The WSGI entry point for gunicorn: imported in each worker, after the fork."""

from service.http.app import create_app

app = create_app()
