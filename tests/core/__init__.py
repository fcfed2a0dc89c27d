"""Tests of smg/core/."""
