"""Tests of smg/pipeline/backends/."""
