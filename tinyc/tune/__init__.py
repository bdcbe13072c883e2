"""Autotuning: search kernel schedules per layer, measure them, and learn which are fast."""
