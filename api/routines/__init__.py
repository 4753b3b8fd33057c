"""Routines: stored after their checks, every version kept (`store`), refs resolved against this api's own
registry for those checks (`resolver`). `tables` holds the rows (`routines`, `routine_versions`), `models`
the bodies.
"""
