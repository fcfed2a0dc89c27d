"""Tests of smg/api/."""
