"""The alembic environment of the api's schema: `env.py`, the revision template and `versions/`.

Nothing here is imported by the api itself: `api.migrations` points alembic at this directory.
"""
