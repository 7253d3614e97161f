"""Pydantic models and enums shared by every part of gpupool. No I/O here."""
