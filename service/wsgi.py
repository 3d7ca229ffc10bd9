"""The WSGI entry point for gunicorn: imported in each worker, after the fork."""

from service.app import create_app

app = create_app()
