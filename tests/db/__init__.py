"""Database fixtures shared by test areas (import them into an area's conftest.py)."""
