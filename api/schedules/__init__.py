"""Schedules of routines, on Temporal Schedules, and the scheduled run start (`service`). `tables` holds the
rows (`routine_schedules`), `models` the bodies.
"""
