"""Tracker service: FastAPI app, SQL store and the dashboard."""
